//! `https://` targets that require a client certificate (mutual TLS): a real TLS server on
//! loopback in front of the simulator, trusting only client certificates its test CA signed.

use crate::support::*;
use canary_core::{ErrorKind, Status};
use canary_replay::{ClientIdentity, Endpoint, Target};
use canary_testkit::{ClientPki, TlsOptions};

#[tokio::test]
async fn a_target_requiring_a_client_certificate_gets_the_one_given() {
    let sim = sim(&["--profile", "fast"]).await;
    let pki = ClientPki::new();
    let options = TlsOptions {
        client_ca: Some(pki.ca_pem.clone()),
        ..TlsOptions::default()
    };
    let (port, ca_pem) = canary_testkit::tls_terminator_with(sim.addr, options).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.pem");
    std::fs::write(&bundle, ca_pem).unwrap();
    let identity = ClientIdentity {
        cert: dir.path().join("client.pem"),
        key: dir.path().join("client.key"),
    };
    std::fs::write(&identity.cert, &pki.cert_pem).unwrap();
    std::fs::write(&identity.key, &pki.key_pem).unwrap();
    let url = format!("https://localhost:{port}");
    let mut t = Target::new(&url, Endpoint::Chat, "canary-sim").unwrap();
    t.ca_bundle = Some(bundle);
    t.client_identity = Some(identity);
    let run = replay(requests(3, 30, 5), t.clone(), |_| {}).await;
    for r in &run.records {
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        assert_eq!(r.usage.as_ref().unwrap().completion_tokens, Some(5));
    }

    // Without it the server ends the connection (in TLS 1.3 after canaryd's side of the
    // handshake is done): a connect error saying what the server wants and how to give it.
    t.client_identity = None;
    let run = replay(requests(1, 30, 5), t, |_| {}).await;
    let e = run.records[0].error.as_ref().unwrap();
    assert_eq!(e.kind, ErrorKind::Connect, "{}", e.message);
    assert!(
        e.message.contains(
            "TLS handshake: the server requires a client certificate and canaryd presented \
             none (CertificateRequired alert): give one with --client-cert and --client-key"
        ),
        "{}",
        e.message
    );
}
