//! The `canaryd` binary run as a real process: the demo, analyze-trace, and clear errors on bad
//! input. The replay engine itself is tested in depth by `canary-replay` and `canary-e2e`.

#[path = "cli/closed_stderr.rs"]
mod closed_stderr;
mod common;
#[path = "cli/experiments.rs"]
mod experiments;
#[path = "cli/export_off_once.rs"]
mod export_off_once;
#[path = "cli/file_limits.rs"]
mod file_limits;
#[path = "cli/hostile.rs"]
mod hostile;
#[path = "cli/http_status.rs"]
mod http_status;
#[path = "cli/open_files.rs"]
mod open_files;
#[path = "cli/per_user.rs"]
mod per_user;
#[path = "cli/profile.rs"]
mod profile;
#[path = "cli/realtime.rs"]
mod realtime;
#[allow(dead_code)] // the OTLP tests use more of it than experiments.rs does
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;
#[path = "cli/skipped_rows.rs"]
mod skipped_rows;
#[path = "cli/synthesize.rs"]
mod synthesize;

use canary_testkit::{Hostile, HostileServer};
use common::{assert_no_file_holds, fake_nvml, free_port, shared, text};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn canaryd(args: &[&str], cwd: &Path) -> Output {
    canaryd_env(args, cwd, &[])
}

/// [`canaryd`] with `env` set; the developer's own measurement knobs never reach it.
fn canaryd_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CANARYD_REQUEST_WORKERS")
        .envs(env.iter().copied())
        .output()
        .expect("canaryd runs")
}

/// `canaryd replay` of the 20-row Mooncake arXiv trace into `DIR/out`, plus `extra` flags.
fn replay_arxiv(dir: &Path, url: &str, extra: &[&str]) -> Output {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", url];
    args.extend(["--model", "canary-sim", "--output-dir", "out"]);
    args.extend_from_slice(extra);
    canaryd(&args, dir)
}

/// `DIR/out/summary.json`.
fn summary(dir: &Path) -> serde_json::Value {
    let path = dir.join("out/summary.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The tests' `common::sim` starts the simulator on a port it binds itself and hands back the
/// port read from its log, so the server answering there is that very sim: its
/// `--engine-version`, unique to this test process, is what `GET /version` reports.
#[test]
fn the_sim_helper_hands_back_the_port_its_own_sim_bound() {
    let tag = format!("sim-of-test-process-{}", std::process::id());
    let (_sim, port) = common::sim(&["--engine-version", &tag]);
    let (status, body) = common::http(port, "GET", "/version", "");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&tag),
        "another server answers on {port}: {body}"
    );
}

#[test]
fn demo_replays_the_bundled_trace_against_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let out = canaryd(
        &[
            "demo",
            "--profile",
            "fast",
            "--speedup",
            "100",
            "--max-requests",
            "60",
            "--output-dir",
            "demo-out",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let records = std::fs::read_to_string(dir.path().join("demo-out/records.jsonl")).unwrap();
    assert_eq!(records.lines().count(), 60);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("demo-out/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["requests"], 60);
    assert_eq!(summary["errors"], 0);
    assert!(summary["time_to_first_token"]["p50"].as_f64().unwrap() > 0.0);
    assert!(
        summary["total_cached_tokens"].as_u64().unwrap() > 0,
        "the Mooncake slice repeats prefixes"
    );
    assert!(dir.path().join("demo-out/summary.csv").exists());
    assert!(text(&out).contains("TTFT (ms"), "{}", text(&out));
}

#[test]
fn analyze_trace_reports_the_real_mooncake_slice() {
    let dir = tempfile::tempdir().unwrap();
    let file = shared("traces/mooncake_conversation_first2000.jsonl");
    let out = canaryd(
        &["analyze-trace", "--json", file.to_str().unwrap()],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["requests"], 2000, "{a}");
    // Each figure's kind: the span exact without delay turns, a lower bound with them; the
    // ideal cache's reuse an upper bound on a real one's.
    let delays = a["delay_turns"].as_u64().unwrap() > 0;
    assert_eq!(
        a["duration_kind"],
        if delays { "lower_bound" } else { "exact" },
        "{a}"
    );
    assert_eq!(a["prefix_reuse"]["kind"], "upper_bound", "{a}");
    let human = canaryd(&["analyze-trace", file.to_str().unwrap()], dir.path());
    assert!(human.status.success());
    let human = String::from_utf8_lossy(&human.stdout).to_string();
    assert!(human.contains("2000"), "{human}");
    assert!(
        human.contains("an upper bound on a real one's hits"),
        "{human}"
    );
}

#[test]
fn a_bad_trace_row_is_a_clear_error_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [1]}\n\
         {\"timestamp\": 5, \"input_length\": \"many\", \"output_length\": 5, \"hash_ids\": [2]}\n",
    )
    .unwrap();
    let out = canaryd(
        &[
            "replay",
            "--trace",
            "bad.jsonl",
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("bad.jsonl:2"), "{msg}");
    assert!(msg.contains("input_length"), "{msg}");
    assert!(!msg.contains("panicked"), "{msg}");
}

#[test]
fn an_unreachable_server_gives_connect_errors_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // Port 9 (discard) is closed on loopback: every request fails to connect.
    let out = replay_arxiv(
        dir.path(),
        "http://127.0.0.1:9",
        &["--speedup", "1000", "--max-requests", "5"],
    );
    // Issue 16, item 1: this exited 0, and the table did not say why requests failed.
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let msg = text(&out);
    assert!(
        msg.contains("top error cause: 5 × connect: connect to 127.0.0.1:9: Connection refused"),
        "{msg}"
    );
    assert!(
        msg.contains("verdict: error: target unusable: none of 5 requests completed"),
        "{msg}"
    );
    let summary = summary(dir.path());
    assert_eq!(summary["requests"], 5);
    assert_eq!(summary["errors_by_kind"]["connect"], 5, "{summary}");
    assert_eq!(summary["error_causes"][0]["requests"], 5, "{summary}");
    assert_eq!(summary["error_causes"][0]["kind"], "connect", "{summary}");
}

