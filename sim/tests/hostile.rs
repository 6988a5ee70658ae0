//! Hostile or careless clients: what one connection can make the sim hold, and for how long.

use std::time::Duration;

use crate::client::{completion_body, read_until, request, Client, End};
use crate::{first_record, sim, sim_with};

const KEY: &str = "sk-sim-test";

fn guarded(c: &mut canary_sim::Config) {
    c.api_key = Some(KEY.into());
}

/// How the connection ends after what was read: waits for the sim to close it, or gives up
/// (`None`) after a bound far beyond any the sim should take, so that a sim that never
/// closes fails the test rather than hangs it.
async fn end(c: &mut Client) -> Option<End> {
    let next = tokio::time::timeout(Duration::from_secs(30), c.next_response()).await;
    next.ok().map(|r| r.end)
}

#[tokio::test]
async fn a_request_without_the_key_is_refused_before_its_body() {
    let sim = sim_with(guarded).await;
    let mut c = Client::connect(sim.addr).await;
    // 64 MiB announced and none sent: before, the sim waited for all of it (to buffer it),
    // and answered 408 after 60 s.
    c.write_raw(b"POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-length: 67108864\r\n\r\n")
        .await;
    let r = c.next_response().await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.json()["error"]["message"].is_string(), "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(end(&mut c).await, Some(End::Eof));
    assert!(sim.truth().is_empty());
}

#[tokio::test]
async fn a_client_still_sending_its_body_reads_the_401_not_a_reset() {
    let sim = sim_with(guarded).await;
    let mut c = Client::connect(sim.addr).await;
    let body = vec![b'x'; 4 << 20];
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: sim\r\nauthorization: Bearer wrong\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    // More than the socket buffers hold: the sim has answered long before the last byte.
    c.write_raw(&[head.as_bytes(), &body].concat()).await;
    let r = c.next_response().await;
    assert_eq!((r.status, r.end), (401, End::Complete), "{}", r.text());
    assert_eq!(end(&mut c).await, Some(End::Eof));
}

#[tokio::test]
async fn a_client_still_sending_a_refused_body_reads_the_refusal_not_a_reset() {
    let sim = sim().await;
    let body = vec![b'x'; 4 << 20];
    // Over the 64 KiB a route other than generation takes: 413 before the body.
    let sized = format!(
        "POST /sim/profile HTTP/1.1\r\nhost: sim\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    // A chunked body is not taken at all: 411.
    let chunked = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: sim\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n",
        body.len()
    );
    for (head, status) in [(sized, 413), (chunked, 411)] {
        let mut c = Client::connect(sim.addr).await;
        // More than the socket buffers hold: before, the sim closed with most of it unread,
        // and the client's write failed on the reset (or its read saw the reset).
        c.write_raw(&[head.as_bytes(), &body].concat()).await;
        let r = c.next_response().await;
        assert_eq!((r.status, r.end), (status, End::Complete), "{}", r.text());
        assert_eq!(end(&mut c).await, Some(End::Eof));
    }
}

#[tokio::test]
async fn only_generation_takes_a_large_body() {
    let sim = sim_with(guarded).await;
    // An open route: before, the sim waited for (and would have buffered) the 64 MiB.
    for path in ["/health", "/metrics", "/sim/profile", "/nope"] {
        let mut c = Client::connect(sim.addr).await;
        let head = format!("GET {path} HTTP/1.1\r\nhost: sim\r\ncontent-length: 67108864\r\n\r\n");
        c.write_raw(head.as_bytes()).await;
        let r = c.next_response().await;
        assert_eq!(r.status, 413, "{path}: {}", r.text());
    }
    // A profile patch is small JSON; 64 KiB of it is refused too.
    let mut c = Client::connect(sim.addr).await;
    let big = format!("{{\"name\":\"{}\"}}", "x".repeat(64 * 1024));
    let key = format!("Bearer {KEY}");
    let r = c
        .send("POST", "/sim/profile", &[("authorization", &key)], &big)
        .await;
    assert_eq!(r.status, 413, "{}", r.text());
}

