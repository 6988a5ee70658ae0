//! `client_cert` and `client_key` of a target, `client_certificate` and `client_key` of
//! `[otlp]`: both or neither, loaded when the file is read, errors naming key and line and
//! never quoting the key.

use super::{with_otlp_ca, GOOD, OTLP};
use crate::config::Config;
use std::path::Path;

/// A folder holding a client certificate, its key, another certificate's key, and the
/// OTLP CA bundle [`OTLP`] names.
fn with_identity() -> tempfile::TempDir {
    let dir = with_otlp_ca();
    let pki = canary_testkit::ClientPki::new();
    std::fs::write(dir.path().join("client.pem"), &pki.cert_pem).unwrap();
    std::fs::write(dir.path().join("client.key"), &pki.key_pem).unwrap();
    let other = canary_testkit::ClientPki::new();
    std::fs::write(dir.path().join("other.key"), other.key_pem).unwrap();
    dir
}

/// [`GOOD`] with `lines` added to its target.
fn target_with(lines: &str) -> String {
    GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        &format!("api_key_env = \"MY_KEY\"\n{lines}"),
    )
}

#[test]
fn a_target_client_identity_is_loaded_and_checked_at_load() {
    let dir = with_identity();
    let parse_in = |text: &str| Config::parse(text, Path::new("canaryd.toml"), dir.path());
    let c = parse_in(&target_with(
        "client_cert = \"client.pem\"\nclient_key = \"client.key\"",
    ))
    .unwrap();
    let id = c.targets["local"].client_identity.clone().unwrap();
    assert_eq!(id.cert, dir.path().join("client.pem"));
    assert_eq!(id.key, dir.path().join("client.key"));
    // One without the other.
    let e = parse_in(&target_with("client_cert = \"client.pem\""))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "canaryd.toml:8: targets.local.client_cert: set without client_key: a client \
             certificate needs its key (set both, or neither)"
        ),
        "{e}"
    );
    let e = parse_in(&target_with("client_key = \"client.key\""))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("canaryd.toml:8: targets.local.client_key: set without client_cert"),
        "{e}"
    );
    // A key that is not the certificate's, and a missing certificate.
    let e = parse_in(&target_with(
        "client_cert = \"client.pem\"\nclient_key = \"other.key\"",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("canaryd.toml:9: targets.local.client_key: client key")
            && e.contains("does not match client certificate"),
        "{e}"
    );
    let e = parse_in(&target_with(
        "client_cert = \"typo.pem\"\nclient_key = \"client.key\"",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(&format!(
            "canaryd.toml:8: targets.local.client_cert: client certificate {}: No such file",
            dir.path().join("typo.pem").display()
        )),
        "{e}"
    );
    // The key where the certificate belongs: named, never quoted.
    let e = parse_in(&target_with(
        "client_cert = \"client.key\"\nclient_key = \"client.key\"",
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("holds a private key and no certificate"), "{e}");
    assert!(!e.contains("PRIVATE KEY"), "{e}");
}

#[test]
fn an_otlp_client_identity_is_loaded_checked_and_given_to_the_exporter() {
    let dir = with_identity();
    let parse_in = |text: &str| Config::parse(text, Path::new("canaryd.toml"), dir.path());
    let with = |lines: &str| {
        format!("{GOOD}{OTLP}").replace(
            "certificate = \"otlp-ca.pem\"",
            &format!("certificate = \"otlp-ca.pem\"\n{lines}"),
        )
    };
    let c = parse_in(&with(
        "client_certificate = \"client.pem\"\nclient_key = \"client.key\"",
    ))
    .unwrap();
    let id = c.otlp.client_identity.clone().unwrap();
    assert_eq!(id.cert, dir.path().join("client.pem"));
    // `[otlp]`'s pair replaces the variables' pair: a half-set inherited pair is no error.
    let env = |k: &str| (k == "OTEL_EXPORTER_OTLP_CLIENT_KEY").then(|| "/nowhere.key".into());
    let mut otlp = c.otlp.clone();
    otlp.headers.clear(); // Their values come from a variable and a file not set here.
    let exporter = otlp.exporter_config_over(env).unwrap();
    assert_eq!(exporter.client_identity, Some(id));
    let e = parse_in(&with("client_key = \"client.key\""))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "canaryd.toml:29: otlp.client_key: set without client_certificate: a client key \
             needs its certificate (set both, or neither)"
        ),
        "{e}"
    );
}
