//! `summary.json` has one schema, whoever writes it: `canaryd replay`, `canaryd demo`, a
//! daemon run, and the summary the daemon rebuilds for a run whose process died all validate
//! against `core/summary.schema.json` and say which version they follow, and their `run`
//! blocks carry the same keys (issue 15).

mod common;

use common::{canaryd, eventually, shared, text};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    jsonschema::draft202012::new(&schema).expect("the schema is a valid 2020-12 schema")
}

/// Every way `doc` breaks the schema, one line each.
fn violations(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// `path` read and checked against the schema.
fn valid_summary(v: &jsonschema::Validator, path: &Path) -> Value {
    let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let errors = violations(v, &doc);
    assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
    assert_eq!(
        doc["schema_version"],
        canary_core::SUMMARY_SCHEMA_VERSION,
        "{}",
        path.display()
    );
    doc
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// A daemon run of the bundled trace against `sim_port`, stopped after its first verdict;
/// the run's artifacts folder.
fn daemon_run(dir: &Path, sim_port: u16) -> PathBuf {
    let config = dir.join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.w]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 10\n\
             speedup = 50\nscale_lengths = 0.05\nevery = \"1h\"\n\
             slos = \"time_to_first_token:5000\"\n",
            dir.join("state").display()
        ),
    )
    .unwrap();
    let (_daemon, status) = common::daemon_on_own_port(dir, &config, "daemon.log", &[]);
    let run = eventually(120, "the daemon's first run", || {
        common::api_runs(status).into_iter().next()
    });
    PathBuf::from(run["artifacts"].as_str().unwrap())
}

#[test]
fn replay_demo_and_daemon_summaries_follow_the_one_schema() {
    let v = validator();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_sim, port) = common::sim(&["--block-size", "26"]);
    let url = format!("http://127.0.0.1:{port}");

    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let replay = canaryd(
        &[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--speedup",
            "100",
            "--goodput",
            "time_to_first_token:5000",
            "--no-nvml",
            "--output-dir",
            "replay-out",
            "--json",
        ],
        d,
    );
    assert!(replay.status.success(), "{}", text(&replay));
    let printed: Value = serde_json::from_slice(&replay.stdout).unwrap();
    let replay = valid_summary(&v, &d.join("replay-out/summary.json"));
    // Issue 16, item 5: `--json` dropped the `run` block; it prints what summary.json holds.
    assert_eq!(printed, replay);

    let demo = canaryd(
        &[
            "demo",
            "--profile",
            "fast",
            "--speedup",
            "100",
            "--max-requests",
            "20",
            "--output-dir",
            "demo-out",
        ],
        d,
    );
    assert!(demo.status.success(), "{}", text(&demo));
    let demo = valid_summary(&v, &d.join("demo-out/summary.json"));

    let run_dir = daemon_run(d, port);
    let daemon = valid_summary(&v, &run_dir.join("summary.json"));
    // Issue 16, item 6: the run's log line said `pass` with no figures and no SLOs.
    let log = std::fs::read_to_string(d.join("daemon.log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains(": pass"))
        .unwrap_or_else(|| panic!("no pass line: {log}"));
    for part in [
        "10 requests, 10 completed",
        "error rate 0.000 (max 0.05)",
        "good 1.000 (min 0.95) over time_to_first_token:5000",
        "TTFT p50 ",
    ] {
        assert!(line.contains(part), "{part:?} not in {line}");
    }

    // One `run` block: the same keys from every front end; the daemon's target also has
    // its name in the config.
    for (name, doc) in [("demo", &demo), ("daemon", &daemon)] {
        assert_eq!(keys(&doc["run"]), keys(&replay["run"]), "{name}");
        let mut target = keys(&doc["run"]["target"]);
        target.remove("name");
        assert_eq!(target, keys(&replay["run"]["target"]), "{name}");
    }
    assert_eq!(daemon["run"]["target"]["name"], "sim");
    assert_eq!(daemon["run"]["workload"], "w");
    assert_eq!(replay["run"]["workload"], "mooncake_arxiv_first20");
    assert_eq!(replay["run"]["trace"]["load"]["rows"], 20);
    assert_eq!(daemon["run"]["goodput"], "time_to_first_token:5000");
    // Issue 16, item 5: the selection asked for is in the run block, so it can be repeated.
    let asked = &demo["run"]["trace"]["asked"];
    assert_eq!(asked["max_requests"], 20, "{asked}");
    assert!(asked["scale_lengths"].as_f64().unwrap() > 0.0, "{asked}");
    let asked = &daemon["run"]["trace"]["asked"];
    assert_eq!(asked["max_requests"], 10, "{asked}");
    assert_eq!(asked["scale_lengths"], 0.05, "{asked}");
    assert_eq!(asked["shard"], Value::Null, "{asked}");

    // The schema is strict enough to catch drift: an unknown key, a wrong type, a
    // missing version.
    let mut drifted = replay.clone();
    drifted["surprise"] = json!(1);
    drifted["run"]["speedup"] = json!("fast");
    drifted.as_object_mut().unwrap().remove("schema_version");
    assert_eq!(
        violations(&v, &drifted).len(),
        3,
        "{:#?}",
        violations(&v, &drifted)
    );
}

#[test]
fn a_summary_rebuilt_after_the_process_died_follows_the_schema() {
    let v = validator();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A run folder whose process died: records, no summary, no verdict. Its id says it
    // started now, so retention keeps it.
    let id = format!("{}-0000dead", chrono::Utc::now().format("%Y%m%dT%H%M%SZ"));
    let run_dir = d.join("state/artifacts/w").join(id);
    std::fs::create_dir_all(&run_dir).unwrap();
    let out = canaryd(
        &[
            "replay",
            "--trace",
            shared("traces/mooncake_arxiv_first20.jsonl")
                .to_str()
                .unwrap(),
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--max-requests",
            "3",
            "--speedup",
            "100",
            "--no-nvml",
            "--no-server-metrics",
            "--output-dir",
            run_dir.to_str().unwrap(),
        ],
        d,
    );
    // Nothing completed (port 9 is closed): exit 4, artifacts written all the same.
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    for f in ["summary.json", "summary.csv"] {
        std::fs::remove_file(run_dir.join(f)).unwrap();
    }
    let config = d.join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\nmetrics_url = \"\"\n\
             [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n",
            d.join("state").display()
        ),
    )
    .unwrap();
    let (_daemon, _) = common::daemon_on_own_port(d, &config, "daemon.log", &[]);
    eventually(60, "the rebuilt summary", || {
        run_dir.join("verdict.json").exists().then_some(())
    });
    let rebuilt = valid_summary(&v, &run_dir.join("summary.json"));
    assert_eq!(rebuilt["process_died"], true);
    assert!(rebuilt["run"]["recovered"].is_string(), "{rebuilt}");
}

