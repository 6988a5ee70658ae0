//! A stderr nobody reads any more (`canaryd … 2>&1 | head -1`, a journald pipe gone) or one
//! that cannot take a byte (`2>/dev/full`) loses log lines, never the run: the replay writes
//! its artifacts and exits with its own status, and the daemon keeps running.

use crate::common::{self, api_runs, eventually, free_port, shared, text, Child, CANARYD};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

/// The write end of a pipe whose read end is already closed: every write fails with EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors, each then owned exactly once below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe(2)");
    // SAFETY: both descriptors were just made by pipe(2) and nothing else owns them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    )
}

/// `canaryd replay` of the 20-row arXiv trace into `dir/out`, logging at info (it has lines
/// to write from the start) to `stderr`; its exit code and stdout.
fn replay(dir: &Path, port: u16, stderr: Stdio) -> (Option<i32>, String) {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let url = format!("http://127.0.0.1:{port}");
    let out = Command::new(CANARYD)
        .args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
        .args(["--model", "canary-sim", "--output-dir", "out", "--no-ebpf"])
        .args(["--speedup", "10", "--scale-lengths", "0.01"])
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .env_remove("OPENAI_API_KEY")
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .output()
        .expect("canaryd runs");
    (out.status.code(), text(&out))
}

fn assert_run_written(dir: &Path, said: &str) {
    let records = std::fs::read_to_string(dir.join("out/records.jsonl"))
        .unwrap_or_else(|e| panic!("records.jsonl: {e}\n{said}"));
    assert_eq!(records.lines().count(), 20, "{said}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"], 20, "{said}");
}

#[test]
fn a_replay_with_a_closed_or_full_stderr_completes_and_keeps_its_status() {
    let (_sim, port) = common::sim(&[]);
    for (what, stderr) in [("closed pipe", closed_pipe()), ("/dev/full", dev_full())] {
        let dir = tempfile::tempdir().unwrap();
        let (code, said) = replay(dir.path(), port, stderr);
        assert_eq!(code, Some(0), "stderr a {what}: {said}");
        assert_run_written(dir.path(), &said);
    }
}

#[test]
fn the_daemon_with_a_full_stderr_runs_its_workloads() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.w]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 10\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"2s\"\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    // Its own log cannot say which port it bound: give it one.
    let port = free_port();
    let mut daemon = Child(
        Command::new(CANARYD)
            .args(["run", "--config"])
            .arg(&config)
            .args(["--status-listen", &format!("127.0.0.1:{port}")])
            .current_dir(dir.path())
            .env("RUST_LOG", "info")
            .env_remove("OPENAI_API_KEY")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("JOURNAL_STREAM")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(dev_full())
            .spawn()
            .expect("canaryd run starts"),
    );
    let run = eventually(60, "the daemon's first run", || {
        if let Some(exit) = daemon.0.try_wait().unwrap() {
            panic!("canaryd run exited ({exit}) with its stderr on /dev/full");
        }
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        api_runs(port).into_iter().find(|r| r["verdict"] == "pass")
    });
    assert_eq!(run["workload"], "w", "{run}");
}
