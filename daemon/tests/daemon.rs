//! `canaryd run` as a real process against a real `canaryd sim` process on loopback: verdicts,
//! baselines and an induced regression, config reloads, SIGTERM mid-run, restarts, a stalled
//! target, the embedded default and `check-config`, a second daemon on one `state_dir`, and a
//! run killed with SIGKILL recovered at the next start (a capacity search's and a sweep's
//! too). Every child is killed and reaped on every path (the guards below); nothing asserts on
//! timing, the status API is polled with generous deadlines instead.

mod common;

use common::{api_runs as runs, eventually, free_port, http, wait_listening, Child, CANARYD};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `canaryd sim --profile fast` on a free port.
fn sim() -> (Child, u16) {
    common::sim(&["--block-size", "26"])
}

/// `canaryd run --config CONFIG` with its status endpoint on a port it binds itself (the
/// port returned); stderr to `log`.
fn daemon(dir: &Path, config: &Path, log: &str) -> (Child, u16) {
    common::daemon_on_own_port(dir, config, log, &[])
}

fn of<'a>(runs: &'a [Value], workload: &str) -> Vec<&'a Value> {
    runs.iter().filter(|r| r["workload"] == workload).collect()
}

fn metrics(port: u16) -> String {
    http(port, "GET", "/metrics", "").1
}

/// A config with `state_dir` in `dir`, a `sim` target on `sim_port`, the baseline settings
/// the tests use, and `extra` appended (targets and workloads). The `fast` simulator answers
/// in a few ms, so a loaded test host moves medians by whole milliseconds between healthy
/// runs: shifts under 20 ms do not count here (the induced slowdown adds about 100 ms).
fn write_config(dir: &Path, sim_port: u16, extra: &str) -> PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [baseline]\nruns = 10\nmin_runs = 3\nmin_shift_ms = 20\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         api_key_file = \"key.txt\"\n\
         {extra}",
        dir.join("state").display()
    );
    std::fs::write(dir.join("key.txt"), format!("{SECRET}\n")).unwrap();
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The `sim` target's API key: it must never reach logs, artifacts, the history or the API.
const SECRET: &str = "sk-canary-SECRET-0451";

/// A short workload: the first 40 rows of the bundled trace (12 s of trace) at 20x, lengths
/// scaled by 1/20, every `every`.
fn workload(name: &str, target: &str, every: &str, extra: &str) -> String {
    format!(
        "[workloads.{name}]\ntarget = \"{target}\"\ntrace = \"bundled\"\nmax_requests = 40\n\
         speedup = 20\nscale_lengths = 0.05\nevery = \"{every}\"\n{extra}\n"
    )
}

#[test]
fn two_workloads_get_verdicts_and_a_slowdown_shows_as_regressed() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let mut extra = workload("steady", "sim", "2s", "");
    extra += &workload(
        "slo",
        "sim",
        "2s",
        "slos = \"request_latency:50\"\nmin_good_fraction = 0.9",
    );
    let config = write_config(dir.path(), sim_port, &extra);
    let (_d, status) = daemon(dir.path(), &config, "daemon.log");

    // A baseline of three passing runs for `steady`, then a run compared with it.
    eventually(
        120,
        "3 passing runs of `slo` and a compared run of `steady`",
        || {
            let all = runs(status);
            let pass = of(&all, "slo")
                .iter()
                .filter(|r| r["verdict"] == "pass")
                .count();
            let compared = of(&all, "steady")
                .iter()
                .any(|r| r["trend"].is_string() && r["trend"] != "insufficient");
            (pass >= 3 && compared).then_some(())
        },
    );
    let healthy = runs(status);
    let before = healthy.len();
    let first = of(&healthy, "steady").last().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    eprintln!(
        "trends before the slowdown: {:?}",
        healthy
            .iter()
            .map(|r| (&r["workload"], &r["trend"]))
            .collect::<Vec<_>>()
    );
    // Before the slowdown a loaded host can make a baseline run really slower, so a
    // `regressed` there is not a defect; a verdict the comparison does not carry is: each one
    // names a metric that regressed, slower, with p under the daemon's alpha (0.001) and by at
    // least this config's min_shift_ms (20).
    for r in of(&healthy, "steady")
        .iter()
        .filter(|r| r["trend"] == "regressed")
    {
        let id = r["id"].as_str().unwrap();
        let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
        assert_eq!(code, 200, "{body}");
        let run: Value = serde_json::from_str(&body).unwrap();
        let metrics = run["comparison"]["metrics"].as_object();
        assert!(
            metrics.is_some_and(|m| m.values().any(|m| {
                let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
                m["trend"] == "regressed"
                    && m["shift_ratio"].as_f64().is_none_or(|x| x > 0.0)
                    && f("p_value") < 0.001
                    && f("median") - f("baseline_median") >= 20.0
            })),
            "a run read `regressed` without a metric that did: {run:#}"
        );
    }

    // Slow the simulator down: every token now costs a decode step of 5 ms or more. Only runs
    // started after the switch ran on the slow profile.
    let (code, body) = http(
        sim_port,
        "POST",
        "/sim/profile",
        r#"{"profile":"illustrative"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let switched_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let after_switch = |r: &Value| {
        r["started_unix_ms"]
            .as_i64()
            .is_some_and(|t| t > switched_ms)
    };

    let regressed = eventually(
        120,
        "a regressed run of `steady` on the slow profile",
        || {
            runs(status)
                .into_iter()
                .find(|r| r["workload"] == "steady" && r["trend"] == "regressed" && after_switch(r))
        },
    );
    let id = regressed["id"].as_str().unwrap();
    let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
    assert_eq!(code, 200);
    let run: Value = serde_json::from_str(&body).unwrap();
    let e2e = &run["comparison"]["metrics"]["request_latency"];
    assert_eq!(e2e["trend"], "regressed", "{run:#}");
    assert!(e2e["shift_ratio"].as_f64().unwrap() > 1.0, "{e2e}");
    assert!(e2e["p_value"].as_f64().unwrap() < 0.001, "{e2e}");
    assert!(e2e["rank_biserial"].as_f64().unwrap() > 0.5, "{e2e}");
    assert!(run["comparison"]["baseline_runs"].as_u64().unwrap() >= 3);
    assert_eq!(run["summary"]["requests"], 40);

    // The SLO workload fails, naming the SLO.
    let failed = eventually(60, "a failed run of `slo` on the slow profile", || {
        runs(status)
            .into_iter()
            .find(|r| r["workload"] == "slo" && r["verdict_kind"] == "fail" && after_switch(r))
    });
    let why = failed["verdict"].as_str().unwrap();
    assert!(
        why.contains("good-request fraction") && why.contains("request_latency"),
        "{why}"
    );
    assert!(runs(status).len() > before);

    // Both workloads use one target that does not allow concurrent runs: they took turns.
    let all = runs(status);
    let mut spans: Vec<(i64, i64)> = all
        .iter()
        .map(|r| {
            let t = |k: &str| r[k].as_i64().unwrap();
            (t("started_unix_ms"), t("finished_unix_ms"))
        })
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "runs overlap: {w:?}");
    }

    // Artifacts of a run, and the daemon's metrics.
    let art = dir.path().join("state/artifacts/steady").join(&first);
    for f in [
        "records.jsonl",
        "summary.json",
        "summary.csv",
        "verdict.json",
    ] {
        assert!(art.join(f).exists(), "{} missing", art.join(f).display());
    }
    assert_eq!(
        std::fs::read_to_string(art.join("records.jsonl"))
            .unwrap()
            .lines()
            .count(),
        40
    );
    let m = metrics(status);
    // The exposition parses cleanly with canaryd's own Prometheus parser.
    let scrape = canary_telemetry::prometheus::parse(&m);
    assert!(
        scrape.errors.is_empty() && scrape.skipped_lines == 0,
        "{:?}",
        scrape.errors
    );
    let passes = scrape
        .families
        .iter()
        .find(|f| f.name == "canaryd_runs_total")
        .unwrap()
        .samples
        .iter()
        .find(|s| {
            s.labels.get("workload") == Some("steady") && s.labels.get("verdict") == Some("pass")
        })
        .unwrap()
        .value;
    assert!(passes >= 3.0, "{m}");
    assert!(
        m.contains("canaryd_runs_total{workload=\"slo\",verdict=\"fail\"}"),
        "{m}"
    );
    assert!(m.contains("canaryd_last_run_latency_ms{workload=\"steady\",metric=\"time_to_first_token\",quantile=\"0.50\"}"), "{m}");
    assert!(m.contains("canaryd_telemetry_source_up{workload=\"steady\",source=\"server_metrics\",state=\"available\",reason=\"\"} 1"), "{m}");
    assert_eq!(http(status, "GET", "/readyz", "").0, 200);
    assert_eq!(http(status, "GET", "/api/runs/no-such-run", "").0, 404);
    let (_, body) = http(status, "GET", "/api/runs?workload=slo&limit=2", "");
    let only: Value = serde_json::from_str(&body).unwrap();
    let only = only["runs"].as_array().unwrap();
    assert_eq!(only.len(), 2, "{body}");
    assert!(only.iter().all(|r| r["workload"] == "slo"), "{body}");
}

