//! The `reason` classes of `canaryd_telemetry_source_up` ([`SOURCE_REASONS`]) are found by
//! phrases of other crates' error texts (telemetry's scrapers and NVML opener, eBPF's
//! refusals): reworded there, a class would silently become `other`. Here each reason is made
//! by its real producer (the server-metrics scraper and the DCGM probe against loopback
//! servers that refuse, answer 404, HTML, gzip, 1xx for ever, a short body, a page too large,
//! nothing; the NVML opener on libc, on the telemetry tests' fake library with no GPU and
//! hung; eBPF's typed refusals and its real probe), read through the daemon's own `/metrics`
//! rendering, and must land in its class. And every phrase of [`SOURCE_REASONS`] is either
//! made here or listed, with why, as one this test cannot make: a new phrase needs a producer
//! here or a reason not to.
//!
//! Before it, the classes were checked against hand-written copies of the scrapers' texts,
//! which a rewording of the scrapers left passing.

mod common;

use canary_core::{Source, SourceState};
use canary_telemetry::{ServerMetricsConfig, ServerMetricsScraper};
use canaryd::service::status::{StatusMetrics, SOURCE_REASONS};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// Phrases of [`SOURCE_REASONS`] no case below makes, and why.
const NOT_MADE_HERE: [(&str, &str); 5] = [
    (
        "attached but saw none of the run",
        "eBPF programs attached for a whole run: root and kernel BTF",
    ),
    (
        ": no page within the run",
        "the run observer's waiting on a scrape through a whole run",
    ),
    (
        "NVML's thread ended without an answer",
        "NVML's thread dying without sending (a panic in the driver binding)",
    ),
    (
        "but cannot count GPUs",
        "a driver whose device count fails (the fake library cannot be told to)",
    ),
    (
        "no GPU reported its name",
        "GPUs whose names all fail (the fake library cannot be told to)",
    ),
];

/// The class `/metrics` gives `state` as the last run's source: rendered by the daemon's
/// status metrics from a stored run (as after a restart) and read with canaryd's own parser.
fn class(state: &SourceState) -> String {
    let summary = serde_json::json!({ "telemetry_sources": { "dcgm": state } });
    let row = canaryd::service::history::ListedRow {
        run: canaryd::service::history::RunFacts {
            id: "20261201T000000Z".into(),
            workload: "w".into(),
            target: "t".into(),
            started_unix_ms: 0,
            due_unix_ms: None,
            finished_unix_ms: 0,
            verdict: canaryd::judge::verdict::Verdict::error("unjudged"),
            comparison: None,
            artifacts: "/nonexistent".into(),
            samples: None,
            capacity: None,
            sweep: None,
            load: None,
        },
        trend: None,
        summary: Some(serde_json::from_value(summary).unwrap()),
    };
    let m = StatusMetrics::default();
    m.retain_workloads(&["w".to_owned()]);
    m.seed(&[row]);
    let text = m.render();
    let scrape = canary_telemetry::prometheus::parse(&text);
    let samples: Vec<_> = scrape
        .families
        .iter()
        .filter(|f| f.name == "canaryd_telemetry_source_up")
        .flat_map(|f| f.samples.iter())
        .filter(|s| s.labels.get("source") == Some(Source::Dcgm.as_str()))
        .collect();
    assert_eq!(samples.len(), 1, "{text}");
    samples[0]
        .labels
        .get("reason")
        .unwrap_or_default()
        .to_owned()
}

/// A loopback server that reads each connection's request head and then does `answer` with
/// the stream (write, close, hold); its port.
fn serve(answer: impl Fn(&mut std::net::TcpStream) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && matches!(s.read(&mut b), Ok(1)) {
                    head.push(b[0]);
                }
                answer(&mut s);
            });
        }
    });
    port
}

/// `serve` answering `bytes` then closing.
fn answering(bytes: Vec<u8>) -> u16 {
    serve(move |s| {
        let _ = s.write_all(&bytes);
    })
}

/// A loopback port bound and not listening, held until the fd is dropped: a connect to it is
/// refused, and no other process can take it meanwhile (a port found free and let go could
/// be, by another test on the host).
fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a socket this function owns; sizes are the structs'.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        let sa = &mut addr as *mut libc::sockaddr_in as *mut libc::sockaddr;
        assert_eq!(
            libc::bind(raw, sa, len),
            0,
            "{}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::getsockname(raw, sa, &mut len), 0);
        (fd, u16::from_be(addr.sin_port))
    }
}

/// The state a run's server-metrics scraper keeps after one scrape of `url`.
async fn scraped(url: &str, tls: bool) -> SourceState {
    let mut config = ServerMetricsConfig::new(url);
    config.timeout = Some(Duration::from_millis(500));
    if tls {
        config.tls = Some(canary_tls::client_config(None, None).expect("a TLS client config"));
    }
    let scraper = ServerMetricsScraper::new(config).unwrap();
    let handle = scraper.handle();
    assert!(handle.scrape_now().await.is_err(), "{url} was scraped");
    handle.state()
}

