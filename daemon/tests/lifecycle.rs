//! The daemon's lifecycle against real processes: `canaryd run` against `canaryd sim` on
//! loopback, stopped with signals (during a warm-up, twice), restarted, and a one-shot `canaryd
//! replay` pointed into its folders.
//! Nothing asserts on timing; the status API and files are polled with generous deadlines (the
//! one fixed wait gives a run that must not start room to show).

mod common;

use common::{eventually, shared, CANARYD};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A config with `state_dir` in `dir`, a `sim` target on `sim_port`, and `extra` appended.
fn write_config(dir: &Path, sim_port: u16, extra: &str) -> PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         {extra}",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// 300 requests over 102 s of trace at 2x: far from done while a test looks at it.
const LONG: &str = "[workloads.long]\ntarget = \"sim\"\ntrace = \"bundled\"\nspeedup = 2\n\
                    scale_lengths = 0.05\nevery = \"1h\"\ngrace_period = \"2s\"\n";

/// The folder of the daemon's run in progress, once it has recorded `n` requests.
fn run_in_progress(dir: &Path, n: usize) -> PathBuf {
    let artifacts = dir.join("state/artifacts/long");
    eventually(60, "the run to record requests", || {
        let run = std::fs::read_dir(&artifacts).ok()?.next()?.ok()?.path();
        let records = std::fs::read_to_string(run.join("records.jsonl")).ok()?;
        (records.lines().count() >= n).then_some(run)
    })
}

/// `canaryd replay -o <a running daemon's run folder> --overwrite` wrote over the run in
/// progress (the daemon wrote on at its offset: a hole of NUL bytes, a report that failed).
/// Refused, naming the daemon, whatever `--overwrite` says; the run is left whole.
#[test]
fn a_replay_into_a_running_daemons_run_folder_is_refused_even_with_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&["--block-size", "26"]);
    let config = write_config(dir.path(), sim_port, LONG);
    let (mut d, _) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let run = run_in_progress(dir.path(), 3);
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let url = format!("http://127.0.0.1:{sim_port}");
    for out in [
        run.clone(),
        run.join("sub"),
        dir.path().join("state/artifacts"),
    ] {
        let o = Command::new(CANARYD)
            .args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
            .args([
                "--model",
                "canary-sim",
                "--max-requests",
                "5",
                "--speedup",
                "100",
            ])
            .arg("--output-dir")
            .arg(&out)
            .arg("--overwrite")
            .current_dir(dir.path())
            .output()
            .unwrap();
        let text = common::text(&o);
        assert_eq!(o.status.code(), Some(1), "{}: {text}", out.display());
        assert!(
            text.contains("inside the folder of a running canaryd daemon")
                && text.contains(&format!("pid {}", d.0.id())),
            "{text}"
        );
    }
    assert!(!run.join("sub").exists());
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    let records = std::fs::read(run.join("records.jsonl")).unwrap();
    assert!(!records.contains(&0), "a hole in the daemon's records");
    for line in records.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert!(v.is_object());
    }
    // Stopped, its folders are the user's again.
    let o = Command::new(CANARYD)
        .args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
        .args([
            "--model",
            "canary-sim",
            "--max-requests",
            "2",
            "--speedup",
            "100",
        ])
        .arg("--output-dir")
        .arg(dir.path().join("state/artifacts/long/after"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", common::text(&o));
}

/// A target that accepts connections and never answers, for as long as it is held;
/// `accepted` counts the completions (`POST`s) read.
struct Silent {
    port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Silent {
    fn start() -> Silent {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let count = count.clone();
                // A completion (`POST`) counts; the run's `GET /v1/models` before it (the
                // target's context length) does not. Each is held, never answered.
                std::thread::spawn(move || {
                    use std::io::Read;
                    let mut method = [0u8; 5];
                    if s.read_exact(&mut method).is_ok() && &method == b"POST " {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    let mut buf = [0u8; 4096];
                    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        Silent { port, accepted }
    }
}

/// [`write_config`] for a [`Silent`] target: without server metrics, which a target that never
/// answers has none of to scrape.
fn silent_config(dir: &Path, target: &Silent, workload: &str) -> PathBuf {
    write_config(dir, target.port, &format!("metrics_url = \"\"\n{workload}"))
}

/// A second SIGTERM was ignored (a second SIGINT quit at once): with requests hung at the
/// target and a minute of grace, `kill` twice now quits at once too, with 143.
#[test]
fn a_second_sigterm_quits_without_waiting_out_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let target = Silent::start();
    let workload = "[workloads.long]\ntarget = \"sim\"\ntrace = \"bundled\"\nspeedup = 2\n\
                    scale_lengths = 0.05\nevery = \"1h\"\ngrace_period = \"2m\"\n";
    let config = silent_config(dir.path(), &target, workload);
    let (mut d, _) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    eventually(60, "a request at the target", || {
        (target.accepted.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(())
    });
    d.signal(libc::SIGTERM);
    let log = dir.path().join("daemon.log");
    eventually(30, "the stop to begin", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("stopping:").then_some(())
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(143));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("second SIGTERM: quitting"), "{text}");
}

/// A stop during a run's warm-up (its requests hung at a target that never answers) was
/// recorded as `error: interrupted` with 0 requests: the run never started, so it is a skip,
/// with no history row and no folder left for the next start to recover.
#[test]
fn a_stop_during_the_warm_up_is_a_skip_not_an_error_run() {
    let dir = tempfile::tempdir().unwrap();
    let target = Silent::start();
    let workload = "[workloads.long]\ntarget = \"sim\"\ntrace = \"bundled\"\nspeedup = 2\n\
                    scale_lengths = 0.05\nevery = \"1h\"\ngrace_period = \"1s\"\n\
                    warmup_requests = 2\n";
    let config = silent_config(dir.path(), &target, workload);
    let (mut d, _) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    eventually(60, "a warm-up request at the target", || {
        (target.accepted.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(())
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("not started: the daemon stopped during its warm-up"),
        "{log}"
    );
    let db = rusqlite::Connection::open(dir.path().join("state/history.sqlite")).unwrap();
    let rows: i64 = db
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0, "{log}");
    let left = std::fs::read_dir(dir.path().join("state/artifacts/long"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "a run folder left for the next start to recover");
}

/// Every restart ran each `every` workload at once, whatever its last run: a crash loop under
/// systemd was a load loop on the target. Restarted a moment after a run, an hourly workload
/// now waits for its hour.
#[test]
fn a_restart_does_not_run_a_workload_that_is_not_due() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&["--block-size", "26"]);
    let short = "[workloads.short]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 10\n\
                 speedup = 20\nscale_lengths = 0.05\nevery = \"1h\"\n";
    let config = write_config(dir.path(), sim_port, short);
    let (mut d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    eventually(120, "the first run", || {
        (!common::api_runs(status).is_empty()).then_some(())
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
    let (mut d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon2.log", &[]);
    eventually(60, "the restarted daemon to be ready", || {
        (common::http(status, "GET", "/readyz", "").0 == 200).then_some(())
    });
    // A run due at start begins within milliseconds of READY; a few seconds leave room for a
    // loaded host.
    std::thread::sleep(Duration::from_secs(3));
    let folders = std::fs::read_dir(dir.path().join("state/artifacts/short"))
        .unwrap()
        .count();
    assert_eq!(folders, 1, "the restart ran the workload again");
    assert_eq!(common::api_runs(status).len(), 1);
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(0));
}