/// A reload that takes a workload out ends its series in the status metrics and the status
/// line (a run still in flight does not bring them back); one that moves `artifacts_dir` is
/// warned about and waits for a restart, as the history it must agree with does. One that
/// changes a workload's load (its speedup) starts its baseline again, and says so.
#[test]
fn a_reload_ends_a_removed_workloads_series_and_keeps_the_artifacts_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let (a, b) = (
        workload("a", "sim", "1s", ""),
        workload("b", "sim", "1s", ""),
    );
    let config = write_config(dir.path(), sim_port, &format!("{a}{b}"));
    let (d, status) = daemon(dir.path(), &config, "daemon.log");
    eventually(60, "runs of both workloads", || {
        let all = runs(status);
        (!of(&all, "a").is_empty() && !of(&all, "b").is_empty()).then_some(())
    });
    assert!(metrics(status).contains("workload=\"a\""));

    let moved = dir.path().join("elsewhere");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&a, "")
        .replace("speedup = 20\n", "speedup = 25\n");
    std::fs::write(
        &config,
        format!("{text}[export]\nartifacts_dir = \"{}\"\n", moved.display()),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    eventually(30, "the reload", || {
        metrics(status)
            .contains("canaryd_config_reloads_total{result=\"ok\"} 1")
            .then_some(())
    });
    let reloaded = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    eventually(60, "two runs of `b` after the reload", || {
        let after = runs(status)
            .into_iter()
            .filter(|r| r["workload"] == "b" && r["started_unix_ms"].as_i64() > Some(reloaded))
            .count();
        (after >= 2).then_some(())
    });
    let m = metrics(status);
    assert!(!m.contains("workload=\"a\""), "{m}");
    assert!(m.contains("workload=\"b\""), "{m}");
    assert!(
        !moved.exists(),
        "artifacts went to the new artifacts_dir before a restart"
    );
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("artifacts_dir changes take effect at restart"),
        "{log}"
    );
    // The latencies of another load are not compared with the old one's.
    assert!(
        log.contains("new load: baseline starts again (speedup 20 → 25)"),
        "{log}"
    );
}

#[test]
fn sighup_with_a_broken_config_keeps_the_old_one_and_baselines_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let extra = workload("a", "sim", "1s", "") + "[export]\nretention_runs = 5\n";
    let config = write_config(dir.path(), sim_port, &extra);
    let (mut d, status) = daemon(dir.path(), &config, "daemon.log");
    eventually(60, "a first run", || {
        (!runs(status).is_empty()).then_some(())
    });

    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        good.replace("every = \"1s\"", "every = \"1 fortnight\""),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    eventually(30, "the reload to be rejected", || {
        metrics(status)
            .contains("canaryd_config_reloads_total{result=\"rejected\"} 1")
            .then_some(())
    });
    // The old config keeps running.
    let n = runs(status).len();
    eventually(60, "two more runs of the old config", || {
        (runs(status).len() >= n + 2).then_some(())
    });
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(log.contains("config rejected"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "no colour codes in a log file: {log}"
    );
    assert!(
        log.contains("canaryd.toml:") && log.contains("workloads.a.every"),
        "{log}"
    );

    // A good config applies: a second workload appears.
    std::fs::write(&config, format!("{good}{}", workload("b", "sim", "1s", ""))).unwrap();
    d.signal(libc::SIGHUP);
    eventually(60, "a run of the new workload", || {
        (!of(&runs(status), "b").is_empty()).then_some(())
    });
    assert!(metrics(status).contains("canaryd_config_reloads_total{result=\"ok\"} 1"));

    // Retention keeps 5 runs of `a`, in the history and on disk (plus one in flight).
    eventually(60, "5 runs of `a`, 4 passing", || {
        let all = runs(status);
        let a = of(&all, "a");
        let pass = a.iter().filter(|r| r["verdict"] == "pass").count();
        (a.len() >= 5 && pass >= 4).then_some(())
    });
    let kept = of(&runs(status), "a").len();
    assert_eq!(kept, 5, "{kept} runs kept");
    let dirs = std::fs::read_dir(dir.path().join("state/artifacts/a"))
        .unwrap()
        .count();
    assert!(dirs <= 6, "{dirs} artifact folders kept");

    // Restarted, the first run of `a` is compared with the baseline from before.
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    let restarted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let (_d, status) = daemon(dir.path(), &config, "daemon2.log");
    let first = eventually(60, "a run of `a` after the restart", || {
        runs(status)
            .into_iter()
            .find(|r| r["workload"] == "a" && r["started_unix_ms"].as_i64() >= Some(restarted))
    });
    let id = first["id"].as_str().unwrap();
    let run: Value =
        serde_json::from_str(&http(status, "GET", &format!("/api/runs/{id}"), "").1).unwrap();
    assert!(
        run["comparison"]["baseline_runs"].as_u64().unwrap() >= 3,
        "{run:#}"
    );
    assert_ne!(run["trend"], "insufficient", "{run:#}");
}

