//! Issue 14: hostile input to the command line. Lengths no model serves, a trace without line
//! breaks (`/dev/zero`, a FIFO fed by a writer that never ends the line), a speedup that never
//! ends, a SIGTERM while a trace loads, and a stdout closed under the output.
//!
//! Before the fixes these aborted on an allocation, read until the OOM killer came, or never
//! ended, so the binary runs as a child: its address space capped (an allocation sized by a
//! hostile number fails in the child, not on the machine) and its time bounded (a run that
//! never ends fails the test instead of hanging it).

use super::common::{eventually, shared, Child, CANARYD};
use canary_testkit::{Hostile, HostileServer};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Address space a child may use: far above what these commands need once fixed (a 16 MiB
/// line, the tokio runtime), far below what the hostile inputs asked for (7 to 30 GB).
const ADDRESS_SPACE: u64 = 2 << 30;

/// `canaryd ARGS` in `dir`, spawned with its address space capped; stdout and stderr go to
/// files in `dir`.
fn spawn(args: &[&str], dir: &Path) -> Child {
    let mut cmd = Command::new(CANARYD);
    cmd.args(args)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap());
    // SAFETY: setrlimit(2) only, between fork and exec; no allocation, no lock.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            match libc::setrlimit(libc::RLIMIT_AS, &lim) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    Child(cmd.spawn().expect("canaryd starts"))
}

/// What a child printed: stdout then stderr.
fn printed(dir: &Path) -> String {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    read("stdout") + &read("stderr")
}

/// [`spawn`], waiting at most `secs` for the exit: (exit code, what it printed). A code of
/// `None` is a death by signal (an abort on a failed allocation).
fn bounded(args: &[&str], dir: &Path, secs: u64) -> (Option<i32>, String) {
    let mut child = spawn(args, dir);
    let code = child.wait_exit(Duration::from_secs(secs));
    (code, printed(dir))
}

/// The real arXiv Mooncake rows, line `n` replaced by `row`.
fn arxiv_with(n: usize, row: &str) -> String {
    let real = std::fs::read_to_string(shared("traces/mooncake_arxiv_first20.jsonl")).unwrap();
    let lines: Vec<&str> = real
        .lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == n { row } else { l })
        .collect();
    lines.join("\n") + "\n"
}

fn replay_args<'a>(trace: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["replay", "--trace", trace, "--url", "http://127.0.0.1:9"];
    args.extend(["--model", "m", "--output-dir", "out"]);
    args.extend_from_slice(extra);
    args
}

#[test]
fn lengths_no_model_serves_are_refused_before_anything_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let arxiv = shared("traces/mooncake_arxiv_first20.jsonl");
    let arxiv = arxiv.to_str().unwrap();

    // --scale-lengths 1e30 was a 30 GB prompt allocation and an abort.
    let (code, out) = bounded(&replay_args(arxiv, &["--scale-lengths", "1e30"]), d, 60);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("scale_lengths: scaling by 1e30 takes the input of line 1 from 6755 tokens"),
        "{out}"
    );
    assert!(
        out.contains("over the length limit of 10000000 (length_limit)"),
        "{out}"
    );

    // A row asking for 1e9 input tokens (its hash ids dropped, so the block rule holds) was a
    // 7 GB prompt allocation and an abort.
    let huge = r#"{"timestamp": 0, "input_length": 1000000000, "output_length": 490}"#;
    std::fs::write(d.join("huge.jsonl"), arxiv_with(2, huge)).unwrap();
    let (code, out) = bounded(&replay_args("huge.jsonl", &["--max-requests", "3"]), d, 60);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("huge.jsonl:2: field \"input_length\": expected at most 10000000 tokens (length_limit), found 1000000000"),
        "{out}"
    );
    assert!(!out.contains("panicked"), "{out}");
    // --length-limit raises the limit (analyze-trace builds no prompt, so it can show it).
    let (code, out) = bounded(
        &[
            "analyze-trace",
            "huge.jsonl",
            "--length-limit",
            "2000000000",
            "--json",
        ],
        d,
        60,
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1000000000"), "{out}");
}

// --length-limit had no ceiling: raised to 2^32 - 1, a 4e9-token --isl passed it and the run
// aborted on a 28 GB prompt allocation (exit 134). A run now refuses a limit above 100M (the
// longest context announced), naming the flag, before anything is built or written.
#[test]
fn a_length_limit_no_model_serves_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "profile",
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--output-dir",
        "out",
        "--length-limit",
        "4294967295",
        "--isl",
        "4000000000",
        "--request-count",
        "1",
    ];
    let (code, out) = bounded(&args, d, 60);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--length-limit: expected 1 to 100000000 tokens"),
        "{out}"
    );
    assert!(out.contains("found 4294967295"), "{out}");
    assert!(!d.join("out").exists(), "nothing is written");
    // A replay too; the ceiling itself is allowed.
    let arxiv = shared("traces/mooncake_arxiv_first20.jsonl");
    let arxiv = arxiv.to_str().unwrap();
    let (code, out) = bounded(&replay_args(arxiv, &["--length-limit", "100000001"]), d, 60);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--length-limit: expected 1 to 100000000"),
        "{out}"
    );
}

