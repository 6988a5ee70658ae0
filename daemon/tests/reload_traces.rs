//! What `check-config` calls an error in a workload's trace (a bad row) is one for the daemon
//! too: a SIGHUP bringing it is rejected and the running config stays, and a daemon started
//! with it does not start; a reload's restart-only change names its field. Real `canaryd run`
//! and `canaryd sim` processes on loopback, a real trace with one row broken.

mod common;

use common::{api_runs, eventually, http, Child, CANARYD};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A copy of the shared Mooncake slice in `dir/name`, its 4th row's `input_length` made -4.
fn trace_with_a_bad_fourth_row(dir: &Path, name: &str) -> PathBuf {
    let good =
        std::fs::read_to_string(common::shared("traces/mooncake_arxiv_first20.jsonl")).unwrap();
    let mut lines: Vec<String> = good.lines().map(str::to_owned).collect();
    let fourth = &mut lines[3];
    let length = fourth.split("\"input_length\": ").nth(1).unwrap();
    let length = &length[..length.find(',').unwrap()];
    *fourth = fourth.replace(
        &format!("\"input_length\": {length},"),
        "\"input_length\": -4,",
    );
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// A config in `dir` with one workload `w` replaying `trace` against the sim on `sim_port`
/// every second, its state in `dir/state_dir`.
fn config(dir: &Path, sim_port: u16, trace: &Path, state_dir: &str) -> String {
    format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.w]\ntarget = \"sim\"\ntrace = \"{}\"\nmax_requests = 5\nspeedup = 20\n\
         scale_lengths = 0.02\nevery = \"1s\"\n",
        dir.join(state_dir).display(),
        trace.display()
    )
}

fn metrics(port: u16) -> String {
    http(port, "GET", "/metrics", "").1
}

#[test]
fn a_reload_whose_trace_has_a_bad_row_is_rejected_and_the_running_config_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&["--block-size", "26"]);
    let good = common::shared("traces/mooncake_arxiv_first20.jsonl");
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config(dir.path(), sim_port, &good, "state")).unwrap();
    let (d, status) = common::daemon_on_own_port(dir.path(), &path, "daemon.log", &[]);
    eventually(60, "a first run of `w`", || {
        (!api_runs(status).is_empty()).then_some(())
    });

    let bad = trace_with_a_bad_fourth_row(dir.path(), "badrow.jsonl");
    std::fs::write(&path, config(dir.path(), sim_port, &bad, "state")).unwrap();
    d.signal(libc::SIGHUP);
    eventually(60, "the reload to be rejected", || {
        metrics(status)
            .contains("canaryd_config_reloads_total{result=\"rejected\"} 1")
            .then_some(())
    });
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    // As check-config names it: the config's `trace` line, then the trace's row and field.
    let trace_line = config(dir.path(), sim_port, &bad, "state")
        .lines()
        .position(|l| l.starts_with("trace = "))
        .unwrap()
        + 1;
    let said = format!(
        "config rejected, the running config stays: {}:{trace_line}: workloads.w: loading the \
         trace: {}:4: field \"input_length\"",
        path.display(),
        bad.display()
    );
    assert!(log.contains(&said), "{said:?} not in {log}");
    assert!(!log.contains("SIGHUP: reloaded"), "{log}");

    // The running config goes on: its runs read the good trace, and none is an error.
    let before = api_runs(status).len();
    let after = eventually(60, "two more runs of the old config", || {
        let all = api_runs(status);
        (all.len() >= before + 2).then_some(all)
    });
    for run in &after {
        let verdict = run["verdict"].as_str().unwrap_or_default();
        assert!(!verdict.starts_with("error"), "{run}");
    }

    // A good file that moves state_dir: accepted, and the warning names that field.
    std::fs::write(&path, config(dir.path(), sim_port, &good, "moved")).unwrap();
    d.signal(libc::SIGHUP);
    eventually(60, "the good reload", || {
        metrics(status)
            .contains("canaryd_config_reloads_total{result=\"ok\"} 1")
            .then_some(())
    });
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    let said = format!(
        "SIGHUP: state_dir changes take effect at restart ({} → {})",
        dir.path().join("state").display(),
        dir.path().join("moved").display()
    );
    assert!(log.contains(&said), "{said:?} not in {log}");
    assert!(!dir.path().join("moved").exists(), "moved before a restart");
}

#[test]
fn a_daemon_started_with_a_bad_trace_row_refuses_to_start_as_check_config_does() {
    let dir = tempfile::tempdir().unwrap();
    let bad = trace_with_a_bad_fourth_row(dir.path(), "badrow.jsonl");
    let path = dir.path().join("canaryd.toml");
    // Nothing is sent: the sim's port is never reached.
    std::fs::write(
        &path,
        config(dir.path(), common::free_port(), &bad, "state"),
    )
    .unwrap();
    let checked = Command::new(CANARYD)
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(checked.status.code(), Some(1), "{}", common::text(&checked));
    let log = dir.path().join("daemon.log");
    let mut d = Child(
        Command::new(CANARYD)
            .arg("run")
            .arg("--config")
            .arg(&path)
            .args(["--status-listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    assert_eq!(d.wait_exit(Duration::from_secs(60)), Some(1));
    let said = std::fs::read_to_string(&log).unwrap();
    // The same error check-config gives, word for word.
    let check_said = String::from_utf8_lossy(&checked.stderr);
    let check_said = check_said.trim();
    assert!(
        check_said.contains(&format!("{}:4: field \"input_length\"", bad.display())),
        "{check_said}"
    );
    assert!(said.contains(check_said), "{check_said:?} not in {said}");
    assert!(!said.contains("status endpoint on"), "{said}");
}
