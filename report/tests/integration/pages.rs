//! What the page says of each kind of folder.

use crate::fixtures::{json_file, report, run, text, Load};
use serde_json::json;

/// A `--runs 3` experiment's `summary.json`: run-3 errored and is left out of its estimates.
fn experiment_summary() -> serde_json::Value {
    json!({"schema_version": 2, "repeats": {
        "runs_asked": 3, "runs": 3, "confidence": 0.95, "interrupted": false,
        "per_run": [
            {"dir": "run-1", "run_id": "r-1", "verdict": "pass", "interrupted": false},
            {"dir": "run-2", "run_id": "r-2", "verdict": "pass", "interrupted": false},
            {"dir": "run-3", "run_id": "r-3", "interrupted": false,
             "verdict": "error: target unusable: none of 50 requests completed (timeout: 50)",
             "left_out": "error: target unusable: none of 50 requests completed (timeout: 50)"}],
        "metrics": [
            {"metric": "time_to_first_token", "statistic": "p99", "unit": "ms",
             "values": [10.0, 20.0], "n": 2, "mean": 15.0, "half_width": 63.5},
            {"metric": "request_throughput", "statistic": "value", "unit": "requests/s",
             "values": [100.0, 100.8], "n": 2, "mean": 100.4, "half_width": 6.35}]}})
}

// `report` of a `--runs 3` folder drew the repeats as a load series and found a knee in noise
// ("Knee at run-1 (100 req/s)"), and drew the errored run-3, which the experiment's means
// leave out, as a point.
#[test]
fn an_experiment_is_its_estimates_with_no_knee_and_its_left_out_run_named() {
    let tmp = tempfile::tempdir().unwrap();
    let exp = tmp.path().join("exp");
    run(&exp.join("run-1"), &Load::new(100.0, 10.0), None);
    run(&exp.join("run-2"), &Load::new(101.0, 20.0), None);
    run(&exp.join("run-3"), &Load::new(100.0, 5.0).failing(1), None);
    json_file(&exp.join("summary.json"), &experiment_summary());
    let (html, said) = report(&[&exp]);
    let page = text(&html);
    assert!(said.contains("(3 run(s), 150 requests"), "{said}");
    assert!(page.contains("experiment exp (3 runs)"), "{page}");
    assert!(!page.contains("Knee"), "{page}");
    assert!(!html.contains("id=\"sweep-latency\""), "a series' chart");
    assert!(!html.contains("id=\"sweep-pareto\""), "a series' chart");
    // The experiment's own figures, with their intervals. These records have no `rx`
    // (canaryd's reads), so each run's TTFT is an upper bound, and so is their mean.
    assert!(
        page.contains("TTFT p99 ≤ 15 ms ± 63.5 ms 2 10, 20"),
        "{page}"
    );
    assert!(page.contains("throughput 100 req/s ± 6.35 req/s"), "{page}");
    assert!(page.contains("over the 2 of 3 runs"), "{page}");
    // Each run's percentiles are its summary.json's, from histograms: estimates, not exact.
    assert!(!page.contains("exact from that run"), "{page}");
    assert!(
        page.contains(
            "Each run's own is its summary.json's: throughputs exact (counted over the run), \
             goodput an exact count of judgements, percentiles estimates from its histograms, \
             within 0.1 % or 0.5 µs, whichever is larger."
        ),
        "{page}"
    );
    assert!(page.contains("run-3 r-3 error: target unusable"), "{page}");
    assert!(page.contains("left out: its verdict"), "{page}");
    assert!(
        page.contains("Run 3: run-3 (left out of the estimates: error: target unusable"),
        "{page}"
    );
    // The overlay is of the runs the estimates are over.
    let overlay = html.split("id=\"series-ttft-cdf\"").nth(1).unwrap();
    let overlay = overlay.split("</figure>").next().unwrap();
    assert!(
        overlay.contains("run-2") && !overlay.contains("run-3"),
        "{overlay}"
    );
}

