//! The real binary given input the config audit found taken without a word: a sweep point over
//! a trace that no run could replay within a year, a run longer than its schedule's period,
//! a BurstGPT header with a column twice, and environment variables whose values cannot be
//! used. Each is now said: an error naming the file and line, or a warning naming the key or
//! the variable (never its value). Traces are copies of the shared real ones.

mod common;

use common::{shared, text, CANARYD};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `canaryd.toml` in `dir`, with a copy of the real Mooncake trace beside it as `trace.jsonl`
/// (3.052 s from its first request to its last), one target and workload `w` of `workload`'s
/// keys. The workload's first key is on line 7.
fn config(dir: &Path, state_dir: bool, workload: &str) -> PathBuf {
    std::fs::copy(
        shared("traces/mooncake_arxiv_first20.jsonl"),
        dir.join("trace.jsonl"),
    )
    .unwrap();
    let state = match state_dir {
        true => format!("state_dir = \"{}\"", dir.join("state").display()),
        false => "# no state_dir".into(),
    };
    let text = format!(
        "{state}\n[targets.t]\nurl = \"http://127.0.0.1:{}\"\nmodel = \"m\"\n\
         [workloads.w]\ntarget = \"t\"\n{workload}",
        common::free_port()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check_config(path: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let o = Command::new(CANARYD)
        .arg("check-config")
        .arg(path)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (o.status.code(), text(&o))
}

/// `sweep_speedup = [1, 1e-12]` over a 3 s trace: the second point would take 97,000 years.
/// check-config checked only the workload's own speedup (1) and said ok; every run of the
/// sweep was then an error at that point.
#[test]
fn a_sweep_speedup_point_over_a_year_fails_check_config_at_the_list_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        true,
        "trace = \"trace.jsonl\"\nevery = \"1h\"\nkind = \"sweep\"\nsweep_speedup = [1, 1e-12]\n",
    );
    let (rc, out) = check_config(&path, &[]);
    assert_eq!(rc, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "{}:10: workloads.w.sweep_speedup: point x",
            path.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("replaying the selected requests would take at least ")
            && out.contains(" days, more than the 365 days allowed; no run could take it"),
        "{out}"
    );
    // Points a run can take pass.
    let path = config(
        dir.path(),
        true,
        "trace = \"trace.jsonl\"\nevery = \"1h\"\nkind = \"sweep\"\nsweep_speedup = [1, 2]\n",
    );
    let (rc, out) = check_config(&path, &[]);
    assert_eq!(rc, Some(0), "{out}");
}

/// A run that takes longer than its period skips the start after it (runs never overlap):
/// said at check-config, with the run's length (a bound or an estimate, and from what) and
/// the period, at the `every` line.
#[test]
fn a_run_longer_than_its_period_is_warned_with_both_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let warned = |workload: &str| {
        let path = config(dir.path(), true, workload);
        let (rc, out) = check_config(&path, &[]);
        assert_eq!(rc, Some(0), "{out}");
        let prefix = format!("  warning: {}:", path.display());
        out.lines()
            .filter(|l| l.starts_with(&prefix) && l.contains("workloads.w.every: "))
            .map(|l| l[prefix.len()..].to_string())
            .collect::<Vec<_>>()
    };
    // The trace's 3.052 s at speedup 0.5.
    let w = warned("trace = \"trace.jsonl\"\nspeedup = 0.5\nevery = \"1s\"\n");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with(
            "9: workloads.w.every: one run takes at least 6.1 s (the selected requests' \
             schedule; not counted: the answers still in flight after the last send, at the \
             server's pace), not less than its period, 1 s: runs never overlap, so each run \
             skips the start after it"
        ),
        "{w:?}"
    );
    // At speedup 10 it takes 0.3 s: no warning.
    let w = warned("trace = \"trace.jsonl\"\nspeedup = 10\nevery = \"1s\"\n");
    assert!(w.is_empty(), "{w:?}");
    // Synthetic: a benchmark_duration (a bound), a request count over a rate (an estimate).
    let w = warned("every = \"1m\"\nrequest_rate = 1\nbenchmark_duration = \"2h\"\n");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with(
            "7: workloads.w.every: one run takes at least 7200 s (benchmark_duration 7200 s; \
             not counted: the answers still in flight after the last send, at the server's \
             pace), not less than its period, 60 s"
        ),
        "{w:?}"
    );
    let w = warned("every = \"1m\"\nrequest_rate = 1\nrequest_count = 100\n");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with(
            "7: workloads.w.every: one run takes about 100 s (100 requests at 1 req/s, an \
             estimate; not counted: the answers still in flight after the last send, at the \
             server's pace), not less than its period, 60 s"
        ),
        "{w:?}"
    );
}

