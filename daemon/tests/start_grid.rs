//! Daemon workloads with `start_at` run on the grid `start_at + k × every` (issue 22): two
//! daemon processes, started at different moments, given one `start_at` and a 2 s period,
//! against one simulator. Each run's `clock.start_at` is a grid instant, the same instants on
//! both daemons, and both placed each shared instant at one point of this host's monotonic
//! clock, within the sum of their recorded mapping uncertainties.

mod common;

use common::{api_runs, eventually, sim};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const PERIOD_NS: i64 = 2_000_000_000;

fn config(dir: &Path, sim_port: u16, start_at: &str) -> std::path::PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.shard]\ntarget = \"sim\"\nevery = \"2s\"\nstart_at = \"{start_at}\"\n\
         request_rate = 20\narrival_pattern = \"constant\"\nrequest_count = 4\n\
         isl = 16\nosl = 4\n",
        dir.join("state").display()
    );
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Each finished run's `clock` block, by its grid instant (Unix ns).
fn clocks(dir: &Path, status: u16) -> BTreeMap<i64, Value> {
    api_runs(status)
        .into_iter()
        .filter(|r| r["verdict_kind"] == "pass")
        .map(|r| {
            let id = r["id"].as_str().unwrap();
            let s = dir
                .join("state/artifacts/shard")
                .join(id)
                .join("summary.json");
            let s: Value = serde_json::from_slice(&std::fs::read(&s).unwrap()).unwrap();
            let clock = s["clock"].clone();
            (clock["start_at"]["unix_ns"].as_i64().unwrap(), clock)
        })
        .collect()
}

#[test]
fn two_daemons_with_one_start_at_start_each_run_on_the_same_grid_instant() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim(&[]);
    // In the past and off the whole second: the grid goes on from it, the daemons start
    // between two of its points.
    let now_ms = chrono::Utc::now().timestamp_millis();
    let start_ns = (now_ms - 5_300) * 1_000_000;
    let start_at = chrono::DateTime::from_timestamp_nanos(start_ns)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // Each daemon binds a port of its own: one found free and let go first was once taken
    // by the other daemon (or the other test's) before this one bound it, which then exited,
    // and the other's runs were looked for in this one's folder.
    let (_da, sa) =
        common::daemon_on_own_port(&a, &config(&a, sim_port, &start_at), "daemon.log", &[]);
    std::thread::sleep(std::time::Duration::from_millis(700));
    let (_db, sb) =
        common::daemon_on_own_port(&b, &config(&b, sim_port, &start_at), "daemon.log", &[]);

    // Two grid instants both daemons ran.
    let (ca, cb) = eventually(60, "two grid instants run by both daemons", || {
        let (ca, cb) = (clocks(&a, sa), clocks(&b, sb));
        let shared = ca.keys().filter(|k| cb.contains_key(k)).count();
        (shared >= 2).then_some((ca, cb))
    });
    for (who, c) in [("a", &ca), ("b", &cb)] {
        for (instant, clock) in c {
            // On the grid, and the instant the run was given is the one it records.
            assert_eq!((instant - start_ns) % PERIOD_NS, 0, "{who}: {clock:#}");
            assert!(*instant > start_ns, "{who}: {clock:#}");
            let s = &clock["start_at"];
            assert_eq!(
                common_parse(s["requested"].as_str().unwrap()),
                *instant,
                "{who}: {clock:#}"
            );
            assert_eq!(s["late_by_ms"], 0.0, "{who}: {clock:#}");
        }
    }
    for (instant, x) in &ca {
        let Some(y) = cb.get(instant) else { continue };
        let mono = |c: &Value| c["start_at"]["monotonic_ns"].as_u64().unwrap();
        let unc = |c: &Value| c["mapping_uncertainty_ns"].as_u64().unwrap();
        let spread = mono(x).abs_diff(mono(y));
        let bound = unc(x) + unc(y);
        eprintln!("grid instant {instant}: monotonic starts {spread} ns apart, bound {bound} ns");
        assert!(spread <= bound.max(1), "{x:#} vs {y:#}");
    }
    let log = std::fs::read_to_string(a.join("daemon.log")).unwrap();
    assert!(log.contains("runs on the grid from start_at"), "{log}");
    assert!(!log.contains("late"), "{log}");
}

fn common_parse(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_nanos_opt()
        .unwrap()
}

#[test]
fn a_run_that_overruns_its_period_skips_to_the_next_grid_instant_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim(&[]);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let start_ns = (now_ms - 2_700) * 1_000_000;
    let start_at = chrono::DateTime::from_timestamp_nanos(start_ns)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    // Each run sends for 2.5 s: longer than the 2 s period.
    let cfg = config(dir.path(), sim_port, &start_at);
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "request_rate = 20\narrival_pattern = \"constant\"\nrequest_count = 4\n",
        "request_rate = 10\narrival_pattern = \"constant\"\nbenchmark_duration = \"2500ms\"\n",
    );
    std::fs::write(&cfg, text).unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &cfg, "daemon.log", &[]);
    let runs = eventually(60, "three runs", || {
        let c = clocks(dir.path(), status);
        (c.len() >= 3).then_some(c)
    });
    let instants: Vec<i64> = runs.keys().copied().collect();
    for w in instants.windows(2) {
        // On the grid, and never the instant right after a run's: it was still going.
        assert_eq!((w[1] - start_ns) % PERIOD_NS, 0, "{instants:?}");
        assert!(w[1] - w[0] >= 2 * PERIOD_NS, "{instants:?}");
    }
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    let missed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("missed: the previous run is still going"))
        .collect();
    assert!(!missed.is_empty(), "{log}");
    // Each missed instant said once, and none of them is an instant a run took.
    let mut said = std::collections::BTreeSet::new();
    for l in &missed {
        let text = l
            .split("grid instant ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap();
        let at = common_parse(text);
        assert!(said.insert(at), "said twice: {text}\n{log}");
        assert!(!runs.contains_key(&at), "{text} was run too");
        assert_eq!((at - start_ns) % PERIOD_NS, 0, "{text}");
    }
    assert!(!log.contains("late"), "{log}");
}