fn ok_with(headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_real_reason_lands_in_its_class() {
    let mut made: Vec<(String, SourceState, &str)> = Vec::new();
    let mut add = |what: &str, state: SourceState, class: &'static str| {
        made.push((what.to_owned(), state, class))
    };

    // The server-metrics scraper, as a run scrapes.
    let (_held, refused) = refusing_port();
    let url = |port: u16| format!("http://127.0.0.1:{port}/metrics");
    add(
        "connection refused",
        scraped(&url(refused), false).await,
        "unreachable",
    );
    let port = answering(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec());
    add("404", scraped(&url(port), false).await, "http_status");
    let port = answering(ok_with("content-type: text/html\r\n", "<html>login</html>"));
    add(
        "an HTML page",
        scraped(&url(port), false).await,
        "bad_response",
    );
    let port = answering(ok_with("content-encoding: gzip\r\n", "\x1f\u{8b}\x08"));
    add("gzip", scraped(&url(port), false).await, "bad_response");
    let port = answering(
        [
            b"HTTP/1.1 100 Continue\r\n\r\n".repeat(canary_core::MAX_INTERIM as usize + 1),
            ok_with("", "m 1\n"),
        ]
        .concat(),
    );
    add(
        "1xx for ever",
        scraped(&url(port), false).await,
        "bad_response",
    );
    let port = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nm 1\n".to_vec());
    add(
        "a short body",
        scraped(&url(port), false).await,
        "bad_response",
    );
    let port = serve(|_| std::thread::sleep(Duration::from_secs(30)));
    add(
        "no answer",
        scraped(&url(port), false).await,
        "not_answering",
    );
    let port = serve(|_| {});
    add(
        "closed without an answer",
        scraped(&url(port), false).await,
        "unreachable",
    );
    // A plain HTTP server answers a ClientHello (no request head to wait for) with its 400.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    add(
        "https to a plain HTTP server",
        scraped(&format!("https://127.0.0.1:{port}/metrics"), true).await,
        "unreachable",
    );

    // dcgm-exporter, through the probe that reads its pages as a run's scraper does.
    let dcgm = |page: String| async move {
        let port = answering(ok_with("content-type: text/plain\r\n", &page));
        canary_telemetry::probe_dcgm(&url(port), Duration::from_secs(5)).await
    };
    add(
        "a page without DCGM metrics",
        dcgm("vllm_requests_total 3\n".into()).await,
        "bad_response",
    );
    add(
        "DCGM samples without a gpu label",
        dcgm("DCGM_FI_DEV_GPU_UTIL 5\n".into()).await,
        "no_gpu",
    );
    add(
        "DCGM metrics declared, no sample",
        dcgm("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n".into()).await,
        "no_gpu",
    );
    add(
        "a page over the parser's caps",
        dcgm(
            (0..=canary_telemetry::prometheus::MAX_FAMILIES)
                .map(|i| format!("# TYPE m{i} gauge\n"))
                .collect(),
        )
        .await,
        "bad_response",
    );
    add(
        "a page over the DCGM body cap",
        dcgm("#".repeat(canary_telemetry::DCGM_MAX_PAGE_BYTES + 1)).await,
        "bad_response",
    );

    // eBPF: its typed refusals (their texts are the crate's), and its real probe here.
    use canary_ebpf::Unavailable;
    add(
        "eBPF not permitted",
        SourceState::unavailable(Unavailable::NotPermitted("os error 1".into()).to_string()),
        "not_permitted",
    );
    add(
        "eBPF not built",
        SourceState::unavailable(Unavailable::NotBuilt("no object").to_string()),
        "not_supported",
    );
    add(
        "no BTF",
        SourceState::unavailable(Unavailable::NoBtf("os error 2".into()).to_string()),
        "not_supported",
    );
    add(
        "eBPF load",
        SourceState::unavailable(Unavailable::Load("EAGAIN".into()).to_string()),
        "load_failed",
    );
    let probed = canary_ebpf::probe();
    let probed_class = class(&probed);
    assert!(
        ["", "not_permitted", "not_supported", "load_failed"].contains(&probed_class.as_str()),
        "eBPF's probe here: {probed:?} reads as {probed_class:?}"
    );

    // NVML, through the opener a run uses: not NVML, no GPU, hung (then still hung).
    let dir = tempfile::tempdir().unwrap();
    let lib = common::fake_nvml(dir.path());
    let nvml = |lib: std::path::PathBuf, opener: canary_telemetry::NvmlOpener| async move {
        let config = canary_telemetry::NvmlConfig {
            lib_path: Some(lib),
            ..Default::default()
        };
        opener.open(config, Default::default()).await.1
    };
    let opener = canary_telemetry::NvmlOpener::default;
    add(
        "libc as NVML",
        nvml("libc.so.6".into(), opener()).await,
        "init_failed",
    );
    // The fake library reads these at each call: set while nothing else runs in this test.
    std::env::set_var("FAKE_NVML_GPUS", "0");
    add("no GPU", nvml(lib.clone(), opener()).await, "no_gpu");
    std::env::remove_var("FAKE_NVML_GPUS");
    std::env::set_var("FAKE_NVML_HANG", "1");
    let hung = opener();
    add(
        "NVML hung",
        nvml(lib.clone(), hung.clone()).await,
        "not_answering",
    );
    add(
        "NVML still hung",
        nvml(lib.clone(), hung).await,
        "not_answering",
    );

    let mut wrong = Vec::new();
    for (what, state, want) in &made {
        let got = class(state);
        if got != *want {
            wrong.push(format!(
                "{what}: {want} wanted, {got:?} read from {state:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Each phrase is made above, or listed as one this test cannot make.
    let reasons: Vec<String> = made
        .iter()
        .filter_map(|(_, s, _)| match s {
            SourceState::Unavailable { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    let mut unmade = Vec::new();
    for (class, phrases) in SOURCE_REASONS {
        for p in phrases {
            let exempt = NOT_MADE_HERE.iter().any(|(q, _)| q == p);
            let seen = reasons.iter().any(|r| r.contains(p));
            if seen == exempt {
                unmade.push(format!(
                    "{class} {p:?}: made here {seen}, listed as not {exempt}"
                ));
            }
        }
    }
    assert!(unmade.is_empty(), "{}", unmade.join("\n"));
}
