//! `[baseline] min_runs` under 3: the daemon compares a run with one or two baseline runs,
//! whose medians measure no run-to-run variation. `canaryd run` against a real `canaryd sim`
//! on loopback, the bundled trace, the simulator slowed down after the first run: the run
//! after reads `insufficient`, the regression its rule found kept as `unconfirmed`, and says
//! what it rests on; `check-config` warns about such a `min_runs`. Nothing asserts on timing;
//! the status API is polled with generous deadlines.

mod common;

use common::{api_runs, eventually, http, CANARYD};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn write_config(dir: &Path, sim_port: u16) -> PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [baseline]\nruns = 10\nmin_runs = 1\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.chat]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 40\n\
         speedup = 20\nscale_lengths = 0.05\nevery = \"5s\"\n",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// With `min_runs = 1`, a run hundreds of times slower than the one baseline run read
/// `regressed`, as confirmed as against twenty runs, though the rule's MAD term stood at its
/// floor (one median has no spread).
#[test]
fn a_regression_against_one_baseline_run_is_unconfirmed() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&["--block-size", "26"]);
    let config = write_config(dir.path(), sim_port);
    let (mut d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    eventually(120, "a first passing run", || {
        api_runs(status)
            .into_iter()
            .find(|r| r["verdict_kind"] == "pass")
    });
    // Slow the simulator down: every token now costs a decode step of 5 ms or more.
    let switched_ms = now_ms();
    let (code, body) = http(
        sim_port,
        "POST",
        "/sim/profile",
        r#"{"profile":"illustrative"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let slow = eventually(180, "a compared run started after the slowdown", || {
        let mut after: Vec<Value> = api_runs(status)
            .into_iter()
            .filter(|r| r["started_unix_ms"].as_i64().unwrap() > switched_ms)
            .collect();
        // The first one: its baseline is the runs before the slowdown.
        after.sort_by_key(|r| r["started_unix_ms"].as_i64());
        after.into_iter().next().filter(|r| !r["trend"].is_null())
    });
    let id = slow["id"].as_str().unwrap();
    let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
    assert_eq!(code, 200, "{body}");
    let run: Value = serde_json::from_str(&body).unwrap();
    let c = &run["comparison"];
    let n = c["baseline_runs"].as_u64().unwrap();
    // Fast runs every 5 s, the slowdown right after the first: one or two of them.
    assert!((1..3).contains(&n), "{c:#}");
    // The rule still found the regression, metric by metric …
    let e2e = &c["metrics"]["request_latency"];
    assert_eq!(e2e["trend"], "regressed", "{c:#}");
    assert_eq!(e2e["reference_runs"], n, "{c:#}");
    // … but the run does not read as a confirmed one.
    assert_eq!(slow["trend"], "insufficient", "{slow:#}");
    assert_eq!(c["trend"], "insufficient", "{c:#}");
    assert_eq!(c["unconfirmed"], "regressed", "{c:#}");
    let runs = if n == 1 { "1 run" } else { "2 runs" };
    assert_eq!(
        c["spread_unmeasured"],
        format!("reference is {runs}: run-to-run variation not measured"),
        "{c:#}"
    );
    // The verdict gate is not the baseline's: no SLO missed, a pass.
    assert_eq!(run["verdict"], "pass", "{run:#}");
    // The listing and the status page show the direction beside `insufficient`, from the
    // stored comparison: not a bare `insufficient`, as if too few runs to look at all.
    assert_eq!(slow["unconfirmed"], "regressed", "{slow:#}");
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("<span class=\"insufficient\">insufficient (unconfirmed: regressed)</span>"),
        "{page}"
    );
    // /metrics says it too, beside the `insufficient` trend.
    let (code, metrics) = http(status, "GET", "/metrics", "");
    assert_eq!(code, 200, "{metrics}");
    for (line, value) in [
        (
            "canaryd_last_run_baseline{workload=\"chat\",trend=\"insufficient\"}",
            1,
        ),
        (
            "canaryd_last_run_baseline_unconfirmed{workload=\"chat\",direction=\"regressed\"}",
            1,
        ),
        (
            "canaryd_last_run_baseline_unconfirmed{workload=\"chat\",direction=\"improved\"}",
            0,
        ),
    ] {
        assert!(
            metrics.lines().any(|l| l == format!("{line} {value}")),
            "{line} {value}: {metrics}"
        );
    }
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(std::time::Duration::from_secs(60)), Some(0));
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains(&format!(
            "baseline: insufficient (unconfirmed: regressed; reference is {runs}: run-to-run \
             variation not measured)"
        )),
        "{log}"
    );
    // verdict.json says it too.
    let v: Value = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join("state/artifacts/chat")
                .join(id)
                .join("verdict.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(v["trend"], "insufficient", "{v:#}");
    assert_eq!(v["comparison"]["unconfirmed"], "regressed", "{v:#}");
}

/// `check-config` said nothing of a `min_runs` whose baselines measure no run-to-run
/// variation: a warning now, the file still valid.
#[test]
fn check_config_warns_about_min_runs_below_3() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), common::free_port());
    let o = Command::new(CANARYD)
        .arg("check-config")
        .arg(&config)
        .output()
        .unwrap();
    let text = common::text(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "warning: baseline.min_runs (1) is below 3: the medians of fewer than 3 baseline \
             runs do not measure run-to-run variation"
        ),
        "{text}"
    );
    // The default (3) says nothing.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("min_runs = 1\n", "");
    std::fs::write(&config, text).unwrap();
    let o = Command::new(CANARYD)
        .arg("check-config")
        .arg(&config)
        .output()
        .unwrap();
    let text = common::text(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(!text.contains("min_runs"), "{text}");
}