#[test]
fn sigterm_mid_run_records_a_partial_run_and_a_restart_keeps_history() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    // 300 requests over 102 s of trace at 2x: still going when SIGTERM comes; due every
    // second meanwhile, so overlapping schedules are skipped and counted.
    let long = "[workloads.long]\ntarget = \"sim\"\ntrace = \"bundled\"\nspeedup = 2\n\
                scale_lengths = 0.05\nevery = \"1s\"\ngrace_period = \"2s\"\n";
    let config = write_config(dir.path(), sim_port, long);
    // systemd's side of Type=notify, read as it comes: a socket read only after the daemon
    // exits would fill (about ten datagrams) and the daemon would drop what followed.
    let notify = NotifySink::bind(dir.path());
    let (mut d, status) =
        common::daemon_on_own_port(dir.path(), &config, "daemon.log", &notify.env());
    let artifacts = dir.path().join("state/artifacts/long");
    let run_dir = eventually(60, "the run to send requests", || {
        let run = std::fs::read_dir(&artifacts).ok()?.next()?.ok()?.path();
        let records = std::fs::read_to_string(run.join("records.jsonl")).ok()?;
        (records.lines().count() >= 3).then_some(run)
    });
    // Shown at 0 from the start: a skip is a count above it.
    eventually(30, "a skipped schedule", || {
        metrics(status)
            .lines()
            .any(|l| {
                l.starts_with("canaryd_skips_total{workload=\"long\",reason=\"overrun\"} ")
                    && !l.ends_with(" 0")
            })
            .then_some(())
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    // The reader's last poll may still hold STOPPING=1.
    let messages = eventually(5, "STOPPING=1", || {
        let m = notify.read();
        m.iter().any(|m| m == "STOPPING=1").then_some(m)
    });
    assert_eq!(
        messages.first().map(String::as_str),
        Some("READY=1"),
        "{messages:?}"
    );
    for want in ["WATCHDOG=1", "STATUS=", "STOPPING=1"] {
        assert!(
            messages.iter().any(|m| m.starts_with(want)),
            "{want} in {messages:?}"
        );
    }

    // The partial run: every artifact written, the summary marked interrupted.
    let summary: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true);
    assert!(summary["unsent"].as_u64().unwrap() > 0, "{summary}");
    let verdict: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("verdict.json")).unwrap()).unwrap();
    // A run the stop cut short is `interrupted`: neither an error (error alerts at every
    // deploy) nor a pass.
    assert_eq!(verdict["verdict"], "interrupted", "{verdict:#}");
    assert_eq!(verdict["verdict_kind"], "interrupted", "{verdict:#}");
    assert!(run_dir.join("summary.csv").exists());
    let records = std::fs::read_to_string(run_dir.join("records.jsonl")).unwrap();
    assert_eq!(
        records.lines().count() as u64,
        summary["requests"].as_u64().unwrap()
    );

    // Restarted, the daemon still knows the interrupted run.
    std::fs::write(
        &config,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("every = \"1s\"", "every = \"1h\""),
    )
    .unwrap();
    let (_d, status) = daemon(dir.path(), &config, "daemon2.log");
    let id = run_dir.file_name().unwrap().to_str().unwrap();
    let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
    assert_eq!(code, 200, "{body}");
    let run: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(run["verdict"], "interrupted");
    assert_eq!(run["verdict_kind"], "interrupted", "{run:#}");
    assert_eq!(run["summary"]["interrupted"], true);
    // The last verdict's series, read back from the history: interrupted, and no error.
    let m = metrics(status);
    for (series, want) in [
        (
            "canaryd_last_run_verdict{workload=\"long\",verdict=\"interrupted\"}",
            " 1",
        ),
        (
            "canaryd_last_run_verdict{workload=\"long\",verdict=\"error\"}",
            " 0",
        ),
        (
            "canaryd_last_run_verdict{workload=\"long\",verdict=\"pass\"}",
            " 0",
        ),
    ] {
        assert!(
            m.lines()
                .any(|l| l.starts_with(series) && l.ends_with(want)),
            "{series}{want} in\n{m}"
        );
    }
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200);
    assert!(
        page.contains("<span class=\"verdict interrupted\">interrupted</span>"),
        "{page}"
    );

    // The API key went out with every request but stayed out of everything canaryd wrote.
    let files = common::assert_no_file_holds(dir.path(), SECRET, &["key.txt"]);
    assert!(files.len() > 5, "{files:?}");
    assert!(!http(status, "GET", "/api/runs", "").1.contains(SECRET));
}

#[test]
fn a_stalled_target_is_an_error_verdict_and_the_daemon_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    // The same simulator, but every response stalls a minute before its head: a hung server.
    let stalled = format!(
        "[targets.stalled]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         headers = {{ \"x-sim-fault\" = \"stall_first_ms=60000\" }}\nrequest_timeout = \"500ms\"\n\
         allow_concurrent_runs = true\n"
    );
    let mut extra = stalled;
    extra += &workload("hung", "stalled", "1s", "max_requests = 3");
    extra = extra.replace("max_requests = 40\n", "");
    extra += &workload("fine", "sim", "1s", "");
    // A server that is down: nothing listens on its port (found free, so not one bound on
    // purpose; nothing to read back from a process that does not exist).
    let down_port = free_port();
    extra += &format!(
        "[targets.down]\nurl = \"http://127.0.0.1:{down_port}\"\nmodel = \"m\"\nallow_concurrent_runs = true\n"
    );
    extra +=
        &workload("refused", "down", "1s", "").replace("max_requests = 40", "max_requests = 5");
    // And a trace that is not there: an error naming the file, every time it is due.
    extra += "[workloads.gone]\ntarget = \"sim\"\ntrace = \"missing.jsonl\"\nevery = \"1s\"\n";
    let config = write_config(dir.path(), sim_port, &extra);
    let (_d, status) = daemon(dir.path(), &config, "daemon.log");
    eventually(
        90,
        "two error runs of `hung` and two passing runs of `fine` after",
        || {
            let all = runs(status);
            let hung: Vec<_> = of(&all, "hung")
                .into_iter()
                .filter(|r| r["verdict_kind"] == "error")
                .collect();
            let first_error = hung
                .iter()
                .filter_map(|r| r["finished_unix_ms"].as_i64())
                .min()?;
            let fine_after = of(&all, "fine")
                .iter()
                .filter(|r| {
                    r["verdict"] == "pass" && r["started_unix_ms"].as_i64() > Some(first_error)
                })
                .count();
            (hung.len() >= 2 && fine_after >= 2).then_some(())
        },
    );
    let all = runs(status);
    let hung = of(&all, "hung")[0];
    let why = hung["verdict"].as_str().unwrap();
    assert!(
        why.contains("none of 3 requests completed") && why.contains("timeout"),
        "{why}"
    );
    assert!(
        hung["trend"].is_null(),
        "error runs are not compared with the baseline"
    );
    let refused = of(&all, "refused");
    assert!(refused.len() >= 2, "{all:?}");
    // Its /metrics is down too: warned about once, not once per run.
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    let down_metrics = format!("127.0.0.1:{down_port}/metrics");
    let warnings = log
        .lines()
        .filter(|l| l.contains("metrics endpoint unavailable") && l.contains(&down_metrics))
        .count();
    assert_eq!(warnings, 1, "{} runs: {log}", refused.len());
    let why = refused[0]["verdict"].as_str().unwrap();
    assert!(
        why.contains("none of 5 requests completed (connect: 5)"),
        "{why}"
    );
    let gone = of(&all, "gone");
    assert!(gone.len() >= 2, "{gone:?}");
    let why = gone[0]["verdict"].as_str().unwrap();
    assert!(
        why.starts_with("error: loading the trace") && why.contains("missing.jsonl"),
        "{why}"
    );
    let verdict = Path::new(gone[0]["artifacts"].as_str().unwrap()).join("verdict.json");
    assert!(verdict.exists(), "an error run still leaves its verdict");
}

