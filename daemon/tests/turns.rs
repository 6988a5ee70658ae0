//! `canaryd run` as a real process against a real `canaryd sim` on loopback: two workloads
//! taking turns on one server (the skip's reason, the warning naming the holder, the wait
//! recorded), when each workload runs next, and a workload a SIGHUP takes out mid-run.
//! Nothing asserts on timing: the status endpoint is polled with generous deadlines.

mod common;

use common::{api_runs, eventually, http};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A config with the sim as target `sim` and `workloads`.
fn write_config(dir: &Path, sim_port: u16, workloads: &str) -> PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         {workloads}",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The bundled trace's first 40 rows (12 s of trace) at `speedup`, lengths scaled by 1/20.
fn workload(name: &str, every: &str, speedup: u32, extra: &str) -> String {
    format!(
        "[workloads.{name}]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 40\n\
         speedup = {speedup}\nscale_lengths = 0.05\nevery = \"{every}\"\ngrace_period = \"1s\"\n\
         {extra}\n"
    )
}

fn metrics(port: u16) -> String {
    http(port, "GET", "/metrics", "").1
}

/// The value of the series `series` (name and labels, as written) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The `verdict.json` files of `workload`'s runs so far.
fn verdicts(dir: &Path, workload: &str) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir.join("state/artifacts").join(workload)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("verdict.json")).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect()
}

#[test]
fn a_run_queued_behind_another_workloads_turn_says_so_and_each_workload_shows_its_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // `long` takes about 6 s once an hour; `share`, due every second on the same server,
    // waits for its turn behind it.
    let config = write_config(
        dir.path(),
        sim_port,
        &format!(
            "{}{}",
            workload("long", "1h", 2, ""),
            workload("share", "1s", 20, "")
        ),
    );
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let server = format!("http://127.0.0.1:{sim_port}");

    // The skip is counted as a turn wait, not an overrun, and the warning names the holder.
    let turn = "canaryd_skips_total{workload=\"share\",reason=\"turn\"}";
    eventually(90, "a skip of `share` waiting for its turn", || {
        (value(&metrics(status), turn)? >= 1.0).then_some(())
    });
    let warned = format!(
        "due again while its previous run is still waiting for its turn on server {server}, \
         held by workload long: skipped"
    );
    eventually(10, "the turn warning in the log", || {
        let log = std::fs::read_to_string(dir.path().join("daemon.log")).ok()?;
        log.contains(&warned).then_some(())
    });

    // The queued run, once started, records how long it waited for its turn.
    let waited = eventually(90, "a run of `share` that waited for its turn", || {
        verdicts(dir.path(), "share")
            .into_iter()
            .find(|v| v["turn_wait_ms"].as_f64().is_some_and(|ms| ms > 0.0))
    });
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("late: it waited for its turn on server"),
        "{waited:#}\n{log}"
    );

    // When each runs next: after its last run's start, in /metrics and in /api/runs.
    let long = eventually(90, "a run of `long` listed", || {
        api_runs(status)
            .into_iter()
            .find(|r| r["workload"] == "long")
    });
    let started_s = long["started_unix_ms"].as_f64().unwrap() / 1000.0;
    let next = value(
        &metrics(status),
        "canaryd_next_run_timestamp_seconds{workload=\"long\"}",
    )
    .expect("a next-run gauge for `long`");
    // Every hour: due again about an hour after this run's due time.
    assert!(next > started_s + 60.0, "next {next}, started {started_s}");
    let listed: Value = serde_json::from_str(&http(status, "GET", "/api/runs", "").1).unwrap();
    let next_ms = listed["next_run_unix_ms"]["long"].as_f64().unwrap();
    assert!((next_ms / 1000.0 - next).abs() < 0.01, "{next}: {listed:#}");
    assert!(log.contains("next run at "), "{log}");
}

#[test]
fn a_workload_taken_out_mid_run_shows_running_until_its_run_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // `long`: about 12 s; `keep` stays configured.
    let long = workload("long", "1h", 1, "");
    let keep = workload("keep", "1h", 20, "");
    let config = write_config(dir.path(), sim_port, &format!("{long}{keep}"));
    let (d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let running = "canaryd_running{workload=\"long\"}";
    eventually(60, "the run of `long` to send requests", || {
        let run = std::fs::read_dir(dir.path().join("state/artifacts/long"))
            .ok()?
            .next()?
            .ok()?
            .path();
        let records = std::fs::read_to_string(run.join("records.jsonl")).ok()?;
        (records.lines().count() >= 2).then_some(())
    });
    assert!(verdicts(dir.path(), "long").is_empty(), "ended too soon");
    write_config(dir.path(), sim_port, &keep);
    d.signal(libc::SIGHUP);
    let text = eventually(30, "the reload applied", || {
        let text = metrics(status);
        value(&text, "canaryd_config_reloads_total{result=\"ok\"}")
            .is_some_and(|n| n >= 1.0)
            .then_some(text)
    });
    // Unless the run ended meanwhile (its verdict written), it still shows as running.
    if verdicts(dir.path(), "long").is_empty() {
        assert_eq!(value(&text, running), Some(1.0), "{text}");
    } else {
        panic!("the run of `long` ended before the reload was seen: make it longer");
    }
    // Once it ends, the series goes with the workload.
    eventually(60, "the run of `long` to end", || {
        (!verdicts(dir.path(), "long").is_empty()).then_some(())
    });
    let text = eventually(10, "`long`'s running series to go", || {
        let text = metrics(status);
        (!text.contains("workload=\"long\"")).then_some(text)
    });
    assert!(
        text.contains("canaryd_running{workload=\"keep\"}"),
        "{text}"
    );
}

#[test]
fn a_closed_loop_that_an_unanswering_target_could_stretch_far_past_its_period_is_warned() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // 10 requests by 2 users, 5 each one after another, each allowed 10 min: up to 50 min
    // against a target that never answers, every 10 min.
    let config = write_config(
        dir.path(),
        sim_port,
        "[workloads.loop]\ntarget = \"sim\"\nisl = 20\nosl = 4\nconcurrency = 2\n\
         request_count = 10\nevery = \"10m\"\n",
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "model = \"canary-sim\"\n",
        "model = \"canary-sim\"\nrequest_timeout = \"10m\"\n",
    );
    std::fs::write(&config, text).unwrap();
    let (_d, _status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let log = eventually(30, "the warning about an unbounded run", || {
        let log = std::fs::read_to_string(dir.path().join("daemon.log")).ok()?;
        log.contains("a run can last up to 3000s (an upper bound: 10 requests by 2 user(s)")
            .then_some(log)
    });
    assert!(log.contains("more than 3 times its period 600s"), "{log}");
}
