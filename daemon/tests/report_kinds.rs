//! Every figure of a run's page and of a comparison says what kind it is: the headline's
//! duration an upper bound and its rates lower bounds, as the run table says them; a side of
//! no request says nothing of how its times were taken. Real runs: the 20-row Mooncake arXiv
//! trace replayed against `canaryd sim`.

mod common;

use common::{canaryd, json, page_words, shared, sim, text};
use std::path::Path;

/// `canaryd replay` of the 20-row trace against `url` into `dir/out`, receive timestamps off
/// (every time canaryd's read, whatever the host), plus `extra`; what it printed (its run
/// table).
fn replay(dir: &Path, url: &str, out: &str, extra: &[&str]) -> String {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", url];
    args.extend(["--model", "canary-sim", "--output-dir", out, "--no-nvml"]);
    args.extend(["--no-ebpf", "--no-kernel-timestamps", "--speedup", "10"]);
    args.extend(["--scale-lengths", "0.05"]);
    args.extend_from_slice(extra);
    let o = canaryd(&args, dir);
    assert!(dir.join(out).join("summary.json").is_file(), "{}", text(&o));
    text(&o)
}

/// `canaryd report DIR/run`: the page's words.
fn page(dir: &Path, run: &str) -> String {
    let html = format!("{run}.html");
    let o = canaryd(&["report", run, "-o", &html], dir);
    assert!(o.status.success(), "{}", text(&o));
    page_words(&std::fs::read_to_string(dir.join(html)).unwrap())
}

/// The tile whose label starts `label`: its value and label, as the page's words give them
/// (the tiles are between the headline's start and the latency table).
fn tile<'a>(page: &'a str, label: &str) -> &'a str {
    let at = page
        .find(label)
        .unwrap_or_else(|| panic!("no tile {label}: {page}"));
    let start = page[..at]
        .rfind(" s ")
        .or(page[..at].rfind("/s "))
        .unwrap_or(at);
    let end = page[at..].find(')').map_or(page.len(), |e| at + e + 1);
    &page[start..end]
}

// The headline's tiles gave the duration and the rates with no kind, while the run table
// (`canaryd replay`'s) calls the duration an upper bound (to the last end as canaryd read
// it) and the rates lower bounds (exact counts over it).
#[test]
fn the_headline_says_the_duration_is_an_upper_bound_and_the_rates_lower_bounds() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // An e2e SLO every request meets on its bound (at most 60 s): no judgement rests on a
    // bound, so the good count is exact and goodput an exact count over the duration.
    let table = replay(dir, &url, "loose", &["--goodput", "request_latency:60000"]);
    // A TTFT no request meets, judged on canaryd's reads (upper bounds): every miss may be
    // a meet.
    replay(
        dir,
        &url,
        "strict",
        &["--goodput", "time_to_first_token:0.001"],
    );
    let summary = json(&dir.join("loose/summary.json"));
    assert!(
        summary["request_throughput"].as_f64() > Some(0.0),
        "{summary}"
    );
    let words = page(dir, "loose");
    // The table's words, which the page's now follow.
    assert!(
        table.contains("an upper bound: to the last end as canaryd read it")
            && table.contains("lower bounds: exact counts over the duration"),
        "{table}"
    );
    assert!(
        words.contains(
            "s first send to last end (an upper bound: to the last end as canaryd read it)"
        ),
        "{}",
        tile(&words, "first send to last end")
    );
    for label in ["completed per second", "output tokens per second"] {
        assert!(
            words.contains(&format!(
                "/s {label} (a lower bound: the exact count over the duration)"
            )),
            "{}",
            tile(&words, label)
        );
    }
    assert!(
        words.contains(
            "goodput against request_latency:60000 (the rate a lower bound: the good count \
             over the duration; the share exact)"
        ),
        "{words}"
    );
    let words = page(dir, "strict");
    let g = &json(&dir.join("strict/summary.json"))["goodput"];
    assert!(
        g["uncertain_misses"]["time_to_first_token"].as_u64() > Some(0),
        "no judgement rests on a bound: the check below would test nothing: {g}"
    );
    assert!(
        words.contains(
            "goodput against time_to_first_token:0.001 (estimates: some judgements rest on \
             a bound, see below)"
        ),
        "{words}"
    );
}

// `canaryd compare` of a run of no request (the 20-row trace's shard 1 of 97 selects none)
// with receive timestamps off said of it "1 run timed some first tokens or ends at canaryd's
// reads": it read nothing.
#[test]
fn a_side_of_no_request_with_receive_timestamps_off_says_nothing_of_reads() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    replay(dir, &url, "zero", &["--shard", "1/97"]);
    replay(dir, &url, "some", &[]);
    let zero = json(&dir.join("zero/summary.json"));
    assert_eq!(
        (&zero["requests"], &zero["receive_timestamps"]["state"]),
        (&serde_json::json!(0), &serde_json::json!("off")),
        "{zero}"
    );
    let o = canaryd(&["compare", "zero", "some"], dir);
    assert!(o.status.success(), "{}", text(&o));
    let shown = text(&o);
    // B read its times: said of B, and of A that it timed nothing.
    assert!(
        shown.contains("B: 1 run timed some first tokens or ends at canaryd's reads"),
        "{shown}"
    );
    assert!(shown.contains("ITL: A: no request timed; B:"), "{shown}");
    assert!(!shown.contains("A: 1 run timed"), "{shown}");
    let o = canaryd(&["compare", "zero", "some", "--json"], dir);
    assert!(o.status.success(), "{}", text(&o));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["a"]["token_events"]["read_runs"], 0, "{}", c["a"]);
    assert_eq!(c["a"]["itl"]["uncounted_runs"], 0, "{}", c["a"]);
    assert_eq!(c["b"]["token_events"]["read_runs"], 1, "{}", c["b"]);
    // The other way round, the same.
    let shown = text(&canaryd(&["compare", "some", "zero"], dir));
    assert!(shown.contains("; B: no request timed"), "{shown}");
    assert!(!shown.contains("B: 1 run timed"), "{shown}");
}