// Issue 16, item 5: a second run into the same `-o DIR` silently replaced the first.
#[test]
fn an_earlier_run_in_the_output_dir_is_kept_unless_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--speedup", "1000", "--max-requests", "2"];
    let first = replay_arxiv(dir.path(), "http://127.0.0.1:9", &args);
    assert_eq!(first.status.code(), Some(4), "{}", text(&first));
    let before = std::fs::read(dir.path().join("out/summary.json")).unwrap();
    let again = replay_arxiv(dir.path(), "http://127.0.0.1:9", &args);
    let msg = text(&again);
    assert_eq!(again.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains(
            "out holds an earlier run (records.jsonl, summary.json, summary.csv, histograms.json)"
        ) && msg.contains("--overwrite"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("out/summary.json")).unwrap(),
        before
    );
    let replaced = replay_arxiv(
        dir.path(),
        "http://127.0.0.1:9",
        &[&args[..], &["--overwrite"]].concat(),
    );
    assert_eq!(replaced.status.code(), Some(4), "{}", text(&replaced));
    assert_ne!(
        std::fs::read(dir.path().join("out/summary.json")).unwrap(),
        before,
        "a new run id and start time"
    );
}

// Issue 16, item 1: CI had no gate on a replay's SLOs or error rate.
#[test]
fn replay_gates_on_good_fraction_and_error_rate_for_ci() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let base = ["--speedup", "1000", "--max-requests", "6", "--overwrite"];
    let run = |extra: &[&str]| replay_arxiv(dir.path(), &url, &[&base[..], extra].concat());
    // No request can meet a 1 µs TTFT: no gate, exit 0; with one, exit 3 and why.
    let unmeetable = ["--goodput", "time_to_first_token:0.001"];
    let out = run(&unmeetable);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = run(&[&unmeetable[..], &["--min-good-fraction", "0.5"]].concat());
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(3), "{msg}");
    assert!(
        msg.contains("verdict: fail: good-request fraction 0.000 below min_good_fraction 0.5"),
        "{msg}"
    );
    assert!(msg.contains("time_to_first_token: 6 missed"), "{msg}");
    // Met bars pass, and say so.
    let out = run(&[
        "--goodput",
        "time_to_first_token:60000",
        "--min-good-fraction",
        "1",
        "--max-error-rate",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("verdict: pass"), "{}", text(&out));
    // A good fraction needs SLOs, named by the flag's name, `--slo`, in every command
    // (`replay` said `--goodput <GOODPUT>`, `sweep` `--slo`); a fraction is between 0 and 1.
    let out = run(&["--min-good-fraction", "0.5"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--slo <SLOS>"), "{}", text(&out));
    // An empty spec is no SLO: it was taken, and the gate silently passed everything. Given
    // by its alias, the error still names the flag `--slo`.
    let out = run(&["--goodput", " ", "--min-good-fraction", "0.99"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--slo <SLOS>") && text(&out).contains("at least one metric:threshold"),
        "{}",
        text(&out)
    );
    let out = run(&["--max-error-rate", "5"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("from 0 to 1"), "{}", text(&out));
}

#[test]
fn bad_flags_are_clear_errors_that_never_echo_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    for (header, expected) in [
        ("Authorization Bearer sk-SECRET-9:x", "invalid name"),
        ("Bearer sk-SECRET-9", "found no ':'"),
        ("x-api-key: sk-SECRET-9\u{7f}", "x-api-key: invalid value"),
    ] {
        let out = replay_arxiv(
            dir.path(),
            "http://127.0.0.1:9",
            &["-H", "x-ok: 1", "-H", header],
        );
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(1), "{msg}");
        assert!(msg.contains("--header #2 (value not shown)"), "{msg}");
        assert!(msg.contains(expected), "{header}: {msg}");
        assert!(!msg.contains("SECRET"), "{msg}");
    }
    let out = replay_arxiv(
        dir.path(),
        "ftp://user:pw-SECRET@127.0.0.1:9/v1?key=k-SECRET",
        &[],
    );
    let msg = text(&out);
    assert!(
        msg.contains("target URL ftp://127.0.0.1:9/v1: scheme must be http or https"),
        "{msg}"
    );
    assert!(!msg.contains("SECRET"), "{msg}");
}

// Secrets audit, item 4: a key pasted where its variable's name or its file's path was due
// was quoted by every message about it (`--api-key-env sk-…: the variable is not set`, and in
// the daemon `targets.t.api_key_env: sk-… is not set here`, which reached logs, verdicts and
// history).
#[test]
fn a_key_pasted_for_its_variable_or_its_file_is_never_quoted() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, pasted, says) in [
        (
            "--api-key-env",
            "sk-ZQ1xPASTEDKEY",
            "--api-key-env: does not look like a variable name; is it the key itself? (not shown)",
        ),
        (
            "--api-key-env",
            "hf_ZQ1xPASTEDKEY0123456789",
            "--api-key-env: the variable is not set or empty (its name is not shown",
        ),
        (
            "--api-key-file",
            "sk-ZQ1xPASTEDKEY7",
            "--api-key-file: cannot be read (its name is not shown",
        ),
    ] {
        let out = replay_arxiv(dir.path(), "http://127.0.0.1:9", &[flag, pasted]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(1), "{msg}");
        assert!(msg.contains(says), "{flag} {pasted}: {msg}");
        assert!(!msg.contains("ZQ1x"), "{msg}");
        let doctor = canaryd(
            &["doctor", "--url", "http://127.0.0.1:9", flag, pasted],
            dir.path(),
        );
        assert!(!text(&doctor).contains("ZQ1x"), "{}", text(&doctor));
    }
    assert_no_file_holds(dir.path(), "ZQ1x", &[]);
    // The daemon's config: refused, or warned of, without the key.
    let config = |key: &str| {
        format!(
            "state_dir = \"state\"\n\
             [targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n{key}\n\
             [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
             [otlp]\nendpoint = \"http://127.0.0.1:4318\"\n\
             [otlp.headers]\nx-key = {{ file = \"sk-ZQ1xPASTEDKEY8\" }}\n"
        )
    };
    for (key, code, says) in [
        (
            "api_key_env = \"sk-ZQ1xPASTEDKEY\"",
            1,
            "targets.t.api_key_env: does not look like a variable name; is it the key itself?",
        ),
        (
            "api_key_env = \"hf_ZQ1xPASTEDKEY0123456789\"",
            0,
            "warning: targets.t.api_key_env: the variable (its name is not shown",
        ),
        (
            "api_key_file = \"sk-ZQ1xPASTEDKEY7\"",
            0,
            "warning: targets.t.api_key_file: the file does not exist (its name is not shown",
        ),
    ] {
        std::fs::write(dir.path().join("canaryd.toml"), config(key)).unwrap();
        let out = canaryd(&["check-config", "canaryd.toml"], dir.path());
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(code), "{msg}");
        assert!(msg.contains(says), "{key}: {msg}");
        assert!(!msg.contains("ZQ1x"), "{msg}");
    }
}

