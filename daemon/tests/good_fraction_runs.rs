//! The good fraction of a `--runs N` experiment (good requests over requests judged): its
//! table, `summary.json` and page gave goodput's mean over the runs, marked when its
//! judgements rest on bounds (`good_bounds`), but no good fraction. Real runs: `canaryd
//! replay --runs 2` of a real trace against `canaryd sim`, receive timestamps off, so every
//! TTFT is canaryd's read and every miss of a TTFT no request meets rests on a bound.

mod common;

use common::{canaryd, count, json, page_words, shared, sim, text};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// `doc` checked against `core/summary.schema.json`'s `$defs/NAME`.
fn assert_valid(doc: &Value, name: &str) {
    let root = json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json"));
    let schema = serde_json::json!({
        "$schema": root["$schema"],
        "$ref": format!("#/$defs/{name}"),
        "$defs": root["$defs"],
    });
    let v = jsonschema::draft202012::new(&schema).expect("a valid schema");
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// `canaryd replay --runs 2` of the 20-row Mooncake arXiv trace at 10x against `url` into
/// `DIR/out`, receive timestamps off, judged by `slo`.
fn replay(dir: &Path, url: &str, slo: &str) -> Output {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let args = [
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--url",
        url,
        "--model",
        "canary-sim",
        "--output-dir",
        "out",
        "--no-nvml",
        "--no-ebpf",
        "--no-kernel-timestamps",
        "--scale-lengths",
        "0.05",
        "--speedup",
        "10",
        "--runs",
        "2",
        "--slo",
        slo,
    ];
    canaryd(&args, dir)
}

/// The experiment's figure `metric` in `summary.json`.
fn figure<'a>(doc: &'a Value, metric: &str) -> &'a Value {
    doc["repeats"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == metric)
        .unwrap_or_else(|| panic!("no {metric}: {doc}"))
}

// A TTFT no request meets: every run's good fraction is 0 as judged, and every judgement a
// miss on an upper bound, so truly anywhere from 0 to 1. The figure is marked as goodput is,
// with each run's range and the mean at either end; two runs alike give no spread.
#[test]
fn an_experiments_good_fraction_on_bounds_is_marked_with_each_runs_range() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = replay(dir, &url, "time_to_first_token:0.001");
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let doc = json(&dir.join("out/summary.json"));
    assert_valid(&doc, "repeats_summary");
    let g = figure(&doc, "good_request_fraction");
    assert_eq!(g["unit"], "fraction", "{g}");
    assert_eq!(g["bound"], true, "{g}");
    let b = &g["good_bounds"];
    let (mut least, mut most) = (0.0, 0.0);
    for r in 1..=2 {
        let run = json(&dir.join(format!("out/run-{r}/summary.json")));
        let good = &run["goodput"];
        assert_eq!(
            g["values"][r - 1].as_f64(),
            good["good_request_fraction"].as_f64(),
            "{g}"
        );
        let judged = count(&run["requests"]) - count(&run["client_errors"]) - {
            // `cancelled` is absent from a run that cancelled none.
            run.get("cancelled").map_or(0, count)
        };
        let (l, m) = (
            count(&good["good_requests_at_least"]),
            count(&good["good_requests_at_most"]),
        );
        assert!(m > l, "{good}");
        assert_eq!(b["good_requests_at_least"][r - 1], l, "{b}");
        assert_eq!(b["good_requests_at_most"][r - 1], m, "{b}");
        least += l as f64 / judged as f64 / 2.0;
        most += m as f64 / judged as f64 / 2.0;
    }
    let near = |v: &Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-9;
    assert!(near(&b["mean_at_least"], least), "{b} vs {least}");
    assert!(near(&b["mean_at_most"], most), "{b} vs {most}");
    // As goodput's: the same judgements on a bound.
    assert_eq!(
        b["judgements_on_bound"],
        figure(&doc, "goodput")["good_bounds"]["judgements_on_bound"],
        "{doc}"
    );
    // Both runs judged nothing good: the same figure, no spread (as goodput's rule).
    assert_eq!(g["no_spread"], true, "{g}");

    let row = said
        .lines()
        .find(|l| l.trim_start().starts_with("good fraction"))
        .unwrap_or_else(|| panic!("no good fraction row: {said}"));
    assert!(row.contains("good fraction (bound)"), "{row}");
    assert!(
        row.contains("0.000 (no spread: all 2 runs gave it"),
        "{row}"
    );
    let on_bound = count(&b["judgements_on_bound"]);
    let num = |v: f64| match v.abs() {
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    };
    assert!(
        said.contains(&format!(
            "{on_bound} judgements rest on a bound, as goodput's: the mean had the truth been \
             at either end: {} to {}",
            num(least),
            num(most)
        )),
        "{said}"
    );

    // The experiment's page: the good fraction's row, marked * as the goodput's.
    let page = canaryd(&["report", "out", "-o", "r.html"], dir);
    assert!(page.status.success(), "{}", text(&page));
    let html = std::fs::read_to_string(dir.join("r.html")).unwrap();
    let words = page_words(&html);
    assert!(
        words.contains("good fraction 0* no spread: every run gave it; not estimable 2 0, 0"),
        "{words}"
    );
    assert!(
        words.contains("so the goodput and good fraction marked * are exact in neither"),
        "{words}"
    );
}
