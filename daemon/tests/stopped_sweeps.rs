//! Sweeps and capacity searches a stop catches before their first measured request: `canaryd
//! run` with a `kind = "sweep"` or `kind = "capacity"` workload against a target that accepts
//! connections and never answers (its warm-up requests hang), stopped with SIGTERM. Such a run
//! never started: a skip, as a latency run's (lifecycle.rs), not an `interrupted` run (written
//! `error: interrupted` before that verdict had its own kind).
//! Nothing asserts on timing; files are polled with generous deadlines.

mod common;

use common::eventually;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A target that accepts connections and never answers, for as long as it is held;
/// `accepted` counts the completions (`POST`s) read.
struct Silent {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Silent {
    fn start() -> Silent {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let count = count.clone();
                // A completion (`POST`) counts; the run's `GET /v1/models` before it (the
                // target's context length) does not. Each is held, never answered.
                std::thread::spawn(move || {
                    use std::io::Read;
                    let mut method = [0u8; 5];
                    if s.read_exact(&mut method).is_ok() && &method == b"POST " {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    let mut buf = [0u8; 4096];
                    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        Silent { port, accepted }
    }
}

/// A config with `state_dir` in `dir`, a target on `port` with nothing to scrape, and
/// `workload` appended.
fn write_config(dir: &Path, port: u16, workload: &str) -> PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.silent]\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"canary-sim\"\n\
         metrics_url = \"\"\n{workload}",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts the daemon on `workload`, stops it once a warm-up request reached the target, and
/// checks the run was a skip: said so, no history row, no folder for the next start.
fn stopped_during_the_warm_up_is_a_skip(name: &str, workload: &str) {
    let dir = tempfile::tempdir().unwrap();
    let target = Silent::start();
    let config = write_config(dir.path(), target.port, workload);
    let (mut d, _) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    eventually(60, "a warm-up request at the target", || {
        (target.accepted.load(Ordering::SeqCst) > 0).then_some(())
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("not started: the daemon stopped during its warm-up"),
        "{log}"
    );
    // Not recorded as a run either: a run stopped by a signal is logged `{id}: interrupted`
    // (`error: interrupted` before the verdict had its own kind), its verdict in the history.
    let said_interrupted: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(": interrupted"))
        .collect();
    assert!(said_interrupted.is_empty(), "{said_interrupted:?}\n{log}");
    let db = rusqlite::Connection::open(dir.path().join("state/history.sqlite")).unwrap();
    let rows: i64 = db
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0, "recorded as a run: {log}");
    let left = std::fs::read_dir(dir.path().join("state/artifacts").join(name))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "a run folder left for the next start to recover");
}

/// A sweep stopped during its first point's warm-up was recorded as `error: interrupted`
/// (a latency run's was a skip already).
#[test]
fn a_sweep_stopped_during_its_first_warm_up_is_a_skip() {
    stopped_during_the_warm_up_is_a_skip(
        "knee",
        "[workloads.knee]\ntarget = \"silent\"\nkind = \"sweep\"\nevery = \"1h\"\n\
         trace = \"bundled\"\nscale_lengths = 0.05\nsweep_concurrency = [2, 8]\n\
         max_requests = 20\nwarmup_requests = 2\ngrace_period = \"1s\"\n",
    );
}

/// A capacity search stopped during its first probe's warm-up, likewise.
#[test]
fn a_capacity_search_stopped_during_its_first_warm_up_is_a_skip() {
    stopped_during_the_warm_up_is_a_skip(
        "capacity",
        "[workloads.capacity]\ntarget = \"silent\"\nkind = \"capacity\"\nevery = \"1h\"\n\
         request_rate = 5\narrival_pattern = \"constant\"\nbenchmark_duration = \"2s\"\n\
         isl = 32\nosl = 16\nwarmup_requests = 2\ngrace_period = \"1s\"\n\
         slos = \"time_to_first_token:100\"\nmin_good_fraction = 0.95\nmax_probes = 3\n",
    );
}