/// A source missing at the first run (NVML: its library is not there) is not tried again,
/// and later runs say it is unavailable and why, not that it was turned off; until a reload
/// names another library, which may be the fix (audit of degradation, L1: it had no effect).
#[test]
fn a_source_missing_at_the_first_run_stays_unavailable_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let extra = workload("w", "sim", "1s", "").replace("max_requests = 40", "max_requests = 5");
    let config = write_config(dir.path(), sim_port, &extra);
    let lib = dir.path().join("no-libnvidia-ml.so");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "nvml = false",
        &format!("nvml = true\nnvml_lib = \"{}\"", lib.display()),
    );
    std::fs::write(&config, text).unwrap();
    let (d, status) = daemon(dir.path(), &config, "daemon.log");
    let ids = eventually(90, "two runs of `w`", || {
        let all = runs(status);
        let mut ids: Vec<String> = of(&all, "w")
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        (ids.len() >= 2).then_some(ids)
    });
    let nvml = |id: &str| {
        let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["summary"]["telemetry_sources"]["nvml"].clone()
    };
    let (first, second) = (nvml(&ids[0]), nvml(&ids[1]));
    assert_eq!(first["state"], "unavailable", "{first}");
    assert_eq!(second["state"], "unavailable", "{second}");
    let why = second["reason"].as_str().unwrap();
    // Later runs say what failed without the loader's error, which the first run's has.
    let head = first["reason"]
        .as_str()
        .unwrap()
        .split(": ")
        .next()
        .unwrap();
    assert!(
        why.starts_with(&format!("{head} (found at an earlier run"))
            && why.ends_with(
                "(found at an earlier run; not tried again until restart or a reload naming \
                 another nvml_lib)"
            ),
        "{first} then {second}"
    );

    // The reload names a library that is there: the next run has NVML.
    let fake = common::fake_nvml(dir.path());
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&lib.display().to_string(), &fake.display().to_string());
    std::fs::write(&config, text).unwrap();
    let reloaded = ids.len();
    d.signal(libc::SIGHUP);
    eventually(90, "a run with NVML after the reload", || {
        let all = runs(status);
        let mut ids: Vec<String> = of(&all, "w")
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids[reloaded.min(ids.len())..]
            .iter()
            .any(|id| nvml(id)["state"] == "available")
            .then_some(())
    });
}

#[test]
fn check_config_validates_the_example_and_names_errors() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/canaryd.example.toml");
    let out = Command::new(CANARYD)
        .arg("check-config")
        .arg(&example)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("4 workload(s)")
            && text.contains("chat-peak")
            && text.contains("sweep: c1, c4"),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let example_text = std::fs::read_to_string(&example).unwrap();
    std::fs::write(&bad, example_text.replace("speedup = 2", "speedup = -2")).unwrap();
    let out = Command::new(CANARYD)
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = example_text
        .lines()
        .position(|l| l.starts_with("speedup = 2"))
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!("bad.toml:{line}: workloads.chat-peak.speedup")),
        "{err}"
    );
    assert!(err.contains("expected a positive number"), "{err}");
    // One mistake reads as one error always did: no count, one line.
    assert!(
        !err.contains("errors:") && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn check_config_names_every_mistake_in_one_pass() {
    // The example with three distinct mistakes, in three places: a value out of range in one
    // workload, a target that does not exist in another, a key that does not exist in a third.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/canaryd.example.toml");
    let example_text = std::fs::read_to_string(&example).unwrap();
    let text = example_text.replace("speedup = 2", "speedup = -2")
        + "\n[workloads.typo]\ntarget = \"vlm\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
           \n[workloads.colour]\ntarget = \"vllm\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
           colour = \"blue\"\n";
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, &text).unwrap();
    let out = Command::new(CANARYD)
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = |start: &str| text.lines().position(|l| l.starts_with(start)).unwrap() + 1;
    assert!(err.contains("bad.toml: 3 errors:"), "{err}");
    for one in [
        format!(
            "bad.toml:{}: workloads.chat-peak.speedup",
            line("speedup = -2")
        ),
        format!(
            "bad.toml:{}: workloads.typo.target: no target \"vlm\"",
            line("target = \"vlm\"")
        ),
        format!(
            "bad.toml:{}: workloads.colour.colour: unknown field",
            line("colour = ")
        ),
    ] {
        assert_eq!(err.matches(&one).count(), 1, "{one:?} once in {err}");
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains(": ok:"));
}

#[test]
fn check_config_names_every_workload_whose_trace_does_not_load() {
    // Two workloads of the bundled trace, each wrong only once it is loaded: lengths scaled
    // over the limit, and a speedup that would take decades.
    let text = "state_dir = \"state\"\n[targets.local]\nurl = \"http://127.0.0.1:8000\"\nmodel = \"m\"\n\
        [workloads.a]\ntarget = \"local\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
        scale_lengths = 1000\nlength_limit = 100000\n\
        [workloads.b]\ntarget = \"local\"\ntrace = \"bundled\"\nevery = \"1h\"\nspeedup = 0.0000001\n";
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("traces.toml");
    std::fs::write(&bad, text).unwrap();
    let out = Command::new(CANARYD)
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("traces.toml: 2 errors:"), "{err}");
    assert!(
        err.contains("\n  ") && err.contains("traces.toml:7: workloads.a: loading the trace"),
        "{err}"
    );
    assert!(err.contains("(length_limit), found"), "{err}");
    assert!(
        err.contains("traces.toml:13: workloads.b: loading the trace: workloads.b.speedup"),
        "{err}"
    );
}

/// `check-config FILE`: (exit code, stdout, stderr).
fn check_config(file: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(CANARYD)
        .arg("check-config")
        .arg(file)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn check_config_names_a_duplicate_table_and_a_duplicate_key() {
    let good = "state_dir = \"state\"\n[targets.local]\nurl = \"http://127.0.0.1:8000\"\n\
                model = \"m\"\n[workloads.chat]\ntarget = \"local\"\ntrace = \"bundled\"\n\
                every = \"1h\"\n";
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "table.toml",
            format!("{good}\n[workloads.chat]\ntarget = \"local\"\n"),
            "table.toml:10: workloads.chat: duplicate key",
        ),
        (
            "key.toml",
            good.replace("every = \"1h\"\n", "every = \"1h\"\nevery = \"2h\"\n"),
            "key.toml:9: workloads.chat.every: duplicate key",
        ),
        // A dotted key is named whole; one inside an inline table bare (its table is not
        // followed); a line of a multi-line array is no table header.
        (
            "dotted.toml",
            good.replace(
                "every = \"1h\"\n",
                "every = \"1h\"\nextra.depth = 1\nextra.depth = 2\n",
            ),
            "dotted.toml:10: workloads.chat.extra.depth: duplicate key",
        ),
        (
            "inline.toml",
            good.replace(
                "model = \"m\"\n",
                "model = \"m\"\nheaders = { X-Team = \"a\", X-Team = \"b\" }\n",
            ),
            "inline.toml:5: X-Team: duplicate key",
        ),
        (
            "array.toml",
            good.replace(
                "every = \"1h\"\n",
                "list = [\n  [1, 2],\n]\nevery = \"1h\"\nevery = \"2h\"\n",
            ),
            "array.toml:12: workloads.chat.every: duplicate key",
        ),
    ];
    for (name, text, want) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let (code, _, err) = check_config(&file);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(want), "{want:?} in {err}");
    }
}

