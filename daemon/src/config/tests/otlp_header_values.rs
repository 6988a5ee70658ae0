//! `[otlp.headers]` values the exporter would drop without a word (a control character):
//! refused when the file is read (a plain value, naming line and key) or when the exporter's
//! settings are made (a value from a file or variable, naming the key), never quoted.

use super::{error_at, with_otlp_ca, GOOD};
use crate::config::Config;
use std::path::Path;

#[test]
fn a_plain_otlp_header_value_with_a_control_character_is_refused_unquoted() {
    let otlp = "\n[otlp]\nendpoint = \"http://127.0.0.1:4318\"\n[otlp.headers]\n";
    for value in [
        "\"OTLPSECRET\\u0001ctrl\"",
        "\"Bearer OTLPSECRET\\n\"",
        "\"OTLPSECRET\\u007f\"",
    ] {
        let text = format!("{GOOD}{otlp}authorization = {value}\n");
        let e = error_at(
            &text,
            "authorization",
            "otlp.headers.authorization: the value is not a valid HTTP header value",
        );
        assert!(!e.contains("SECRET"), "{e}");
    }
}

#[test]
fn an_otlp_header_value_read_from_a_file_with_a_control_character_is_refused_unquoted() {
    let dir = with_otlp_ca();
    std::fs::write(dir.path().join("otlp-key"), "OTLPSECRET\u{1}ctrl\n").unwrap();
    let text = format!(
        "{GOOD}\n[otlp]\nendpoint = \"http://127.0.0.1:4318\"\n[otlp.headers]\n\
         authorization = {{ file = \"otlp-key\", prefix = \"Bearer \" }}\n"
    );
    let c = Config::parse(&text, Path::new("canaryd.toml"), dir.path()).unwrap();
    let e = c.otlp.exporter_config().unwrap_err();
    assert!(
        e.starts_with("otlp.headers.authorization: the value read from "),
        "{e}"
    );
    assert!(e.contains("is not a valid HTTP header value"), "{e}");
    assert!(!e.contains("SECRET"), "{e}");
}
