//! `canaryd_telemetry_source_up{workload,source,state,reason}` on the daemon's `/metrics`,
//! against a real `canaryd run`, a real `canaryd sim` on loopback and the telemetry tests'
//! fake `libnvidia-ml.so` (no GPU here): a source the last run had reads 1 with no reason; one
//! it lacked reads 0 with a reason class from a fixed set, never the reason's text (its URL
//! and error chain would make a series per wording).
//!
//! Before it, a daemon that lost NVML, eBPF, DCGM or a server's `/metrics` said so in its log
//! only: the series had a `state` label alone, `unavailable` for every cause.

mod common;

use common::{eventually, http};
use std::collections::BTreeMap;

/// `source → (state, reason, value)` of `workload`'s `canaryd_telemetry_source_up` series,
/// read with canaryd's own Prometheus parser (the exposition must parse cleanly).
fn source_up(port: u16, workload: &str) -> BTreeMap<String, (String, String, f64)> {
    let (code, text) = http(port, "GET", "/metrics", "");
    assert_eq!(code, 200, "{text}");
    let scrape = canary_telemetry::prometheus::parse(&text);
    assert!(
        scrape.errors.is_empty() && scrape.skipped_lines == 0,
        "{:?}\n{text}",
        scrape.errors
    );
    let Some(family) = scrape
        .families
        .iter()
        .find(|f| f.name == "canaryd_telemetry_source_up")
    else {
        return BTreeMap::new();
    };
    family
        .samples
        .iter()
        .filter(|s| s.labels.get("workload") == Some(workload))
        .map(|s| {
            let l = |k| s.labels.get(k).unwrap_or_default().to_owned();
            (l("source"), (l("state"), l("reason"), s.value))
        })
        .collect()
}

#[test]
fn each_source_of_the_last_run_reads_up_or_down_with_a_bounded_reason() {
    let dir = tempfile::tempdir().unwrap();
    let lib = common::fake_nvml(dir.path());
    let (_sim, sim_port) = common::sim(&[]);
    // Nothing listens on this port (found free, let go): DCGM cannot connect.
    let dcgm_port = common::free_port();
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = true\nnvml_lib = \"{}\"\nebpf = false\n\
             dcgm_url = \"http://127.0.0.1:{dcgm_port}/metrics\"\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             metrics_url = \"http://127.0.0.1:{sim_port}/no-metrics-here\"\n\
             [workloads.w]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 5\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"1s\"\n",
            dir.path().join("state").display(),
            lib.display()
        ),
    )
    .unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    // Two runs: the second one's sources were said from the first one's outages (warned
    // once) and read the same.
    let runs = |port| {
        common::api_runs(port)
            .iter()
            .filter(|r| r["workload"] == "w")
            .count()
    };
    eventually(120, "two runs of w", || (runs(status) >= 2).then_some(()));
    let up = source_up(status, "w");
    let want = |state: &str, reason: &str, v: f64| (state.to_owned(), reason.to_owned(), v);
    let expected = BTreeMap::from([
        ("nvml".to_owned(), want("available", "", 1.0)),
        ("ebpf".to_owned(), want("disabled", "disabled", 0.0)),
        ("dcgm".to_owned(), want("unavailable", "unreachable", 0.0)),
        (
            "server_metrics".to_owned(),
            want("unavailable", "http_status", 0.0),
        ),
    ]);
    assert_eq!(up, expected);
    // Its reasons in words are in the run's summary, as before.
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(log.contains("/no-metrics-here: HTTP status 404"), "{log}");
}
