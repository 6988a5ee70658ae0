//! What `canaryd report` says of figures that rest on a bound, on real runs (`canaryd replay`
//! of a real trace against `canaryd sim`): goodput judgements made on times read late, a TTFB
//! whose head was read with later bytes, and an experiment whose `summary.json` is damaged.

mod common;

use common::{count, json, page_words, shared, sim, text, CANARYD};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn canaryd(args: &[&str], cwd: &Path) -> Output {
    Command::new(CANARYD)
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("canaryd runs")
}

/// `canaryd replay` of the 20-row Mooncake arXiv trace at 10x against `url` into `DIR/out`,
/// plus `extra`; what it printed.
fn replay(dir: &Path, url: &str, extra: &[&str]) -> String {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", url];
    args.extend(["--model", "canary-sim", "--output-dir", "out", "--no-nvml"]);
    args.extend(["--no-ebpf", "--speedup", "10", "--scale-lengths", "0.05"]);
    args.extend_from_slice(extra);
    let out = canaryd(&args, dir);
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

/// `canaryd report DIR -o r.html` in `dir`: the page's text, tags dropped.
fn page(dir: &Path, run: &str) -> String {
    let out = canaryd(&["report", run, "-o", "r.html"], dir);
    assert!(out.status.success(), "{}", text(&out));
    page_words(&std::fs::read_to_string(dir.join("r.html")).unwrap())
}

// The page's goodput said how many requests were good and nothing of the judgements that rest
// on a time read late (summary.json's uncertain_misses / uncertain_meets), though each could
// go the other way: with receive timestamps off every time is canaryd's read, so a TTFT miss
// may be a meet and an ITL meet a miss.
#[test]
fn the_page_says_which_goodput_judgements_rest_on_a_bound() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    replay(
        dir,
        &url,
        &[
            "--no-kernel-timestamps",
            "--slo",
            "time_to_first_token:0.001 inter_token_latency:100000",
        ],
    );
    let summary = json(&dir.join("out/summary.json"));
    let g = &summary["goodput"];
    let missed = count(&g["uncertain_misses"]["time_to_first_token"]);
    let met = count(&g["uncertain_meets"]["inter_token_latency"]);
    assert!(missed > 0 && met > 0, "{g}");
    let (good, low, high) = (
        count(&g["good_requests"]),
        count(&g["good_requests_at_least"]),
        count(&g["good_requests_at_most"]),
    );
    assert!(low < high, "{g}");
    let said = format!(
        "good {good} (truly {low} to {high}: {missed} misses and {met} meets rest on a bound, a \
         time read late, and may go the other way: time_to_first_token missed {missed}, \
         inter_token_latency met {met})"
    );
    let text = page(dir, "out");
    assert!(text.contains(&said), "no {said:?} in {text}");
    assert!(
        text.contains(&format!(
            "{low} to {high} requests truly good ({good} judged good; {} judgements rest on a \
             bound: see below)",
            missed + met
        )),
        "{text}"
    );
    // A summary.json without its goodput block (an older canaryd's): the report judges the
    // records itself, by their rx, and says the same.
    let mut older = summary.clone();
    older.as_object_mut().unwrap().remove("goodput");
    std::fs::write(dir.join("out/summary.json"), older.to_string()).unwrap();
    let text = page(dir, "out");
    assert!(
        text.contains("Goodput judged here from records.jsonl"),
        "{text}"
    );
    assert!(text.contains(&said), "no {said:?} in {text}");

    // Judged on exact times only (no SLO a bound could turn): nothing said.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    replay(
        dir,
        &url,
        &["--no-kernel-timestamps", "--slo", "request_latency:100000"],
    );
    let g = &json(&dir.join("out/summary.json"))["goodput"];
    assert!(g.get("uncertain_misses").is_none(), "{g}");
    let text = page(dir, "out");
    assert!(!text.contains("rest on a bound"), "{text}");
    assert!(!text.contains("truly good"), "{text}");
}