/// A BurstGPT header naming `Request tokens` twice was read from its first column, without a
/// word: refused at line 1, naming the column and both places.
#[test]
fn a_burstgpt_column_given_twice_is_refused_at_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::read_to_string(shared("traces/burstgpt_readme_rows.csv")).unwrap();
    let dup = dir.path().join("dup.csv");
    std::fs::write(&dup, real.replacen("Total tokens", "Request tokens", 1)).unwrap();
    let o = Command::new(CANARYD)
        .arg("analyze-trace")
        .arg(&dup)
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "{}:1: bad BurstGPT header: `Request tokens` is given twice (columns 3 and 5)",
            dup.display()
        )),
        "{out}"
    );
    // The real file reads.
    let o = Command::new(CANARYD)
        .arg("analyze-trace")
        .arg(shared("traces/burstgpt_readme_rows.csv"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `RUST_LOG` that does not parse (logging fell back to info), `CANARYD_REALTIME_WORKERS_MAX=-3`
/// (ignored) and an empty `STATE_DIRECTORY` (state went to the working folder) were all taken
/// without a word: each is a warning naming the variable, without its value.
#[test]
fn bad_environment_variables_are_warned_about_by_name_never_by_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), false, "every = \"1h\"\nrequest_rate = 1\n");
    let o = Command::new(CANARYD)
        .arg("check-config")
        .arg(&path)
        .env("RUST_LOG", "canaryd=debgu,sk-NOTSHOWN=info")
        .env("CANARYD_REALTIME_WORKERS_MAX", "-3")
        .env("STATE_DIRECTORY", "")
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for said in [
        "RUST_LOG is not a log filter: its directive 1 does not parse (the value is not shown); \
         logging at info instead",
        "CANARYD_REALTIME_WORKERS_MAX is not a whole number of 0 or more (the value is not \
         shown); ignored",
        "  warning: STATE_DIRECTORY is set but empty; state goes to /var/lib/canaryd",
        "artifacts in /var/lib/canaryd/artifacts",
    ] {
        assert!(out.contains(said), "{said:?} in:\n{out}");
    }
    for value in ["debgu", "NOTSHOWN", "=-3", "\"-3\""] {
        assert!(!out.contains(value), "{value:?} in:\n{out}");
    }
    // Values that are fine: none of these warnings.
    let o = Command::new(CANARYD)
        .arg("check-config")
        .arg(&path)
        .env("RUST_LOG", "info,canaryd=debug")
        .env("CANARYD_REALTIME_WORKERS_MAX", "1")
        .env("STATE_DIRECTORY", dir.path().join("st"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for variable in [
        "RUST_LOG",
        "CANARYD_REALTIME_WORKERS_MAX",
        "STATE_DIRECTORY",
    ] {
        assert!(!out.contains(variable), "{variable} in:\n{out}");
    }
}

/// A relative `STATE_DIRECTORY` (systemd sets an absolute one) put the history under the
/// folder the daemon was started in, without a word: check-config (as the daemon's start)
/// refuses it, naming the variable, its value and the folder it would have meant.
#[test]
fn a_relative_state_directory_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), false, "every = \"1h\"\nrequest_rate = 1\n");
    let o = Command::new(CANARYD)
        .arg("check-config")
        .arg(&path)
        .current_dir(dir.path())
        .env("STATE_DIRECTORY", "canaryd-state")
        .output()
        .unwrap();
    let out = text(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    let meant = dir.path().canonicalize().unwrap().join("canaryd-state");
    let said = format!(
        "STATE_DIRECTORY is a relative path, canaryd-state: state would go to {}",
        meant.display()
    );
    assert!(out.contains(&said), "{said:?} in:\n{out}");
    assert!(!meant.exists());
}
