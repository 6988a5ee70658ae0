//! `https://` targets: a real TLS server on loopback with a certificate made in the test,
//! terminating TLS in front of the simulator.

use crate::support::*;
use canary_core::{ErrorKind, Status};
use canary_replay::{Endpoint, Target};

#[tokio::test]
async fn https_target_with_a_private_ca_bundle() {
    let sim = sim(&["--profile", "fast"]).await;
    let (port, ca_pem) = canary_testkit::tls_terminator(sim.addr).await;
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