#[test]
fn check_config_warns_of_a_stop_that_would_outlast_the_units_stop_timeout() {
    let text = "state_dir = \"state\"\n[otlp]\nflush_timeout = \"15s\"\n\
                [targets.local]\nurl = \"http://127.0.0.1:8000\"\nmodel = \"m\"\n\
                [workloads.slow]\ntarget = \"local\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
                grace_period = \"70s\"\n\
                [workloads.quick]\ntarget = \"local\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
                grace_period = \"65s\"\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stop.toml");
    std::fs::write(&file, text).unwrap();
    let (code, out, err) = check_config(&file);
    assert_eq!(code, Some(0), "{err}");
    let warnings: Vec<&str> = out.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(
        warnings[0].contains(
            "workloads.slow.grace_period: 70 s plus otlp.flush_timeout 15 s is 85 s, over 80 s"
        ) && warnings[0].contains("TimeoutStopSec=90s"),
        "{out}"
    );
}

#[test]
fn the_embedded_default_runs_the_simulator_with_no_config() {
    if Path::new("/etc/canaryd/canaryd.toml").exists() {
        return canary_testkit::skip(
            "default-config",
            "/etc/canaryd/canaryd.toml exists on this host, so `canaryd run` would not use the embedded default",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // Its status endpoint on a port it binds itself, read from the banner it prints.
    let mut d = Child(
        Command::new(CANARYD)
            .args(["run", "--status-listen", "127.0.0.1:0"])
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(std::fs::File::create(dir.path().join("out.txt")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let banner = dir.path().join("out.txt");
    let status: u16 = eventually(10, "the embedded default's banner", || {
        let out = std::fs::read_to_string(&banner).ok()?;
        let rest = out.split("status:    http://127.0.0.1:").nth(1)?;
        rest[..rest.find('/')?].parse().ok()
    });
    eventually(60, "the demo workload to run", || {
        metrics(status)
            .contains("canaryd_running{workload=\"demo\"} 1")
            .then_some(())
    });
    // A stop before the run's first measured request is a skip that leaves no folder: stop
    // once a measured request is in its records.
    let demo = dir.path().join("canaryd-data/artifacts/demo");
    eventually(60, "the demo run's first measured request", || {
        std::fs::read_dir(&demo).ok()?.flatten().find_map(|run| {
            let records = std::fs::metadata(run.path().join("records.jsonl")).ok()?;
            (records.len() > 0).then_some(())
        })
    });
    assert_eq!(http(status, "GET", "/readyz", "").0, 200);
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    let out = std::fs::read_to_string(dir.path().join("out.txt")).unwrap();
    assert!(
        out.contains("embedded default") && out.contains(&format!("127.0.0.1:{status}/api/runs")),
        "{out}"
    );
    let run = std::fs::read_dir(&demo)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        run.join("verdict.json").exists() && run.join("summary.json").exists(),
        "{}: {:?}\n{out}",
        run.display(),
        std::fs::read_dir(&run).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
    assert!(dir.path().join("canaryd-data/history.sqlite").exists());
}

#[test]
fn only_a_target_that_names_its_key_source_gets_a_key() {
    let dir = tempfile::tempdir().unwrap();
    // A server that wants the key, like vLLM with --api-key.
    let (_sim, sim_port) = common::sim(&["--block-size", "26", "--api-key", SECRET]);
    // `sim` names its key file (SECRET); `plain` is the same server with no key source. The
    // daemon's own OPENAI_API_KEY holds the key too, and must not go to `plain`.
    let mut extra =
        format!("[targets.plain]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n");
    extra += &workload("keyed", "sim", "1s", "max_requests = 5").replace("max_requests = 40\n", "");
    extra +=
        &workload("unkeyed", "plain", "1s", "max_requests = 5").replace("max_requests = 40\n", "");
    let config = write_config(dir.path(), sim_port, &extra);
    let (_d, status) = common::daemon_on_own_port(
        dir.path(),
        &config,
        "daemon.log",
        &[("OPENAI_API_KEY", SECRET)],
    );
    let all = eventually(60, "a run of each workload", || {
        let all = runs(status);
        (!of(&all, "keyed").is_empty() && !of(&all, "unkeyed").is_empty()).then_some(all)
    });
    let keyed = of(&all, "keyed")[0];
    assert_eq!(keyed["verdict"], "pass", "{keyed}");
    let unkeyed = of(&all, "unkeyed")[0];
    assert_eq!(unkeyed["verdict_kind"], "error", "{unkeyed}");
    assert!(
        unkeyed["verdict"]
            .as_str()
            .unwrap()
            .contains("http_status: 5"),
        "{unkeyed}"
    );
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(!log.contains(SECRET), "the key reached the log");
}

#[test]
fn a_second_daemon_on_the_same_state_dir_refuses_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    // Artifacts outside the state_dir: they are locked too.
    let extra = workload("w", "sim", "1h", "")
        + &format!(
            "[export]\nartifacts_dir = {:?}\n",
            dir.path().join("artifacts")
        );
    let config = write_config(dir.path(), sim_port, &extra);
    let (mut first, status) = daemon(dir.path(), &config, "first.log");
    eventually(60, "a run of the first daemon", || {
        (!runs(status).is_empty()).then_some(())
    });

    // Not `common::daemon_on_own_port`: that one waits for a status endpoint this one must
    // never open. A port found free, not 0: the checks below are that nothing listens on it
    // while the first daemon runs, and that a later daemon does listen on this same port.
    let second_status = free_port();
    let start_second = |config: &Path, log: &str| {
        Child(
            Command::new(CANARYD)
                .args(["run", "--config"])
                .arg(config)
                .args(["--status-listen", &format!("127.0.0.1:{second_status}")])
                .current_dir(dir.path())
                .env("RUST_LOG", "info")
                .env_remove("NOTIFY_SOCKET")
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join(log)).unwrap())
                .spawn()
                .unwrap(),
        )
    };
    let mut second = start_second(&config, "second.log");
    let code = second.wait_exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.path().join("second.log")).unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(&format!("another canaryd (pid {})", first.0.id()))
            && log.contains("canaryd.lock"),
        "{log}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", second_status)).is_err(),
        "the second daemon opened its status endpoint"
    );
    // Another state_dir, but the same artifacts_dir: refused as well.
    let other = dir.path().join("other.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&other, text.replace("/state\"", "/state2\"")).unwrap();
    let mut third = start_second(&other, "third.log");
    let code = third.wait_exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.path().join("third.log")).unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "another canaryd (pid {}) is running with artifacts_dir",
            first.0.id()
        )),
        "{log}"
    );

    // The first one goes on, alone in the history.
    assert_eq!(http(status, "GET", "/healthz", "").0, 200);
    assert!(runs(status).iter().all(|r| r["workload"] == "w"));
    assert_eq!(runs(status).len(), 1, "the workload ran once, not twice");

    // Once the first has stopped, the lock file it leaves behind does not block a restart.
    first.signal(libc::SIGTERM);
    assert_eq!(first.wait_exit(Duration::from_secs(60)), Some(0));
    assert!(dir.path().join("state/canaryd.lock").exists());
    let _second = start_second(&config, "second-again.log");
    wait_listening(second_status, "the second daemon, after the first stopped");
    // The port was found free and let go: check the one answering is this daemon.
    let log = std::fs::read_to_string(dir.path().join("second-again.log")).unwrap();
    assert!(
        log.contains(&format!(
            "status endpoint on http://127.0.0.1:{second_status}"
        )),
        "{log}"
    );
}

