//! TLS audit M1: every extra header's value of 3 bytes or more counted as a secret, so
//! ordinary values blanked the same words in canaryd's own messages and in what a server
//! said: `-H 'X-Ns: 127' -H 'X-Kind: server' -H 'X-Cluster: handshake'` made a TLS failure
//! read `connect to <redacted>.0.0.1:…: TLS <redacted>: the <redacted>'s certificate …`. Only
//! the key and the values of headers that carry a credential are secrets now.

use crate::support::*;
use canary_core::ErrorKind;
use canary_replay::{header, ApiKey, Endpoint, Target};
use canary_testkit::{Hostile, HostileServer};

/// Headers that carry no credential: a namespace, a kind, a cluster, a route.
fn ordinary() -> Vec<(http::HeaderName, http::HeaderValue)> {
    [
        ("x-ns", "127"),
        ("x-kind", "server"),
        ("x-cluster", "handshake"),
        ("x-route", "model=canary-sim"),
    ]
    .iter()
    .map(|(n, v)| header(n, v).unwrap())
    .collect()
}

#[tokio::test]
async fn a_tls_failure_keeps_canaryds_words_whatever_ordinary_headers_say() {
    let sim = sim(&["--profile", "fast"]).await;
    // A CA the target is not given: the handshake fails on an unknown issuer.
    let (port, _ca) = canary_testkit::tls_terminator(sim.addr).await;
    let url = format!("https://127.0.0.1:{port}");
    let mut t = Target::new(&url, Endpoint::Chat, "canary-sim").unwrap();
    t.api_key = Some(ApiKey::new("sk-ZQ7xPLAINWORDS-1"));
    t.headers = ordinary();
    let run = replay(requests(1, 30, 5), t, |_| {}).await;
    for m in errors_of(&run.records, 1, ErrorKind::Connect) {
        assert!(
            m.starts_with(&format!(
                "connect to 127.0.0.1:{port}: TLS handshake: the server's"
            )),
            "{m}"
        );
        assert!(!m.contains("<redacted>"), "{m}");
    }
}

#[tokio::test]
async fn a_server_quoting_the_request_keeps_ordinary_headers_and_loses_credentials() {
    let server = HostileServer::start(Hostile::EchoRequest { in_stream: false });
    let mut t = small_target(&server.url(), true);
    t.api_key = Some(ApiKey::new("sk-ZQ7xPLAINWORDS-1"));
    t.headers = ordinary();
    t.headers.extend([
        header("X-Api-Key", "ZQ7xAPIKEYHDR").unwrap(),
        header("x-auth-token", "ZQ7xTOKEN").unwrap(),
        header("Cookie", "theme=dark; session=ZQ7xSESSION").unwrap(),
        header("x-gateway", "Token ZQ7xGATEWAY").unwrap(),
    ]);
    let run = replay(requests(2, 20, 4), t, |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::HttpStatus) {
        for plain in [
            "x-ns: 127",
            "x-kind: server",
            "x-cluster: handshake",
            "x-route: model=canary-sim",
        ] {
            assert!(m.contains(plain), "{plain}: {m}");
        }
        for said in [
            "authorization: Bearer <redacted>",
            "x-api-key: <redacted>",
            "x-auth-token: <redacted>",
            "x-gateway: <redacted>",
        ] {
            assert!(m.contains(said), "{said}: {m}");
        }
        assert!(!m.contains("ZQ7x"), "{m}");
    }
    for file in std::fs::read_dir(run.dir.path()).unwrap() {
        let path = file.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains("ZQ7x"), "{}: {text}", path.display());
    }
}
