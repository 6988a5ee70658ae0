//! `https://` targets: a real TLS server on loopback with a certificate made in the test,
//! terminating TLS in front of the simulator.

use crate::support::*;
use canary_core::{ErrorKind, Status};
use canary_replay::{Endpoint, Target};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

/// A TLS terminator for `localhost` in front of `backend`, with its own CA. Returns the
/// listening port and the CA certificate in PEM.
async fn tls_proxy(backend: SocketAddr) -> (u16, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "canaryd test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
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
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut upstream) = TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    (port, ca.pem())
}

#[tokio::test]
async fn https_target_with_a_private_ca_bundle() {
    let sim = sim(&["--profile", "fast"]).await;
    let (port, ca_pem) = tls_proxy(sim.addr).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.pem");
    std::fs::write(&bundle, ca_pem).unwrap();

    let mut t = Target::new(
        &format!("https://localhost:{port}"),
        Endpoint::Chat,
        "canary-sim",
    )
    .unwrap();
    t.ca_bundle = Some(bundle);
    let run = replay(requests(3, 30, 5), t.clone(), |_| {}).await;
    for r in &run.records {
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        assert_eq!(r.usage.as_ref().unwrap().completion_tokens, Some(5));
    }

    // Without the bundle the certificate is unknown: a connect error, clearly said.
    t.ca_bundle = None;
    let run = replay(requests(1, 30, 5), t, |_| {}).await;
    let e = run.records[0].error.as_ref().unwrap();
    assert_eq!(e.kind, ErrorKind::Connect);
    assert!(e.message.contains("TLS"), "{}", e.message);
}

#[test]
fn a_ca_bundle_without_certificates_is_rejected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("empty.pem");
    std::fs::write(&bundle, "not a certificate\n").unwrap();
    let err = canary_replay::client_config(Some(&bundle)).unwrap_err();
    assert!(err.to_string().contains("empty.pem"), "{err}");
}