// OTLP audit, item 2: an inherited `OTEL_*` value the exporter cannot use turns export off
// at start (one ERROR in the daemon's log), yet `check-config` said `ok … OTLP export to …`
// and nothing more.
#[test]
fn check_config_warns_when_the_environment_turns_export_off() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("canaryd.toml"),
        "[targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\
         [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
         [otlp]\nendpoint = \"http://127.0.0.1:4318\"\n",
    )
    .unwrap();
    let args = ["check-config", "canaryd.toml"];
    let out = canaryd_env(
        &args,
        dir.path(),
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
    );
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(0), "{msg}");
    assert!(
        msg.contains("warning: OTLP export off: ") && msg.contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
        "{msg}"
    );
    let out = canaryd_env(
        &args,
        dir.path(),
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")],
    );
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(0), "{msg}");
    assert!(!msg.contains("OTLP export off"), "{msg}");
}

// Secrets audit, item 1 (every place a server's text is cut, then more is said after it):
// `doctor` listed a target's model ids cut to 128 bytes and joined, unscrubbed, though its
// request carried the key. The 110 `Q`s put the cut 11 bytes into the key.
#[test]
fn doctor_lists_model_ids_without_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), "sk-ZQ1xAPIKEY/k+y=1\n").unwrap();
    let server = HostileServer::start(Hostile::EchoInModelList { pad: 110 });
    let out = canaryd(
        &["doctor", "--url", &server.url(), "--api-key-file", "key"],
        dir.path(),
    );
    let msg = text(&out);
    assert!(
        msg.contains("QQQBearer <redacted>, Bearer <redacted>"),
        "{msg}"
    );
    assert!(!msg.contains("ZQ1x"), "{msg}");
}

/// `canaryd ARGS` in `cwd` to its end: its output, and its peak resident memory in MiB
/// (the kernel's count for this one child, from `wait4`).
// The child is reaped by `wait4`, which `std` does not see.
#[allow(clippy::zombie_processes)]
fn canaryd_peak_rss(args: &[&str], cwd: &Path) -> (Output, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("canaryd runs");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it in for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid out-pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    // ru_maxrss is in KiB on Linux.
    (output, usage.ru_maxrss as u64 / 1024)
}

/// Peak resident memory a `canaryd replay` of four requests may reach whatever a server
/// sends: 51 MiB measured against these servers with the caps, 121 MiB when all four hold a
/// full 16 MiB body (the largest default cap); the rest is room for the allocator.
const REPLAY_RSS_BOUND_MIB: u64 = 200;

// Issue 14, item 1: a 4 GB body or a `data:` line that never ends made the process allocate
// until it aborted (exit 134, no summary). Each server below offers 256 MiB per request,
// more than the bound: before the caps, the peak memory check fails.
#[test]
fn a_huge_body_or_an_endless_line_costs_one_error_each_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let huge = HostileServer::start(Hostile::HugeBody {
        declared: 4 << 30,
        bytes: 256 << 20,
    });
    let endless = HostileServer::start(Hostile::EndlessLine { bytes: 256 << 20 });
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    for (server, extra, expected) in [
        (
            &huge,
            &["--no-streaming"][..],
            "response body of 4294967296 bytes (Content-Length), over 16 MiB (max_body_bytes)",
        ),
        (&huge, &[][..], "an SSE event over 1 MiB (max_event_bytes)"),
        (
            &endless,
            &["--no-streaming"][..],
            "response body, over 16 MiB (max_body_bytes)",
        ),
        (
            &endless,
            &["--max-event-bytes", "256KiB"][..],
            "an SSE event over 256 KiB (max_event_bytes)",
        ),
    ] {
        let url = server.url();
        let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", &url];
        args.extend(["--model", "m", "--output-dir", "out", "--max-requests", "4"]);
        // Each case replaces the last one's artifacts.
        args.push("--overwrite");
        args.extend([
            "--speedup",
            "1000",
            "--request-timeout",
            "60s",
            "--no-server-metrics",
        ]);
        args.extend_from_slice(extra);
        let (out, peak_mib) = canaryd_peak_rss(&args, dir.path());
        let msg = text(&out);
        // Nothing completed: exit 4.
        assert_eq!(out.status.code(), Some(4), "{extra:?}: {msg}");
        let s = summary(dir.path());
        assert_eq!(
            s["errors_by_kind"]["response_too_large"], 4,
            "{extra:?}: {s}"
        );
        let records = std::fs::read_to_string(dir.path().join("out/records.jsonl")).unwrap();
        for line in records.lines() {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(r["error"]["message"], expected, "{extra:?}");
        }
        assert!(
            peak_mib < REPLAY_RSS_BOUND_MIB,
            "{extra:?}: peak RSS {peak_mib} MiB, bound {REPLAY_RSS_BOUND_MIB} MiB"
        );
        eprintln!("{extra:?} against {url}: peak RSS {peak_mib} MiB");
    }
    let args = ["--max-event-bytes", "12", "--overwrite"];
    let out = replay_arxiv(dir.path(), &huge.url(), &args);
    let msg = text(&out);
    // Out of the flag's own range: clap's, exit 2.
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(
        msg.contains("'--max-event-bytes <BYTES>': expected at least 1 KiB, found 12 bytes"),
        "{msg}"
    );
}

