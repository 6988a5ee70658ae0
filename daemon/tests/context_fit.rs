//! Requests that cannot fit the target's context window are said before the run: `canaryd
//! replay` of the real Mooncake arXiv rows against the simulator started with a small
//! `--max-model-len` warns once, with the counts of the requests over it (prompt + max_tokens,
//! and prompt alone) and where the limit came from, and `summary.json`'s
//! `run.trace.selection` counts the same. What is sent and the exit status do not change.
//! Against a context that holds every row, nothing is said.

mod common;

use common::{canaryd, shared, text};
use serde_json::Value;
use std::path::Path;

const TRACE: &str = "traces/mooncake_arxiv_first20.jsonl";

/// `canaryd replay` of the 20-row arXiv trace to `url`, into `DIR/out`.
fn replay(dir: &Path, url: &str) -> (std::process::Output, Value) {
    let trace = shared(TRACE);
    let out = canaryd(
        &[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--url",
            url,
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
            "--no-ebpf",
        ],
        dir,
    );
    let path = dir.join("out/summary.json");
    let summary = match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).unwrap(),
        Err(e) => panic!("{}: {e}\n{}", path.display(), text(&out)),
    };
    (out, summary)
}

/// From the trace itself: its rows' (input_length, output_length).
fn rows() -> Vec<(u64, u64)> {
    std::fs::read_to_string(shared(TRACE))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["input_length"].as_u64().unwrap(),
                v["output_length"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    jsonschema::draft202012::new(&schema).unwrap()
}

fn assert_valid(doc: &Value) {
    let v = validator();
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// The warning's lines in `canaryd`'s output.
fn context_warnings(out: &std::process::Output) -> Vec<String> {
    text(out)
        .lines()
        .filter(|l| l.contains("than the target's context"))
        .map(str::to_string)
        .collect()
}

#[test]
fn requests_over_the_targets_context_are_counted_and_said_before_the_run() {
    // 8000 tokens: some rows are over by prompt + output only (7234 + 794), most by their
    // prompt alone, the rest fit.
    let limit = 8000u64;
    let rows = rows();
    let over = rows.iter().filter(|(i, o)| i + o > limit).count();
    let alone = rows.iter().filter(|(i, _)| *i > limit).count();
    assert!(
        0 < alone && alone < over && over < rows.len(),
        "{over} {alone}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&["--max-model-len", &limit.to_string()]);
    let (out, summary) = replay(dir.path(), &format!("http://127.0.0.1:{port}"));
    // Refused requests do not change what the exit status means: the run is unjudged.
    assert!(out.status.success(), "{}", text(&out));

    let warnings = context_warnings(&out);
    assert_eq!(warnings.len(), 1, "{}", text(&out));
    let w = &warnings[0];
    let said = format!(
        "{over} of {} requests ask for more tokens than the target's context ({limit}, from \
         /v1/models max_model_len): {alone} by their prompt alone; the server will likely \
         refuse them (HTTP 400)",
        rows.len()
    );
    assert!(w.contains(&said), "{w}\nnot: {said}");
    assert!(w.contains("WARN"), "{w}");
    assert!(w.contains("an estimate of the server's tokenizer"), "{w}");
    let sel = &summary["run"]["trace"]["selection"];
    assert_eq!(sel["context_limit"], limit, "{sel:#}");
    assert_eq!(sel["context_limit_source"], "/v1/models max_model_len");
    assert_eq!(sel["over_context"], over as u64, "{sel:#}");
    assert_eq!(sel["prompt_over_context"], alone as u64, "{sel:#}");
    // Nothing left out: every row was sent, and the sim (whose prompts hold the planned
    // token counts) refused exactly the requests counted.
    assert_eq!(sel["requests_out"], rows.len() as u64);
    assert_eq!(summary["requests"], rows.len() as u64, "{summary:#}");
    assert_eq!(summary["errors"], over as u64, "{summary:#}");
    assert_eq!(summary["errors_by_kind"]["http_status"], over as u64);
    assert_valid(&summary);
}

#[test]
fn a_context_that_holds_every_request_says_nothing() {
    let rows = rows();
    let biggest = rows.iter().map(|(i, o)| i + o).max().unwrap();
    let limit = biggest + 1000;
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&["--max-model-len", &limit.to_string()]);
    let (out, summary) = replay(dir.path(), &format!("http://127.0.0.1:{port}"));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(context_warnings(&out), Vec::<String>::new());
    let sel = &summary["run"]["trace"]["selection"];
    assert_eq!(sel["context_limit"], limit, "{sel:#}");
    assert_eq!(sel["over_context"], 0, "{sel:#}");
    assert_eq!(sel["prompt_over_context"], 0, "{sel:#}");
    assert_eq!(summary["errors"], 0, "{summary:#}");
    assert_valid(&summary);
}

/// A target whose context length is not known before the run (its API behind a path where
/// no `/v1/models`, `/props`, `/get_server_info` or `/info` answers): nothing new is said and
/// the selection has no context fields, whatever the run then meets.
#[test]
fn an_unknown_context_says_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&["--max-model-len", "8000"]);
    let url = format!("http://127.0.0.1:{port}/proxy/v1/chat/completions");
    let (out, summary) = replay(dir.path(), &url);
    assert_eq!(context_warnings(&out), Vec::<String>::new());
    let sel = summary["run"]["trace"]["selection"].as_object().unwrap();
    for key in [
        "context_limit",
        "context_limit_source",
        "over_context",
        "prompt_over_context",
    ] {
        assert!(!sel.contains_key(key), "{key}: {sel:#?}");
    }
    assert_eq!(sel["requests_out"], 20);
    assert_valid(&summary);
}