// Warm-up requests had no ceiling: their ids count down from u32::MAX into the measured ones'
// past 3.3 billion, and their records are held until the measured phase.
#[test]
fn warmup_requests_past_the_ceiling_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let arxiv = shared("traces/mooncake_arxiv_first20.jsonl");
    let arxiv = arxiv.to_str().unwrap();
    let args = replay_args(arxiv, &["--warmup-requests", "10001"]);
    let (code, out) = bounded(&args, dir.path(), 60);
    // Out of the flag's own range: clap's, exit 2.
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(
            "'--warmup-requests <WARMUP_REQUESTS>': expected at most 10000 warm-up requests"
        ),
        "{out}"
    );
}

#[test]
fn a_speedup_that_never_ends_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let arxiv = shared("traces/mooncake_arxiv_first20.jsonl");
    // The arXiv rows span 23 s of trace time: at 1e-12x, 730,000 years.
    let (code, out) = bounded(
        &replay_args(arxiv.to_str().unwrap(), &["--speedup", "1e-12"]),
        dir.path(),
        60,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--speedup 1e-12: replaying the selected requests would take at least"),
        "{out}"
    );
    assert!(out.contains("more than the 365 days allowed"), "{out}");
    for bad in ["0", "-1", "inf", "NaN"] {
        let flag = format!("--speedup={bad}");
        let (code, out) = bounded(
            &replay_args(arxiv.to_str().unwrap(), &[&flag]),
            dir.path(),
            60,
        );
        assert_eq!(code, Some(2), "{out}");
        assert!(out.contains("expected a positive number"), "{out}");
    }
}

#[test]
fn dev_zero_as_the_trace_is_refused_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = bounded(&replay_args("/dev/zero", &[]), dir.path(), 120);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("/dev/zero:1: line longer than 16777216 bytes (max_line_bytes)"),
        "{out}"
    );
    let (code, out) = bounded(&["analyze-trace", "/dev/zero"], dir.path(), 120);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("/dev/zero:1: line longer than"), "{out}");
}

/// A FIFO in `dir` and a thread writing `head` into it, then `tail` again and again until
/// the reader goes away (`tail` empty: the writer holds the FIFO open and writes nothing
/// more). Returns the FIFO's path and a receiver that gets `()` once the reader has opened it.
fn fifo(
    dir: &Path,
    head: String,
    tail: &'static [u8],
) -> (std::path::PathBuf, std::sync::mpsc::Receiver<()>) {
    let path = dir.join("trace.fifo");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let writer_path = path.clone();
    let (opened, opened_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Opening blocks until canaryd opens the other end.
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(writer_path)
            .unwrap();
        let _ = opened.send(());
        if w.write_all(head.as_bytes()).is_err() {
            return;
        }
        if tail.is_empty() {
            std::thread::sleep(Duration::from_secs(600));
        }
        // EPIPE (SIGPIPE is ignored in Rust programs) once the reader is gone.
        while w.write_all(tail).is_ok() {}
    });
    (path, opened_rx)
}

/// Waits until `child` has opened the FIFO whose `opened` receiver this is (its trace load
/// has begun); panics if that does not happen within 60 s.
fn wait_opened(opened: &std::sync::mpsc::Receiver<()>, dir: &Path) {
    if opened.recv_timeout(Duration::from_secs(60)).is_err() {
        panic!("canaryd never opened the FIFO: {}", printed(dir));
    }
}

/// Whether the kernel says process `pid` catches `sig` (`SigCgt` in /proc/PID/status): its
/// handler is installed.
fn catches(pid: u32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}

#[test]
fn a_fifo_with_a_line_that_never_ends_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::read_to_string(shared("traces/mooncake_arxiv_first20.jsonl")).unwrap();
    // Two real rows, then a third that never ends.
    let head: String = real
        .lines()
        .take(2)
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        + r#"{"timestamp": 0, "hash_ids": [0"#;
    let (trace, _) = fifo(dir.path(), head, b", 1, 2, 3, 4, 5, 6, 7, 8, 9");
    let (code, out) = bounded(&replay_args(trace.to_str().unwrap(), &[]), dir.path(), 120);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("trace.fifo:3: line longer than 16777216 bytes (max_line_bytes)"),
        "{out}"
    );
}

