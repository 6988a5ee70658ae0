//! A run's own `/metrics` scrapes against hostile endpoints, real loopback servers started by
//! the test: one that reads the GET and never answers, one that declares a body far over the
//! cap and stalls, one that answers 200 with an auth proxy's JSON.
//!
//! The bounds below are generous (a fraction of the scrape timeout the old code spent in
//! full, twice): they turn a wait for timeouts into a failure, not measure precision.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use canary_core::{Observer, SourceState};
use canary_telemetry::{
    probe_server_metrics, Config, ScrapeError, ServerMetricsConfig, ServerMetricsScraper,
    TelemetryObserver,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A loopback server that reads each request's head, writes `answer` (maybe nothing) and then
/// holds the connection open, silent. Returns the `/metrics` URL, the requests read so far and
/// a notice of each.
async fn server(answer: &'static [u8]) -> (String, Arc<AtomicUsize>, Arc<Notify>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let (count, came) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
    let (c, n) = (count.clone(), came.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (c, n) = (c.clone(), n.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => head.extend_from_slice(&chunk[..k]),
                    }
                }
                c.fetch_add(1, Ordering::SeqCst);
                n.notify_one();
                let _ = sock.write_all(answer).await;
                // Silent from here on, the connection held until the client drops it.
                let _ = sock.read(&mut chunk).await;
                tokio::time::sleep(Duration::from_secs(600)).await;
            });
        }
    });
    (url, count, came)
}

/// F1 (hostile audit 2): a stop while the run's first scrape waits on a silent `/metrics`
/// (20 s interval: 10 s scrape timeout) ends the measured phase and the run's end at once,
/// and the server source says the stop cut its scrapes. Before, the first scrape waited for
/// the interval's in flight, then its own (~20 s), and the last scrape as long again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_does_not_wait_out_the_runs_own_scrapes() {
    let (url, _, came) = server(b"").await;
    let cfg = Config {
        server_metrics_url: Some(url),
        server_metrics_interval: Duration::from_secs(20),
        nvml: false,
        ..Config::default()
    };
    let sources = CancellationToken::new();
    let run_stop = CancellationToken::new();
    let observer = TelemetryObserver::start(&cfg, &sources)
        .await
        .stopped_by(run_stop.clone());
    // The interval's first scrape is in flight (and will get nothing) before the run's.
    tokio::time::timeout(Duration::from_secs(30), came.notified())
        .await
        .expect("the interval's scrape reached the server");
    let began = Instant::now();
    let stopper = run_stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stopper.cancel();
    });
    let t0 = canary_core::MonoTime::now();
    observer.measured_phase(0).await;
    let summary = canary_core::Aggregator::new(Default::default()).summary();
    let telemetry = observer
        .finish(t0, canary_core::MonoTime::now(), &summary)
        .await;
    let took = began.elapsed();
    sources.cancel();
    assert!(
        took < Duration::from_secs(5),
        "the stop waited {took:?} for the run's scrapes (timeout 10 s)"
    );
    let state = &telemetry.sources[&canary_core::Source::ServerMetrics];
    let SourceState::Unavailable { reason } = state else {
        panic!("no page came, yet {state:?}");
    };
    assert!(
        reason.contains("the measured phase's first scrape and the run's last scrape not taken")
            && reason.contains("the run was stopped"),
        "{reason}"
    );
    let server = &telemetry.context.as_ref().unwrap().server;
    assert_eq!(
        server.version,
        canary_core::Known::unavailable("not asked: the run was stopped")
    );
}

/// The other side of F1: a stopped run against a healthy `/metrics` still takes its last
/// scrape (the real llama.cpp capture, answered at once), so the run's server figures end at
/// its end, not at the interval's last page: the stop bounds the wait, it does not skip it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_still_takes_a_healthy_servers_last_page() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/llamacpp_server_metrics.prom"
    ))
    .expect("shared/fixtures/llamacpp_server_metrics.prom");
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\r\n{page}",
        page.len()
    );
    let (url, count, came) = server(Box::leak(answer.into_bytes().into_boxed_slice())).await;
    let cfg = Config {
        server_metrics_url: Some(url),
        server_metrics_interval: Duration::from_secs(20),
        nvml: false,
        ..Config::default()
    };
    let sources = CancellationToken::new();
    let run_stop = CancellationToken::new();
    let observer = TelemetryObserver::start(&cfg, &sources)
        .await
        .stopped_by(run_stop.clone());
    tokio::time::timeout(Duration::from_secs(30), came.notified())
        .await
        .expect("the interval's scrape reached the server");
    let t0 = canary_core::MonoTime::now();
    observer.measured_phase(0).await;
    let asked = count.load(Ordering::SeqCst);
    run_stop.cancel();
    let summary = canary_core::Aggregator::new(Default::default()).summary();
    let telemetry = observer
        .finish(t0, canary_core::MonoTime::now(), &summary)
        .await;
    sources.cancel();
    assert!(
        count.load(Ordering::SeqCst) > asked,
        "the stopped run's last scrape was not asked"
    );
    let state = &telemetry.sources[&canary_core::Source::ServerMetrics];
    let SourceState::Available { detail } = state else {
        panic!("a healthy page, yet {state:?}");
    };
    assert!(!detail.contains("not taken"), "{detail}");
}

