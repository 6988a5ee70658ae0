//! A sweep's point and a capacity search's probe cut by their own limits (a run deadline, a
//! target that answers nothing), as a real `canaryd run` process against a loopback listener
//! that accepts and never answers. The cut is no signal: the sweep (the search) ends with the
//! cut's error, naming the point (the probe), never `interrupted`, and a first point that
//! measured nothing before its cut is an error recorded in the history, not a skip. Before,
//! the point's outcome (stopped, as a signal stops it) made the whole sweep `interrupted`, and
//! a first point cut before any request ended was a skip: no verdict, the workload's tick
//! lost.

mod common;

use common::{api_runs, eventually, http};
use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A listener on loopback that accepts every connection and never answers (nor closes).
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

/// A config with a target on `port` (`target` keys) and one workload `w`, every hour.
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

/// The first finished run of `w` (a verdict, or a skip), waiting at most `secs` seconds.
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
    eprintln!(
        "run: {} ms: {}",
        run["finished_unix_ms"].as_i64().unwrap_or(0)
            - run["started_unix_ms"].as_i64().unwrap_or(0),
        run["verdict"]
    );
    run
}

/// `/metrics`' `canaryd_last_run_verdict` and `canaryd_runs_total` for `w` say `error`, not
/// `interrupted`.
fn metrics_say_error(status: u16) {
    let text = http(status, "GET", "/metrics", "").1;
    let one = |name: &str, kind: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{workload=\"w\",verdict=\"{kind}\"}} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(
        one("canaryd_last_run_verdict", "error"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        one("canaryd_last_run_verdict", "interrupted"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(one("canaryd_runs_total", "interrupted"), None, "{text}");
}

/// A concurrency sweep of 2 points, each a closed loop of 10 requests after 1 warm-up request,
/// with the default 10 min request timeout, against a target that never answers: the first
/// point's `run_deadline` of 3 s cuts it during its warm-up, before it measured a request. The
/// sweep's verdict is that error, naming the point (its first of 2), recorded (not a skip);
/// the second point never ran.
#[test]
fn a_sweep_whose_first_point_is_cut_ends_with_the_cut_error_not_interrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = silent_listener();
    let config = write_config(
        dir,
        port,
        "",
        "kind = \"sweep\"\nsweep_concurrency = [2, 4]\ncooldown = \"100ms\"\n\
         request_count = 10\nisl = 50\nosl = 5\nwarmup_requests = 1\nrun_deadline = \"3s\"",
    );
    let (_d, status) = common::daemon_on_own_port(dir, &config, "daemon.log", &[]);
    let run = finished_run(dir, status, 60);
    let verdict = run["verdict"].as_str().unwrap();
    assert_eq!(run["verdict_kind"], "error", "{run}");
    // Cut before it measured anything (a warm-up request is not measured).
    assert_eq!(run["figures"]["requests"], 0, "{run}");
    assert!(
        verdict.starts_with("error: run deadline 3s passed"),
        "{run}"
    );
    assert!(verdict.contains("(at the point c2, 1 of 2)"), "{run}");
    assert!(!verdict.contains("interrupted"), "{run}");
    let artifacts = Path::new(run["artifacts"].as_str().unwrap());
    let file = std::fs::read_to_string(artifacts.join("verdict.json")).unwrap();
    assert!(file.contains("run deadline 3s passed"), "{file}");
    // sweep.json: not interrupted; the point kept with its cut verdict, the other not run.
    let doc: Value =
        serde_json::from_slice(&std::fs::read(artifacts.join("sweep.json")).unwrap()).unwrap();
    assert_ne!(doc["interrupted"], true, "{doc:#}");
    assert_eq!(doc["points"].as_array().map(Vec::len), Some(1), "{doc:#}");
    let point_verdict = doc["points"][0]["verdict"].as_str().unwrap_or_default();
    assert!(
        point_verdict.starts_with("error: run deadline 3s"),
        "{doc:#}"
    );
    assert_eq!(doc["not_run"], serde_json::json!(["c4"]), "{doc:#}");
    metrics_say_error(status);
}

/// A capacity search from 4 req/s, each request with a 300 ms timeout, against a target that
/// never answers: the first probe's 5th silent request in a row cuts it. The search's verdict
/// is `target unresponsive`, naming the probe, not `interrupted`; the probe is recorded.
#[test]
fn a_capacity_search_whose_probe_is_cut_ends_with_the_cut_error_not_interrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = silent_listener();
    let config = write_config(
        dir,
        port,
        "request_timeout = \"300ms\"",
        "kind = \"capacity\"\nrequest_rate = 4\narrival_pattern = \"constant\"\n\
         benchmark_duration = \"20s\"\nisl = 50\nosl = 5\n\
         slos = \"time_to_first_token:100\"\nmin_good_fraction = 0.95\n\
         max_probes = 3\nsearch_precision = 0.3",
    );
    let (_d, status) = common::daemon_on_own_port(dir, &config, "daemon.log", &[]);
    let run = finished_run(dir, status, 60);
    let verdict = run["verdict"].as_str().unwrap();
    assert_eq!(run["verdict_kind"], "error", "{run}");
    assert!(
        verdict.starts_with("error: target unresponsive: 5 consecutive requests got nothing back"),
        "{run}"
    );
    assert!(
        verdict.contains("(at the probe at 4 req/s, probe 1)"),
        "{run}"
    );
    assert!(!verdict.contains("interrupted"), "{run}");
    let artifacts = Path::new(run["artifacts"].as_str().unwrap());
    let file = std::fs::read_to_string(artifacts.join("verdict.json")).unwrap();
    assert!(file.contains("target unresponsive"), "{file}");
    metrics_say_error(status);
}

/// A plain run cut by its `run_deadline` (2 s) against a target that never answers: its
/// `summary.json` says no signal interrupted it (`interrupted: false`) and why it stopped
/// (`cut`), and so do `/api/runs`' figures; the run lists its due time (`due_unix_ms`).
/// Before, `summary.json` and `/api/runs` said `interrupted: true`, as for a SIGTERM.
#[test]
fn a_cut_run_is_not_called_interrupted_in_its_summary_or_api_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = silent_listener();
    let config = write_config(
        dir,
        port,
        "",
        "request_count = 10\nisl = 50\nosl = 5\nrun_deadline = \"2s\"",
    );
    let (_d, status) = common::daemon_on_own_port(dir, &config, "daemon.log", &[]);
    let run = finished_run(dir, status, 60);
    assert!(
        run["verdict"]
            .as_str()
            .unwrap()
            .starts_with("error: run deadline 2s passed"),
        "{run}"
    );
    let artifacts = Path::new(run["artifacts"].as_str().unwrap());
    let summary: Value =
        serde_json::from_slice(&std::fs::read(artifacts.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], false, "{summary:#}");
    // It follows the summary's schema, `cut` included.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let schema = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = schema
        .iter_errors(&summary)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let cut = summary["cut"].as_str().unwrap_or_default();
    assert!(cut.starts_with("run deadline 2s passed"), "{summary:#}");
    assert_eq!(run["figures"]["interrupted"], false, "{run}");
    assert_eq!(run["figures"]["cut"], cut, "{run}");
    let due = run["due_unix_ms"].as_i64();
    assert!(
        due.is_some_and(|d| d <= run["started_unix_ms"].as_i64().unwrap()),
        "{run}"
    );
    metrics_say_error(status);
}
