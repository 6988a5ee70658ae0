//! `--realtime-workers`: the runtime's worker threads real-time where permitted, the run's
//! summary saying how it was measured, and a clear word once where it is not permitted.

use super::{replay_arxiv, summary};
use crate::common::{self, text};
use canary_testkit::skip;
use std::process::{Command, Output};

/// Whether this process may take `SCHED_FIFO` 2 (root, CAP_SYS_NICE, RLIMIT_RTPRIO ≥ 2),
/// tried on a throwaway thread; else a counted skip.
fn realtime_permitted() -> bool {
    let tried = std::thread::spawn(|| {
        let param = libc::sched_param { sched_priority: 2 };
        // SAFETY: pid 0 is this throwaway thread; `param` is valid for the call.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    })
    .join()
    .unwrap();
    if !tried {
        skip(
            "realtime",
            "SCHED_FIFO is not permitted here (CI runs as root)",
        );
    }
    tried
}

fn workers(s: &serde_json::Value) -> &serde_json::Value {
    &s["context"]["canaryd"]["workers"]
}

/// Lines of the run's log that report real-time workers refused.
fn refusals(out: &Output) -> usize {
    text(out)
        .lines()
        .filter(|l| l.contains("real-time workers asked for"))
        .count()
}

#[test]
fn realtime_workers_are_sched_fifo_below_the_release_thread_and_the_summary_says_so() {
    if !realtime_permitted() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let out = replay_arxiv(dir.path(), &url, &["--realtime-workers"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(refusals(&out), 0, "{}", text(&out));
    let s = summary(dir.path());
    assert_eq!(s["errors"], 0);
    let w = workers(&s);
    assert_eq!(w["realtime_requested"], true, "{w}");
    assert_eq!(w["scheduling"], "SCHED_FIFO", "{w}");
    assert_eq!(w["priority"], 1, "{w}");
    assert!(w["realtime_threads"].as_u64().unwrap() >= 1, "{w}");
    assert!(w.get("realtime_unavailable").is_none(), "{w}");
    // The release thread still preempts them.
    assert_eq!(s["clock"]["release"]["scheduling"], "SCHED_FIFO");
    assert_eq!(s["clock"]["release"]["priority"], 2);

    // Without the flag: ordinary workers, said as plainly.
    let out = replay_arxiv(dir.path(), &url, &["--overwrite"]);
    assert!(out.status.success(), "{}", text(&out));
    let s = summary(dir.path());
    let w = workers(&s);
    assert_eq!(w["realtime_requested"], false, "{w}");
    assert_eq!(w["scheduling"], "SCHED_OTHER", "{w}");
    assert_eq!(w["realtime_threads"], 0, "{w}");
    assert!(w.get("realtime_unavailable").is_none(), "{w}");
}

#[test]
fn refused_realtime_workers_are_reported_once_and_the_run_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");

    // Refused on purpose by the environment.
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    let replay = |cmd: &mut Command, out: &str| -> Output {
        cmd.args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
            .args([
                "--model",
                "canary-sim",
                "--realtime-workers",
                "--output-dir",
                out,
            ])
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .env_remove("OPENAI_API_KEY")
            .output()
            .expect("canaryd runs")
    };
    let out = replay(
        Command::new(common::CANARYD).env("CANARYD_NO_REALTIME", "1"),
        "env",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(refusals(&out), 1, "said once: {}", text(&out));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("env/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["errors"], 0);
    let w = workers(&s);
    assert_eq!(w["realtime_requested"], true, "{w}");
    assert_eq!(w["scheduling"], "SCHED_OTHER", "{w}");
    assert!(
        w["realtime_unavailable"]
            .as_str()
            .unwrap()
            .contains("CANARYD_NO_REALTIME"),
        "{w}"
    );

    // Refused by the kernel: no CAP_SYS_NICE and an RLIMIT_RTPRIO of 0, even as root.
    for tool in ["setpriv", "prlimit"] {
        if let Err(e) = Command::new(tool).arg("--version").output() {
            return skip(
                "setpriv",
                &format!("{tool} (util-linux) does not run here: {e}"),
            );
        }
    }
    let mut cmd = Command::new("prlimit");
    cmd.args(["--rtprio=0:0", "--", "setpriv", "--bounding-set=-sys_nice"])
        .args(["--inh-caps=-sys_nice", "--ambient-caps=-sys_nice", "--"])
        .arg(common::CANARYD);
    let out = replay(&mut cmd, "caps");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(refusals(&out), 1, "said once: {}", text(&out));
    let log = text(&out);
    assert!(
        log.contains("CAP_SYS_NICE") && log.contains("LimitRTPRIO"),
        "says how to allow it: {log}"
    );
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("caps/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["errors"], 0);
    assert!(s["requests"].as_u64().unwrap() > 0, "{s}");
    let w = workers(&s);
    assert_eq!(w["scheduling"], "SCHED_OTHER", "{w}");
    assert_eq!(w["realtime_threads"], 0, "{w}");
    assert!(
        w["realtime_unavailable"]
            .as_str()
            .unwrap()
            .contains("CAP_SYS_NICE"),
        "{w}"
    );
    // The release thread was refused too, and says so in its own block.
    assert_eq!(s["clock"]["release"]["scheduling"], "SCHED_OTHER");
}

/// A server streaming as fast as the socket takes it keeps real-time workers busy: each
/// request still ends as one classified error (the chunk cap), and the run ends.
#[test]
fn a_server_streaming_without_pause_costs_real_time_workers_one_error_per_request() {
    use canary_testkit::{Hostile, HostileServer};
    let permitted = realtime_permitted();
    let server = HostileServer::start(Hostile::EndlessStream {
        chunks: 10_000_000,
        every: std::time::Duration::ZERO,
    });
    let dir = tempfile::tempdir().unwrap();
    let out = replay_arxiv(
        dir.path(),
        &server.url(),
        &[
            "--realtime-workers",
            "--max-requests",
            "4",
            "--max-output-tokens",
            "10",
        ],
    );
    // Nothing completed: exit 4.
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let s = summary(dir.path());
    assert_eq!(s["errors_by_kind"]["response_too_long"], 4, "{s}");
    if permitted {
        assert_eq!(workers(&s)["scheduling"], "SCHED_FIFO", "{s}");
    }
}

/// `CANARYD_REALTIME_WORKERS_MAX=N`, the measurement knob (README "Precision mode", how
/// bench/RESULTS.md compared one real-time worker of two against both): of the run's two
/// workers only N are raised, and `context.canaryd.workers` says how many were.
#[test]
fn the_measurement_knob_raises_at_most_that_many_workers() {
    if !realtime_permitted() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    let raised = |max: Option<&str>, out: &str| -> serde_json::Value {
        let mut cmd = Command::new(common::CANARYD);
        cmd.args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
            .args(["--model", "canary-sim", "--realtime-workers"])
            .args(["--output-dir", out])
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .env("CANARYD_REQUEST_WORKERS", "2")
            .env_remove("OPENAI_API_KEY")
            .env_remove("CANARYD_REALTIME_WORKERS_MAX");
        if let Some(max) = max {
            cmd.env("CANARYD_REALTIME_WORKERS_MAX", max);
        }
        let run = cmd.output().expect("canaryd runs");
        assert!(run.status.success(), "{}", text(&run));
        let s: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join(out).join("summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(s["errors"], 0, "{s}");
        workers(&s).clone()
    };
    let one = raised(Some("1"), "one");
    assert_eq!(one["scheduling"], "SCHED_FIFO", "{one}");
    assert_eq!(one["realtime_threads"], 1, "{one}");
    // Without it, both (each is raised the first time it parks, which an idle worker does).
    let both = raised(None, "both");
    assert_eq!(both["realtime_threads"], 2, "{both}");
}