// A non-streaming answer comes in one write, so its head is read with its body: the head's
// receive stamp is the body's (kernel_bound), and TTFB only an upper bound. summary.csv called
// TTFB exact, summary.json did not count the heads, and the page showed no TTFB.
#[test]
fn a_ttfb_over_a_head_read_with_its_body_is_called_an_upper_bound() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let printed = replay(dir, &url, &["--no-streaming"]);
    let records = std::fs::read_to_string(dir.join("out/records.jsonl")).unwrap();
    let heads: Vec<String> = records
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["status"] == "ok")
        .map(|r| r["rx"]["head"].as_str().unwrap_or("userspace").to_string())
        .collect();
    let late = heads.iter().filter(|h| *h != "kernel").count();
    assert!(late > 0, "every head exact: {heads:?}");
    let summary = json(&dir.join("out/summary.json"));
    let rx = &summary["receive_timestamps"];
    if count(&rx["requests"]) > 0 {
        let counted: u64 = rx["head"]
            .as_object()
            .unwrap_or_else(|| panic!("heads not counted: {rx}"))
            .iter()
            .filter(|(k, _)| *k != "kernel")
            .map(|(_, n)| count(n))
            .sum();
        assert_eq!(counted, late as u64, "{rx}");
    }
    let csv = std::fs::read_to_string(dir.join("out/summary.csv")).unwrap();
    let row = csv
        .lines()
        .find(|l| l.starts_with("time_to_first_byte,"))
        .unwrap_or_else(|| panic!("no TTFB row: {csv}"));
    assert!(row.ends_with(",upper_bound,estimate"), "{row}");
    // The table replay prints at the end had no TTFB row: now one, marked a bound, with
    // summary.json's figures, and the heads counted as the first tokens are.
    let ttfb = printed
        .lines()
        .find(|l| l.starts_with("TTFB (ms"))
        .unwrap_or_else(|| panic!("no TTFB row: {printed}"));
    assert!(ttfb.starts_with("TTFB (ms, bound) "), "{printed}");
    let st = &summary["time_to_first_byte"];
    let cells: Vec<&str> = ttfb["TTFB (ms, bound)".len()..]
        .split_whitespace()
        .collect();
    let want: Vec<String> = ["avg", "min", "p50", "p90", "p99", "max"]
        .iter()
        .map(|k| format!("{:.3}", st[k].as_f64().unwrap()))
        .collect();
    assert_eq!(cells, want, "{ttfb}\n{st}");
    if count(&rx["requests"]) > 0 {
        let n = |k: &str| rx["head"][k].as_u64().unwrap_or(0);
        assert!(
            printed.contains(&format!(
                "response heads timed: {} by the kernel's stamp (exact), {} read with later \
                 bytes or by a later segment's stamp (upper bounds), {} by canaryd's read",
                n("kernel"),
                n("kernel_bound"),
                n("userspace")
            )),
            "{printed}"
        );
    }
    assert!(
        printed.contains("so TTFB, TTFT, TTFO and latency are upper bounds"),
        "{printed}"
    );
    let text = page(dir, "out");
    assert!(text.contains("TTFB (upper bound)"), "{text}");
    assert!(
        text.contains(&format!("TTFB: {late} of {} are upper bounds", heads.len())),
        "{text}"
    );
}

// `canaryd compare` refused an experiment whose summary.json has a repeats.per_run that is not
// a list, naming the field; `canaryd report` passed it over and drew its run folders as a
// series, a page of another kind, with no word of the damage.
#[test]
fn report_refuses_an_experiment_whose_per_run_is_not_a_list_as_compare_does() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    replay(dir, &url, &["--runs", "2", "--max-requests", "4"]);
    let path = dir.join("out/summary.json");
    let mut summary = json(&path);
    assert_eq!(summary["repeats"]["per_run"].as_array().unwrap().len(), 2);
    summary["repeats"]["per_run"] = Value::String("run-1,run-2".into());
    std::fs::write(&path, summary.to_string()).unwrap();
    let why = "summary.json: repeats.per_run: expected an array (one entry per run), found \
               string \"run-1,run-2\"";
    let compared = canaryd(&["compare", "out", "out"], dir);
    assert!(!compared.status.success(), "{}", text(&compared));
    assert!(text(&compared).contains(why), "{}", text(&compared));
    let reported = canaryd(&["report", "out", "-o", "r.html"], dir);
    assert!(!reported.status.success(), "{}", text(&reported));
    assert!(text(&reported).contains(why), "{}", text(&reported));
    assert!(!dir.join("r.html").exists());
    // Among a series' folders too: refused, not passed over.
    let reported = canaryd(&["report", ".", "-o", "r.html"], dir);
    assert!(!reported.status.success(), "{}", text(&reported));
    assert!(text(&reported).contains(why), "{}", text(&reported));
}
