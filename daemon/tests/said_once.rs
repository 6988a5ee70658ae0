//! What the daemon says once, and what it shows from the start, as a real `canaryd run`
//! process against a real `canaryd sim` on loopback: its counters have samples at 0 before
//! they first count, and a source missing on this host (NVML with no libnvidia-ml, a `/metrics`
//! and a DCGM endpoint nothing listens on) is warned about once over several runs, its
//! loader's error recorded once, not repeated in every run's diagnosis (README audit, 7 and 12).

mod common;

use common::{api_runs, eventually, free_port, http};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A config with `state_dir` in `dir`, a `sim` target on `sim_port` and one short workload
/// `w` (5 requests of the bundled trace at 20x) every `every`; `telemetry` and `target`
/// add keys to those tables.
fn write_config(dir: &Path, sim_port: u16, every: &str, telemetry: &str, target: &str) -> PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\n{telemetry}\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n{target}\n\
         [workloads.w]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 5\n\
         speedup = 20\nscale_lengths = 0.05\nevery = \"{every}\"\n",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn metrics(port: u16) -> String {
    http(port, "GET", "/metrics", "").1
}

/// `canaryd_skips_total` and `canaryd_config_reloads_total` had only their `# HELP` and
/// `# TYPE` lines until the first skip or reload, so `increase(…) > 0` saw no series at all.
#[test]
fn skips_and_reloads_show_at_zero_before_they_first_count() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // Every hour: no run is due again while one goes, so nothing is skipped; no SIGHUP comes.
    let config = write_config(dir.path(), sim_port, "1h", "nvml = false\nebpf = false", "");
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    // The workloads are known once scheduled.
    eventually(30, "the workload to be scheduled", || {
        let log = std::fs::read_to_string(dir.path().join("daemon.log")).ok()?;
        log.contains("scheduled every 1h").then_some(())
    });
    let text = metrics(status);
    for line in [
        "canaryd_skips_total{workload=\"w\",reason=\"overrun\"} 0",
        "canaryd_skips_total{workload=\"w\",reason=\"turn\"} 0",
        "canaryd_skips_total{workload=\"w\",reason=\"stopping\"} 0",
        "canaryd_config_reloads_total{result=\"ok\"} 0",
        "canaryd_config_reloads_total{result=\"rejected\"} 0",
    ] {
        assert!(text.contains(&format!("\n{line}\n")), "{line}:\n{text}");
    }
}

/// Several runs on a host without NVML (no libnvidia-ml here: it is missing for real), with
/// a `/metrics` and a DCGM endpoint nothing listens on: each is warned about once, every run
/// says its source is unavailable, the first run's summary keeps the loader's error, and the
/// later runs' diagnoses do not repeat it.
#[test]
fn a_source_missing_at_every_run_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let (metrics_port, dcgm_port) = (free_port(), free_port());
    let config = write_config(
        dir.path(),
        sim_port,
        "1s",
        &format!("nvml = true\nebpf = false\ndcgm_url = \"http://127.0.0.1:{dcgm_port}/metrics\""),
        &format!("metrics_url = \"http://127.0.0.1:{metrics_port}/metrics\""),
    );
    let (mut d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let runs = eventually(120, "four runs of `w`", || {
        let mut runs: Vec<Value> = api_runs(status)
            .into_iter()
            .filter(|r| r["workload"] == "w" && r["artifacts"].is_string())
            .collect();
        runs.sort_by_key(|r| r["id"].as_str().unwrap_or_default().to_string());
        let summaries: Vec<Value> = runs
            .iter()
            .filter_map(|r| {
                let at = Path::new(r["artifacts"].as_str()?).join("summary.json");
                serde_json::from_slice(&std::fs::read(at).ok()?).ok()
            })
            .collect();
        (summaries.len() >= 4).then_some(summaries)
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();

    let nvml = |s: &Value| s["telemetry_sources"]["nvml"].clone();
    if nvml(&runs[0])["state"] == "available" {
        return canary_testkit::skip(
            "no-nvml",
            "NVML opened on this host (a libnvidia-ml is installed): it is not missing here",
        );
    }
    let warnings = |what: &str| {
        log.lines()
            .filter(|l| l.contains(" WARN ") && l.contains(what))
            .count()
    };
    assert_eq!(warnings("NVML unavailable"), 1, "{log}");
    assert_eq!(warnings("what=\"server /metrics\""), 1, "{log}");
    assert_eq!(warnings("what=\"dcgm-exporter\""), 1, "{log}");

    // The artifacts say why once: the first run's reason is the loader's whole error.
    let loader = "cannot open shared object file";
    let first = nvml(&runs[0]);
    assert_eq!(first["state"], "unavailable", "{first}");
    assert!(
        first["reason"].as_str().unwrap().contains(loader),
        "{first}"
    );
    for s in &runs[1..] {
        let n = nvml(s);
        let reason = n["reason"].as_str().unwrap_or_default();
        assert_eq!(n["state"], "unavailable", "{n}");
        assert!(
            reason.starts_with("cannot initialize NVML from") && !reason.contains(loader),
            "{n}"
        );
        // The diagnosis names what it lacked (GPU use, for the compute-bound rule), in short.
        let diagnosis = &s["diagnosis"];
        let missing: Vec<&str> = diagnosis["missing"]
            .as_array()
            .map(|m| m.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(
            missing
                .iter()
                .any(|m| m.contains("nvml: unavailable: cannot initialize NVML")),
            "{diagnosis}"
        );
        assert!(!diagnosis.to_string().contains(loader), "{diagnosis}");
        for source in ["server_metrics", "dcgm"] {
            assert_eq!(
                s["telemetry_sources"][source]["state"], "unavailable",
                "{s}"
            );
        }
    }
}