// Issue 14, item 7: with no --concurrency a burst opened more sockets than the open-file
// limit allows, and "Too many open files" was recorded as the target's connect errors. Now
// the limit caps the requests in flight, and summary.json says so.
#[test]
fn the_open_file_limit_caps_requests_in_flight_and_the_summary_says_so() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let trace = shared("traces/mooncake_conversation_first2000.jsonl");
    let url = format!("http://127.0.0.1:{port}");
    // 300 requests due within about a second, each held a second by the server: far more
    // in flight at once than 128 open files allow.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_canaryd"));
    cmd.args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
        .args(["--model", "canary-sim", "--output-dir", "out"])
        .args(["--max-requests", "300", "--speedup", "100"])
        .args([
            "--scale-lengths",
            "0.02",
            "-H",
            "x-sim-fault: stall_first_ms=1000",
        ])
        .args(["--no-ebpf", "--no-nvml", "--no-server-metrics"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null());
    // SAFETY: the hook only calls setrlimit, which is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 128,
                rlim_max: 128,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let out = cmd.output().unwrap();
    let msg = text(&out);
    assert!(out.status.success(), "{msg}");
    let s = summary(dir.path());
    assert_eq!(s["requests"], 300);
    assert_eq!(s["errors"], 0, "{}", s["errors_by_kind"]);
    let cap = &s["in_flight_cap"];
    assert_eq!(cap["source"], "open_files", "{cap}");
    assert_eq!(cap["open_files_limit"], 128, "{cap}");
    assert_eq!(cap["headroom"], 32, "{cap}");
    let limit = cap["limit"].as_u64().unwrap();
    assert!((1..=96).contains(&limit), "{cap}");
    assert!(
        s["schedule_hold"]["max"].as_f64().unwrap() > 0.0,
        "requests waited for a slot, and the wait is recorded"
    );
    assert!(s["client_bottleneck"].is_null(), "{s}");
}

// Issue 14, items 5, 10 and 12: each of these was accepted, and sent somewhere else or
// broke every request.
#[test]
fn bad_ports_framing_headers_and_credentials_in_the_url_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for port in ["99999", "abc", "-1"] {
        let url = format!("http://127.0.0.1:{port}");
        for out in [
            replay_arxiv(dir.path(), &url, &[]),
            canaryd(&["doctor", "--url", &url], dir.path()),
        ] {
            let msg = text(&out);
            assert_eq!(out.status.code(), Some(1), "{url}: {msg}");
            assert!(
                msg.contains(&format!("port \"{port}\" is not a number from 1 to 65535")),
                "{url}: {msg}"
            );
        }
    }
    for header in [
        "Content-Length: 5",
        "transfer-encoding: chunked",
        "Host: elsewhere",
        "Connection: close",
        "Upgrade: h2c",
        "TE: trailers",
    ] {
        let out = replay_arxiv(dir.path(), "http://127.0.0.1:9", &["-H", header]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(1), "{header}: {msg}");
        let name = header.split(':').next().unwrap().to_ascii_lowercase();
        assert!(
            msg.contains(&format!(
                "--header #1 (value not shown): {name} is set by canaryd"
            )),
            "{header}: {msg}"
        );
        assert!(!msg.contains(header.split(": ").nth(1).unwrap()), "{msg}");
    }
    let creds = "http://admin:pw-SECRET-3@127.0.0.1:9";
    for out in [
        replay_arxiv(dir.path(), creds, &[]),
        canaryd(&["doctor", "--url", creds], dir.path()),
    ] {
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(1), "{msg}");
        assert!(
            msg.contains("--url: user info (user:password@) is not sent"),
            "{msg}"
        );
        assert!(msg.contains("--api-key-file"), "{msg}");
        assert!(!msg.contains("SECRET"), "{msg}");
    }
}

// README audit finding 12: a `--url` pasted with its endpoint (vLLM's docs show one) was sent
// to `/v1/chat/completions/v1/chat/completions` (404) and doctor probed
// `/v1/completions/v1/models`. The endpoint's own URL is its API root; the other endpoint's
// is refused before the run, saying why.
#[test]
fn a_url_pasted_with_its_endpoint_is_the_api_root() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let root = format!("http://127.0.0.1:{port}");
    let args = ["--speedup", "1000", "--max-requests", "2", "--overwrite"];
    let out = replay_arxiv(dir.path(), &format!("{root}/v1/chat/completions"), &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(summary(dir.path())["completed"], 2, "{}", text(&out));
    let out = replay_arxiv(dir.path(), &format!("{root}/v1/completions"), &args);
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("names /v1/completions but requests go to /v1/chat/completions"),
        "{msg}"
    );
    assert!(msg.contains("--endpoint-type"), "{msg}");
    for url in [
        format!("{root}/v1/completions"),
        format!("{root}/v1/chat/completions/"),
    ] {
        let out = canaryd(&["doctor", "--url", &url, "--json"], dir.path());
        assert_eq!(out.status.code(), Some(0), "{url}: {}", text(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["target"]["state"], "available", "{url}: {report}");
    }
}

