//! Goodput judged on bounds in the aggregate views (audit findings 2, 2b and 13): with receive
//! timestamps off every time is canaryd's read, so a TTFT miss is judged on an upper bound and
//! may be a meet (`summary.json`'s `uncertain_misses`). A run's own table and page said so; the
//! `--runs` experiment, the sweep's table, `sweep.json`, the series page and the capacity
//! search called the same goodput exact. Real runs: `canaryd replay` / `canaryd sweep` of a
//! real trace against `canaryd sim`.

mod common;

use common::{canaryd, count, json, page_words, shared, sim, text};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// A TTFT no request meets: every judgement a miss on canaryd's read, an upper bound.
const SLO: &str = "time_to_first_token:0.001";

/// `canaryd CMD` of the 20-row Mooncake arXiv trace against `url`, receive timestamps off,
/// judged by [`SLO`], into `DIR/out`, plus `extra`.
fn run(cmd: &str, dir: &Path, url: &str, extra: &[&str]) -> Output {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let mut args = vec![cmd, "--trace", trace.to_str().unwrap(), "--url", url];
    args.extend(["--model", "canary-sim", "--output-dir", "out", "--no-nvml"]);
    args.extend([
        "--no-ebpf",
        "--no-kernel-timestamps",
        "--scale-lengths",
        "0.05",
    ]);
    args.extend(["--slo", SLO]);
    args.extend_from_slice(extra);
    canaryd(&args, dir)
}

/// `canaryd report DIR -o r.html` in `dir`: the page's text, tags dropped, spaces folded.
fn page(dir: &Path, folder: &str) -> String {
    let out = canaryd(&["report", folder, "-o", "r.html"], dir);
    assert!(out.status.success(), "{}", text(&out));
    page_words(&std::fs::read_to_string(dir.join("r.html")).unwrap())
}

// Finding 2: the experiment's summary.json said goodput `bound: false` and its table printed
// goodput unmarked, though each run's goodput rested on misses judged on bounds; its page's
// note said "goodput exact".
#[test]
fn an_experiments_goodput_on_bounds_is_marked_with_each_runs_range() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = run("replay", dir, &url, &["--speedup", "10", "--runs", "2"]);
    let said = text(&out);
    let doc = json(&dir.join("out/summary.json"));
    let goodput = doc["repeats"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "goodput")
        .unwrap_or_else(|| panic!("no goodput: {doc}"));
    assert_eq!(goodput["bound"], true, "{goodput}");
    let b = &goodput["good_bounds"];
    let mut on_bound = 0;
    for r in 1..=2 {
        let g = &json(&dir.join(format!("out/run-{r}/summary.json")))["goodput"];
        let missed = count(&g["uncertain_misses"]["time_to_first_token"]);
        assert!(missed > 0, "{g}");
        on_bound += missed;
        assert_eq!(
            b["good_requests_at_most"][r - 1],
            g["good_requests_at_most"],
            "{b}"
        );
        assert_eq!(
            b["good_requests_at_least"][r - 1],
            g["good_requests_at_least"],
            "{b}"
        );
    }
    assert_eq!(count(&b["judgements_on_bound"]), on_bound, "{b}");
    assert!(said.contains("goodput (bound)"), "{said}");
    assert!(
        said.contains(&format!("{on_bound} goodput judgements rest on a bound")),
        "{said}"
    );
    let text = page(dir, "out");
    assert!(!text.contains("goodput exact"), "{text}");
    assert!(
        text.contains(&format!(
            "{on_bound} of the runs' goodput judgements rest on a bound"
        )),
        "{text}"
    );
}

