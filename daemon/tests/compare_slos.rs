//! `canaryd compare` between runs judged against different SLOs: goodput and the good fraction
//! count requests that met the SLOs, so under another threshold they are other figures, shown
//! and not judged (audit finding 1: `yes: worse` between two experiments that differed only in
//! their SLO). Real runs: the 20-row Mooncake trace replayed against the simulator.

mod common;

use common::{canaryd, ok};
use serde_json::Value;

/// Two experiments of 2 runs each, the same requests on the same simulator, one judged
/// against a TTFT SLO of 1000 ms, the other of 0.001 ms: every request is good in the first
/// and none in the second, which Welch's test on the runs' good fractions called `yes: worse`.
#[test]
fn goodput_under_different_slos_is_shown_not_judged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    for (out, slo) in [
        ("loose", "time_to_first_token:1000"),
        ("strict", "time_to_first_token:0.001"),
    ] {
        let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", &url];
        args.extend(["--model", "canary-sim", "--output-dir", out, "--no-nvml"]);
        args.extend(["--no-ebpf", "--speedup", "10", "--scale-lengths", "0.05"]);
        args.extend(["--runs", "2", "--goodput", slo]);
        ok(&canaryd(&args, dir));
    }

    let json: Value = serde_json::from_str(&ok(&canaryd(
        &["compare", "loose", "strict", "--json"],
        dir,
    )))
    .unwrap();
    let why = "different SLOs (A: time_to_first_token:1000, B: time_to_first_token:0.001)";
    assert_eq!(
        json["different_slos"]["why"], why,
        "{}",
        json["different_slos"]
    );
    let row = |metric: &str| {
        json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == metric)
            .unwrap_or_else(|| panic!("no {metric} row: {}", json["rows"]))
            .clone()
    };
    for metric in ["goodput", "good fraction"] {
        let r = row(metric);
        assert_eq!(r["verdict"]["kind"], "not_comparable", "{r}");
        assert_eq!(r["verdict"]["why"], why, "{r}");
        // The values are still shown.
        assert!(
            r["a"].as_f64().is_some() && r["b"].as_f64().is_some(),
            "{r}"
        );
    }
    // What the test is for: the strict side's requests were all judged not good.
    assert_eq!(row("good fraction")["a"].as_f64(), Some(1.0));
    assert_eq!(row("good fraction")["b"].as_f64(), Some(0.0));
    // The other rows are still judged: the SLO changes what goodput means, not a latency.
    assert_ne!(row("TTFT p50")["verdict"]["kind"], "not_comparable");

    let shown = ok(&canaryd(&["compare", "loose", "strict"], dir));
    // The goodput rows carry no verdict (the latency rows may: two runs a side on a busy host).
    for line in shown.lines().filter(|l| l.starts_with("good")) {
        assert!(!line.contains("yes: worse"), "{shown}");
    }
    assert!(shown.contains(&format!("not comparable: {why}")), "{shown}");
    assert!(
        shown.contains("Not comparable: goodput and the good fraction"),
        "{shown}"
    );
    ok(&canaryd(
        &["compare", "loose", "strict", "-o", "c.html"],
        dir,
    ));
    let html = std::fs::read_to_string(dir.join("c.html")).unwrap();
    assert!(!html.contains("yes: worse"), "{html}");
    assert!(html.contains("not comparable: different SLOs"), "{html}");

    // The same SLOs on both sides are compared as before.
    let json: Value =
        serde_json::from_str(&ok(&canaryd(&["compare", "loose", "loose", "--json"], dir))).unwrap();
    assert!(
        json["different_slos"].is_null(),
        "{}",
        json["different_slos"]
    );
}

