//! A collector that quotes a credential back ("invalid token T") quotes its own cut of it:
//! the token without its `Bearer ` scheme, or the value as it came in
//! `OTEL_EXPORTER_OTLP_HEADERS`, percent-encoded. Only whole values were scrubbed, so the
//! token reached the log in clear.

use crate::logs;
use crate::one_run::{bearer, refused_warnings};
use crate::receiver::Answer;
use canary_exporters::Config;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_echoing_a_token_does_not_get_it_logged() {
    logs::capture();
    let (token, key, env_token) = ("TOKecho-7f3a9", "KEYecho/91c", "ENVTOKecho-55");
    let message = format!(
        "invalid token {token} for tenant; unknown key KEYecho%2F91c (or KEYecho%2f91c? \
         KEYecho/91c); as sent: Bearer%20{token}, Bearer+{token}; and {env_token}"
    );
    let headers =
        format!("authorization=Bearer%20{token},x-api-key=KEYecho%2F91c,x-env=Token {env_token}");
    let warned = refused_warnings(
        Answer::Rejected { items: 1, message },
        "secrets",
        |url| {
            let vars = |k: &str| match k {
                "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(url.clone()),
                "OTEL_EXPORTER_OTLP_HEADERS" => Some(headers.clone()),
                _ => None,
            };
            let config = Config {
                timeout: Duration::from_secs(5),
                ..Config::from_vars(vars).unwrap()
            };
            assert_eq!(config.headers[1].1, key);
            config
        },
        |_| {},
    )
    .await;
    assert!(
        warned
            .iter()
            .any(|l| l.contains("invalid token <redacted>")),
        "{warned:#?}"
    );
    let leaked = logs::lines_with_any(&["TOKecho", "KEYecho", "ENVTOKecho"]);
    assert!(leaked.is_empty(), "{leaked:#?}");
}

/// A collector quoting the headers in its own spelling: every byte percent-encoded (`%41`
/// for `A`), upper-cased, a `Basic` credential decoded (`user:password`, the password alone),
/// the secret after a prefix given without a space (`token=…`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_respelling_a_secret_does_not_get_it_logged() {
    logs::capture();
    // `Basic` of `svc-user:PWDspell-81z`.
    let basic = "Basic c3ZjLXVzZXI6UFdEc3BlbGwtODF6";
    let encoded: String = "TOKspell-4c1d"
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    let message = format!(
        "bad token {encoded}; TOKSPELL-4C1D; tokspell-4c1d; login svc-user:PWDspell-81z \
         failed (password PWDspell-81z); unknown key KEYspell99"
    );
    let warned = refused_warnings(
        Answer::Rejected { items: 1, message },
        "respelled",
        |url| Config {
            endpoint: Some(url),
            headers: vec![
                ("authorization".into(), "Bearer TOKspell-4c1d".into()),
                ("proxy-authorization".into(), basic.into()),
                ("x-api-key".into(), "token=KEYspell99".into()),
            ],
            timeout: Duration::from_secs(5),
            ..Config::default()
        },
        |_| {},
    )
    .await;
    assert!(
        warned.iter().any(|l| l.contains(
            "bad token <redacted>; <redacted>; <redacted>; login <redacted> failed (password \
             <redacted>); unknown key <redacted>"
        )),
        "{warned:#?}"
    );
    let leaked = logs::lines_with_any(&[
        "TOKspell", "TOKSPELL", "tokspell", "PWDspell", "KEYspell", "%54%4F",
    ]);
    assert!(leaked.is_empty(), "{leaked:#?}");
}

/// Rules the replay's scrub had and the exporter's lacked, now one scrub's: a collector quoting
/// a header value JSON-escaped (`\/`), HTML-escaped, in base64 or in hex, or its message cut
/// inside a token (`…`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_escaping_encoding_or_cutting_a_secret_does_not_get_it_logged() {
    logs::capture();
    let token = "TOKescape/5e&x<9Z";
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    // `Bearer TOKescape/5e&x<9Z` in base64, as a collector dumping the header writes it.
    let b64 = "QmVhcmVyIFRPS2VzY2FwZS81ZSZ4PDla";
    let message = format!(
        "bad token TOKescape\\/5e&x<9Z; TOKescape/5e&amp;x&lt;9Z; header {b64}; hex {hex}; \
         last seen TOKesca…"
    );
    let warned = refused_warnings(
        Answer::Rejected { items: 1, message },
        "escaped",
        |url| bearer(url, token),
        |_| {},
    )
    .await;
    assert!(
        warned.iter().any(|l| l.contains(
            "bad token <redacted>; <redacted>; header <redacted>; hex <redacted>; last seen \
             <redacted>…"
        )),
        "{warned:#?}"
    );
    let leaked = logs::lines_with_any(&["TOKesc", "S2VzY2FwZS81ZSZ4", &hex[..12]]);
    assert!(leaked.is_empty(), "{leaked:#?}");
}

/// A warning quotes only a message's first 512 bytes: a secret the collector quoted just
/// before that cut was scrubbed, and then its `<redacted>` marker was cut in half (`<red`),
/// which reads like the start of a leaked value. The cut now falls before the marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_message_does_not_end_in_part_of_a_redacted_marker() {
    logs::capture();
    let token = "TOKcut-6b2e91";
    // The marker starts 4 bytes before the 512-byte cut.
    let before = format!(
        "rejected at the gate: {}",
        "span attributes over limit; ".repeat(18)
    );
    let before = &before[..508];
    let message = format!("{before}{token} and what the collector said after it");
    let warned = refused_warnings(
        Answer::Rejected { items: 1, message },
        "cut",
        |url| bearer(url, token),
        |_| {},
    )
    .await;
    assert!(
        warned
            .iter()
            .any(|l| l.contains(&format!("partial success: \"{before}\");"))),
        "{warned:#?}"
    );
    let leaked = logs::lines_with_any(&["TOKcut", "<red\""]);
    assert!(leaked.is_empty(), "{leaked:#?}");
}
