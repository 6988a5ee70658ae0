//! The order in which a server's pages are kept, against a real loopback HTTP server that the
//! test answers request by request: a run's own scrape and the interval's overlapping, the
//! run's last scrape while an interval scrape hangs, and a real restart of the server.
//!
//! The pages are the real llama.cpp capture (`llamacpp_server_metrics.prom`) with its
//! counters raised by 40 prompt tokens (and 40 of every other counter but the cached prompt
//! tokens) per request the server got before, as a server serving one 40-token request
//! between scrapes, none from its cache, counts them. No
//! timing assertions: the interleavings are forced by holding answers, and the deadlines
//! below only turn a hang into a failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use canary_core::MonoTime;
use canary_telemetry::{ServerMetricsConfig, ServerMetricsScraper, SourceState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Prompt tokens (and every other counter) the server counts per request before a page.
const STEP: f64 = 40.0;

/// The capture with every `_total` counter but the cached prompt tokens (0 in the capture,
/// counted into the prompt tokens read) raised by `add`.
fn page(add: f64) -> String {
    let mut out = String::new();
    for line in fixture!("llamacpp_server_metrics.prom").lines() {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        let raised = name.ends_with("_total") && name != "llamacpp:prompt_tokens_cached_total";
        match line.rsplit_once(' ') {
            Some((head, v)) if !line.starts_with('#') && raised => {
                out += &format!("{head} {}", v.parse::<f64>().unwrap() + add)
            }
            _ => out += line,
        }
        out.push('\n');
    }
    out
}

/// A request the server got: its number (from 0, in the order the server read them) and the
/// gate that answers it with the page rendered when it came. Dropping the gate closes the
/// connection unanswered.
struct Arrival {
    n: u64,
    answer: oneshot::Sender<()>,
}

impl Arrival {
    fn answer(self) {
        // The client may have given up on it already.
        let _ = self.answer.send(());
    }
}

/// Serves `page_for(n)` for the n-th request on a loopback port, each only when the test
/// answers its [`Arrival`]; returns the `/metrics` URL and the arrivals.
async fn gated_server(
    page_for: impl Fn(u64) -> String + Send + Sync + 'static,
) -> (String, mpsc::UnboundedReceiver<Arrival>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let page_for = Arc::new(page_for);
    let counter = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (tx, page_for, counter) = (tx.clone(), page_for.clone(), counter.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                // Rendered when the request came, sent when the test says.
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let body = page_for(n);
                let (answer, gate) = oneshot::channel();
                if tx.send(Arrival { n, answer }).is_err() || gate.await.is_err() {
                    return;
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (format!("http://{addr}/metrics"), rx)
}

/// The next request the server got; panics after a generous deadline (not a timing check).
async fn next(arrivals: &mut mpsc::UnboundedReceiver<Arrival>, what: &str) -> Arrival {
    match tokio::time::timeout(Duration::from_secs(60), arrivals.recv()).await {
        Ok(Some(a)) => a,
        _ => panic!("no request came for {what}"),
    }
}

/// Scrapes every 20 ms, giving up on one after `timeout`.
fn config(url: String, timeout: Duration) -> ServerMetricsConfig {
    let mut c = ServerMetricsConfig::new(url);
    c.interval = Duration::from_millis(20);
    c.timeout = Some(timeout);
    c
}

/// The prompt tokens kept in the ring, in its order.
fn kept(h: &canary_telemetry::ServerMetrics) -> Vec<f64> {
    h.samples_between(MonoTime(0), MonoTime::now())
        .iter()
        .map(|s| s.prompt_tokens_total.expect("llama.cpp's prompt tokens"))
        .collect()
}

// A run's own scrape (its measured phase's first, its last) overlapping the interval's: the
// interval's page, written first, came back after the run's. Kept in the order they came
// back, the fall from the later page to the earlier one read as a restart, and the earlier
// page's whole count was added as growth (CI's llama.cpp test read 282 prompt tokens where
// 240 grew). One scrape of an endpoint at a time keeps them in the order the server wrote them.
#[tokio::test]
async fn a_scrape_beside_the_intervals_keeps_the_pages_in_the_servers_order() {
    let (url, mut arrivals) = gated_server(|n| page(STEP * n as f64)).await;
    // The interval's scrape held here gives up after 2 s; with one scrape at a time the
    // run's own waits for that (nothing is timed by it).
    let scraper = ServerMetricsScraper::new(config(url, Duration::from_secs(2))).unwrap();
    let h = scraper.handle();

    // The window's first page (request 0).
    let first = tokio::spawn({
        let h = h.clone();
        async move { h.scrape_now().await }
    });
    next(&mut arrivals, "the first page").await.answer();
    first.await.unwrap().unwrap();

    // The interval's scrape (request 1) comes in; the server holds its answer.
    let shutdown = CancellationToken::new();
    let poller = tokio::spawn(scraper.run(shutdown.clone()));
    let interval = next(&mut arrivals, "the interval's scrape").await;
    assert_eq!(interval.n, 1);

    // The run's own scrape: answered at once, whenever its request comes.
    let own = tokio::spawn({
        let h = h.clone();
        async move { h.scrape_now().await }
    });
    let own_request = next(&mut arrivals, "the run's own scrape").await;
    assert_eq!(own_request.n, 2);
    own_request.answer();
    let own = own.await.unwrap().expect("the run's own page");
    assert_eq!(own.prompt_tokens_total, Some(42.0 + 2.0 * STEP));

    // Only then the interval's page, written before it, comes back (if still asked for).
    interval.answer();
    // The interval's next request means it is done with that page, kept or given up.
    let _held = next(&mut arrivals, "the interval's next scrape").await;
    shutdown.cancel();
    poller.await.unwrap().unwrap();

    let kept = kept(&h);
    assert!(
        kept.windows(2).all(|w| w[0] <= w[1]),
        "kept in another order than the server wrote them: {kept:?}"
    );
    let s = h.summary(MonoTime(0), MonoTime::now());
    assert_eq!(
        s.prompt_tokens,
        Some(2.0 * STEP),
        "exact: 2 requests of 40 between the first page and the last ({kept:?})"
    );
    assert_eq!(s.note, None);
}

// A run's last scrape while an interval scrape hangs on a slow server: it stops the interval's
// scrapes and goes first, rather than waiting out the interval's timeout, and the interval's
// page, answered after it, is not kept.
#[tokio::test]
async fn the_last_scrape_stops_the_interval_and_keeps_the_last_page() {
    let (url, mut arrivals) = gated_server(|n| page(STEP * n as f64)).await;
    // The interval's scrape would hang 10 s before giving up (a failed scrape, noted).
    let scraper = ServerMetricsScraper::new(config(url, Duration::from_secs(10))).unwrap();
    let h = scraper.handle();
    let first = tokio::spawn({
        let h = h.clone();
        async move { h.scrape_now().await }
    });
    next(&mut arrivals, "the first page").await.answer();
    first.await.unwrap().unwrap();

    let shutdown = CancellationToken::new();
    let poller = tokio::spawn(scraper.run(shutdown.clone()));
    let interval = next(&mut arrivals, "the interval's scrape").await;
    assert_eq!(interval.n, 1);

    let last = tokio::spawn({
        let h = h.clone();
        async move { h.last_scrape(false).await }
    });
    let last_request = next(&mut arrivals, "the run's last scrape").await;
    assert_eq!(last_request.n, 2);
    last_request.answer();
    let last = last.await.unwrap().expect("the last page");
    assert_eq!(last.prompt_tokens_total, Some(42.0 + 2.0 * STEP));
    // The interval's scrape was dropped, not waited out: no failure noted.
    match h.state() {
        SourceState::Available { detail } => assert!(!detail.contains("failed"), "{detail}"),
        other => panic!("{other}"),
    }

    // The interval's page, answered now, is not kept: its scrapes stopped by themselves.
    interval.answer();
    poller.await.unwrap().unwrap();
    assert!(!shutdown.is_cancelled());
    assert_eq!(kept(&h), [42.0, 42.0 + 2.0 * STEP]);
    assert_eq!(h.ring().latest().unwrap().at, last.at);
    let s = h.summary(MonoTime(0), last.at);
    assert_eq!(s.prompt_tokens, Some(2.0 * STEP), "exact");
    // No more requests came: the server got three in all.
    assert!(arrivals.try_recv().is_err());
}

// A server that really restarts mid-run still counts from zero: its counters fall to the
// capture's own values (42 prompt tokens since it started) and grow again. The pages come one
// at a time, in order, through the scraper.
#[tokio::test]
async fn a_real_restart_between_scrapes_counts_from_zero() {
    // 1,000 ahead, +40, restart (the capture itself), +40.
    let adds = [1000.0, 1000.0 + STEP, 0.0, STEP];
    let (url, mut arrivals) = gated_server(move |n| page(adds[n as usize])).await;
    let scraper = ServerMetricsScraper::new(config(url, Duration::from_secs(10))).unwrap();
    let h = scraper.handle();
    for i in 0..adds.len() {
        let scrape = tokio::spawn({
            let h = h.clone();
            async move { h.scrape_now().await }
        });
        next(&mut arrivals, "a scrape").await.answer();
        scrape
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("scrape {i}: {e}"));
    }
    assert_eq!(kept(&h), [1042.0, 1082.0, 42.0, 82.0]);
    let s = h.summary(MonoTime(0), MonoTime::now());
    // 40 before the restart, 42 counted from zero after it, then 40 more.
    assert_eq!(s.prompt_tokens, Some(STEP + 42.0 + STEP), "exact");
    assert_eq!(s.note, None);
}
