//! A soak of `canaryd run` against hostile servers (issue 14): a line, a stream and a body that
//! never end, headers that come a byte at a time, silence and garbage, each a target with its
//! own workload (its `/metrics` scraped, as by default), beside a healthy workload against
//! `canaryd sim`. For a bounded 90 seconds the daemon must stay up, the healthy workload keep
//! its schedule and pass, every hostile run end in its classified error, and the daemon's peak
//! memory stay under a stated bound.

mod common;

use canary_testkit::{Hostile, HostileServer};
use common::{api_runs as runs, eventually, http, Child};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the hostile servers play.
const SOAK: Duration = Duration::from_secs(90);

/// The daemon's peak resident memory (VmHWM) may not pass this. Measured on the 2-core
/// development VM: 156 MiB when this test was written, 249 MiB on 2026-11-25 before runs had
/// worker threads of their own, 269 MiB since (361 MiB before the daemon capped glibc's malloc
/// arenas, `daemon/src/malloc_arenas.rs`); of the first, about 90 MiB were the `/metrics`
/// scrapes of the hostile targets (left on, as by default: the scraper holds up to 32 MiB of one scrape, and three
/// of these servers answer `/metrics` with an endless body); 65 MiB with scraping off. The
/// caps bound each hostile run: 20 requests in flight, each holding at most one 1 MiB SSE
/// event and hyper's 64 KiB read buffer. Before the caps, the endless line alone buffered
/// 64 MiB per request, over a GiB per run.
const RSS_BOUND_MIB: u64 = 300;

/// The hostile workloads: name, how the server misbehaves, the error kind it must cost.
fn hostile() -> Vec<(&'static str, Hostile, &'static str)> {
    vec![
        (
            "endless_line",
            Hostile::EndlessLine { bytes: 64 << 20 },
            "response_too_large",
        ),
        (
            "endless_stream",
            Hostile::EndlessStream {
                chunks: 1 << 30,
                every: Duration::ZERO,
            },
            "response_too_long",
        ),
        (
            "huge_body",
            Hostile::HugeBody {
                declared: 4 << 30,
                bytes: 64 << 20,
            },
            "response_too_large",
        ),
        (
            "slow_headers",
            Hostile::SlowHeaders {
                every: Duration::from_millis(200),
            },
            "timeout",
        ),
        ("silent", Hostile::Silent, "timeout"),
        ("garbage", Hostile::Garbage { bytes: 4096 }, "protocol"),
    ]
}

fn vm_hwm_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib / 1024
}

/// The `summary.json` of a run.
fn summary_of(run: &Value) -> Value {
    let dir = Path::new(run["artifacts"].as_str().unwrap());
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn the_daemon_survives_hostile_targets_and_keeps_its_healthy_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&["--block-size", "26"]);
    let servers: Vec<_> = hostile()
        .into_iter()
        .map(|(name, mode, kind)| {
            let server = HostileServer::lasting(mode, SOAK + Duration::from_secs(30));
            (name, server, kind)
        })
        .collect();
    let mut config = format!(
        "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.healthy]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 40\n\
         speedup = 20\nscale_lengths = 0.05\nevery = \"3s\"\n",
        dir.path().join("state").display()
    );
    for (name, server, _) in &servers {
        config += &format!(
            "[targets.{name}]\nurl = \"{}\"\nmodel = \"m\"\n\
             request_timeout = \"5s\"\n\
             [workloads.{name}]\ntarget = \"{name}\"\ntrace = \"bundled\"\nmax_requests = 20\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"4s\"\ngrace_period = \"1s\"\n",
            server.url()
        );
    }
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    let (mut daemon, status): (Child, u16) =
        common::daemon_on_own_port(dir.path(), &path, "daemon.log", &[]);
    let pid = daemon.0.id();

    let end = Instant::now() + SOAK;
    let mut peak = 0;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "the daemon died; its log:\n{}",
            std::fs::read_to_string(dir.path().join("daemon.log")).unwrap()
        );
        assert_eq!(http(status, "GET", "/healthz", "").0, 200);
        peak = peak.max(vm_hwm_mib(pid));
    }
    // Let the runs in flight finish, so every workload has a finished run to look at.
    let all = eventually(60, "a finished run of every workload", || {
        let all = runs(status);
        let done = |w: &str| all.iter().any(|r| r["workload"] == w);
        (done("healthy") && servers.iter().all(|(n, ..)| done(n))).then_some(all)
    });
    peak = peak.max(vm_hwm_mib(pid));
    eprintln!("daemon peak RSS (VmHWM): {peak} MiB over {SOAK:?}");
    for w in std::iter::once("healthy").chain(servers.iter().map(|(n, ..)| *n)) {
        let mine: Vec<&str> = all
            .iter()
            .filter(|r| r["workload"] == w)
            .filter_map(|r| r["verdict_kind"].as_str())
            .collect();
        eprintln!("{w}: {} runs, verdicts {mine:?}", mine.len());
    }

    // The healthy workload: every run passed, none skipped, none long after the last.
    let mut healthy: Vec<&Value> = all.iter().filter(|r| r["workload"] == "healthy").collect();
    healthy.sort_by_key(|r| r["started_unix_ms"].as_i64());
    assert!(
        healthy.len() >= 10,
        "{} healthy runs in {SOAK:?}",
        healthy.len()
    );
    for r in &healthy {
        assert_eq!(r["verdict"], "pass", "{r}");
    }
    for w in healthy.windows(2) {
        let gap =
            w[1]["started_unix_ms"].as_i64().unwrap() - w[0]["started_unix_ms"].as_i64().unwrap();
        // Every 3 s; a loaded test machine gets generous room, a stalled daemon does not.
        assert!(gap < 15_000, "healthy runs {gap} ms apart: {w:?}");
    }
    let metrics = http(status, "GET", "/metrics", "").1;
    // One series per skip reason, each absent or 0.
    assert!(
        metrics
            .lines()
            .filter(|l| l.starts_with("canaryd_skips_total{workload=\"healthy\","))
            .all(|l| l.ends_with(" 0")),
        "the healthy workload was skipped:\n{metrics}"
    );

    // Each hostile run: not a pass, its requests all recorded, failed the way they should.
    for (name, server, kind) in &servers {
        let mine: Vec<&Value> = all.iter().filter(|r| r["workload"] == *name).collect();
        assert!(server.requests() > 0, "{name} was never asked");
        for r in &mine {
            assert_ne!(r["verdict"], "pass", "{name}: {r}");
            if r["verdict"].as_str().unwrap().contains("interrupted") {
                continue;
            }
            let s = summary_of(r);
            assert_eq!(s["requests"], 20, "{name}: {s}");
            assert_eq!(
                s["errors_by_kind"][kind], 20,
                "{name}: {}",
                s["errors_by_kind"]
            );
        }
    }

    assert!(
        peak < RSS_BOUND_MIB,
        "peak RSS {peak} MiB, bound {RSS_BOUND_MIB} MiB"
    );
    daemon.signal(libc::SIGTERM);
    assert_eq!(daemon.wait_exit(Duration::from_secs(60)), Some(0));
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}