/// F2 (hostile audit 2): the run's scrape while the interval's hangs on a silent endpoint
/// spends one scrape timeout in all (its wait for the interval's to give up, and its GET),
/// not the interval's timeout and then its own. The bound is 1.5 timeouts; before it took 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_scrape_spends_one_timeout_not_two() {
    let (url, _, came) = server(b"").await;
    let timeout = Duration::from_secs(4);
    let mut cfg = ServerMetricsConfig::new(url);
    cfg.interval = Duration::from_secs(60);
    cfg.timeout = Some(timeout);
    let scraper = ServerMetricsScraper::new(cfg).unwrap();
    let handle = scraper.handle();
    let stop = CancellationToken::new();
    tokio::spawn(scraper.run(stop.clone()));
    tokio::time::timeout(Duration::from_secs(30), came.notified())
        .await
        .expect("the interval's scrape reached the server");
    let began = Instant::now();
    let e = handle.scrape_now().await.expect_err("a silent server");
    let took = began.elapsed();
    stop.cancel();
    assert!(
        took < timeout * 3 / 2,
        "the run's scrape took {took:?} with a {timeout:?} timeout ({e})"
    );
    assert!(
        !handle.state().is_available(),
        "a scrape that got nothing: {:?}",
        handle.state()
    );
}

/// F10 (hostile audit 2): a `Content-Length` far over the 32 MiB cap is refused at the head,
/// with the over-cap reason, not waited on until the timeout (the server then stalls).
#[tokio::test]
async fn a_declared_length_over_the_cap_is_refused_at_the_head() {
    let (url, _, _) = server(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 99999999999999999\r\n\r\n{}",
    )
    .await;
    let mut cfg = ServerMetricsConfig::new(url);
    cfg.timeout = Some(Duration::from_secs(30));
    let scraper = ServerMetricsScraper::new(cfg).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(20), scraper.handle().scrape_now())
        .await
        .expect("refused before the 30 s timeout")
        .expect_err("over the cap");
    assert!(matches!(e, ScrapeError::TooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains("over 32 MiB"), "{e}");
}

/// F11 (hostile audit 2): a `/metrics` answering 200 with an auth proxy's JSON (no metric
/// family readable) is unavailable, saying what the page held: a run's scrape, the interval's,
/// and `doctor`'s probe. Before, it was `available` with an unknown engine.
#[tokio::test]
async fn a_page_with_no_metric_family_is_unavailable() {
    const JSON: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n{\"detail\":\"Not authenticated\"}";
    let (url, _, _) = server(JSON).await;
    let mut cfg = ServerMetricsConfig::new(url.clone());
    cfg.interval = Duration::from_millis(50);
    let scraper = ServerMetricsScraper::new(cfg).unwrap();
    let handle = scraper.handle();
    let e = handle.scrape_now().await.expect_err("not a metrics page");
    let want = "not a metrics page, no metric family read: 1 line(s) that could not be read \
                as Prometheus text, beginning \"{\\\"detail\\\":\\\"Not authenticated\\\"}\"";
    assert!(e.to_string().contains(want), "{e}");
    let SourceState::Unavailable { reason } = handle.state() else {
        panic!("{:?}", handle.state());
    };
    assert!(reason.contains(want), "{reason}");
    assert!(handle.ring().is_empty(), "no sample kept of such a page");
    // The interval's scrapes say the same.
    let stop = CancellationToken::new();
    tokio::spawn(scraper.run(stop.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    assert!(!handle.state().is_available(), "{:?}", handle.state());
    assert!(handle.ring().is_empty());
    let probed = probe_server_metrics(&url, None, None, Duration::from_secs(10)).await;
    let SourceState::Unavailable { reason } = probed else {
        panic!("doctor: {probed:?}");
    };
    assert!(reason.contains("not a metrics page"), "{reason}");
}
