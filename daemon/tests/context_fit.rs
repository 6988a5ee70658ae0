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

/// `canaryd replay` of the trace to `url` with `extra` flags, into `DIR/out`.
fn replay_with(dir: &Path, url: &str, extra: &[&str]) -> (std::process::Output, Value) {
    let trace = shared(TRACE);
    let mut args = vec![
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
        "--speedup",
        "10",
    ];
    args.extend_from_slice(extra);
    let out = canaryd(&args, dir);
    let path = dir.join("out/summary.json");
    let summary = match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).unwrap(),
        Err(e) => panic!("{}: {e}\n{}", path.display(), text(&out)),
    };
    (out, summary)
}

/// The edge, as vLLM refuses: without `max_tokens` (`--max-tokens-field none`) a prompt of
/// exactly the limit leaves no room for one output token, and is counted over by its prompt
/// alone (it used to count as fitting). The limit is a row's own input length.
#[test]
fn a_prompt_of_exactly_the_limit_without_max_tokens_is_over() {
    let rows = rows();
    let limit = rows[0].0;
    let over = rows.iter().filter(|(i, _)| *i >= limit).count() as u64;
    // The edge row is the difference between the old count (prompt > limit) and vLLM's.
    assert_eq!(
        rows.iter().filter(|(i, _)| *i > limit).count() as u64 + 1,
        over
    );
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&["--max-model-len", &limit.to_string()]);
    let url = format!("http://127.0.0.1:{port}");
    let (out, summary) = replay_with(dir.path(), &url, &["--max-tokens-field", "none"]);
    let sel = &summary["run"]["trace"]["selection"];
    assert_eq!(sel["context_limit"], limit, "{sel:#}");
    assert_eq!(sel["over_context"], over, "{sel:#}\n{}", text(&out));
    assert_eq!(sel["prompt_over_context"], over, "{sel:#}");
    assert_valid(&summary);
}

/// What a server answers each path with (`None`: 404).
type Routes = fn(&str) -> Option<&'static str>;

/// A loopback server answering GET `path` with 200 and `routes(path)` as JSON, 404 for any
/// other request (the run's requests too): an engine stating its context only on its own
/// route. Returns its URL.
fn serve_routes(routes: Routes) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => head.extend_from_slice(&buf[..k]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let mut words = head.split_whitespace();
                let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                let reply = match (method, routes(path)) {
                    ("GET", Some(body)) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    _ => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        .to_string(),
                };
                let _ = conn.write_all(reply.as_bytes());
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// Each engine's own route, asked of the target before the run, by telemetry's one reader:
/// llama.cpp's `/props`, SGLang's `/get_server_info` and TGI's `/info`. The
/// bodies hold only the fields read (no capture of these routes is among the fixtures). The
/// run's requests then fail (404): the counts are the plan's, before anything is sent.
#[test]
fn each_engine_route_states_the_context_before_the_run() {
    let limit = 8000u64;
    let rows = rows();
    let over = rows.iter().filter(|(i, o)| i + o > limit).count() as u64;
    // SGLang refuses a total at the limit too (`>=`).
    let over_sglang = rows.iter().filter(|(i, o)| i + o >= limit).count() as u64;
    let cases: [(Routes, &str, u64); 3] = [
        (
            |p| (p == "/props").then_some(r#"{"default_generation_settings":{"n_ctx":8000}}"#),
            "/props n_ctx",
            over,
        ),
        (
            |p| (p == "/get_server_info").then_some(r#"{"context_length":8000}"#),
            "/get_server_info context_length",
            over_sglang,
        ),
        (
            |p| (p == "/info").then_some(r#"{"max_total_tokens":8000}"#),
            "/info max_total_tokens",
            over,
        ),
    ];
    for (routes, source, over) in cases {
        let dir = tempfile::tempdir().unwrap();
        let url = serve_routes(routes);
        let (out, summary) = replay_with(dir.path(), &url, &[]);
        let sel = &summary["run"]["trace"]["selection"];
        assert_eq!(
            sel["context_limit_source"],
            source,
            "{sel:#}\n{}",
            text(&out)
        );
        assert_eq!(sel["context_limit"], limit, "{sel:#}");
        assert_eq!(sel["over_context"], over, "{source}: {sel:#}");
        let warnings = context_warnings(&out);
        assert_eq!(warnings.len(), 1, "{}", text(&out));
        assert!(
            warnings[0].contains(&format!("from {source}")),
            "{}",
            warnings[0]
        );
    }
}

/// SGLang's `max_total_num_tokens` is the size of its KV-cache pool (all running requests
/// together), not a request's context: neither the pre-flight nor `summary.json`'s
/// `context.server.max_model_len` reads it as one, and the latter says why there is none.
#[test]
fn sglang_kv_pool_size_is_not_a_context_length() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve_routes(|p| {
        (p == "/get_server_info")
            .then_some(r#"{"version":"0.4.6","context_length":null,"max_total_num_tokens":912345}"#)
    });
    let (out, summary) = replay_with(dir.path(), &url, &[]);
    let sel = summary["run"]["trace"]["selection"].as_object().unwrap();
    assert!(!sel.contains_key("context_limit"), "{sel:#?}");
    assert_eq!(context_warnings(&out), Vec::<String>::new());
    let server = &summary["context"]["server"];
    assert_eq!(server["version"], "0.4.6", "{server:#}");
    let why = server["max_model_len"]["unavailable"].as_str().unwrap();
    assert!(
        why.contains(
            "/get_server_info: context_length is null (SGLang states it only when \
             started with --context-length; its max_total_num_tokens is the KV-cache pool's \
             size, not a context length)"
        ),
        "{why}"
    );
    assert_valid(&summary);
}

/// A server of several models that asks for the API key: `summary.json`'s `context.server`
/// reads it as the pre-flight does — the run's model's entry of the model list (not the
/// first, another model's), over the target's transport (its API key) — and both say the
/// same context. The key is in no artifact.
#[test]
fn context_server_names_the_runs_model_and_its_length_with_the_targets_key() {
    use std::io::{Read, Write};
    const KEY: &str = "sekret-ctx-4711";
    let limit = 8000u64;
    let rows = rows();
    let over = rows.iter().filter(|(i, o)| i + o > limit).count() as u64;
    for keyed in [false, true] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => head.extend_from_slice(&buf[..k]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let authorized = head.lines().any(|l| {
                        l.split_once(':').is_some_and(|(name, value)| {
                            name.eq_ignore_ascii_case("authorization")
                                && value.trim() == format!("Bearer {KEY}")
                        })
                    });
                    let path = head.split_whitespace().nth(1).unwrap_or("");
                    let body = match path {
                        "/v1/models" => Some(
                            r#"{"object":"list","data":[
                                {"id":"other-0","object":"model","max_model_len":10},
                                {"id":"other-1","object":"model","max_model_len":20},
                                {"id":"m","object":"model","max_model_len":8000}]}"#,
                        ),
                        "/version" => Some(r#"{"version":"0.10.1"}"#),
                        _ => None,
                    };
                    let reply = match (keyed && !authorized, body) {
                        (true, _) => "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\
                                      connection: close\r\n\r\n"
                            .to_string(),
                        (false, Some(body)) => format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        ),
                        (false, None) => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\
                                          connection: close\r\n\r\n"
                            .to_string(),
                    };
                    let _ = conn.write_all(reply.as_bytes());
                });
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let trace = shared(TRACE);
        let url = format!("http://127.0.0.1:{port}");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_canaryd"))
            .args([
                "replay",
                "--trace",
                trace.to_str().unwrap(),
                "--url",
                &url,
                "--model",
                "m",
                "--api-key-env",
                "CTX_TEST_KEY",
                "--output-dir",
                "out",
                "--no-ebpf",
                "--no-nvml",
                "--speedup",
                "10",
            ])
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .env("CTX_TEST_KEY", KEY)
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap();
        let summary: Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("out/summary.json"))
                .unwrap_or_else(|e| panic!("{e}\n{}", text(&out))),
        )
        .unwrap();
        let server = &summary["context"]["server"];
        assert_eq!(server["model"], "m", "keyed {keyed}: {server:#}");
        assert_eq!(server["max_model_len"], limit, "keyed {keyed}: {server:#}");
        assert_eq!(server["version"], "0.10.1", "keyed {keyed}: {server:#}");
        // The pre-flight read the same.
        let sel = &summary["run"]["trace"]["selection"];
        assert_eq!(sel["context_limit"], limit, "{sel:#}");
        assert_eq!(sel["context_limit_source"], "/v1/models max_model_len");
        assert_eq!(sel["over_context"], over, "{sel:#}");
        assert_valid(&summary);
        assert!(!common::assert_no_file_holds(dir.path(), KEY, &[]).is_empty());
        assert!(!text(&out).contains(KEY), "{}", text(&out));
    }
}