#[test]
fn sigterm_stops_a_trace_load_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A FIFO whose writer sends one real row, then nothing, and never closes it.
    let real = std::fs::read_to_string(shared("traces/mooncake_arxiv_first20.jsonl")).unwrap();
    let first = real.lines().next().unwrap().to_string() + "\n";
    let (trace, opened) = fifo(dir.path(), first, b"");
    let mut child = spawn(&replay_args(trace.to_str().unwrap(), &[]), dir.path());
    // It has opened the FIFO (and reads it until the writer, which never closes it, sends
    // more), and its SIGTERM handler is in place: a SIGTERM now is one while loading.
    wait_opened(&opened, dir.path());
    let pid = child.0.id();
    eventually(60, "canaryd's SIGTERM handler", || {
        catches(pid, libc::SIGTERM).then_some(())
    });
    child.signal(libc::SIGTERM);
    let code = child.wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(130), "interrupted: {}", printed(dir.path()));
    assert!(
        printed(dir.path()).contains("stopped while loading"),
        "{}",
        printed(dir.path())
    );

    // analyze-trace keeps SIGTERM's default action: it ends at once too.
    let dir = tempfile::tempdir().unwrap();
    let (trace, opened) = fifo(dir.path(), String::new(), b"");
    let mut child = spawn(&["analyze-trace", trace.to_str().unwrap()], dir.path());
    wait_opened(&opened, dir.path());
    child.signal(libc::SIGTERM);
    child.wait_exit(Duration::from_secs(20));
}

#[test]
fn a_second_sigint_quits_at_once_while_a_request_waits_out_its_grace_period() {
    // A server that reads each request and never answers: the first SIGINT stops dispatch
    // and leaves the request in flight for its grace period (10 minutes here); the second
    // one quits now, with the interrupted status.
    let server = HostileServer::start(Hostile::Silent);
    let dir = tempfile::tempdir().unwrap();
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let url = server.url();
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", &url];
    args.extend(["--model", "m", "--output-dir", "out"]);
    args.extend(["--grace-period", "10m", "--request-timeout", "10m"]);
    let mut child = spawn(&args, dir.path());
    let waited = |what: &str, done: &dyn Fn() -> bool| {
        for _ in 0..600 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{what}: {}", printed(dir.path()));
    };
    // A completion: the run asks `GET /v1/models` first (the target's context length).
    waited("no request reached the server", &|| {
        server.post_requests() > 0
    });
    child.signal(libc::SIGINT);
    waited("the first SIGINT was not taken as a stop", &|| {
        printed(dir.path()).contains("Ctrl-C again to quit now")
    });
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the first SIGINT waits for the request in flight: {}",
        printed(dir.path())
    );
    // The signal task is waiting for the second SIGINT once it has said so.
    std::thread::sleep(Duration::from_millis(500));
    child.signal(libc::SIGINT);
    let code = child.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(130), "{}", printed(dir.path()));
}

#[test]
fn check_config_loads_each_trace_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let arxiv = shared("traces/mooncake_arxiv_first20.jsonl");
    let config = |workload: &str| {
        format!(
            "state_dir = \"state\"\n\n[targets.sim]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\n\
             [workloads.w]\ntarget = \"sim\"\nevery = \"15m\"\n{workload}\n"
        )
    };
    let check = |name: &str, workload: &str| {
        std::fs::write(d.join(name), config(workload)).unwrap();
        bounded(&["check-config", name], d, 60)
    };
    let trace = format!("trace = {:?}", arxiv.to_str().unwrap());

    let (code, out) = check("good.toml", &trace);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("trace: 20 of 20 rows selected"), "{out}");

    // A synthetic workload says what it sends as such (it was printed as a trace).
    let (code, out) = check(
        "rate.toml",
        "request_rate = 5.0
request_count = 10",
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("    synthetic: 5 req/s, poisson arrivals"),
        "{out}"
    );
    assert!(!out.contains("trace: "), "{out}");

    // A bad row is named: file, line, field.
    let bad = r#"{"timestamp": 0, "input_length": "many", "output_length": 5}"#;
    std::fs::write(d.join("bad.jsonl"), arxiv_with(7, bad)).unwrap();
    let (code, out) = check("bad-row.toml", "trace = \"bad.jsonl\"");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("bad-row.toml:10: workloads.w: loading the trace"),
        "{out}"
    );
    assert!(
        out.contains("bad.jsonl:7: field \"input_length\": expected a positive integer"),
        "{out}"
    );

    // A scale taking lengths over the limit: the key and its line.
    let (code, out) = check("scale.toml", &format!("{trace}\nscale_lengths = 1e30"));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("scale.toml:11: workloads.w.scale_lengths: 1e30 takes every length over"),
        "{out}"
    );
    // Under the static bound, but over it on a real row: named with the row.
    let (code, out) = check("scale2.toml", &format!("{trace}\nscale_lengths = 5000"));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("scaling by 5000 takes the input of line 1"),
        "{out}"
    );

    // A speedup that would take ages.
    let (code, out) = check("slow.toml", &format!("{trace}\nspeedup = 1e-12"));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("workloads.w.speedup 1e-12: replaying"),
        "{out}"
    );
}

