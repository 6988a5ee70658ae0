//! `canaryd compare` of two sweeps, as a user reads it: what each side ran (once or `--runs
//! N`) said by what it did, throughput judged in the table where both sides have runs, a sweep
//! without a knee said why in the sweep's own words, and the figures called estimates where
//! they are means of runs. Real sweeps against `canaryd sim` (the README audit's findings 10,
//! 15 and 17).

use super::{canaryd, capacity_sim, shared, sim_with_profile, sweep, sweep_into, text, timing};
use serde_json::Value;
use std::path::Path;

/// The rule's words for a series with no knee, as `canaryd sweep` prints them.
const NO_STEP: &str =
    "none (no step in load gained in throughput under min(10%, 50% of its load increase) while TTFT p99 rose over 20%)";

/// A line's cells: the table's columns are two spaces or more apart, a cell's words one.
fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

fn read(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        .unwrap()
}

/// A: one user then four, each point `--runs 2`; B: the same once; C: as A. Compare of A and C
/// judges throughput in the table (a `real?` after req/s, as `--json` has it); compare of A
/// and B says what each ran (it said "each sweep ran once" of A's repeated points); the rule
/// line calls the means of runs estimates (it said "Figures are exact"); a sweep with no knee
/// says the rule found none (it said "the series did not saturate"); and the run context that
/// differs no longer starts with the runs' ids.
#[test]
fn compare_of_sweeps_says_what_each_side_ran_and_judges_throughput_when_both_have_runs() {
    let _timing = timing();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let run_sweep = |out: &str, runs: &[&str]| {
        let mut points = vec!["--concurrency", "1,4", "--benchmark-duration", "1s"];
        points.extend_from_slice(runs);
        let o = sweep_into(dir.path(), &url, out, &points);
        assert!(o.status.success(), "{}", text(&o));
    };
    run_sweep("a", &["--runs", "2"]);
    run_sweep("b", &[]);
    run_sweep("c", &["--runs", "2"]);
    let shown = |x: &str, y: &str| -> String {
        let o = canaryd(&["compare", x, y], dir.path());
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };

    // Both repeated: throughput's verdict in the table, as in --json.
    let o = canaryd(&["compare", "a", "c", "--json"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let json: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ac = shown("a", "c");
    let mut lines = ac.lines().skip_while(|l| !l.starts_with("point "));
    let head = cells(lines.next().expect("the table's head"));
    assert_eq!(
        head[..6],
        [
            "point",
            "req/s A",
            "req/s B",
            "B vs A",
            "real?",
            "TTFT p99 A"
        ],
        "{ac}"
    );
    for p in json["points"].as_array().unwrap() {
        let label = p["label"].as_str().unwrap();
        let row = ac
            .lines()
            .find(|l| l.starts_with(&format!("{label} ")))
            .unwrap_or_else(|| panic!("{label}: {ac}"));
        let tp = p["comparison"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == "throughput")
            .unwrap();
        let said = match (
            tp["verdict"]["kind"].as_str(),
            tp["verdict"]["trend"].as_str(),
        ) {
            (Some("judged"), Some("regressed")) => "yes: worse",
            (Some("judged"), Some("improved")) => "yes: better",
            (Some("judged"), _) => "no: ",
            _ => "not judged: ",
        };
        let row = cells(row);
        assert!(row[4].starts_with(said), "{label}: {row:?} against {tp}");
    }
    assert!(
        ac.contains(
            "The cells are the means of each point's runs, estimates; each run's figures are \
             exact, from its records"
        ),
        "{ac}"
    );
    assert!(!ac.contains("Figures are exact"), "{ac}");

    // A repeated, B once: said as each did; throughput not judged, so no verdict for it.
    let ab = shown("a", "b");
    assert!(
        ab.contains(
            "(A has 2 runs at each point, B has one run at each point: a knee is a point of its \
             grid"
        ),
        "{ab}"
    );
    assert!(!ab.contains("each sweep ran once"), "{ab}");
    assert!(
        ab.contains(
            "A's cells are the means of each point's runs, estimates; each run's figures are \
             exact, from its records"
        ),
        "{ab}"
    );
    let head = cells(
        ab.lines()
            .find(|l| l.starts_with("point "))
            .expect("the table's head"),
    );
    assert_eq!(head[4], "TTFT p99 A", "{ab}");

    // No knee: the rule found none, in the sweep's words. One user to four quadruples what a
    // closed loop can send, far past the rule's 10 %, so B has none.
    let b = read(&dir.path().join("b/sweep.json"));
    assert!(b["knee"].is_null(), "c1 to c4 should scale: {b:#}");
    let knee = ab.lines().find(|l| l.starts_with("knee: ")).unwrap();
    assert!(knee.contains(NO_STEP), "{knee}");
    assert!(!ab.contains("did not saturate"), "{ab}");

    // Two experiments (a point of each): the values are means of runs, estimates; the runs'
    // ids are not a difference in context, and a run's side is still named by its id.
    let points = shown("a/point-01-c1", "c/point-01-c1");
    assert!(
        points.contains(
            "The values are the means of each side's runs, estimates (± their 95 % intervals); \
             each run's figures are exact, from its records"
        ),
        "{points}"
    );
    assert!(!points.contains("Run figures are exact"), "{points}");
    assert!(!points.contains("run_id:"), "{points}");
    let runs = shown("a/point-01-c1/run-1", "b/point-01-c1");
    let id = read(&dir.path().join("a/point-01-c1/run-1/summary.json"))["run"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(runs.starts_with(&format!("A: {id} (")), "{runs}");
    assert!(!runs.contains("run_id:"), "{runs}");
    assert!(
        runs.contains("Figures are exact, from each run's records"),
        "{runs}"
    );
}

/// A sweep whose every point failed at the target (a quarter of the answers 503s) has no knee
/// because none of its points is evidence: compare says so and names them, as the sweep's
/// own line does, where it said "the series did not saturate".
#[test]
fn compare_of_sweeps_says_no_knee_because_the_points_were_left_out() {
    let _host = shared();
    let dir = tempfile::tempdir().unwrap();
    let faults = ["--fault-rate", "0.25", "--fault", "status=503"];
    let (_sim, port) = sim_with_profile(dir.path(), r#"{"profile": "capacity"}"#, &faults);
    let url = format!("http://127.0.0.1:{port}");
    let out = sweep(
        dir.path(),
        &url,
        &["--concurrency", "1,4", "--request-count", "40"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let o = canaryd(&["compare", "out", "out"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let shown = String::from_utf8(o.stdout).unwrap();
    assert!(
        shown.contains(
            "knee: A and B none (0 of the 2 points are evidence, and a knee is a step between \
             two; left out: c1 ("
        ),
        "{shown}"
    );
    assert!(
        shown.contains("% of its requests failed at the target)"),
        "{shown}"
    );
    assert!(!shown.contains("did not saturate"), "{shown}");
    let o = canaryd(&["compare", "out", "out", "--json"], dir.path());
    let json: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        json["knee"]["a_left_out"][0]["why"], "target_errors",
        "{json}"
    );
}