#[test]
fn synthetic_profile_summaries_follow_the_schema_and_say_their_shape() {
    let v = validator();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    for (out, shape, flags) in [
        (
            "rate-out",
            "rate",
            vec!["--request-rate", "100", "--request-count", "5"],
        ),
        (
            "loop-out",
            "closed_loop",
            vec!["--concurrency", "2", "--benchmark-duration", "300ms"],
        ),
    ] {
        let mut args = vec![
            "profile",
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--no-nvml",
        ];
        args.extend(["--isl", "20", "--osl", "4", "--output-dir", out]);
        args.extend(flags);
        let run = canaryd(&args, d);
        assert!(run.status.success(), "{}", text(&run));
        let doc = valid_summary(&v, &d.join(out).join("summary.json"));
        assert_eq!(doc["run"]["load"]["shape"], shape);
        // The schema knows each shape's keys: a rate without its rate is caught.
        let mut drifted = doc.clone();
        drifted["run"]["load"]
            .as_object_mut()
            .unwrap()
            .remove("isl");
        assert_eq!(violations(&v, &drifted).len(), 1, "{shape}");
    }
}

// Every request cancelled on purpose: nothing judged, so the shares are null (version 3, where
// 2 wrote 0), and the file still follows the schema.
#[test]
fn a_run_of_cancels_only_has_null_shares_and_follows_the_schema() {
    let v = validator();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Every response stalls after its second token: each request is cancelled at 100 ms.
    let (_sim, port) = common::sim(&["--fault-rate", "1", "--fault", "stall_mid_ms=1000,at=2"]);
    let url = format!("http://127.0.0.1:{port}");
    let run = canaryd(
        &[
            "profile",
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--no-nvml",
            "--isl",
            "16",
            "--osl",
            "8",
            "--request-count",
            "2",
            "--request-cancellation-rate",
            "100",
            "--request-cancellation-delay",
            "100ms",
            "--goodput",
            "time_to_first_token:100",
            "--output-dir",
            "cancel-out",
        ],
        d,
    );
    assert!(!run.status.success(), "{}", text(&run));
    let doc = valid_summary(&v, &d.join("cancel-out/summary.json"));
    assert!(doc["error_rate"].is_null(), "{doc}");
    assert!(doc["goodput"]["good_request_fraction"].is_null(), "{doc}");
    // The schema holds a share to 0..1.
    let mut drifted = doc.clone();
    drifted["error_rate"] = json!(1.5);
    assert_eq!(violations(&v, &drifted).len(), 1);
}

// A run whose target failed part of its requests with 429s and 503s (the simulator's fault
// mix): its error fields (errors_by_kind, errors_by_http_status, error_causes, the
// diagnosis's target-errors evidence) follow the schema. No error run was validated before.
#[test]
fn a_run_with_http_errors_follows_the_schema() {
    let v = validator();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_sim, port) = common::sim(&[
        "--fault-rate",
        "0.5",
        "--fault",
        "status=429",
        "--fault",
        "status=503",
        "--seed",
        "7",
    ]);
    let url = format!("http://127.0.0.1:{port}");
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let out = canaryd(
        &[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--speedup",
            "100",
            "--no-nvml",
            "--output-dir",
            "out",
        ],
        d,
    );
    assert!(out.status.success(), "{}", text(&out));
    let s = valid_summary(&v, &d.join("out/summary.json"));
    let http = s["errors_by_kind"]["http_status"].as_u64().unwrap_or(0);
    assert!(http > 0 && s["completed"].as_u64() > Some(0), "{s}");
    let by_status = s["errors_by_http_status"].as_object().expect("statuses");
    assert_eq!(
        keys(&s["errors_by_http_status"]),
        ["429", "503"].map(String::from).into(),
        "{s}"
    );
    assert_eq!(
        by_status.values().filter_map(Value::as_u64).sum::<u64>(),
        http,
        "{s}"
    );
    assert!(s["error_causes"][0]["http_status"].is_u64(), "{s}");
    assert_eq!(s["diagnosis"]["class"], "target-errors", "{s}");
}
