//! `https://` OTLP endpoints: a TLS terminator with a CA made in the test, in front of the
//! real receiver. The CA comes from `OTEL_EXPORTER_OTLP_CERTIFICATE`'s setting.

use crate::one_run::export;
use crate::receiver::Receiver;
use canary_exporters::{Config, OtlpExporter};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_endpoint_with_a_private_ca() {
    let receiver = Receiver::start().await;
    let (port, ca_pem) = canary_testkit::tls_terminator(receiver.addr).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.pem");
    std::fs::write(&bundle, ca_pem).unwrap();
    let config = Config {
        endpoint: Some(format!("https://localhost:{port}")),
        certificate: Some(bundle),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || export(config, "tls-test", 0))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    let paths: Vec<String> = receiver.posts().into_iter().map(|p| p.path).collect();
    assert!(paths.iter().any(|p| p == "/v1/metrics"), "{paths:?}");
    assert!(paths.iter().any(|p| p == "/v1/logs"), "{paths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_endpoint_whose_ca_is_not_trusted_is_refused_and_counted() {
    let receiver = Receiver::start().await;
    let (port, _ca_pem) = canary_testkit::tls_terminator(receiver.addr).await;
    let config = Config {
        endpoint: Some(format!("https://localhost:{port}")),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || export(config, "tls-test", 0))
        .await
        .unwrap();
    assert!(!report.is_clean(), "{report:?}");
    assert!(
        receiver.posts().is_empty(),
        "nothing crosses an untrusted TLS session"
    );
}

#[test]
fn an_unreadable_ca_bundle_is_an_error_naming_it() {
    let config = Config {
        endpoint: Some("https://localhost:4318".into()),
        certificate: Some("/nonexistent/ca.pem".into()),
        ..Config::default()
    };
    let e = OtlpExporter::start(config).err().unwrap().to_string();
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
}