// Issue 14, item 13: the cause of an artifact error was printed three times.
#[test]
fn an_error_chain_names_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plainfile"), "x").unwrap();
    let (_sim, port) = common::sim(&[]);
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
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
            "plainfile/out",
        ],
        dir.path(),
    );
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(msg.contains("writing results: plainfile/out"), "{msg}");
    assert_eq!(msg.matches("Not a directory").count(), 1, "{msg}");
}

// A full disk used to throw away the whole measured run: the records' write error was
// returned before summary.json was tried, and nothing was printed. Here the file size limit
// (RLIMIT_FSIZE, SIGXFSZ ignored) plays the full disk: records.jsonl outgrows it, the
// summary does not.
#[test]
fn a_full_disk_loses_the_records_not_the_run() {
    use std::os::unix::process::CommandExt;
    const LIMIT: u64 = 128 << 10;
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let trace = shared("traces/mooncake_conversation_first2000.jsonl");
    let url = format!("http://127.0.0.1:{port}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_canaryd"));
    cmd.args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
        .args(["--model", "canary-sim", "--output-dir", "out", "--no-ebpf"])
        .args(["--speedup", "1000", "--max-requests", "1000"])
        .args(["--max-input-tokens", "16", "--max-output-tokens", "4"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY");
    // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(|| {
            let rl = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            match libc::setrlimit(libc::RLIMIT_FSIZE, &rl) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let out = cmd.output().expect("canaryd runs");
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("writing results: out/records.jsonl: File too large"),
        "{msg}"
    );
    // What was measured is shown and kept: the table, and summary.json with every request.
    assert!(msg.contains("TTFT (ms"), "{msg}");
    let s = summary(dir.path());
    assert_eq!(s["requests"], 1000, "{s}");
    let records = std::fs::metadata(dir.path().join("out/records.jsonl")).unwrap();
    assert!(records.len() <= LIMIT, "{}", records.len());
}

#[test]
fn zero_concurrency_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = replay_arxiv(dir.path(), "http://127.0.0.1:9", &["--concurrency", "0"]);
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(msg.contains("--concurrency"), "{msg}");
    let out = replay_arxiv(
        dir.path(),
        "http://127.0.0.1:9",
        &["--request-timeout", "0s"],
    );
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(msg.contains("--request-timeout"), "{msg}");
    // Taken, and the OTLP SDK silently pushed every 60 s; the config's metrics_interval
    // refuses 0 too.
    // So is a timeout of 0 (every export would time out at once), and a flush timeout of 0
    // (taken, and the last batch was dropped by design).
    for flag in [
        "--otlp-metrics-interval",
        "--otlp-timeout",
        "--otlp-flush-timeout",
    ] {
        let out = replay_arxiv(dir.path(), "http://127.0.0.1:9", &[flag, "0s"]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(2), "{msg}");
        assert!(
            msg.contains(flag) && msg.contains("must be above zero"),
            "{msg}"
        );
    }
}

#[test]
fn an_unknown_log_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = canaryd(&["--log-format", "yaml", "check-config"], dir.path());
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(
        msg.contains("'yaml'") && msg.contains("text") && msg.contains("json"),
        "{msg}"
    );
}

#[test]
fn api_key_comes_from_a_file_and_never_reaches_artifacts_or_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), "sk-canary-SECRET-123\n").unwrap();
    // A server that, like vLLM with --api-key, answers 401 without that key.
    let (_sim, port) = common::sim(&["--api-key", "sk-canary-SECRET-123"]);
    let url = format!("http://127.0.0.1:{port}");
    let args = ["--speedup", "1000", "--max-requests", "4", "--overwrite"];
    let out = replay_arxiv(
        dir.path(),
        &url,
        &[&args[..], &["--api-key-file", "key"]].concat(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("SECRET"));
    let s = summary(dir.path());
    assert_eq!(
        (s["completed"].as_u64(), s["errors"].as_u64()),
        (Some(4), Some(0)),
        "{s}"
    );
    for f in ["records.jsonl", "summary.json", "summary.csv"] {
        let body = std::fs::read_to_string(dir.path().join("out").join(f)).unwrap();
        assert!(!body.contains("SECRET"), "{f} leaks the key");
    }
    // A key a header cannot carry is an error naming the file, not a panic.
    std::fs::write(dir.path().join("bad-key"), "sk-canary-SECRET\u{1}123\n").unwrap();
    let bad = replay_arxiv(
        dir.path(),
        &url,
        &[&args[..], &["--api-key-file", "bad-key"]].concat(),
    );
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("--api-key-file bad-key"),
        "{}",
        text(&bad)
    );
    assert!(!text(&bad).contains("SECRET") && !text(&bad).contains("panicked"));
    // Without it, every request is refused: the key above really was sent.
    let out = replay_arxiv(dir.path(), &url, &args);
    assert!(!text(&out).contains("SECRET"));
    // Nothing completed: a failed command, and the cause in the table.
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(
        text(&out).contains("top error cause: 4 × http_status"),
        "{}",
        text(&out)
    );
    let s = summary(dir.path());
    assert_eq!(s["completed"].as_u64(), Some(0), "{s}");
    assert_eq!(s["errors_by_kind"]["http_status"].as_u64(), Some(4), "{s}");
}

