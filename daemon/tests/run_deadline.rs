//! A run's limits, as a real `canaryd run` process on loopback (audit finding 2): a target that
//! accepts connections and never answers held one run for `request_count × request_timeout`,
//! with no verdict. Now a run is stopped at its `run_deadline`, or after consecutive requests
//! that got nothing back, with that error as its verdict (in `verdict.json` and the history),
//! its requests so far kept; a server that is slow but answers is not cut.

mod common;

use common::{api_runs, eventually, http};
use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A listener on loopback that accepts every connection and never answers (nor closes): the
/// connections are held for as long as the test runs. Returns its port.
fn silent_listener() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            held.lock().unwrap().push(conn);
        }
    });
    port
}

/// A config with `state_dir` in `dir`, a target on `port` with `target` keys, and one
/// workload `w` run every hour with `workload` keys.
fn write_config(dir: &Path, port: u16, target: &str, workload: &str) -> PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.t]\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"canary-sim\"\n\
         metrics_url = \"\"\n{target}\n\
         [workloads.w]\ntarget = \"t\"\nevery = \"1h\"\ngrace_period = \"1s\"\n{workload}\n",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The first finished run of `w` (with its verdict), waiting at most `secs` seconds.
fn finished_run(dir: &Path, status: u16, secs: u64) -> Value {
    let log = || std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    let run = std::panic::catch_unwind(|| {
        eventually(secs, "the run's verdict", || {
            api_runs(status)
                .into_iter()
                .find(|r| r["workload"] == "w" && r["verdict_kind"].is_string())
        })
    });
    let run = run.unwrap_or_else(|_| panic!("no verdict within {secs} s:\n{}", log()));
    // For the reader of a failure or of `--nocapture`: how long the run went on (exact, the
    // history's start and end).
    eprintln!(
        "run: {} ms, {} requests: {}",
        run["finished_unix_ms"].as_i64().unwrap_or(0)
            - run["started_unix_ms"].as_i64().unwrap_or(0),
        run["figures"]["requests"],
        run["verdict"]
    );
    run
}

/// The run's `verdict.json`, as text.
fn verdict_file(run: &Value) -> String {
    let artifacts = Path::new(run["artifacts"].as_str().unwrap());
    std::fs::read_to_string(artifacts.join("verdict.json")).unwrap()
}

/// A closed loop of 200 requests, 300 ms timeout each, against a target that never answers:
/// 60 s before, with no verdict meanwhile. The 5th silent request in a row stops it (about
/// 1.5 s, plus the 1 s grace); the bound waited for is 30 s.
#[test]
fn a_target_that_never_answers_is_cut_after_consecutive_silent_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = silent_listener();
    let config = write_config(
        dir,
        port,
        "request_timeout = \"300ms\"",
        "request_count = 200\nisl = 50\nosl = 5",
    );
    let (_d, status) = common::daemon_on_own_port(dir, &config, "daemon.log", &[]);
    let run = finished_run(dir, status, 30);
    let verdict = run["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("error: target unresponsive: 5 consecutive requests got nothing back"),
        "{run}"
    );
    assert!(verdict.contains("request timeout"), "{run}");
    let file = verdict_file(&run);
    assert!(
        file.contains("target unresponsive: 5 consecutive"),
        "{file}"
    );
    // What was measured is kept: the requests sent so far, far fewer than planned.
    let requests = run["figures"]["requests"].as_u64().unwrap();
    assert!((5..200).contains(&requests), "{run}");
    // Said once in the log.
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert_eq!(log.matches("stopping the run").count(), 1, "{log}");
}

/// A run against a target that never answers, with a 10 min request timeout (the default):
/// 10 requests would take 100 min. Its `run_deadline` of 4 s stops it; while it goes,
/// `/metrics` shows when it started, and not once it has ended.
#[test]
fn a_run_deadline_stops_a_run_held_by_a_silent_target() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = silent_listener();
    let config = write_config(
        dir,
        port,
        "",
        "request_count = 10\nisl = 50\nosl = 5\nrun_deadline = \"4s\"",
    );
    let (_d, status) = common::daemon_on_own_port(dir, &config, "daemon.log", &[]);
    let started = eventually(10, "canaryd_run_started_timestamp_seconds", || {
        let text = http(status, "GET", "/metrics", "").1;
        let line = text
            .lines()
            .find(|l| l.starts_with("canaryd_run_started_timestamp_seconds{workload=\"w\"} "))?;
        line.rsplit(' ').next()?.parse::<f64>().ok()
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(started > now - 60.0 && started <= now, "{started} vs {now}");
    let run = finished_run(dir, status, 30);
    let verdict = run["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("error: run deadline 4s passed"),
        "{run}"
    );
    assert!(verdict_file(&run).contains("run deadline 4s passed"));
    let text = http(status, "GET", "/metrics", "").1;
    assert!(
        !text.contains("canaryd_run_started_timestamp_seconds{workload=\"w\"}"),
        "{text}"
    );
}

/// An open-loop trace replay against a server that is slow but answers: every prefill takes
/// 600 ms, over the 300 ms request timeout, so each request times out after the server sent
/// its response head. Nothing is cut: every request of the window is sent, and the verdict is
/// the run's own (no completed request), not `target unresponsive`.
#[test]
fn a_slow_server_that_answers_is_not_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim_with_profile(
        dir,
        r#"{"profile": "fast", "prefill_overhead_us": 600000}"#,
        &[],
    );
    let config = write_config(
        dir,
        port,
        "request_timeout = \"300ms\"",
        "trace = \"bundled\"\nmax_requests = 12\nspeedup = 20\nscale_lengths = 0.05",
    );
    let (_d, status) = common::daemon_on_own_port(dir, &config, "daemon.log", &[]);
    let run = finished_run(dir, status, 60);
    let verdict = run["verdict"].as_str().unwrap();
    assert!(
        !verdict.contains("unresponsive") && !verdict.contains("run deadline"),
        "{run}"
    );
    assert!(verdict.contains("timeout"), "{run}");
    assert_eq!(run["figures"]["requests"].as_u64(), Some(12), "{run}");
}