// Finding 2b: `replay --min-good-fraction` failed a run on a good share that rests on misses
// judged on bounds and did not say the truth could pass it.
#[test]
fn a_fail_the_bounds_could_turn_says_so_in_its_verdict() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = run(
        "replay",
        dir,
        &url,
        &["--speedup", "10", "--min-good-fraction", "0.9"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let g = json(&dir.join("out/summary.json"))["goodput"].clone();
    let (least, most) = (
        count(&g["good_requests_at_least"]),
        count(&g["good_requests_at_most"]),
    );
    let judged = 20;
    assert!(most as f64 / judged as f64 >= 0.9, "{g}");
    let said = text(&out);
    let line = said
        .lines()
        .find(|l| l.contains("verdict: fail: good-request fraction"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains(&format!(
            "which rests on bounds: up to {:.1} % may be good",
            100.0 * most as f64 / judged as f64
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!("truly good {least} to {most} of {judged}")),
        "{line}"
    );
}

// Findings 2 and 13: the sweep's table said "good: exact" and left its good cells unmarked
// beside marked TTFT cells; sweep.json had no range; the series page had no good column.
#[test]
fn a_sweeps_good_cells_on_bounds_are_marked_in_its_table_json_and_page() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = run("sweep", dir, &url, &["--speedup", "5,10"]);
    let said = text(&out);
    let doc = json(&dir.join("out/sweep.json"));
    let points = doc["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{said}");
    for p in points {
        let bounds: Vec<&str> = p["bounds"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(bounds.contains(&"goodput"), "{p}");
        assert!(count(&p["good_judged_on_bound"]) > 0, "{p}");
        assert!(
            count(&p["good_requests_at_most"]) > count(&p["good_requests"]),
            "{p}"
        );
        let label = p["label"].as_str().unwrap();
        let row = said
            .lines()
            .find(|l| l.starts_with(&format!("{:02} {label}", count(&p["index"]))))
            .unwrap_or_else(|| panic!("no row {label}: {said}"));
        assert!(row.contains("0.0%*"), "{row}");
    }
    assert!(
        said.contains("good*: some of the point's goodput judgements"),
        "{said}"
    );
    let text = page(dir, "out");
    // The series page's good column, each cell marked as the sweep's table marks it.
    assert_eq!(text.matches("0.00 %*").count(), 2, "{text}");
    assert!(
        text.contains("One marked * rests on judgements made on a bound"),
        "{text}"
    );
}

// Finding 2b: a capacity search's failing probes rested entirely on misses judged on bounds,
// and its answer called "below R (failed)" established; sweep.json had no field for it.
#[test]
fn a_capacity_end_the_bounds_could_turn_is_called_not_established() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = canaryd(
        &[
            "sweep",
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--no-ebpf",
            "--no-nvml",
            "--no-kernel-timestamps",
            "-o",
            "cap",
            "--find-max-rate",
            "--slo",
            SLO,
            "--min-good-fraction",
            "0.9",
            "--request-rate",
            "20",
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "1s",
            "--max-runs",
            "2",
            "--isl",
            "32",
            "--osl",
            "4",
        ],
        dir,
    );
    let said = text(&out);
    let doc = json(&dir.join("cap/sweep.json"));
    let c = &doc["capacity"];
    let failed = c["min_failing_rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("{c}: {said}"));
    let ends = c["not_established"]
        .as_array()
        .unwrap_or_else(|| panic!("{c}"));
    let end = ends
        .iter()
        .find(|e| e["end"] == "failed")
        .unwrap_or_else(|| panic!("{c}"));
    assert_eq!(end["rate"].as_f64(), Some(failed), "{c}");
    assert!(
        end["why"]
            .as_str()
            .unwrap()
            .starts_with("rests on bounds: up to"),
        "{c}"
    );
    let rate = canary_core::rate_text::rate_below(failed);
    let want = format!("not established: the fail at {rate} req/s rests on bounds: up to");
    let line = said
        .lines()
        .find(|l| l.starts_with("capacity at SLO"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(line.contains(&want), "{line}");
    let text = page(dir, "cap");
    assert!(text.contains(&want), "{text}");
    assert!(!text.contains("so they still hold"), "{text}");
}