#[tokio::test]
async fn the_ground_truth_wants_the_key() {
    let sim = sim_with(guarded).await;
    let key = format!("Bearer {KEY}");
    let auth = [("authorization", key.as_str())];
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &auth,
        &completion_body("a", 2, false),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Before, anyone reaching the port read the key-holder's request ids and traceparents.
    let r = request(sim.addr, "GET", "/sim/truth", &[], "").await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = request(sim.addr, "GET", "/sim/truth", &auth, "").await;
    assert_eq!(
        (r.status, r.text().lines().count()),
        (200, 1),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn the_ground_truth_comes_a_bounded_page_at_a_time() {
    let sim = sim().await;
    for _ in 0..5 {
        let body = completion_body("a", 2, false);
        request(sim.addr, "POST", "/v1/completions", &[], &body).await;
    }
    // Before, `limit` was ignored and every request copied the whole ring.
    let page = |query: &'static str| async move {
        let r = request(sim.addr, "GET", &format!("/sim/truth?{query}"), &[], "").await;
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        let seqs: Vec<u64> = r
            .text()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        (seqs, r.header("x-sim-truth-more").map(str::to_owned))
    };
    let more = |m: &str| Some(m.to_owned());
    assert_eq!(page("limit=2").await, (vec![1, 2], more("true")));
    assert_eq!(page("since=2&limit=2").await, (vec![3, 4], more("true")));
    assert_eq!(page("since=4&limit=2").await, (vec![5], more("false")));
    assert_eq!(page("since=1").await, (vec![2, 3, 4, 5], more("false")));
    for bad in ["since=x", "limit=0"] {
        let r = request(sim.addr, "GET", &format!("/sim/truth?{bad}"), &[], "").await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.json()["error"]["message"].as_str().unwrap().contains(bad));
    }
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed() {
    let sim = sim_with(|c| c.idle_timeout = Some(Duration::from_millis(200))).await;
    // Before, it held its task (and one of the 16,384 connection slots) for ever.
    let mut silent = Client::connect(sim.addr).await;
    assert_eq!(end(&mut silent).await, Some(End::Eof));
    // A kept-alive one too, once its response is out.
    let mut c = Client::connect(sim.addr).await;
    assert_eq!(c.send("GET", "/health", &[], "").await.status, 200);
    assert_eq!(end(&mut c).await, Some(End::Eof));
}

#[tokio::test]
async fn a_client_that_stops_reading_is_let_go() {
    let sim = sim_with(|c| c.write_timeout = Duration::from_millis(200)).await;
    // A stream of about 100 MB, far more than the socket buffers hold, and never read: before,
    // the sim's write waited for ever, and so did the request's engine slot.
    let body = completion_body("a", 1 << 20, true);
    let headers = [("x-request-id", "deaf")];
    let (stream, _, _) = read_until(sim.addr, "/v1/completions", &headers, &body, |_| true).await;
    let t = first_record(&sim).await.expect("the request never ended");
    assert_eq!(t.request_id.as_deref(), Some("deaf"));
    assert!(t.disconnected, "{t:?}");
    assert!(
        t.error.as_deref().unwrap().contains("read nothing"),
        "{t:?}"
    );
    assert!(t.completion_tokens > 0 && t.completion_tokens < 1 << 20);
    drop(stream);
}

#[tokio::test]
async fn a_head_over_64_kib_is_refused_however_it_arrives() {
    let sim = sim().await;
    // Before, the bound was checked only while the head's end was still to come: a 66 KB
    // head that came in one read was served.
    for big in [66_000, 70_000, 130_000] {
        let mut c = Client::connect(sim.addr).await;
        let head = format!(
            "GET /health HTTP/1.1\r\nhost: sim\r\nx-big: {}\r\n\r\n",
            "x".repeat(big)
        );
        c.write_raw(head.as_bytes()).await;
        let r = c.next_response().await;
        assert_eq!(r.status, 431, "{big}: {}", r.text());
    }
    // Just under the bound is served.
    let mut c = Client::connect(sim.addr).await;
    let line = "GET /health HTTP/1.1\r\nhost: sim\r\nx-big: ";
    let fill = 64 * 1024 - line.len() - 4;
    let head = format!("{line}{}\r\n\r\n", "x".repeat(fill));
    assert_eq!(head.len(), 64 * 1024);
    c.write_raw(head.as_bytes()).await;
    assert_eq!(c.next_response().await.status, 200);
}

#[tokio::test]
async fn request_bodies_in_flight_are_bounded_together() {
    const MIB: usize = 1024 * 1024;
    let sim = sim_with(|c| c.body_budget = 8 * MIB).await;
    // Three 3 MiB bodies at once, each but its last byte sent: 9 MiB > 8 MiB. Before, each
    // connection could hold 64 MiB (16,384 of them), and every body here was waited for.
    let body = |tag: &str| {
        let prompt = tag.repeat(3 * MIB - 40);
        format!(r#"{{"prompt":"{prompt}","max_tokens":1}}"#)
    };
    let mut clients = Vec::new();
    for tag in ["a", "b", "c"] {
        let b = body(tag);
        let mut c = Client::connect(sim.addr).await;
        let head = format!(
            "POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-length: {}\r\n\r\n",
            b.len()
        );
        c.write_raw(&[head.as_bytes(), &b.as_bytes()[..b.len() - 1]].concat())
            .await;
        clients.push((c, b));
    }
    crate::truth_once(&sim, "a request refused with 503", |t| {
        t.iter().any(|r| r.status == 503)
    })
    .await;
    let mut statuses = Vec::new();
    for (c, b) in &mut clients {
        // The refused one has its answer already; the others complete their bodies.
        c.write_raw(&b.as_bytes()[b.len() - 1..]).await;
        let r = c.next_response().await;
        if r.status == 503 {
            let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
            assert!(msg.contains("bound of 8.0 MiB"), "{msg}");
            assert_eq!(r.json()["error"]["type"], "ServiceUnavailableError");
        }
        statuses.push(r.status);
    }
    statuses.sort_unstable();
    assert!(
        statuses.contains(&503) && statuses.contains(&200),
        "{statuses:?}"
    );
    // The budget is given back: a 3 MiB body and a small one are served.
    let r = request(sim.addr, "POST", "/v1/completions", &[], &body("d")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body("a b", 2, false),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Writes `raw` on a fresh connection and reads until the sim closes it (at most 30 s).
async fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut got = Vec::new();
    let read = s.read_to_end(&mut got);
    let _ = tokio::time::timeout(Duration::from_secs(30), read).await;
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_head_request_gets_no_body() {
    let sim = sim().await;
    // Before, HEAD got a 405 with a JSON body, which a client reads as the next response.
    let got = exchange(
        sim.addr,
        b"HEAD /version HTTP/1.1\r\nhost: sim\r\n\r\nHEAD /v1/completions HTTP/1.1\r\nhost: sim\r\n\r\n\
          GET /version HTTP/1.1\r\nhost: sim\r\nconnection: close\r\n\r\n",
    )
    .await;
    let heads: Vec<&str> = got.split("\r\n\r\n").collect();
    assert_eq!(heads.len(), 4, "{got}");
    assert!(heads[0].starts_with("HTTP/1.1 200 "), "{got}");
    assert!(!heads[0].contains("content-length: 0"), "{got}");
    assert!(heads[1].starts_with("HTTP/1.1 405 "), "{got}");
    assert!(heads[2].starts_with("HTTP/1.1 200 "), "{got}");
    assert!(heads[3].starts_with(r#"{"version":"#), "{got}");
}

#[tokio::test]
async fn an_http_1_0_stream_is_not_chunked() {
    let sim = sim().await;
    let body = completion_body("a b", 3, true);
    let raw = format!(
        "POST /v1/completions HTTP/1.0\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let got = exchange(sim.addr, raw.as_bytes()).await;
    let (head, body) = got.split_once("\r\n\r\n").expect("a response");
    // Before: `transfer-encoding: chunked`, which an HTTP/1.0 client reads as text.
    assert!(head.starts_with("HTTP/1.1 200 "), "{got}");
    assert!(!head.contains("transfer-encoding"), "{got}");
    assert!(head.contains("connection: close"), "{got}");
    let events = crate::client::sse_events(body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{got}");
    assert_eq!(events.len(), 3 + 1 + 1 + 1, "{got}");
}
