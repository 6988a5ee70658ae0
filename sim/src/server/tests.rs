//! The listener's kernel receive stamps: refused, and what a request's reads cost.

use super::*;
use std::io;
use tokio::io::AsyncReadExt;

/// Sends one non-streaming chat request with `id` on `stream` and reads its whole response.
async fn one_request(stream: &mut TcpStream, id: &str) -> String {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi there"}],"max_tokens":2}"#;
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\nx-request-id: {id}\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // The response is complete once its JSON body closes.
    while !got.ends_with(b"}") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

/// What a kernel without SO_TIMESTAMPING answers (ENOPROTOOPT, 92 on x86-64 and arm64).
fn refuse(_: &TcpListener) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(92))
}

async fn started(enable: Enable) -> (SocketAddr, Arc<Shared>, CancellationToken) {
    let config = Config {
        profile: crate::Profile::fast(),
        ..Config::default()
    };
    let sim = Sim::bind_with(config, enable).await.unwrap();
    let (addr, shared, stop) = (sim.local_addr(), sim.shared(), CancellationToken::new());
    tokio::spawn(sim.run(stop.clone()));
    (addr, shared, stop)
}

#[tokio::test]
async fn refused_stamps_leave_the_field_empty_and_change_nothing_else() {
    let (addr, shared, stop) = started(refuse).await;
    assert!(!shared.kernel_clock.on());
    let mut stream = TcpStream::connect(addr).await.unwrap();
    for id in ["r1", "r2"] {
        let resp = one_request(&mut stream, id).await;
        assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    }
    let truth = shared.truth.snapshot(0);
    assert_eq!(truth.len(), 2);
    for r in &truth {
        assert_eq!(r.arrival_kernel_ns, None, "{r:?}");
        assert!(
            r.arrival_ns > 0 && r.body_received_ns >= r.arrival_ns,
            "{r:?}"
        );
    }
    stop.cancel();
}

// The hot path stays one syscall per read: a request that arrives in one segment costs the
// sim's connection one recvmsg, as it cost one read before stamps (the current-thread runtime
// runs the sim's tasks on this thread, where the calls are counted).
#[tokio::test(flavor = "current_thread")]
async fn a_request_costs_one_recvmsg() {
    let (addr, shared, stop) = started(canary_rxstamp::enable).await;
    assert!(shared.kernel_clock.on());
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    one_request(&mut stream, "warm").await;
    let before = canary_rxstamp::recvmsg_calls();
    for i in 0..5 {
        one_request(&mut stream, &format!("n{i}")).await;
    }
    assert_eq!(canary_rxstamp::recvmsg_calls() - before, 5);
    let truth = shared.truth.snapshot(0);
    assert!(
        truth.iter().all(|r| r.arrival_kernel_ns.is_some()),
        "{truth:?}"
    );
    stop.cancel();
}

// Before, each failed accept logged a line: about 100 lines/s while clients held every fd.
#[test]
fn failed_accepts_are_logged_a_line_per_interval() {
    let mut f = AcceptFailures::default();
    let e = io::Error::from_raw_os_error(24);
    let t0 = std::time::Instant::now();
    let first = f.failed(t0, &e).expect("the first is logged");
    assert!(first.starts_with("accept failed: "), "{first}");
    let ms = std::time::Duration::from_millis;
    for i in 1..=999 {
        assert_eq!(f.failed(t0 + ms(10 * i), &e), None, "{i}");
    }
    let next = f.failed(t0 + ms(10_000), &e).expect("one line per 10 s");
    assert!(next.starts_with("accept failed 1000 times since"), "{next}");
    assert_eq!(f.failed(t0 + ms(10_010), &e), None);
}