/// systemd's side of `Type=notify` for a test: the messages the daemon sent, in order, read
/// as they come by a thread of its own (canaryd drops a message once a datagram socket's small
/// queue is full, as systemd never lets it be).
struct NotifySink {
    path: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl NotifySink {
    fn bind(dir: &Path) -> NotifySink {
        let path = dir.join("notify.sock");
        let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let sink = NotifySink {
            path: path.display().to_string(),
            seen: Default::default(),
            stop: Default::default(),
        };
        let (seen, stop) = (sink.seen.clone(), sink.stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(n) = socket.recv(&mut buf) {
                    let m = String::from_utf8_lossy(&buf[..n]).to_string();
                    seen.lock().unwrap().push(m);
                }
            }
        });
        sink
    }

    /// The daemon's environment: this socket, and a 1 s watchdog (pings every 0.5 s).
    fn env(&self) -> [(&str, &str); 2] {
        [
            ("NOTIFY_SOCKET", self.path.as_str()),
            ("WATCHDOG_USEC", "1000000"),
        ]
    }

    /// The messages seen so far.
    fn read(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for NotifySink {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Another process's hold on the lock file at `path`: a new file, locked, then renamed over
/// it (so the daemon never sees the path without a file it could take itself).
fn hold_lock_file(path: &Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let new = path.with_extension("other");
    let file = std::fs::File::create(&new).unwrap();
    // SAFETY: flock(2) on a descriptor this function owns.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    std::fs::rename(&new, path).unwrap();
    file
}

/// A lock file another process took after it was replaced makes the daemon unhealthy and
/// stops the watchdog pings; a SIGHUP does not clear that (the other process still holds
/// it); the daemon taking it back once let go does; and a second loss is reported again.
#[test]
fn a_lost_lock_stays_unhealthy_across_a_reload_until_held_again_and_every_loss_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let config = write_config(dir.path(), sim_port, &workload("w", "sim", "1h", ""));
    let notify = NotifySink::bind(dir.path());
    let (d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &notify.env());
    let lock = dir.path().join("state/canaryd.lock");
    let healthz = || http(status, "GET", "/healthz", "");
    assert_eq!(healthz().0, 200);
    let lost = |what: &str| {
        eventually(60, what, || {
            let (code, body) = healthz();
            (code == 503 && body.contains("lost the lock")).then_some(())
        })
    };

    let other = hold_lock_file(&lock);
    lost("/healthz to say the lock is lost");
    // Between two status lines that both say so, no watchdog ping: a restart cures this.
    let says_lost = |m: &String| m.starts_with("STATUS=unhealthy: lost the lock");
    let between = eventually(60, "two status lines saying the lock is lost", || {
        let seen = notify.read();
        let first = seen.iter().position(says_lost)?;
        let second = first + 1 + seen[first + 1..].iter().position(says_lost)?;
        Some(seen[first..=second].to_vec())
    });
    assert!(!between.iter().any(|m| m == "WATCHDOG=1"), "{between:?}");

    // A reload schedules the workloads anew; the other process still holds the lock.
    d.signal(libc::SIGHUP);
    eventually(60, "the reload", || {
        metrics(status)
            .contains("canaryd_config_reloads_total{result=\"ok\"} 1")
            .then_some(())
    });
    let (code, body) = healthz();
    assert_eq!(code, 503, "a reload cleared a lost lock: {body}");
    assert!(body.contains("lost the lock"), "{body}");

    // Let go: the daemon takes the lock again and is healthy, pinging again.
    drop(other);
    eventually(60, "/healthz healthy once the lock is held again", || {
        (healthz().0 == 200).then_some(())
    });
    let pid = std::fs::read_to_string(&lock).unwrap();
    assert_eq!(pid.trim(), d.0.id().to_string());
    let now = notify.read().len();
    eventually(60, "watchdog pings again", || {
        notify.read()[now..]
            .iter()
            .any(|m| m == "WATCHDOG=1")
            .then_some(())
    });

    // A second loss is said again.
    let _other = hold_lock_file(&lock);
    lost("/healthz to say the lock is lost a second time");
    let log = || std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    eventually(30, "the second loss in the log", || {
        (log().matches("lost the lock").count() == 2).then_some(())
    });
    assert_eq!(log().matches("is held again").count(), 1, "{}", log());
}

/// A history that cannot be written (another program holds its write lock past the busy
/// timeout) makes `/healthz` and the `STATUS=` line say so, but systemd's watchdog pings go
/// on: a restart would not cure it, and would kill the runs in flight.
#[test]
fn a_failing_history_write_is_said_but_the_watchdog_pings_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let config = write_config(
        dir.path(),
        sim_port,
        &workload("w", "sim", "2s", "").replace("max_requests = 40", "max_requests = 5"),
    );
    let notify = NotifySink::bind(dir.path());
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &notify.env());
    eventually(60, "a first run recorded", || {
        (!runs(status).is_empty()).then_some(())
    });
    let holder = rusqlite::Connection::open(dir.path().join("state/history.sqlite")).unwrap();
    holder.busy_timeout(Duration::from_secs(60)).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    eventually(120, "/healthz to say the history is failing", || {
        let (code, body) = http(status, "GET", "/healthz", "");
        (code == 503 && body.contains("history")).then_some(())
    });
    // The lock is still held, so every status line from now on says so: pings after one.
    eventually(
        60,
        "a watchdog ping after a status line saying the history fails",
        || {
            let seen = notify.read();
            let said = seen
                .iter()
                .position(|m| m.starts_with("STATUS=unhealthy: history"))?;
            seen[said..].iter().any(|m| m == "WATCHDOG=1").then_some(())
        },
    );
    assert_eq!(http(status, "GET", "/healthz", "").0, 503);
    // The status page and /api/runs say it too: the runs they list are not the newest.
    let (code, body) = http(status, "GET", "/api/runs", "");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let why = v["unhealthy"].as_array().expect(&body);
    assert!(
        why.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.starts_with("history ") && w.contains("history.sqlite"))),
        "{body}"
    );
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("<p class=\"warn\">Unhealthy: history ")
            && page.contains("are not listed here"),
        "{page}"
    );
    holder.execute_batch("COMMIT").unwrap();
    eventually(120, "/healthz healthy once a write succeeds", || {
        (http(status, "GET", "/healthz", "").0 == 200).then_some(())
    });
    let v: Value = serde_json::from_str(&http(status, "GET", "/api/runs", "").1).unwrap();
    assert_eq!(v["unhealthy"], serde_json::json!([]), "{v}");
    assert!(!http(status, "GET", "/", "").1.contains("Unhealthy"));
}