#[test]
fn replay_joins_server_metrics_and_nvml_to_records_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_nvml(dir.path());
    let (_sim, port) = common::sim(&[]);
    let out = replay_arxiv(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        &[
            "--speedup",
            "20",
            "--nvml-lib",
            lib.to_str().unwrap(),
            "--gpu-interval",
            "20ms",
            "--server-metrics-interval",
            "100ms",
            "--warmup-requests",
            "3",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let summary = summary(dir.path());
    // The simulator's vLLM-shaped /metrics, parsed and reduced over the run.
    let server = &summary["server"];
    assert_eq!(server["engine"], "vllm_v1", "{server}");
    // Issue 16, item 3: a server percentile is the bucket holding it, not a value.
    let p50 = &server["ttft_s"]["p50"];
    let (lo, hi) = (
        p50["lower_bound"].as_f64().unwrap(),
        p50["upper_bound"].as_f64().unwrap(),
    );
    let est = p50["estimate"].as_f64().unwrap();
    assert!(lo < hi && lo <= est && est <= hi, "{p50}");
    // Issue 16, item 2: the server's window leaves the 3 warm-up requests out, so its count
    // equals canaryd's measured requests and the two are compared; same host, loopback: the
    // client sees the first token after the server counted it.
    assert_eq!(summary["warmup_requests"], 3, "{summary}");
    let cmp = &server["comparison"];
    assert_eq!(cmp["state"], "matched", "{server}");
    assert_eq!(cmp["requests"], summary["completed"], "{server}");
    assert!(cmp["ttft_ms"]["mean"].as_f64().unwrap() >= 0.0, "{server}");
    // The server's ITL sits beside the client's inter-chunk gaps, not per-request ITL.
    assert_eq!(
        server["client_inter_chunk_latency_ms"], summary["inter_chunk_latency"],
        "{server}"
    );
    let table = text(&out);
    assert!(table.contains("client vs server over"), "{table}");
    assert!(!table.contains("server TTFT - "), "{table}");
    assert_eq!(
        server["generation_tokens"].as_f64().unwrap() as u64,
        summary["total_output_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        summary["telemetry_sources"]["nvml"]["state"], "available",
        "{summary}"
    );
    // The fake library reports 73% utilization and 215.123 W on GPU 0.
    assert_eq!(summary["gpu"]["util_max_pct"], 73.0, "{}", summary["gpu"]);
    assert!(summary["gpu"]["energy"]["joules"].as_f64().unwrap() > 0.0);
    let records = std::fs::read_to_string(dir.path().join("out/records.jsonl")).unwrap();
    for line in records.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = &r["telemetry"];
        assert_eq!(t["gpu_util_max_pct"], 73.0, "{r}");
        assert_eq!(t["gpu_power_max_w"], 215.123, "{r}");
        assert!(t["server_queue_depth_at_send"].is_number(), "{r}");
    }
    assert!(text(&out).contains("server TTFT"), "{}", text(&out));
}

#[test]
fn missing_telemetry_sources_are_reported_once_and_the_replay_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let out = replay_arxiv(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        &[
            "--speedup",
            "50",
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so",
            "--dcgm-url",
            "http://127.0.0.1:9/metrics",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let summary = summary(dir.path());
    assert_eq!(summary["errors"], 0);
    assert_eq!(summary["telemetry_sources"]["nvml"]["state"], "unavailable");
    assert_eq!(summary["telemetry_sources"]["dcgm"]["state"], "unavailable");
    let log = text(&out);
    let warnings = |what: &str| {
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains(what))
            .count()
    };
    assert_eq!(warnings("NVML unavailable"), 1, "reported once: {log}");
    assert_eq!(warnings("dcgm-exporter"), 1, "reported once: {log}");

    // Over a command's runs too: NVML is not opened (nor warned about) again after the first
    // run found it missing, and the endpoint's outage is one outage; each run says why.
    let out = replay_arxiv(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        &[
            "--speedup",
            "50",
            "--runs",
            "3",
            "--overwrite",
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so",
            "--dcgm-url",
            "http://127.0.0.1:9/metrics",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&out);
    let warnings = |what: &str| {
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains(what))
            .count()
    };
    assert_eq!(warnings("NVML unavailable"), 1, "reported once: {log}");
    assert_eq!(warnings("dcgm-exporter"), 1, "reported once: {log}");
    // And over a sweep's points.
    let sweep = canaryd(
        &[
            "sweep",
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--model",
            "canary-sim",
            "--isl",
            "16",
            "--osl",
            "4",
            "--request-count",
            "3",
            "--concurrency",
            "1,2,3",
            "--warmup-request-count",
            "0",
            "--no-ebpf",
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so",
            "--output-dir",
            "sweep",
        ],
        dir.path(),
    );
    assert!(sweep.status.success(), "{}", text(&sweep));
    let swept = text(&sweep);
    let nvml_warnings = swept
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("NVML unavailable"))
        .count();
    assert_eq!(nvml_warnings, 1, "reported once over the points: {swept}");
    for point in ["point-01-c1", "point-02-c2", "point-03-c3"] {
        let path = dir.path().join(format!("sweep/{point}/summary.json"));
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            s["telemetry_sources"]["nvml"]["state"], "unavailable",
            "{point}"
        );
    }
    for run in 1..=3 {
        let path = dir.path().join(format!("out/run-{run}/summary.json"));
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let nvml = &s["telemetry_sources"]["nvml"];
        assert_eq!(nvml["state"], "unavailable", "run {run}: {nvml}");
        assert!(
            nvml["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "run {run}: {nvml}"
        );
    }
}

