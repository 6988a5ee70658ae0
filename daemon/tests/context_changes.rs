//! A run says what changed in its context since its baseline run (issue 19): `canaryd run`
//! as a real process against a real `canaryd sim` whose engine version is changed between
//! runs (`POST /sim/version`). Before the change each compared run says nothing changed;
//! after it, the run names `server.version` old → new in `summary.json` (valid against the
//! schema), `verdict.json`, `/api/runs`, `/api/runs/{id}`, the status page and the log.
//! Nothing asserts on timing; the status API is polled with generous deadlines.

mod common;

use common::{api_runs as runs, eventually, http, Child};
use serde_json::Value;
use std::path::Path;

const NEW_VERSION: &str = "0.99.1-upgraded";

fn write_config(dir: &Path, sim_port: u16) -> std::path::PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [baseline]\nruns = 10\nmin_runs = 2\nmin_shift_ms = 20\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.chat]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 20\n\
         speedup = 20\nscale_lengths = 0.05\nevery = \"1s\"\n",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn changes(run: &Value) -> Option<&Vec<Value>> {
    run["context_changes"]["changes"].as_array()
}

#[test]
fn a_new_engine_version_is_named_beside_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let (code, body) = http(sim_port, "GET", "/version", "");
    assert_eq!(code, 200, "{body}");
    let old_version = serde_json::from_str::<Value>(&body).unwrap()["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(old_version, NEW_VERSION);
    let config = write_config(dir.path(), sim_port);
    let (_d, status): (Child, u16) =
        common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);

    // Two passing runs: the second is compared with the first, and nothing changed.
    let before = eventually(120, "a run compared with a baseline run", || {
        let all = runs(status);
        all.iter().any(|r| changes(r).is_some()).then_some(all)
    });
    for run in before.iter().filter(|r| changes(r).is_some()) {
        assert_eq!(
            changes(run).unwrap().len(),
            0,
            "nothing changed yet: {run:#}"
        );
    }
    let first = before.last().unwrap();
    assert!(
        first.get("context_changes").is_some_and(Value::is_null),
        "the first run has no baseline run to compare with: {first:#}"
    );

    // The engine is "upgraded".
    let (code, body) = http(
        sim_port,
        "POST",
        "/sim/version",
        &format!(r#"{{"version":"{NEW_VERSION}"}}"#),
    );
    assert_eq!(code, 200, "{body}");
    let changed = eventually(120, "a run whose context names the new version", || {
        runs(status)
            .into_iter()
            .find(|r| changes(r).is_some_and(|c| c.iter().any(|c| c["now"] == NEW_VERSION)))
    });
    let id = changed["id"].as_str().unwrap();
    let baseline_run = changed["context_changes"]["baseline_run"].as_str().unwrap();
    assert!(
        baseline_run < id,
        "the baseline run is an earlier run: {changed:#}"
    );
    let expected = serde_json::json!({
        "field": "server.version", "baseline": old_version, "now": NEW_VERSION
    });
    // Only the version changed, the run against its newest baseline run (the previous one,
    // unless it ran while the version changed and saw the new one already).
    let listed = changes(&changed).unwrap();
    assert_eq!(listed, &vec![expected.clone()], "{changed:#}");

    // The same in the run's JSON, its summary.json (valid against the schema) and verdict.json.
    let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
    assert_eq!(code, 200, "{body}");
    let api: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(api["summary"]["context_changes"]["changes"][0], expected);
    assert_eq!(api["summary"]["context"]["server"]["version"], NEW_VERSION);
    let art = dir.path().join("state/artifacts/chat").join(id);
    let read = |f: &str| -> Value {
        serde_json::from_slice(&std::fs::read(art.join(f)).unwrap()).unwrap()
    };
    let summary = read("summary.json");
    assert_eq!(summary["context_changes"]["changes"][0], expected);
    assert_eq!(summary["context_changes"]["baseline_run"], baseline_run);
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(schema_path).unwrap()).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&summary)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(
        read("verdict.json")["context_changes"]["changes"][0],
        expected
    );

    // The status page shows it beside the trend, and the log line of the verdict says it.
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200);
    let shown = format!("changed: server.version {old_version} → {NEW_VERSION}");
    assert!(page.contains(&shown), "{page}");
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    let said = format!(
        "context changed since run {baseline_run}: server.version {old_version} → {NEW_VERSION}"
    );
    assert!(
        log.lines().any(|l| l.contains(id) && l.contains(&said)),
        "{log}"
    );
}