#[test]
fn a_run_killed_with_sigkill_is_recovered_from_its_records_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    // 300 requests over 102 s of trace at 2x: far from done when the kill comes.
    let long = "[workloads.long]\ntarget = \"sim\"\ntrace = \"bundled\"\nspeedup = 2\n\
                scale_lengths = 0.05\nevery = \"1h\"\n\
                slos = \"request_latency:60000\"\nmin_good_fraction = 0.5\n";
    let config = write_config(dir.path(), sim_port, long);
    let (mut d, _) = daemon(dir.path(), &config, "daemon.log");
    let artifacts = dir.path().join("state/artifacts/long");
    let run_dir = eventually(60, "the run to record requests", || {
        let run = std::fs::read_dir(&artifacts).ok()?.next()?.ok()?.path();
        let records = std::fs::read_to_string(run.join("records.jsonl")).ok()?;
        (records.lines().count() >= 5).then_some(run)
    });
    d.signal(libc::SIGKILL);
    assert_eq!(
        d.wait_exit(Duration::from_secs(30)),
        None,
        "killed by a signal"
    );
    for f in ["summary.json", "summary.csv", "verdict.json"] {
        assert!(!run_dir.join(f).exists(), "{f} written by a killed process");
    }
    // Killed in the middle of writing a record: the last line is cut short.
    let records = run_dir.join("records.jsonl");
    let valid = std::fs::read_to_string(&records).unwrap().lines().count() as u64;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&records)
        .unwrap();
    std::io::Write::write_all(&mut f, br#"{"id":4242,"session":7,"sent_at"#).unwrap();
    drop(f);
    // And a summary.json torn as an older canaryd, which wrote it in place, could leave it:
    // the records are read instead (it used to fail the recovery at every start).
    std::fs::write(
        run_dir.join("summary.json"),
        br#"{"schema_version":3,"run":{"#,
    )
    .unwrap();

    let (_d, status) = daemon(dir.path(), &config, "daemon2.log");
    let id = run_dir.file_name().unwrap().to_str().unwrap();
    // The status endpoint opens before the orphans are recovered: wait for the run to show.
    let path = format!("/api/runs/{id}");
    let body = eventually(60, "the killed run in the history", || {
        let (code, body) = http(status, "GET", &path, "");
        (code == 200).then_some(body)
    });
    let run: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        run["verdict"],
        "error: no verdict.json: the process died or its results could not be written",
        "{run:#}"
    );
    assert_eq!(run["summary"]["requests"].as_u64(), Some(valid), "{run:#}");
    assert_eq!(run["summary"]["skipped_lines"], 1, "{run:#}");
    assert_eq!(run["summary"]["process_died"], true, "{run:#}");
    assert!(
        run["trend"].is_null() && run["comparison"].is_null(),
        "{run:#}"
    );
    assert!(
        metrics(status).contains("canaryd_runs_total{workload=\"long\",verdict=\"error\"} 1"),
        "{}",
        metrics(status)
    );

    // Its folder now has what every run leaves: a summary from its records, and a verdict.
    let summary: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"].as_u64(), Some(valid));
    assert_eq!(summary["interrupted"], true);
    assert_eq!(summary["run"]["run_id"], id);
    assert!(
        summary["request_latency"]["count"].as_u64().unwrap() > 0,
        "{summary:#}"
    );
    // The SLOs of the workload were applied to the recovered records.
    assert!(
        summary["goodput"]["good_requests"].as_u64().unwrap() > 0,
        "{summary:#}"
    );
    let csv = std::fs::read_to_string(run_dir.join("summary.csv")).unwrap();
    assert!(csv.contains(&format!("\nrequests,{valid}\n")), "{csv}");
    let verdict: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(
        verdict["verdict"],
        "error: no verdict.json: the process died or its results could not be written"
    );
    // It keeps no samples, so no baseline ever includes it.
    let db = rusqlite::Connection::open(dir.path().join("state/history.sqlite")).unwrap();
    let samples: Option<String> = db
        .query_row("SELECT samples FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .unwrap();
    assert_eq!(samples, None);
}

/// A capacity search and a sweep keep their records in one folder per probe or point: a kill
/// in the middle of one still leaves a run the next start records, with the part it cut short
/// summarized from its records, a verdict, and a history row (so retention can remove it).
#[test]
fn capacity_and_sweep_runs_killed_mid_part_are_recovered_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    // Parts of a minute each: far from done when the kill comes.
    let shape = "isl = 16\nosl = 4\nbenchmark_duration = \"60s\"\nevery = \"1h\"\n\
                 slos = \"request_latency:60000\"\nmin_good_fraction = 0.5\n";
    // Workloads on one server take turns: the sweep's target, the same server by another
    // name, lets its runs go at once.
    let extra = format!(
        "[targets.sim2]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         allow_concurrent_runs = true\n\
         [workloads.capacity]\ntarget = \"sim\"\nkind = \"capacity\"\nrequest_rate = 20\n\
         arrival_pattern = \"constant\"\n{shape}\
         [workloads.knee]\ntarget = \"sim2\"\nkind = \"sweep\"\nsweep_concurrency = [2, 4]\n\
         {shape}"
    );
    let config = write_config(dir.path(), sim_port, &extra);
    let (mut d, _) = daemon(dir.path(), &config, "daemon.log");
    // The run's folder, once its first part has recorded a few requests.
    let running = |workload: &str, part: &str| {
        let artifacts = dir.path().join("state/artifacts").join(workload);
        let part = part.to_string();
        eventually(60, "the part to record requests", move || {
            let run = std::fs::read_dir(&artifacts).ok()?.next()?.ok()?.path();
            let records = std::fs::read_to_string(run.join(&part).join("records.jsonl")).ok()?;
            (records.lines().count() >= 5).then_some(run)
        })
    };
    let runs = [
        (
            "capacity",
            running("capacity", "probe-01-20rps"),
            "probe-01-20rps",
        ),
        ("knee", running("knee", "point-01-c2"), "point-01-c2"),
    ];
    d.signal(libc::SIGKILL);
    assert_eq!(
        d.wait_exit(Duration::from_secs(30)),
        None,
        "killed by a signal"
    );
    for (_, run_dir, part) in &runs {
        assert!(!run_dir.join("verdict.json").exists());
        assert!(!run_dir.join(part).join("summary.json").exists());
    }

    let (_d, status) = daemon(dir.path(), &config, "daemon2.log");
    for (workload, run_dir, part) in &runs {
        let id = run_dir.file_name().unwrap().to_str().unwrap();
        let path = format!("/api/runs/{id}");
        let body = eventually(60, "the killed run in the history", || {
            let (code, body) = http(status, "GET", &path, "");
            (code == 200).then_some(body)
        });
        let run: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(run["workload"], *workload, "{run:#}");
        assert_eq!(
            run["verdict"],
            "error: no verdict.json: the process died or its results could not be written",
            "{run:#}"
        );
        // The run's summary is the part it was killed in, rebuilt from that part's records.
        let read =
            |f: &Path| -> Value { serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap() };
        let summary = read(&run_dir.join(part).join("summary.json"));
        // A SIGKILL can land between the write(2)s of one batch: a torn last line is no
        // record, and the rebuilt summary leaves it out.
        let recorded = std::fs::read_to_string(run_dir.join(part).join("records.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).is_ok())
            .count() as u64;
        assert_eq!(summary["requests"].as_u64(), Some(recorded), "{summary:#}");
        assert_eq!(summary["interrupted"], true, "{summary:#}");
        assert_eq!(summary["run"]["run_id"], format!("{id}-p01"), "{summary:#}");
        assert_eq!(
            run["summary"]["requests"].as_u64(),
            Some(recorded),
            "{run:#}"
        );
        assert_eq!(run["summary"]["process_died"], true, "{run:#}");
        let verdict = read(&run_dir.join("verdict.json"));
        assert_eq!(
            verdict["verdict"],
            "error: no verdict.json: the process died or its results could not be written"
        );
    }
}

#[test]
fn a_synthetic_workload_runs_as_a_closed_loop_over_two_urls() {
    let dir = tempfile::tempdir().unwrap();
    let (_a, pa) = sim();
    let (_b, pb) = sim();
    // No trace: 10 requests of 20 tokens in, 4 out, from 2 users, spread over two replicas.
    let extra = format!(
        "[targets.pair]\nurl = [\"http://127.0.0.1:{pa}\", \"http://127.0.0.1:{pb}\"]\n\
         model = \"canary-sim\"\n\
         [workloads.loop]\ntarget = \"pair\"\nisl = 20\nosl = 4\nconcurrency = 2\n\
         request_count = 10\nevery = \"1h\"\n"
    );
    let config = write_config(dir.path(), pa, &extra);
    let (_d, status) = daemon(dir.path(), &config, "daemon.log");
    let run = eventually(90, "a finished run of the synthetic workload", || {
        let all = runs(status);
        let done = of(&all, "loop")
            .into_iter()
            .find(|r| r["artifacts"].is_string() && r["verdict_kind"].is_string())?;
        Some(done.clone())
    });
    let log = || std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();
    assert_eq!(run["verdict"], "pass", "{run}\n{}", log());
    let artifacts = Path::new(run["artifacts"].as_str().unwrap());
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(artifacts.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["run"]["load"]["shape"], "closed_loop", "{s}");
    assert_eq!(s["run"]["load"]["users"], 2, "{s}");
    assert_eq!(
        (s["requests"].as_u64(), s["completed"].as_u64()),
        (Some(10), Some(10))
    );
    let by_url = s["by_url"].as_object().expect("a per-URL breakdown");
    assert_eq!(by_url.len(), 2, "{by_url:?}");
    for (url, share) in by_url {
        assert_eq!(share["requests"], 5, "{url}");
    }
    let records = std::fs::read_to_string(artifacts.join("records.jsonl")).unwrap();
    for line in records.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["usage"]["prompt_tokens"], 20, "{r}");
        assert_eq!(r["usage"]["completion_tokens"], 4, "{r}");
    }
}

