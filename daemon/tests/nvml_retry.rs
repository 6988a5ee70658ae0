//! NVML found unavailable for a cause that may pass is tried again after a back-off, and its
//! figures come back, against a real `canaryd run`, a real `canaryd sim` on loopback and the
//! telemetry tests' fake `libnvidia-ml.so` (no GPU here).
//!
//! Audit (daemon) 3: any unavailable NVML was left off until a restart, so one bad moment
//! (a driver not loaded yet at boot, an open that hung) left GPU figures missing for the
//! daemon's whole life. The fake is first built without `nvmlInit_v2` (it loads, and NVML
//! cannot initialize: a cause that may pass), then replaced by the whole fake.

mod common;

use common::{api_runs, eventually, http};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The fake NVML built into `out` with `defines` (`-D` flags).
fn build_fake(out: &Path, defines: &[&str]) {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../telemetry/tests/fake_nvml/fake_nvml.c");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1"])
        .args(defines)
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .expect("cc runs (gcc is part of the base image)");
    assert!(status.success());
}

/// NVML's state in each of `w`'s runs so far, oldest first.
fn nvml_states(port: u16) -> Vec<Value> {
    let mut ids: Vec<String> = api_runs(port)
        .iter()
        .filter(|r| r["workload"] == "w")
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids.iter()
        .map(|id| {
            let (code, body) = http(port, "GET", &format!("/api/runs/{id}"), "");
            assert_eq!(code, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            v["summary"]["telemetry_sources"]["nvml"].clone()
        })
        .collect()
}

const EARLIER: &str = "(found at an earlier run; not tried again until ";

#[test]
fn nvml_that_failed_to_initialize_is_tried_again_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libnvidia-ml.so");
    build_fake(&lib, &["-DnvmlInit_v2=nvmlInit_v2_absent"]);
    let (_sim, sim_port) = common::sim(&[]);
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = true\nnvml_lib = \"{}\"\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.w]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 5\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"1s\"\n",
            dir.path().join("state").display(),
            lib.display()
        ),
    )
    .unwrap();
    // The first wait before a retry is 3 s here (10 min otherwise), doubling to 18 s.
    let (_d, status) = common::daemon_on_own_port(
        dir.path(),
        &config,
        "daemon.log",
        &[("CANARYD_TEST_SOURCE_RETRY_MS", "3000")],
    );
    let fresh = |s: &Value| {
        s["state"] == "unavailable"
            && s["reason"].as_str().is_some_and(|r| {
                r.starts_with(&format!("cannot initialize NVML from {}: ", lib.display()))
                    && !r.contains("found at an earlier run")
            })
    };
    // A run that says it found NVML missing earlier and when it is tried again, then a run
    // that tried again (and failed again).
    let states = eventually(120, "NVML left off, then tried again", || {
        let states = nvml_states(status);
        let cached = states.iter().position(|s| {
            s["state"] == "unavailable"
                && s["reason"].as_str().is_some_and(|r| {
                    r.starts_with("cannot initialize NVML from ")
                        && r.contains(EARLIER)
                        && r.ends_with("Z)")
                })
        })?;
        states[cached..].iter().any(fresh).then_some(states)
    });
    assert!(fresh(&states[0]), "{}", states[0]);

    // The whole library replaces the broken one (a new file, as an install makes it).
    let whole = dir.path().join("whole.so");
    build_fake(&whole, &[]);
    std::fs::rename(&whole, &lib).unwrap();
    eventually(120, "a run with NVML back", || {
        nvml_states(status)
            .iter()
            .any(|s| s["state"] == "available")
            .then_some(())
    });
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    let lines = |what: &str, level: &str| {
        log.lines()
            .filter(|l| l.contains(level) && l.contains(what))
            .count()
    };
    // Warned once for the spell, not at each retry; its back logged once.
    assert_eq!(lines("NVML unavailable", "WARN"), 1, "{log}");
    assert_eq!(lines("NVML is tried again at", "INFO"), 1, "{log}");
    assert_eq!(lines("NVML is available again", "INFO"), 1, "{log}");
}