#[test]
fn doctor_says_what_is_available_and_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_nvml(dir.path());
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let out = canaryd(
        &[
            "doctor",
            "--url",
            &url,
            "--nvml-lib",
            lib.to_str().unwrap(),
            "--dcgm-url",
            "http://127.0.0.1:9/metrics",
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["target"]["state"], "available", "{report}");
    assert!(report["target"]["detail"]
        .as_str()
        .unwrap()
        .contains("canary-sim"));
    assert!(
        report["server_metrics"]["detail"]
            .as_str()
            .unwrap()
            .contains("engine vllm_v1"),
        "{report}"
    );
    assert_eq!(report["nvml"]["state"], "available", "{report}");
    assert!(
        report["tokenizer"]["detail"]
            .as_str()
            .unwrap()
            .ends_with("single-token words"),
        "{report}"
    );
    assert!(
        report["dcgm"]["reason"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:9"),
        "{report}"
    );

    // A target that wants a key: 401 without it (exit 1), listed with it; never printed.
    let (_guarded, gport) = common::sim(&["--api-key", "sk-doctor-SECRET-9"]);
    let gurl = format!("http://127.0.0.1:{gport}");
    let out = canaryd(&["doctor", "--url", &gurl], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("HTTP 401"), "{}", text(&out));
    std::fs::write(dir.path().join("doctor-key"), "sk-doctor-SECRET-9\n").unwrap();
    let out = canaryd(
        &["doctor", "--url", &gurl, "--api-key-file", "doctor-key"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("SECRET"), "{}", text(&out));

    // A target that does not answer: the replay cannot run, so the exit status says so. A
    // port meant to have nothing listening (found free; no process to start and read back).
    let closed = format!("http://127.0.0.1:{}", free_port());
    let out = canaryd(&["doctor", "--url", &closed], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("target           unavailable"));
}

/// A loopback HTTP server answering every request with 200, `content_type` and `body`, then
/// closing the connection. Returns its port.
fn canned_server(content_type: &'static str, body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

// Audit F8: any 200 at /v1/models passed: a web page said "available: … serves " (an empty
// list) and doctor exited 0, which says a replay can run. A body that is not an OpenAI model
// list now fails the check, saying what came back; an empty list is available, said as such.
#[test]
fn doctor_fails_a_target_whose_models_page_is_not_a_model_list() {
    let dir = tempfile::tempdir().unwrap();
    let doctor = |port: u16| {
        let url = format!("http://127.0.0.1:{port}");
        let args = [
            "doctor",
            "--url",
            &url,
            "--dcgm-url",
            "http://127.0.0.1:9/m",
        ];
        canaryd(&args, dir.path())
    };
    for (content_type, body, says) in [
        (
            "text/html",
            "<html>hello</html>",
            "/v1/models answered 200 OK but not with an OpenAI model list (not JSON): \
             text/html, 18 bytes: \"<html>hello</html>\"",
        ),
        (
            "application/json",
            "{}",
            "(no `data` array): application/json, 2 bytes: \"{}\"",
        ),
    ] {
        let out = doctor(canned_server(content_type, body));
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(1), "{msg}");
        assert!(msg.contains("target           unavailable"), "{msg}");
        assert!(msg.contains(says), "{msg}");
    }
    let out = doctor(canned_server(
        "application/json",
        r#"{"object":"list","data":[]}"#,
    ));
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(0), "{msg}");
    assert!(msg.contains("serves no model (its list is empty"), "{msg}");
}

/// A loopback HTTP server that lists one model to a request carrying the header line `wanted`
/// (lower case) and answers 401 to any other. Returns its port.
fn header_server(wanted: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&request).to_ascii_lowercase();
            let (status, body) = if head.contains(&format!("\r\n{wanted}\r\n")) {
                ("200 OK", r#"{"object":"list","data":[{"id":"gw-model"}]}"#)
            } else {
                ("401 Unauthorized", r#"{"error":"no api-key"}"#)
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

// Audit F7: NVML's init ran on doctor's task with no timeout: on a wedged driver doctor hung
// for ever. Here the fake library's init never returns; doctor still reports and exits, the
// NVML check unavailable (it is optional: exit 0).
#[test]
fn doctor_reports_a_hung_nvml_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_nvml(dir.path());
    let out = canaryd_env(
        &[
            "doctor",
            "--nvml-lib",
            lib.to_str().unwrap(),
            "--dcgm-url",
            "http://127.0.0.1:9/m",
            "--json",
        ],
        dir.path(),
        &[("FAKE_NVML_HANG", "1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["nvml"]["state"], "unavailable", "{report}");
    assert!(
        report["nvml"]["reason"]
            .as_str()
            .unwrap()
            .contains("no answer within 5s (a hung driver?)"),
        "{report}"
    );
    assert_eq!(report["tokenizer"]["state"], "available", "{report}");
}

// Audit F16: doctor had no -H, so a target behind a gateway's own key header (Azure's
// `api-key:`) gave HTTP 401 and exit 1, saying a replay could not run when `replay -H` can.
#[test]
fn doctor_sends_the_headers_replay_would_and_never_prints_them() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "http://127.0.0.1:{}",
        header_server("api-key: gw-secret-77")
    );
    let base = [
        "doctor",
        "--url",
        &url,
        "--dcgm-url",
        "http://127.0.0.1:9/m",
    ];
    let out = canaryd(&base, dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("HTTP 401"), "{}", text(&out));
    let out = canaryd(
        &[&base[..], &["-H", "api-key: gw-secret-77"]].concat(),
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("serves gw-model"), "{}", text(&out));
    assert!(!text(&out).contains("gw-secret"), "{}", text(&out));
    // A header that does not parse is refused without its value.
    let out = canaryd(
        &[&base[..], &["-H", "Bearer gw-secret-77"]].concat(),
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--header #1 (value not shown)"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("gw-secret"), "{}", text(&out));
}

// Audit f5, item 5: `doctor` against OpenSSL 3's default self-signed certificate (CA:TRUE),
// given as its own --ca-bundle, said `invalid peer certificate:
// Other(OtherError(CaUsedAsEndEntity))`.
#[test]
fn doctor_says_a_tls_failure_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let options = canary_testkit::TlsOptions {
        self_signed_ca: true,
        ..Default::default()
    };
    let (tls_port, pem) = runtime.block_on(canary_testkit::tls_terminator_with(backend, options));
    std::fs::write(dir.path().join("self-signed.pem"), pem).unwrap();
    let url = format!("https://localhost:{tls_port}");
    let args = [
        "doctor",
        "--url",
        &url,
        "--ca-bundle",
        "self-signed.pem",
        "--json",
    ];
    let out = canaryd(&args, dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = report["target"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("TLS handshake: the server's certificate is a CA certificate")
            && reason.contains("(CaUsedAsEndEntity)"),
        "{reason}"
    );
}

// Audit f5, item 6: a bad --ca-bundle beside an http target was a warning ("metrics over
// https: …; using the system's roots") and the run went on; beside an https one it failed the
// run. Both are refused before anything is sent, naming the flag.
#[test]
fn a_bad_ca_bundle_is_refused_before_the_run_whatever_the_scheme() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let out = replay_arxiv(
        dir.path(),
        &url,
        &["--speedup", "50", "--ca-bundle", "typo.pem"],
    );
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("--ca-bundle typo.pem: No such file or directory"),
        "{said}"
    );
    assert!(!said.contains("using the system's roots"), "{said}");
    assert!(!dir.path().join("out/records.jsonl").exists(), "{said}");
}

#[test]
fn a_given_prompt_salt_is_the_runs_salt() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let mut salts = Vec::new();
    for extra in [&["--prompt-salt", "4242"][..], &[], &[]] {
        let mut args = vec!["--speedup", "50", "--overwrite"];
        args.extend_from_slice(extra);
        let out = replay_arxiv(dir.path(), &url, &args);
        assert!(out.status.success(), "{}", text(&out));
        salts.push(summary(dir.path())["prompt_salt"].as_u64().unwrap());
    }
    assert_eq!(salts[0], 4242);
    assert_ne!(salts[1], salts[2], "a fresh salt each run by default");
}

#[test]
fn shards_of_one_replay_add_up_to_the_whole_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let bad = replay_arxiv(dir.path(), &url, &["--shard", "2/2"]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("0 <= i < n"), "{}", text(&bad));
    let mut total = 0;
    for shard in ["0/2", "1/2"] {
        let args = ["--speedup", "50", "--shard", shard, "--overwrite"];
        let out = replay_arxiv(dir.path(), &url, &args);
        assert!(out.status.success(), "{}", text(&out));
        let s = summary(dir.path());
        total += s["requests"].as_u64().unwrap();
        assert_eq!(s["errors"], 0, "{s}");
    }
    assert_eq!(total, 20, "the two shards replay the 20-row trace once");
}

/// A minimal OTLP/HTTP endpoint on loopback: answers every POST with an empty protobuf
/// success and keeps each request's head (the exporters' own tests decode bodies).
struct OtlpSink {
    port: u16,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl OtlpSink {
    fn start() -> OtlpSink {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let h = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let h = h.clone();
                std::thread::spawn(move || {
                    let mut w = stream.try_clone().unwrap();
                    let mut r = BufReader::new(stream);
                    loop {
                        let mut head = String::new();
                        let mut len = 0usize;
                        loop {
                            let mut line = String::new();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                len = v.trim().parse().unwrap_or(0);
                            }
                            if line == "\r\n" {
                                break;
                            }
                            head.push_str(&line);
                        }
                        let mut body = vec![0; len];
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                        h.lock().unwrap().push(head);
                        let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
                    }
                });
            }
        });
        OtlpSink { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

#[test]
fn otlp_export_sends_header_secrets_but_never_logs_or_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let sink = OtlpSink::start();
    let out = replay_arxiv(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        &[
            "--speedup",
            "20",
            "--otlp-endpoint",
            &format!("http://127.0.0.1:{}", sink.port),
            "--otlp-header",
            "authorization=Bearer OTLP-SECRET-42",
            "--workload",
            "arxiv",
        ],
    );
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let heads = sink.heads();
    for signal in ["/v1/traces", "/v1/metrics", "/v1/logs"] {
        let h: Vec<_> = heads
            .iter()
            .filter(|h| h.starts_with(&format!("POST {signal} ")))
            .collect();
        assert!(!h.is_empty(), "no {signal} export: {heads:?}");
        assert!(
            h.iter()
                .all(|h| h.contains("authorization: Bearer OTLP-SECRET-42")),
            "{h:?}"
        );
    }
    assert!(!all.contains("OTLP-SECRET-42"), "{all}");
    assert_no_file_holds(dir.path(), "OTLP-SECRET-42", &[]);
}