/// The same SLO on both sides, but a side judged some requests on a time that is only a bound
/// (summary.json's `uncertain_misses`: the simulator's small answers come in one read, so a
/// first token's time is canaryd's read): its goodput rests on bounds, so the goodput rows
/// say `(bound)` and a difference is `unconfirmed`, never `yes`, and says so. A on a `fast`
/// sim, B on an `illustrative` one (hundreds of ms of TTFT), the same requests, one run each.
#[test]
fn goodput_resting_on_bounds_is_marked_and_unconfirmed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_fast, fast) = common::sim(&[]);
    let (_slow, slow) = common::sim_with_profile(dir, r#"{"profile": "illustrative"}"#, &[]);
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    for (out, port) in [("a", fast), ("b", slow)] {
        let url = format!("http://127.0.0.1:{port}");
        let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", &url];
        args.extend(["--model", "canary-sim", "--output-dir", out, "--no-nvml"]);
        args.extend(["--no-ebpf", "--speedup", "10", "--scale-lengths", "0.05"]);
        args.extend(["--goodput", "time_to_first_token:20"]);
        ok(&canaryd(&args, dir));
    }
    let uncertain: u64 = ["a", "b"]
        .iter()
        .map(|side| dir.join(side))
        .map(|run| {
            let s: Value =
                serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
            ["uncertain_misses", "uncertain_meets"]
                .iter()
                .filter_map(|k| s["goodput"][k].as_object())
                .flat_map(|m| m.values().filter_map(Value::as_u64))
                .sum::<u64>()
        })
        .sum();
    // What the test is for: some request was judged on a bound.
    assert!(uncertain > 0, "no request judged on a bound");

    let json: Value =
        serde_json::from_str(&ok(&canaryd(&["compare", "a", "b", "--json"], dir))).unwrap();
    let words = json["goodput_on_bounds"]
        .as_str()
        .unwrap_or_else(|| panic!("{json}"));
    assert!(words.starts_with("goodput rests on bounds ("), "{words}");
    assert!(
        json["different_slos"].is_null(),
        "{}",
        json["different_slos"]
    );
    let shown = ok(&canaryd(&["compare", "a", "b"], dir));
    for metric in ["goodput", "good fraction"] {
        let r = json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == metric)
            .unwrap_or_else(|| panic!("no {metric} row: {}", json["rows"]))
            .clone();
        if metric == "good fraction" {
            // Every request good on A, none on B: the rank test finds it, and with one run a
            // side and goodput on bounds it is unconfirmed for both reasons.
            let v = &r["verdict"];
            assert_eq!(v["kind"], "unconfirmed", "{r}");
            assert_eq!(
                v["because"],
                serde_json::json!(["one_run", "on_bounds"]),
                "{r}"
            );
            assert!(v["why"].as_str().unwrap().ends_with(words), "{r}");
        }
        assert!(shown.contains(&format!("{metric} (bound)")), "{shown}");
    }
    assert!(!shown.contains("yes: worse"), "{shown}");
}

/// A side of no request (the 20-row trace's shard 1 of 97 selects none) timed nothing: the
/// rule line says so, and neither that it timed first tokens at canaryd's reads nor that it
/// corrected for 0 rows (audit finding 6).
#[test]
fn a_side_of_no_request_says_nothing_of_timing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    for (out, extra) in [("zero", &["--shard", "1/97"][..]), ("a", &[][..])] {
        let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", &url];
        args.extend(["--model", "canary-sim", "--output-dir", out, "--no-nvml"]);
        args.extend(["--no-ebpf", "--speedup", "10", "--scale-lengths", "0.05"]);
        args.extend(["--goodput", "time_to_first_token:5"]);
        args.extend_from_slice(extra);
        ok(&canaryd(&args, dir));
    }
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.join("zero/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["receive_timestamps"]["requests"], 0, "{summary}");
    let shown = ok(&canaryd(&["compare", "zero", "a"], dir));
    assert!(!shown.contains("timed some first tokens"), "{shown}");
    assert!(!shown.contains("all 0 first tokens"), "{shown}");
    assert!(!shown.contains("for the 0 rows"), "{shown}");
}
