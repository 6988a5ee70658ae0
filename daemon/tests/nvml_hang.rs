//! An NVML whose init never returns (a wedged driver; the fake library with
//! `FAKE_NVML_HANG=1`), and an NVML missing for runs that start together, against real
//! `canaryd replay` and `canaryd run` processes and a real `canaryd sim` on loopback.
//!
//! Audit (graceful degradation) H1: the init ran on an async worker, so `replay` sent nothing
//! and ignored SIGTERM, and the daemon's run never ended (its status endpoints stopped
//! answering once every worker was stuck). M1: two workloads starting together each warned
//! that NVML is missing. Every wait here is bounded and generous; a process that does not end
//! in time fails its test and is killed by its guard.

mod common;

use common::{api_runs, eventually, fake_nvml, http, shared, Child, CANARYD};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What a run warns once when NVML's open does not return.
const HUNG: &str = "NVML did not answer within 5 s";

/// `canaryd replay` of the 20-row Mooncake arXiv trace against the sim on `port` into
/// `dir/out`, NVML from the hanging fake `lib`, `extra` flags added; stderr to `dir/replay.log`.
fn replay_hung(dir: &Path, port: u16, lib: &Path, extra: &[&str]) -> Child {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    Child(
        Command::new(CANARYD)
            .arg("replay")
            .arg("--trace")
            .arg(&trace)
            .args(["--url", &format!("http://127.0.0.1:{port}")])
            .args(["--model", "canary-sim", "--output-dir", "out", "--no-ebpf"])
            .arg("--nvml-lib")
            .arg(lib)
            .args(extra)
            .current_dir(dir)
            .env("RUST_LOG", "warn")
            .env("FAKE_NVML_HANG", "1")
            .env_remove("OPENAI_API_KEY")
            .env_remove("CANARYD_REQUEST_WORKERS")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("replay.log")).unwrap())
            .spawn()
            .expect("canaryd replay starts"),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The WARN lines of `log` that hold `what`.
fn warnings(log: &str, what: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("WARN") && l.contains(what))
        .count()
}

fn summary(dir: &Path) -> Value {
    let path = dir.join("out/summary.json");
    serde_json::from_slice(&std::fs::read(&path).expect("summary.json written")).unwrap()
}

/// NVML's state in a summary: unavailable, the reason naming the hang.
fn assert_nvml_hung(s: &Value) {
    let nvml = &s["telemetry_sources"]["nvml"];
    assert_eq!(nvml["state"], "unavailable", "{nvml}");
    let reason = nvml["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("did not answer within 5 s") || reason.contains("still not answering"),
        "{nvml}"
    );
}

#[test]
fn replay_with_a_hung_nvml_sends_its_requests_and_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_nvml(dir.path());
    let (_sim, port) = common::sim(&[]);
    let mut replay = replay_hung(dir.path(), port, &lib, &["--speedup", "50"]);
    let code = replay.wait_exit(Duration::from_secs(120));
    let log = read(&dir.path().join("replay.log"));
    assert_eq!(code, Some(0), "{log}");
    let s = summary(dir.path());
    assert_eq!(s["requests"], 20, "{log}");
    assert_nvml_hung(&s);
    assert_eq!(warnings(&log, HUNG), 1, "{log}");
    assert!(
        log.contains("--no-nvml / [telemetry] nvml = false"),
        "{log}"
    );
}

#[test]
fn sigterm_stops_a_replay_whose_nvml_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_nvml(dir.path());
    let (_sim, port) = common::sim(&[]);
    // The trace's 3 s played over a minute: the run is still sending when stopped.
    let mut replay = replay_hung(dir.path(), port, &lib, &["--speedup", "0.05"]);
    let log = dir.path().join("replay.log");
    eventually(60, "the hung NVML's warning", || {
        read(&log).contains(HUNG).then_some(())
    });
    // Slack for the first requests (the trace's first five are due at once) to go out.
    std::thread::sleep(Duration::from_secs(2));
    replay.signal(libc::SIGTERM);
    replay.wait_exit(Duration::from_secs(60));
    let s = summary(dir.path());
    assert_nvml_hung(&s);
    let sent = s["requests"].as_u64().unwrap_or(0);
    assert!(sent < 20, "stopped mid-run: {sent}\n{}", read(&log));
}

/// A daemon config: state in `dir`, the sim on `port` (runs against it may overlap), NVML
/// from `lib`, no eBPF, and two short workloads, both due at start: their runs start together.
fn two_workloads(dir: &Path, port: u16, lib: &Path) -> std::path::PathBuf {
    let mut text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = true\nnvml_lib = \"{}\"\nebpf = false\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"canary-sim\"\n\
         allow_concurrent_runs = true\n",
        dir.join("state").display(),
        lib.display()
    );
    for name in ["a", "b"] {
        text += &format!(
            "[workloads.{name}]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 5\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"1h\"\n"
        );
    }
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Both workloads' first runs, once recorded: their NVML states.
fn first_runs_nvml(status: u16) -> Vec<Value> {
    let ids = eventually(120, "a run of each workload", || {
        let all = api_runs(status);
        let ids: Vec<String> = ["a", "b"]
            .iter()
            .filter_map(|w| all.iter().find(|r| r["workload"] == *w))
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        (ids.len() == 2).then_some(ids)
    });
    ids.iter()
        .map(|id| {
            let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
            assert_eq!(code, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            v["summary"].clone()
        })
        .collect()
}

#[test]
fn daemon_runs_end_and_answer_while_nvml_hangs_and_sigterm_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_nvml(dir.path());
    let (_sim, port) = common::sim(&[]);
    let config = two_workloads(dir.path(), port, &lib);
    let (mut daemon, status) = common::daemon_on_own_port(
        dir.path(),
        &config,
        "daemon.log",
        &[("FAKE_NVML_HANG", "1")],
    );
    for s in first_runs_nvml(status) {
        assert_eq!(s["requests"], 5, "{s}");
        assert_nvml_hung(&s);
    }
    assert_eq!(http(status, "GET", "/healthz", "").0, 200);
    let log = read(&dir.path().join("daemon.log"));
    assert_eq!(warnings(&log, HUNG), 1, "{log}");
    assert!(warnings(&log, "still not answering") <= 1, "{log}");
    daemon.signal(libc::SIGTERM);
    daemon.wait_exit(Duration::from_secs(60));
}

#[test]
fn two_workloads_starting_together_warn_once_of_a_missing_nvml() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let config = two_workloads(dir.path(), port, &dir.path().join("no-libnvidia-ml.so"));
    let (_daemon, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    for s in first_runs_nvml(status) {
        assert_eq!(
            s["telemetry_sources"]["nvml"]["state"], "unavailable",
            "{s}"
        );
    }
    let log = read(&dir.path().join("daemon.log"));
    assert_eq!(warnings(&log, "NVML unavailable"), 1, "{log}");
}
