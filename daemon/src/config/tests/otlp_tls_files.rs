//! The TLS files of OTLP export that OpenTelemetry's variables name: read when the daemon
//! makes its exporter settings (`[otlp]`'s own are read with the file), so that a missing or
//! broken one is an error naming the variable and the file, never quoting a key.

use crate::config::otlp::Otlp;
use canary_exporters::{CERTIFICATE, CLIENT_CERTIFICATE, CLIENT_KEY};

fn to(endpoint: &str) -> Otlp {
    Otlp {
        endpoint: Some(endpoint.into()),
        ..Otlp::default()
    }
}

#[test]
fn a_missing_ca_bundle_variable_is_an_error_naming_it_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("collector-ca.pem").display().to_string();
    let var = |k: &str| (k == CERTIFICATE).then(|| missing.clone());
    let e = to("https://collector.internal:4318")
        .exporter_config_over(var)
        .unwrap_err();
    assert_eq!(
        e,
        format!("{CERTIFICATE}={missing}: No such file or directory (os error 2)")
    );
    // Over plain http the exporter reads no TLS file: an inherited variable stops nothing.
    assert!(to("http://127.0.0.1:4318")
        .exporter_config_over(var)
        .is_ok());
    // A good bundle passes.
    std::fs::write(&missing, canary_testkit::ca_pem().0).unwrap();
    let c = to("https://collector.internal:4318")
        .exporter_config_over(var)
        .unwrap();
    assert_eq!(c.certificate.unwrap().display().to_string(), missing);
}

#[test]
fn a_bad_client_key_variable_is_an_error_naming_it_never_quoting_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let pki = canary_testkit::ClientPki::new();
    let cert = dir.path().join("client.pem").display().to_string();
    let key = dir.path().join("client.key").display().to_string();
    std::fs::write(&cert, &pki.cert_pem).unwrap();
    // A key cut short: its PEM is broken.
    let cut = &pki.key_pem[..pki.key_pem.len() / 2];
    std::fs::write(&key, cut).unwrap();
    let var = |k: &str| match k {
        CLIENT_CERTIFICATE => Some(cert.clone()),
        CLIENT_KEY => Some(key.clone()),
        _ => None,
    };
    let e = to("https://collector.internal:4318")
        .exporter_config_over(var)
        .unwrap_err();
    assert!(e.starts_with(&format!("{CLIENT_KEY}={key}: ")), "{e}");
    let body: String = cut.lines().nth(1).unwrap().chars().take(24).collect();
    assert!(!e.contains(&body), "quotes the key: {e}");

    // Another certificate's key: both variables named.
    std::fs::write(&key, canary_testkit::ClientPki::new().key_pem).unwrap();
    let e = to("https://collector.internal:4318")
        .exporter_config_over(var)
        .unwrap_err();
    assert!(
        e.starts_with(&format!(
            "{CLIENT_CERTIFICATE} and {CLIENT_KEY}: client key "
        )) && e.contains("KeyMismatch"),
        "{e}"
    );
    // Its own key: accepted.
    std::fs::write(&key, &pki.key_pem).unwrap();
    let c = to("https://collector.internal:4318")
        .exporter_config_over(var)
        .unwrap();
    assert!(c.client_identity.is_some());
}
