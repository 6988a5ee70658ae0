//! Generation requests the sim refuses before it has read them whole still get a truth record.

use tokio::io::AsyncWriteExt;

use crate::client::{completion_body, request, Client};
use crate::{first_record, sim, sim_with, truth_once};

/// Sends `raw` on a new connection and returns the status the sim answered.
async fn refused(addr: std::net::SocketAddr, raw: &[u8]) -> u16 {
    let mut c = Client::connect(addr).await;
    c.write_raw(raw).await;
    c.next_response().await.status
}

// Before, a request refused while its head or body was read (400 for a head not UTF-8, 411,
// 413, 431, 408) left no record, though every generation request, errors included, should.
#[tokio::test]
async fn a_generation_request_refused_while_read_has_a_record() {
    let big = "x".repeat(70_000);
    let cases: [(Vec<u8>, u16, &str); 4] = [
        (
            [
                &b"POST /v1/completions HTTP/1.1\r\nx-request-id: "[..],
                b"caf\xe9",
                b"\r\ntraceparent: tp-1\r\ncontent-length: 2\r\n\r\n{}",
            ]
            .concat(),
            400,
            "not UTF-8",
        ),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\nx-request-id: chunked\r\n\
              transfer-encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_vec(),
            411,
            "chunked",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nx-request-id: huge\r\n\
              content-length: 67108865\r\n\r\n"
                .to_vec(),
            413,
            "too large",
        ),
        (
            format!(
                "POST /v1/completions?x=1 HTTP/1.1\r\nx-request-id: wide\r\nx-big: {big}\r\n\r\n"
            )
            .into_bytes(),
            431,
            "head too large",
        ),
    ];
    for (raw, status, error) in cases {
        let sim = sim().await;
        assert_eq!(refused(sim.addr, &raw).await, status);
        let t = first_record(&sim).await.expect("a record");
        assert_eq!(t.status, status, "{t:?}");
        assert!(t.error.as_deref().unwrap().contains(error), "{t:?}");
        assert!(t.path.starts_with("/v1/") && !t.path.contains('?'), "{t:?}");
        assert_eq!(t.method, "POST");
        assert!(t.arrival_ns > 0 && t.end_ns >= t.arrival_ns, "{t:?}");
        assert_eq!(t.first_byte_ns, Some(t.end_ns));
        assert!(!t.disconnected);
        match status {
            // The header that was not UTF-8 is left out; the rest are read.
            400 => {
                assert_eq!(t.request_id, None);
                assert_eq!(t.traceparent.as_deref(), Some("tp-1"));
            }
            411 => assert_eq!(t.request_id.as_deref(), Some("chunked")),
            413 => assert_eq!(t.request_id.as_deref(), Some("huge")),
            _ => assert_eq!(t.request_id.as_deref(), Some("wide")),
        }
        assert_eq!(sim.truth().len(), 1);
    }
}

#[tokio::test]
async fn a_generation_request_cut_short_has_a_record() {
    let sim = sim().await;
    let mut s = tokio::net::TcpStream::connect(sim.addr).await.unwrap();
    s.write_all(
        b"POST /v1/completions HTTP/1.1\r\nx-request-id: cut\r\ncontent-length: 100\r\n\r\n{",
    )
    .await
    .unwrap();
    s.shutdown().await.unwrap();
    let t = first_record(&sim).await.expect("a record");
    assert_eq!(t.request_id.as_deref(), Some("cut"));
    assert_eq!((t.status, t.disconnected), (0, true), "{t:?}");
    assert_eq!(t.disconnect_ns, Some(t.end_ns));
    assert!(t.error.as_deref().unwrap().contains("closed"), "{t:?}");
}

#[tokio::test]
async fn other_refusals_have_no_record() {
    let sim = sim_with(|c| c.api_key = Some("k".into())).await;
    // Not generation.
    let raw = b"POST /sim/profile HTTP/1.1\r\nauthorization: Bearer k\r\ntransfer-encoding: chunked\r\n\r\n";
    assert_eq!(refused(sim.addr, raw).await, 411);
    // Generation, but without the key (as a 401 has none).
    let raw = b"POST /v1/completions HTTP/1.1\r\nx-bad: \xff\r\n\r\n";
    assert_eq!(refused(sim.addr, raw).await, 400);
    // With it, one.
    let raw = b"POST /v1/completions HTTP/1.1\r\nauthorization: Bearer k\r\nx-bad: \xff\r\n\r\n";
    assert_eq!(refused(sim.addr, raw).await, 400);
    // A barrier: a request served whole after those. Each record is written by the
    // connection's task right after its answer, so once this one's record is there, any
    // record of the refusals above is too.
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[("authorization", "Bearer k")],
        &completion_body("a b", 1, false),
    )
    .await;
    assert_eq!(r.status, 200);
    let truth = truth_once(&sim, "the served request's record", |t| {
        t.iter().any(|r| r.status == 200)
    })
    .await;
    let refusals: Vec<_> = truth.iter().filter(|r| r.status != 200).collect();
    assert_eq!(refusals.len(), 1, "{truth:?}");
    assert_eq!(refusals[0].status, 400);
}

#[tokio::test]
async fn a_generation_head_not_complete_in_time_has_a_record() {
    let sim = sim().await;
    // The head's bound is 10 s, not a setting: this test waits it out.
    let raw = b"POST /v1/chat/completions HTTP/1.1\r\nx-request-id: slow\r\nhost: si";
    assert_eq!(refused(sim.addr, raw).await, 408);
    let t = first_record(&sim).await.expect("a record");
    assert_eq!(
        (t.status, t.request_id.as_deref(), t.path.as_str()),
        (408, Some("slow"), "/v1/chat/completions"),
        "{t:?}"
    );
    assert!(t.error.as_deref().unwrap().contains("10s"), "{t:?}");
}