#[test]
fn otlp_collector_down_is_reported_once_and_the_replay_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    // A collector that is down: a port meant to have nothing listening (found free; there
    // is no process to start on port 0 and read back).
    let dead = free_port();
    let out = replay_arxiv(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        &[
            "--speedup",
            "20",
            "--otlp-endpoint",
            &format!("http://127.0.0.1:{dead}"),
            "--otlp-header",
            "x-api-key=OTLP-SECRET-44",
            "--otlp-metrics-interval",
            "100ms",
        ],
    );
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert_eq!(summary(dir.path())["requests"], 20);
    let records = std::fs::read_to_string(dir.path().join("out/records.jsonl")).unwrap();
    assert_eq!(records.lines().count(), 20);
    // Many metric exports failed during the run; each signal says so once.
    for signal in ["traces", "metrics", "logs"] {
        let n = all
            .matches(&format!(
                "OTLP {signal} export to http://127.0.0.1:{dead}/v1/{signal} failed"
            ))
            .count();
        assert_eq!(n, 1, "{signal}: {all}");
    }
    assert!(
        all.contains("OTLP export lost data: 20 spans dropped"),
        "{all}"
    );
    assert!(!all.contains("OTLP-SECRET-4"), "{all}");
    assert_no_file_holds(dir.path(), "OTLP-SECRET-4", &[]);
    // User info in an endpoint is refused before the run (hyper's pool would log it at
    // debug), and the refusal does not quote it.
    let out = replay_arxiv(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        &[
            "--overwrite",
            "--otlp-endpoint",
            &format!("http://user:OTLP-SECRET-43@127.0.0.1:{dead}"),
        ],
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("user info (user:password@) is not taken"),
        "{all}"
    );
    assert!(!all.contains("OTLP-SECRET-43"), "{all}");
}