/// A sweep's folder: c1, c4 and c8 in `point-NN-cX`; c8's throughput barely grows while its
/// TTFT p99 triples (a knee at c4, by the rule), but `sweep.json` says the open-file limit
/// capped c8, so it has no knee.
fn capped_sweep(dir: &std::path::Path) {
    run(&dir.join("point-01-c1"), &Load::new(20.0, 10.0), None);
    run(&dir.join("point-02-c4"), &Load::new(80.0, 12.0), None);
    run(&dir.join("point-03-c8"), &Load::new(82.0, 40.0), None);
    let capped = "capped by the open-file limit at 6 requests in flight, below its 8 users: \
                  its figures are of a lighter load than its label (left out of the knee and \
                  the Pareto front)";
    json_file(
        &dir.join("sweep.json"),
        &json!({"schema_version": 1, "kind": "sweep", "axis": "concurrency", "knee": null,
                "pareto": ["c1", "c4"], "notes": ["tokens/s per GPU unknown"],
                "points": [
                    {"index": 1, "label": "c1", "value": 1.0, "dir": "point-01-c1",
                     "verdict": "pass", "pareto": true},
                    {"index": 2, "label": "c4", "value": 4.0, "dir": "point-02-c4",
                     "verdict": "pass", "pareto": true},
                    {"index": 3, "label": "c8", "value": 8.0, "dir": "point-03-c8",
                     "verdict": "pass", "capped": true, "notes": [capped]}]}),
    );
}

// `report` of a sweep computed its own knee and front, leaving out only points a signal cut
// short: where sweep.json left a capped point out and found no knee, the page said "Knee at
// point-02-c4", and never said the point was capped.
#[test]
fn a_sweeps_knee_front_and_left_out_points_are_its_sweep_json() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("sweep");
    capped_sweep(&sweep);
    let (html, _) = report(&[&sweep]);
    let page = text(&html);
    assert!(!page.contains("Knee at"), "{page}");
    assert!(page.contains("No knee (sweep.json's)"), "{page}");
    assert!(page.contains("left out: capped"), "{page}");
    assert!(
        page.contains("point-03-c8: capped by the open-file limit at 6 requests in flight"),
        "{page}"
    );
    assert!(page.contains("tokens/s per GPU unknown"), "{page}");
    // Crossed out on both charts.
    assert_eq!(
        html.matches("data-name=\"left out of knee and front\"")
            .count(),
        2
    );
    // The front is sweep.json's: c1 and c4.
    assert_eq!(page.matches("Pareto left out").count(), 0, "{page}");
    assert!(page.contains("0.00 % Pareto point-02-c4"), "{page}");
}

// With no sweep.json (runs named together), the report finds the knee itself and left out
// only runs a signal cut short: a run with 20 % of its requests failing made a knee of the
// run before it, and one the open-file limit held under its load counted as a step.
#[test]
fn a_series_leaves_out_what_the_sweep_would_capped_and_errored_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run(&tmp.path().join("a"), &Load::new(20.0, 10.0), None);
    let b = run(&tmp.path().join("b"), &Load::new(80.0, 12.0), None);
    // 20 % errors: its figures are of the requests that were served.
    let c = run(
        &tmp.path().join("c"),
        &Load::new(82.0, 40.0).failing(5),
        None,
    );
    let (html, _) = report(&[&a, &b, &c]);
    let page = text(&html);
    assert!(!page.contains("Knee at"), "{page}");
    assert!(page.contains("left out: errors over 5 %"), "{page}");
    assert!(
        page.contains("c: 20.0 % of its requests failed at the target (over 5 %)"),
        "{page}"
    );
    // Held for a slot under the open-file limit: a lighter load than its own.
    let capped = json!({"schema_version": 2, "in_flight_cap":
        {"limit": 15, "source": "open_files", "waited": 40}});
    let c = run(&tmp.path().join("c2"), &Load::new(82.0, 40.0), Some(capped));
    let (html, _) = report(&[&a, &b, &c]);
    let page = text(&html);
    assert!(!page.contains("Knee at"), "{page}");
    assert!(
        page.contains(
            "c2: capped by the open-file limit at 15 requests in flight: 40 requests waited"
        ),
        "{page}"
    );
    // The same three runs, none left out: the knee is found.
    let c = run(&tmp.path().join("c3"), &Load::new(82.0, 40.0), None);
    let (html, _) = report(&[&a, &b, &c]);
    assert!(text(&html).contains("Knee at b ("), "{}", text(&html));
}

// A point whose records.jsonl was gone was left out of the page without a word (and the knee
// found on the points left).
#[test]
fn a_sweep_point_without_its_records_is_named_on_the_page() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("sweep");
    capped_sweep(&sweep);
    std::fs::remove_file(sweep.join("point-02-c4/records.jsonl")).unwrap();
    let (html, said) = report(&[&sweep]);
    assert!(said.contains("(2 run(s)"), "{said}");
    let page = text(&html);
    assert!(
        page.contains(
            "point-02-c4 (c4): sweep.json lists this point but its folder has no records.jsonl \
             (verdict: pass): it is not on this page"
        ),
        "{page}"
    );
}