/// The config's `realtime_workers`: the daemon's runtime workers run `SCHED_FIFO` where
/// permitted and each run's summary says so; a reload that turns it off is followed.
#[test]
fn realtime_workers_in_the_config_is_followed_at_start_and_on_reload() {
    let permitted = std::thread::spawn(|| {
        let param = libc::sched_param { sched_priority: 2 };
        // SAFETY: pid 0 is this throwaway thread; `param` is valid for the call.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    })
    .join()
    .unwrap();
    if !permitted {
        return canary_testkit::skip(
            "realtime",
            "SCHED_FIFO is not permitted here (CI runs as root)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let extra = workload("rt", "sim", "1s", "max_requests = 5").replace("max_requests = 40\n", "");
    let config = write_config(dir.path(), sim_port, &extra);
    let text = std::fs::read_to_string(&config).unwrap();
    // A top-level key: before the first table.
    std::fs::write(&config, format!("realtime_workers = true\n{text}")).unwrap();
    let (d, status) = daemon(dir.path(), &config, "daemon.log");
    let workers_of = |run: &Value| -> Value {
        let dir = Path::new(run["artifacts"].as_str().unwrap());
        let s: Value =
            serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
        s["context"]["canaryd"]["workers"].clone()
    };
    let first = eventually(60, "a first run", || runs(status).first().cloned());
    let w = workers_of(&first);
    assert_eq!(w["realtime_requested"], true, "{w}");
    assert_eq!(w["scheduling"], "SCHED_FIFO", "{w}");

    std::fs::write(&config, text).unwrap();
    d.signal(libc::SIGHUP);
    let w = eventually(60, "a run with ordinary workers after the reload", || {
        runs(status)
            .iter()
            .map(workers_of)
            // A run that ended as the reload came may say `false` before its workers
            // followed: each worker changes before it next parks, so a later run is ordinary.
            .find(|w| w["realtime_requested"] == false && w["scheduling"] == "SCHED_OTHER")
    });
    assert_eq!(w["realtime_threads"], 0, "{w}");
}

/// A start where no file can grow (the file size limit, RLIMIT_FSIZE 0 with SIGXFSZ ignored,
/// plays the full disk: every write fails as ENOSPC would, creating files does not): the pid
/// the lock file cannot take is a warning, the lock held all the same; the history, intact
/// but unreadable without its `-shm` file, is refused with SQLite's I/O error, never called
/// damaged nor to be moved away (which would lose every baseline).
#[test]
fn a_start_where_nothing_can_be_written_warns_of_the_pid_and_calls_the_history_unreadable() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), free_port(), &workload("w", "sim", "1h", ""));
    // A history of a daemon that stopped cleanly: WAL mode, its -wal and -shm files gone.
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    let history = dir.path().join("state/history.sqlite");
    {
        let db = rusqlite::Connection::open(&history).unwrap();
        db.pragma_update(None, "journal_mode", "WAL").unwrap();
        db.execute_batch("CREATE TABLE kept (x); INSERT INTO kept VALUES (1);")
            .unwrap();
    }
    let mut cmd = Command::new(CANARYD);
    cmd.args(["run", "--config"])
        .arg(&config)
        .args(["--status-listen", &format!("127.0.0.1:{}", free_port())])
        .current_dir(dir.path())
        .env("RUST_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        // A pipe: the limit is on files, and the log must get out.
        .stderr(Stdio::piped());
    // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(|| {
            let rl = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            match libc::setrlimit(libc::RLIMIT_FSIZE, &rl) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let mut child = Child(cmd.spawn().unwrap());
    let mut stderr = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = stderr.read_to_string(&mut log);
        log
    });
    let code = child.wait_exit(Duration::from_secs(60));
    let log = reader.join().unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("WARN")
            && log.contains("writing the pid to")
            && log.contains("canaryd.lock: File too large")
            && log.contains("the lock is held all the same"),
        "{log}"
    );
    assert!(
        log.contains("history.sqlite cannot be opened or read (disk I/O error")
            && log.contains("do not move it away"),
        "{log}"
    );
    assert!(!log.contains("is damaged"), "{log}");
    // Intact: it opens, with its row, once files can grow again.
    let db = rusqlite::Connection::open(&history).unwrap();
    let kept: i64 = db
        .query_row("SELECT x FROM kept", [], |r| r.get(0))
        .unwrap();
    assert_eq!(kept, 1);
}

/// A history emptied to 0 bytes beside its runs' folders (a restore gone wrong, a tool that
/// truncated it): the start records the runs again from their verdict.json and says so once,
/// as a warning naming the file, with the baselines' loss; each run's line says it was not in
/// the history, not that the history failed when it finished.
#[test]
fn a_history_emptied_beside_its_runs_is_warned_of_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim();
    let config = write_config(dir.path(), sim_port, &workload("w", "sim", "1h", ""));
    let (mut first, status) = daemon(dir.path(), &config, "first.log");
    eventually(60, "a first run", || {
        (!runs(status).is_empty()).then_some(())
    });
    first.signal(libc::SIGTERM);
    assert_eq!(first.wait_exit(Duration::from_secs(60)), Some(0));
    let history = dir.path().join("state/history.sqlite");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&history)
        .unwrap()
        .set_len(0)
        .unwrap();
    let (mut second, status) = daemon(dir.path(), &config, "second.log");
    eventually(60, "the run recorded again", || {
        (!runs(status).is_empty()).then_some(())
    });
    second.signal(libc::SIGTERM);
    assert_eq!(second.wait_exit(Duration::from_secs(60)), Some(0));
    let log = std::fs::read_to_string(dir.path().join("second.log")).unwrap();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the database file was empty (0 bytes) at start"))
        .filter(|l| l.contains("WARN"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("history.sqlite")
            && warned[0].contains("1 run folder(s) hold a verdict.json")
            && warned[0].contains("latency baselines start again"),
        "{log}"
    );
    assert!(
        log.contains("recorded from its verdict.json (pass): not in the history"),
        "{log}"
    );
    assert!(!log.contains("could not be written when"), "{log}");
}