/// A daemon run says the same in the daemon's log, and its `summary.json` counts the same.
#[test]
fn a_daemon_run_says_it_in_its_log() {
    let limit = 8000u64;
    let rows = rows();
    let over = rows.iter().filter(|(i, o)| i + o > limit).count();
    let alone = rows.iter().filter(|(i, _)| *i > limit).count();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_sim, port) = common::sim(&["--max-model-len", &limit.to_string()]);
    let config = d.join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"canary-sim\"\n\
             [workloads.w]\ntarget = \"sim\"\ntrace = \"{}\"\nevery = \"1h\"\n",
            d.join("state").display(),
            shared(TRACE).display()
        ),
    )
    .unwrap();
    let (_daemon, status) = common::daemon_on_own_port(d, &config, "daemon.log", &[]);
    let run = common::eventually(120, "the daemon's first run", || {
        common::api_runs(status).into_iter().next()
    });
    let log = std::fs::read_to_string(d.join("daemon.log")).unwrap();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("than the target's context"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    let expected = format!(
        "{over} of {} requests ask for more tokens than the target's context ({limit}, from \
         /v1/models max_model_len): {alone} by their prompt alone",
        rows.len()
    );
    assert!(said[0].contains(&expected), "{}\nnot: {expected}", said[0]);
    let artifacts = Path::new(run["artifacts"].as_str().unwrap());
    let summary: Value =
        serde_json::from_slice(&std::fs::read(artifacts.join("summary.json")).unwrap()).unwrap();
    let sel = &summary["run"]["trace"]["selection"];
    assert_eq!(sel["over_context"], over as u64, "{sel:#}");
    assert_eq!(sel["prompt_over_context"], alone as u64, "{sel:#}");
    assert_eq!(sel["context_limit"], limit, "{sel:#}");
    assert_valid(&summary);
}

/// `--runs 2`: the second run reuses the first's answer (kept 10 min), says nothing again, and
/// counts the same in its own `summary.json`. Each run asked and warned before.
#[test]
fn repeated_runs_warn_once_and_each_counts() {
    let limit = 8000u64;
    let rows = rows();
    let over = rows.iter().filter(|(i, o)| i + o > limit).count() as u64;
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&["--max-model-len", &limit.to_string()]);
    let trace = shared(TRACE);
    let url = format!("http://127.0.0.1:{port}");
    let out = canaryd(
        &[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
            "--no-ebpf",
            "--speedup",
            "10",
            "--runs",
            "2",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(context_warnings(&out).len(), 1, "{}", text(&out));
    for k in 1..=2 {
        let path = dir.path().join(format!("out/run-{k}/summary.json"));
        let summary: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        let sel = &summary["run"]["trace"]["selection"];
        assert_eq!(sel["over_context"], over, "run {k}: {sel:#}");
        assert_eq!(sel["context_limit"], limit, "run {k}: {sel:#}");
    }
}
