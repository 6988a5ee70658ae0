//! `https://` OTLP endpoints that require a client certificate (mutual TLS): a TLS
//! terminator in front of the real receiver, trusting only client certificates its test CA
//! signed.

use crate::one_run::export;
use crate::receiver::Receiver;
use canary_exporters::Config;
use canary_testkit::{ClientPki, TlsOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_requiring_a_client_certificate_gets_the_one_given() {
    let receiver = Receiver::start().await;
    let pki = ClientPki::new();
    let options = TlsOptions {
        client_ca: Some(pki.ca_pem.clone()),
        ..TlsOptions::default()
    };
    let (port, ca_pem) = canary_testkit::tls_terminator_with(receiver.addr, options).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.pem");
    std::fs::write(&bundle, ca_pem).unwrap();
    // As OpenTelemetry's variables name them.
    let (cert, key) = (dir.path().join("client.pem"), dir.path().join("client.key"));
    std::fs::write(&cert, &pki.cert_pem).unwrap();
    std::fs::write(&key, &pki.key_pem).unwrap();
    let vars = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(format!("https://localhost:{port}")),
        "OTEL_EXPORTER_OTLP_CERTIFICATE" => Some(bundle.display().to_string()),
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE" => Some(cert.display().to_string()),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY" => Some(key.display().to_string()),
        "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("5000".into()),
        _ => None,
    };
    let config = Config::from_vars(vars).unwrap();
    let without = Config {
        client_identity: None,
        ..config.clone()
    };
    let report = tokio::task::spawn_blocking(move || export(config, "mtls-test", 0))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    let paths: Vec<String> = receiver.posts().into_iter().map(|p| p.path).collect();
    assert!(paths.iter().any(|p| p == "/v1/metrics"), "{paths:?}");
    assert!(paths.iter().any(|p| p == "/v1/logs"), "{paths:?}");

    // Without it the terminator forwards nothing.
    let before = receiver.posts().len();
    let report = tokio::task::spawn_blocking(move || export(without, "mtls-test", 0))
        .await
        .unwrap();
    assert!(!report.is_clean(), "{report:?}");
    assert_eq!(receiver.posts().len(), before);
}

#[test]
fn a_client_certificate_variable_without_its_key_is_an_error_naming_both() {
    let vars = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE" => Some("/etc/otel/client.pem".to_string()),
        _ => None,
    };
    let e = Config::from_vars(vars).unwrap_err().to_string();
    assert_eq!(
        e,
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: set without OTEL_EXPORTER_OTLP_CLIENT_KEY: a \
         client certificate needs its key (set both, or neither)"
    );
}