/// Synthetic requests (`canaryd profile --isl/--osl`) are counted too, in `run.load`:
/// an input over the sim's `--max-model-len` is over by its prompt alone, each request of
/// the plan's count; the warning says so once. Within the limit, the counts are 0.
#[test]
fn synthetic_requests_over_the_context_are_counted() {
    let (_sim, port) = common::sim(&["--max-model-len", "1000"]);
    let url = format!("http://127.0.0.1:{port}");
    let profile = |dir: &Path, isl: &str| {
        let out = canaryd(
            &[
                "profile",
                "--url",
                &url,
                "--model",
                "canary-sim",
                "--isl",
                isl,
                "--osl",
                "10",
                "--request-count",
                "3",
                "--output-dir",
                "out",
                "--no-ebpf",
            ],
            dir,
        );
        let path = dir.join("out/summary.json");
        let summary: Value = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).unwrap(),
            Err(e) => panic!("{}: {e}\n{}", path.display(), text(&out)),
        };
        (out, summary)
    };
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = profile(dir.path(), "1200");
    let load = &summary["run"]["load"];
    assert_eq!(load["context_limit"], 1000, "{load:#}\n{}", text(&out));
    assert_eq!(load["context_limit_source"], "/v1/models max_model_len");
    assert_eq!(load["over_context"], 3, "{load:#}");
    assert_eq!(load["prompt_over_context"], 3, "{load:#}");
    let warnings = context_warnings(&out);
    assert_eq!(warnings.len(), 1, "{}", text(&out));
    assert!(
        warnings[0].contains("3 of 3 requests ask for more tokens than the target's context (1000, from /v1/models max_model_len): 3 by their prompt alone"),
        "{}",
        warnings[0]
    );
    assert_valid(&summary);

    // 990 + 10 = 1000: fits, as vLLM takes it.
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = profile(dir.path(), "990");
    let load = &summary["run"]["load"];
    assert_eq!(load["over_context"], 0, "{load:#}\n{}", text(&out));
    assert_eq!(context_warnings(&out), Vec::<String>::new());
    assert_valid(&summary);
}