/// Runs `canaryd ARGS` with a stdout whose reader is already gone, as `| head -1` leaves it
/// once `head` has its line; (exit code, stderr).
fn closed_stdout(args: &[&str], dir: &Path) -> (Option<i32>, String) {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors; each is owned exactly once below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let (reader, writer) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    drop(reader);
    let mut child = Command::new(CANARYD)
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let mut child = Child(child);
    (child.wait_exit(Duration::from_secs(120)), err)
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/canaryd.example.toml");
    let slice = shared("traces/mooncake_conversation_first2000.jsonl");
    let arxiv = shared("traces/mooncake_arxiv_first20.jsonl");
    let (_sim, port) = super::common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    // `doctor` of a target that is down: a port meant to have nothing listening (found free;
    // no process to start on port 0 and read back).
    let closed = format!("http://127.0.0.1:{}", super::common::free_port());
    let replay = |json: bool| {
        let mut a = vec!["replay", "--trace", arxiv.to_str().unwrap(), "--url", &url];
        let o = if json { "out-json" } else { "out" };
        a.extend(["--model", "canary-sim", "--max-requests", "2", "-o", o]);
        if json {
            a.push("--json");
        }
        a
    };
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["check-config", example.to_str().unwrap()], 0),
        (vec!["analyze-trace", slice.to_str().unwrap()], 0),
        (vec!["analyze-trace", "--json", slice.to_str().unwrap()], 0),
        (replay(false), 0),
        (replay(true), 0),
        (vec!["doctor", "--url", &closed], 1),
        (
            vec![
                "demo",
                "--profile",
                "fast",
                "--speedup",
                "100",
                "--max-requests",
                "3",
                "-o",
                "demo",
            ],
            0,
        ),
    ];
    for (args, expected) in cases {
        let (code, err) = closed_stdout(&args, d);
        assert_eq!(code, Some(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
    }
}

// Audit F5: a server's `timings.prompt_ms` of -1e200 made a TTFT gap of 1e200 ms; beside a
// sane gap Welford's sum of squares overflowed, so `std` was `null` in summary.json and `m2`
// in histograms.json, and `canaryd merge` of the run failed to parse it. The prompt time is
// now refused (negative) and counted, and the rest of the run's figures stand.
#[test]
fn a_hostile_servers_prompt_time_is_refused_counted_and_the_run_still_merges() {
    let server = HostileServer::start(Hostile::PromptTime {
        first: "-1e200",
        later: "0.001",
    });
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The first second of the trace: its first 15 rows, all due at once.
    let flags = ["--end-offset", "1s", "--shard", "0/1"];
    let out = super::replay_arxiv(
        d,
        &server.url(),
        &[&flags[..], &["--no-nvml", "--no-ebpf"]].concat(),
    );
    assert!(out.status.success(), "{}", super::common::text(&out));
    let s = super::summary(d);
    super::experiments::assert_valid(&s, None);
    assert_eq!(s["completed"], 15, "{s}");
    assert_eq!(
        s["server_prompt_time_refused"],
        serde_json::json!({ "negative": 1 }),
        "{s}"
    );
    // The printed table says why its gap row counts 14 of the 15.
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(
            "server prompt times (timings.prompt_ms) refused: negative 1 (exact counts; left \
             out of TTFT - server prompt time)"
        ),
        "{printed}"
    );
    let gap = &s["ttft_minus_server_prompt_time"];
    assert_eq!(gap["count"], 14, "{gap}");
    assert!(gap["std"].as_f64().is_some_and(f64::is_finite), "{gap}");
    assert!(gap["max"].as_f64().is_some_and(|m| m < 60_000.0), "{gap}");
    let histograms = std::fs::read(d.join("out/histograms.json")).unwrap();
    let histograms: serde_json::Value = serde_json::from_slice(&histograms).unwrap();
    let gap = &histograms["metrics"]["ttft_minus_server_prompt_time"];
    assert!(gap["m2"].as_f64().is_some_and(f64::is_finite), "{gap}");
    let merged = super::canaryd(&["merge", "out", "-o", "merged"], d);
    assert!(merged.status.success(), "{}", super::common::text(&merged));
}
