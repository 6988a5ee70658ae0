//! `https://` OTLP endpoints: a TLS terminator with a CA made in the test, in front of the
//! real receiver. The CA comes from `OTEL_EXPORTER_OTLP_CERTIFICATE`'s setting.

use crate::receiver::Receiver;
use canary_exporters::{Config, OtlpExporter};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// TLS for `localhost` in front of `backend`: the listening port and the CA in PEM.
async fn tls_terminator(backend: SocketAddr) -> (u16, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "canaryd exporter test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(leaf.der().to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut tls), Ok(mut up)) = (
                    acceptor.accept(tcp).await,
                    TcpStream::connect(backend).await,
                ) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    (port, ca.pem())
}

fn export_one_run(config: Config) -> canary_exporters::ExportReport {
    let exporter = OtlpExporter::start(config).unwrap();
    let target =
        canary_replay::Target::new("http://127.0.0.1:8000", canary_replay::Endpoint::Chat, "m")
            .unwrap();
    let labels = canary_exporters::RunLabels::for_target(&target, "tls-test");
    exporter.export_judged_run(&labels, None, &Default::default());
    exporter.shutdown(Duration::from_secs(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_endpoint_with_a_private_ca() {
    let receiver = Receiver::start().await;
    let (port, ca_pem) = tls_terminator(receiver.addr).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.pem");
    std::fs::write(&bundle, ca_pem).unwrap();
    let config = Config {
        endpoint: Some(format!("https://localhost:{port}")),
        certificate: Some(bundle),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || export_one_run(config))
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
    let (port, _ca_pem) = tls_terminator(receiver.addr).await;
    let config = Config {
        endpoint: Some(format!("https://localhost:{port}")),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || export_one_run(config))
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
