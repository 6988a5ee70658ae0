//! What the daemon says once, and what it shows from the start, as a real `canaryd run`
//! process against a real `canaryd sim` on loopback: its counters have samples at 0 before
//! they first count, and a source missing on this host (NVML with no libnvidia-ml, a `/metrics`
//! and a DCGM endpoint nothing listens on) is warned about once over several runs, its
//! loader's error recorded once, not repeated in every run's diagnosis (README audit, 7 and 12).

mod common;

use common::{eventually, http};
use std::path::{Path, PathBuf};

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
        "canaryd_skips_total{workload=\"w\"} 0",
        "canaryd_config_reloads_total{result=\"ok\"} 0",
        "canaryd_config_reloads_total{result=\"rejected\"} 0",
    ] {
        assert!(text.contains(&format!("\n{line}\n")), "{line}:\n{text}");
    }
}
