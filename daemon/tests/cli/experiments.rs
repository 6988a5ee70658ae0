//! Repeat runs with confidence intervals and timeslices (issue 18), as real `canaryd`
//! processes against `canaryd sim`, replaying the real Mooncake traces.

use super::{canaryd, receiver::Receiver};
use crate::common::{http, shared, sim, sim_with_profile, text, CANARYD};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}

fn schema() -> Value {
    json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json"))
}

/// `doc` checked against `core/summary.schema.json`, or against its `$defs/NAME`.
pub(crate) fn assert_valid(doc: &Value, def: Option<&str>) {
    let root = schema();
    let schema = match def {
        None => root,
        Some(name) => serde_json::json!({
            "$schema": root["$schema"],
            "$ref": format!("#/$defs/{name}"),
            "$defs": root["$defs"],
        }),
    };
    let v = jsonschema::draft202012::new(&schema).expect("a valid schema");
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// `canaryd replay` of the 20-row Mooncake arXiv trace at 10x into `DIR/out`, plus `extra`.
fn replay(dir: &Path, url: &str, extra: &[&str]) -> std::process::Output {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", url];
    args.extend(["--model", "canary-sim", "--output-dir", "out", "--no-nvml"]);
    args.extend(["--no-ebpf", "--speedup", "10", "--scale-lengths", "0.05"]);
    args.extend_from_slice(extra);
    canaryd(&args, dir)
}

#[test]
fn runs_give_each_headline_figure_a_t_interval_and_each_run_its_folder() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = replay(dir.path(), &url, &["--runs", "3"]);
    assert!(out.status.success(), "{}", text(&out));
    // Three runs are few: the table says how wide Student's t makes the interval, in the
    // sweep's words.
    assert!(
        text(&out).contains(
            "few runs: with 3 runs a figure's 95% half-width is Student's t on 2 degrees of \
             freedom (4.30) times s/√3, 2.48 times the runs' standard deviation s"
        ),
        "{}",
        text(&out)
    );
    let root = dir.path().join("out");

    // Each run is a full run with its own artifacts, its own run id and its own salt.
    let mut ttft_p50 = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    let mut salts = std::collections::BTreeSet::new();
    for i in 1..=3 {
        let run = root.join(format!("run-{i}"));
        let s = json(&run.join("summary.json"));
        assert_valid(&s, None);
        assert_eq!(s["requests"], 20, "run {i}");
        assert_eq!(
            std::fs::read_to_string(run.join("records.jsonl"))
                .unwrap()
                .lines()
                .count(),
            20
        );
        ttft_p50.push(s["time_to_first_token"]["p50"].as_f64().unwrap());
        ids.insert(s["run"]["run_id"].as_str().unwrap().to_string());
        salts.insert(s["prompt_salt"].as_u64().unwrap());
    }
    assert_eq!((ids.len(), salts.len()), (3, 3), "{ids:?} {salts:?}");

    // The experiment's summary: the mean of the runs' own figures, with the interval
    // t(0.975, 2) = 4.302653 (the printed table) times s/√3.
    let top = json(&root.join("summary.json"));
    assert_valid(&top, Some("repeats_summary"));
    let r = &top["repeats"];
    assert_eq!(
        (r["runs_asked"].as_u64(), r["runs"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(r["exit_status"], 0);
    assert_eq!(r["per_run"].as_array().unwrap().len(), 3);
    // The runs share one plan, so one arrival schedule: the interval is the server's run-to-run
    // variation, not the load's randomness, and the method and the table say so (audit F1).
    let method = r["method"].as_str().unwrap();
    assert!(
        method.contains("every run sends the same requests on the same arrival schedule"),
        "{method}"
    );
    assert!(
        text(&out).contains("the runs share one arrival schedule and seed"),
        "{}",
        text(&out)
    );
    let figure = |metric: &str, stat: &str| {
        r["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == metric && m["statistic"] == stat)
            .unwrap_or_else(|| panic!("no {metric} {stat} in {r}"))
            .clone()
    };
    let ttft = figure("time_to_first_token", "p50");
    let values: Vec<f64> = serde_json::from_value(ttft["values"].clone()).unwrap();
    assert_eq!(values, ttft_p50);
    let mean = values.iter().sum::<f64>() / 3.0;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let half = 4.302_653 * sd / 3f64.sqrt();
    assert_eq!(ttft["n"], 3);
    assert!((ttft["mean"].as_f64().unwrap() - mean).abs() < 1e-9);
    assert!((ttft["half_width"].as_f64().unwrap() - half).abs() < 1e-5 * half.max(1e-3));
    // A latency cannot be negative: the low end is clipped at 0, and says so.
    let low = (mean - half).max(0.0);
    assert!((ttft["low"].as_f64().unwrap() - low).abs() < 1e-5 * half.max(1e-3));
    assert_eq!(ttft["clipped"], mean - half < 0.0);
    for (m, s) in [
        ("time_to_first_token", "p99"),
        ("inter_token_latency", "p50"),
        ("request_latency", "p99"),
        ("request_throughput", "value"),
        ("output_token_throughput", "value"),
        ("schedule_lag", "p99"),
    ] {
        assert_eq!(figure(m, s)["n"], 3, "{m} {s}");
    }
    let csv = std::fs::read_to_string(root.join("repeats.csv")).unwrap();
    assert!(csv.starts_with(
        "metric,statistic,unit,n,mean,std,confidence,half_width,low,high,clipped,bound\n"
    ));
    assert!(csv.contains("\ntime_to_first_token,p50,ms,3,"), "{csv}");
    let shown = text(&out);
    assert!(shown.contains("(95% CI, 3 runs)"), "{shown}");
    assert!(shown.contains("TTFT p50"), "{shown}");
    assert!(shown.contains("estimates"), "{shown}");

    // One run says there is no interval; a gate every run misses gives the worst status.
    let dir = tempfile::tempdir().unwrap();
    let gate = [
        "--goodput",
        "request_latency:0.001",
        "--min-good-fraction",
        "0.9",
    ];
    let out = replay(dir.path(), &url, &[&["--runs", "1"][..], &gate].concat());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("(1 run: no interval)"),
        "{}",
        text(&out)
    );
    let top = json(&dir.path().join("out/summary.json"));
    assert_valid(&top, Some("repeats_summary"));
    assert_eq!(top["repeats"]["exit_status"], 3);
    assert!(top["repeats"]["metrics"][0]["half_width"].is_null());
    // A second experiment into the same folder is refused, as a second run is.
    let again = replay(dir.path(), &url, &["--runs", "2"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("earlier run"), "{}", text(&again));
    // With --overwrite, the earlier experiment's runs go (a report of the folder would mix a
    // stale run-2 in); the user's own folders stay.
    let two = replay(dir.path(), &url, &["--runs", "2", "--overwrite"]);
    assert_eq!(two.status.code(), Some(0), "{}", text(&two));
    assert!(dir.path().join("out/run-2/records.jsonl").exists());
    std::fs::create_dir(dir.path().join("out/run-notes")).unwrap();
    std::fs::write(dir.path().join("out/run-notes/keep.txt"), "x").unwrap();
    let one = replay(dir.path(), &url, &["--runs", "1", "--overwrite"]);
    assert_eq!(one.status.code(), Some(0), "{}", text(&one));
    assert!(
        !dir.path().join("out/run-2").exists(),
        "the stale run is gone"
    );
    assert!(dir.path().join("out/run-notes/keep.txt").exists());
}

// `--start-at` with `--runs` was every run's: the second was refused (the instant had
// passed), and that error ended the experiment without the first run's summary.
#[test]
fn start_at_is_the_first_runs_and_a_failed_run_keeps_the_summary_of_those_before() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let at = (chrono::Utc::now() + chrono::Duration::seconds(4)).to_rfc3339();
    let two = ["--runs", "2", "--max-requests", "2"];
    // A loaded host may take seconds to start: late is fine here, the instant is what counts.
    let at_flags = ["--start-at", &at, "--max-late-start", "1m"];
    let out = replay(dir.path(), &url, &[&two[..], &at_flags[..]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let root = dir.path().join("out");
    let first = json(&root.join("run-1/summary.json"));
    assert_eq!(first["clock"]["start_at"]["requested"], at, "{first}");
    let second = json(&root.join("run-2/summary.json"));
    assert!(second["clock"].get("start_at").is_none(), "{second}");

    // Run 2 cannot write its folder (a file stands there): the command fails, naming the
    // run, and run 1's figures are still summarized, with the status it exits with.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("out");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("run-2"), "not a folder").unwrap();
    let out = replay(dir.path(), &url, &["--runs", "3", "--max-requests", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("run 2 of 3"), "{}", text(&out));
    let top = json(&root.join("summary.json"));
    assert_valid(&top, Some("repeats_summary"));
    let r = &top["repeats"];
    assert_eq!(
        (r["runs_asked"].as_u64(), r["runs"].as_u64()),
        (Some(3), Some(1)),
        "{r}"
    );
    assert_eq!(r["exit_status"], 1, "{r}");
    assert!(root.join("repeats.csv").exists());
}

/// `canaryd compare` of two `--runs 3` experiments (issue 18: is B really slower?): one user
/// sending 15 short requests one after another (no queueing, so each run's figures vary
/// little), three runs against the simulator at 2 ms a decode step, then three after its
/// prefill turns slow too (`POST /sim/profile`, 20 ms per prefill step). Every row is judged on the runs' figures by Welch's
/// t-test, with each side's interval; an experiment against itself shows nothing real; against
/// one run, the throughputs are not judged and the latencies use A's runs as the baseline
/// rule's reference runs.
#[test]
fn compare_judges_two_experiments_on_their_runs_figures() {
    let dir = tempfile::tempdir().unwrap();
    // 2 ms a decode step: a request takes about 20 ms, so a run's throughput is steady.
    let (_sim, port) = sim_with_profile(
        dir.path(),
        r#"{"profile":"fast","decode_base_us":2000}"#,
        &[],
    );
    let url = format!("http://127.0.0.1:{port}");
    let profile_with = |out: &str, extra: &[&str]| {
        let mut args = vec!["profile", "--url", &url, "--model", "canary-sim"];
        args.extend(["--output-dir", out, "--no-nvml", "--no-ebpf", "--runs", "3"]);
        args.extend(["--concurrency", "1", "--request-count", "15"]);
        args.extend(["--isl", "64", "--osl", "8"]);
        args.extend_from_slice(extra);
        let o = canaryd(&args, dir.path());
        assert!(o.status.success(), "{}", text(&o));
    };
    let profile = |out: &str| profile_with(out, &[]);
    profile("a");
    let (code, body) = http(
        port,
        "POST",
        "/sim/profile",
        r#"{"profile":"fast","decode_base_us":2000,"prefill_overhead_us":20000}"#,
    );
    assert_eq!(code, 200, "{body}");
    profile("b");

    let compare = |x: &str, y: &str| -> Value {
        let o = canaryd(&["compare", x, y, "--json"], dir.path());
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let row = |c: &Value, m: &str| -> Value {
        c["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == m)
            .unwrap_or_else(|| panic!("{m}: {c}"))
            .clone()
    };
    let c = compare("a", "b");
    assert_eq!(
        (c["a"]["runs"].as_u64(), c["b"]["runs"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(c["rules"]["runs_alpha"], 0.05);
    // Each run's own figure, from its records: run-2 of B is B's second value.
    let b2 = std::fs::read_to_string(dir.path().join("b/run-2/records.jsonl")).unwrap();
    let mut ttft: Vec<f64> = b2
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["status"] == "ok" && r["warmup"] != true)
        .filter_map(|r| r["ttft_ms"].as_f64())
        .collect();
    ttft.sort_by(f64::total_cmp);
    let nearest_rank_p50 = ttft[(ttft.len() as f64 * 0.5).ceil() as usize - 1];
    let t50 = row(&c, "TTFT p50");
    assert_eq!(
        t50["runs"]["b_values"][1].as_f64(),
        Some(nearest_rank_p50),
        "{t50}"
    );
    for m in ["TTFT p50", "TTFT p90", "e2e p50"] {
        let r = row(&c, m);
        assert_eq!(r["verdict"]["trend"], "regressed", "{m}: {r}");
        assert!(
            r["verdict"]["how"].as_str().unwrap().starts_with("Welch"),
            "{r}"
        );
        assert!(r["verdict"]["p_value"].as_f64().unwrap() < 0.05, "{r}");
        let (lo, hi) = (
            r["runs"]["b_interval"]["low"].as_f64().unwrap(),
            r["runs"]["b_interval"]["high"].as_f64().unwrap(),
        );
        let mean = r["b"].as_f64().unwrap();
        assert!(lo <= mean && mean <= hi, "{r}");
        assert_eq!(r["runs"]["a_values"].as_array().unwrap().len(), 3, "{r}");
    }
    // Throughputs are judged too (one figure per run, three runs a side): one user waits
    // out every slower prefill, so fewer requests a second.
    for m in ["throughput", "output tokens/s"] {
        assert_eq!(row(&c, m)["verdict"]["trend"], "regressed", "{m}: {c}");
    }
    assert_eq!(row(&c, "error rate")["verdict"]["kind"], "judged", "{c}");
    let shown = String::from_utf8(canaryd(&["compare", "a", "b"], dir.path()).stdout).unwrap();
    assert!(shown.contains("3 runs") && shown.contains(" ± "), "{shown}");
    assert!(
        shown.contains("Welch's t-test on the runs' figures, p < 0.05"),
        "{shown}"
    );
    // The level is each row's, said (audit F15).
    assert!(
        shown.contains("Each row is tested at its own level, not corrected for the 12 rows"),
        "{shown}"
    );

    // An experiment against itself: every row judged, none real.
    let same = compare("a", "a");
    for r in same["rows"].as_array().unwrap() {
        assert_eq!(r["verdict"]["trend"], "steady", "{r}");
    }

    // Three runs against one: throughputs wait for repeats on both sides; latencies are the
    // baseline rule's, A's three runs its reference.
    let one = compare("a", "b/run-1");
    assert_eq!(one["b"]["runs"].as_u64(), Some(1));
    let tp = row(&one, "throughput");
    assert_eq!(tp["verdict"]["kind"], "not_judged", "{tp}");
    assert!(
        tp["verdict"]["why"]
            .as_str()
            .unwrap()
            .contains("A has 3, B has 1"),
        "{tp}"
    );
    let t50 = row(&one, "TTFT p50");
    assert_eq!(t50["verdict"]["trend"], "regressed", "{t50}");
    assert!(t50["verdict"]["how"]
        .as_str()
        .unwrap()
        .starts_with("whole distribution"));
    assert!(t50["runs"].is_null(), "{t50}");

    // One run a side: B's first run is slower than A's at every request (20 ms of prefill
    // against about 1), and the rank test over their 15 requests each says so, but it takes
    // requests as independent and one run measures no run-to-run variation: unconfirmed,
    // never `yes` (audit F10).
    let runs = compare("b/run-1", "a/run-1");
    let t50 = row(&runs, "TTFT p50");
    assert_eq!(t50["verdict"]["kind"], "unconfirmed", "{t50}");
    assert_eq!(t50["verdict"]["direction"], "improved", "{t50}");
    assert_eq!(
        t50["verdict"]["because"],
        serde_json::json!(["one_run"]),
        "{t50}"
    );
    let shown =
        String::from_utf8(canaryd(&["compare", "b/run-1", "a/run-1"], dir.path()).stdout).unwrap();
    assert!(!shown.contains("yes:"), "{shown}");
    assert!(shown.contains("unconfirmed: better (p "), "{shown}");
    // Two runs of one setup: no test over requests calls a difference real.
    for (x, y) in [("a/run-1", "a/run-2"), ("a/run-2", "a/run-3")] {
        let c = compare(x, y);
        for r in c["rows"].as_array().unwrap() {
            assert!(
                r["verdict"]["trend"].is_null() || r["verdict"]["trend"] == "steady",
                "{x} against {y}: {r}"
            );
        }
    }

    // Another seed, after the same slowdown: three runs a side, a difference Welch's test
    // finds, but the sides sent other requests on another schedule (the seed), so it may be
    // the workload's: unconfirmed, said why (audit F1: a seed alone read `yes: worse (p
    // 7.8e-9)` on throughput).
    profile_with("c", &["--random-seed", "7"]);
    let c = compare("a", "c");
    assert_eq!(
        c["different_requests"]["fields"][0]["kind"], "seed",
        "{}",
        c["different_requests"]
    );
    for m in ["TTFT p50", "e2e p50"] {
        let r = row(&c, m);
        assert_eq!(r["verdict"]["kind"], "unconfirmed", "{m}: {r}");
        assert_eq!(r["verdict"]["direction"], "regressed", "{m}: {r}");
        assert_eq!(
            r["verdict"]["because"],
            serde_json::json!(["different_requests"]),
            "{m}: {r}"
        );
        assert!(
            r["verdict"]["how"].as_str().unwrap().starts_with("Welch"),
            "{r}"
        );
    }
    let shown = String::from_utf8(canaryd(&["compare", "a", "c"], dir.path()).stdout).unwrap();
    assert!(!shown.contains("yes:"), "{shown}");
    assert!(
        shown.contains("unconfirmed: worse (p ")
            && shown.contains("not the same requests: may be the workload's)"),
        "{shown}"
    );
}

/// Slices of 1 s over a replay of the Mooncake conversation trace (100 rows at 10x, about
/// 30 requests/s for 3 s); 1.2 s after the first record lands the simulator turns slow
/// (`POST /sim/profile`, 30 ms per prefill step): the later slices show it.
#[test]
fn timeslices_show_ttft_rising_after_the_server_turns_slow() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim_with_profile(dir.path(), r#"{"profile":"fast"}"#, &[]);
    let trace = shared("traces/mooncake_conversation_first2000.jsonl");
    let child = Command::new(CANARYD)
        .args([
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--model",
            "canary-sim",
        ])
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .args([
            "--speedup",
            "10",
            "--max-requests",
            "100",
            "--scale-lengths",
            "0.02",
        ])
        .args([
            "--slice-duration",
            "1s",
            "--output-dir",
            "out",
            "--no-nvml",
            "--no-ebpf",
        ])
        .args([
            "--otlp-endpoint",
            &receiver.url(),
            "--otlp-flush-timeout",
            "5s",
        ])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let records = dir.path().join("out/records.jsonl");
    let started = Instant::now();
    while std::fs::metadata(&records).map_or(0, |m| m.len()) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the replay never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Pacing, not synchronization: the switch comes after the first slice's end, and the
    // checks below take its moment from the clock, not from this sleep.
    std::thread::sleep(Duration::from_millis(1200));
    let unix_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before_switch = unix_ns();
    let (code, body) = http(
        port,
        "POST",
        "/sim/profile",
        r#"{"prefill_overhead_us":30000}"#,
    );
    assert_eq!(code, 200, "{body}");
    let after_switch = unix_ns();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));

    let s = json(&dir.path().join("out/summary.json"));
    assert_valid(&s, None);
    let t = &s["timeslices"];
    assert_eq!(t["slice_duration_s"], 1.0);
    let slices = t["slices"].as_array().unwrap();
    assert!(slices.len() >= 3, "{t}");
    let p50 = |i: usize| slices[i]["time_to_first_token"]["p50"].as_f64().unwrap();
    // A request is in the slice it was sent in. The switch on the run's clock (its start's
    // wall time, summary.json's started_unix_ns, on this host's clock as the test's): every
    // request of a slice that began after the switch returned waits for a 30 ms prefill step
    // at least (a lower bound a loaded host only raises; percentiles within 1 %), and the
    // slices that ended before the POST was sent, on the fast profile, answered sooner than
    // any of those.
    let t0 = s["started_unix_ns"].as_u64().unwrap();
    let on_run_clock = |ns: u64| ns.saturating_sub(t0) as f64 / 1e9;
    let (from_s, to_s) = (on_run_clock(before_switch), on_run_clock(after_switch));
    let f = |s: &Value, k: &str| s[k].as_f64().unwrap();
    let with_ttft = |s: &&Value| s["time_to_first_token"]["p50"].is_number();
    let fast: Vec<&Value> = slices
        .iter()
        .filter(|s| f(s, "end_s") <= from_s)
        .filter(with_ttft)
        .collect();
    let slow: Vec<&Value> = slices
        .iter()
        .filter(|s| f(s, "start_s") >= to_s)
        .filter(with_ttft)
        .collect();
    assert!(
        !fast.is_empty() && !slow.is_empty(),
        "no slice wholly before ({from_s:.3} s) or after ({to_s:.3} s) the switch: {t}"
    );
    let ttft = |s: &Value| s["time_to_first_token"]["p50"].as_f64().unwrap();
    for s in &slow {
        assert!(ttft(s) > 29.0, "after the switch at {to_s:.3} s: {s}");
    }
    let fastest_slow = slow.iter().map(|s| ttft(s)).fold(f64::INFINITY, f64::min);
    for s in &fast {
        assert!(
            ttft(s) < fastest_slow,
            "before the switch at {from_s:.3} s, as slow as after it ({fastest_slow}): {s}"
        );
    }
    let sent: u64 = slices.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
    assert_eq!(sent, s["requests"].as_u64().unwrap());
    let last = slices.last().unwrap();
    assert_eq!(last["partial"], true, "{last}");
    assert!(slices[..slices.len() - 1]
        .iter()
        .all(|s| s["partial"] == false));
    assert!(text(&out).contains("timeslices of 1 s"), "{}", text(&out));

    let csv = std::fs::read_to_string(dir.path().join("out/timeslices.csv")).unwrap();
    assert!(csv
        .starts_with("slice,start_s,end_s,partial,metric,statistic,unit,value,covered_s,bound\n"));
    let row = format!(
        "\n2,2.000,3.000,false,time_to_first_token,p50,ms,{:.4},1.000000,{}\n",
        p50(2),
        slices[2]["time_to_first_token"]["bound"]
    );
    assert!(csv.contains(&row), "{row} not in {csv}");
    // The partial slice's own span: its rate times it gives back what finished in it.
    let covered = last["covered_s"].as_f64().unwrap();
    assert!(csv.contains(&format!(
        ",true,requests,count,requests,{},{covered:.6},false\n",
        last["requests"]
    )));

    // The HTML report draws them and lists them, the partial slice said.
    let said = canaryd(&["report", "out", "-o", "r.html"], dir.path());
    assert!(said.status.success(), "{}", text(&said));
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.contains("id=\"timeslices\""), "no timeslices section");
    assert!(html.contains("slices-latency"), "no latency-by-slice chart");
    assert!(html.contains("(partial)"), "the partial slice is not said");

    // The same slices over OTLP, one point per slice start.
    let metrics = receiver.last_metrics();
    let m = metrics
        .iter()
        .find(|m| m.name == "canary.slice.time_to_first_token")
        .unwrap_or_else(|| panic!("{:?}", metrics.iter().map(|m| &m.name).collect::<Vec<_>>()));
    let Some(metric::Data::Gauge(g)) = &m.data else {
        panic!("not a gauge")
    };
    let point = |start: &str| {
        g.data_points
            .iter()
            .find(|p| {
                let a = super::receiver::attrs(&p.attributes);
                a.get("canary.slice.start_s").map(String::as_str) == Some(start)
                    && a.get("canary.statistic").map(String::as_str) == Some("p50")
            })
            .and_then(|p| match p.value {
                Some(number_data_point::Value::AsDouble(d)) => Some(d),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no p50 point at slice {start}: {g:?}"))
    };
    assert!((point("0") - p50(0) / 1e3).abs() < 1e-9);
    assert!((point("2") - p50(2) / 1e3).abs() < 1e-9);
    drop(rt);
}

// Audit F3: with --no-kernel-timestamps every client time is canaryd's read and the run's
// table marks TTFT, ITL and e2e `(bound)`, but the slices beside it (summary.json's
// `timeslices`, timeslices.csv, the slice table) read as exact measurements.
#[test]
fn timeslice_latencies_over_canaryds_reads_say_they_are_bounds() {
    let (_sim, port) = sim(&[]);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let extra = ["--slice-duration", "500ms", "--no-kernel-timestamps"];
    let out = replay(
        dir.path(),
        &url,
        &[&extra[..], &["--max-requests", "8"]].concat(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let s = json(&dir.path().join("out/summary.json"));
    assert_valid(&s, None);
    let slices = s["timeslices"]["slices"].as_array().unwrap();
    let metrics = [
        "time_to_first_token",
        "inter_token_latency",
        "request_latency",
    ];
    let mut seen = 0;
    for slice in slices {
        for m in metrics.iter().filter(|m| !slice[**m].is_null()) {
            assert_eq!(slice[*m]["bound"], true, "{m}: {slice}");
            seen += 1;
        }
    }
    assert!(seen >= 3, "{slices:?}");

    let csv = std::fs::read_to_string(dir.path().join("out/timeslices.csv")).unwrap();
    assert!(csv
        .starts_with("slice,start_s,end_s,partial,metric,statistic,unit,value,covered_s,bound\n"));
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    for row in &rows {
        let latency = metrics.iter().any(|m| row.contains(&format!(",{m},")));
        let bound = latency && !row.contains(",count,");
        assert!(row.ends_with(&format!(",{bound}")), "{row}");
    }
    assert!(rows.iter().any(|r| r.contains(",time_to_first_token,p50,")));

    let printed = text(&out);
    assert!(printed.contains(" ms b "), "{printed}");
    assert!(
        printed.contains("b: a bound, not exact") && printed.contains("0.5 µs"),
        "{printed}"
    );

    // The HTML report's slice table marks them too.
    let said = canaryd(&["report", "out", "-o", "r.html"], dir.path());
    assert!(said.status.success(), "{}", text(&said));
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    let section = &html[html
        .find("id=\"timeslices\"")
        .expect("no timeslices section")..];
    assert!(
        section.contains("<td class=\"n\">≤ "),
        "no bound cell in the slice table"
    );
    assert!(
        section.contains("marked ≤ is an upper bound"),
        "the mark is not explained"
    );
}

// `profile --runs 3` with the server dead during run 3 printed `throughput 68.5 ± 147.4
// requests/s (3 runs)` of [102.7, 102.8, 0.0] while the latencies were over 2 runs: the run
// that completed nothing counted as 0 requests/s. It is left out of the estimates, and said so.
#[test]
fn a_run_that_completed_nothing_is_left_out_of_the_estimates_and_named() {
    let dir = tempfile::tempdir().unwrap();
    // Each request decodes 300 tokens at about 10 ms a step: 3 s, far longer than the test
    // takes to see run 2's summary and stop the server, so run 3 completes nothing.
    let slow = r#"{"profile":"capacity","decode_base_us":8000,"decode_per_seq_us":1000}"#;
    let (sim, port) = sim_with_profile(dir.path(), slow, &[]);
    let url = format!("http://127.0.0.1:{port}");
    let child = Command::new(CANARYD)
        .args(["profile", "--url", &url, "--model", "canary-sim"])
        .args(["--output-dir", "out", "--no-nvml", "--no-ebpf"])
        .args(["--isl", "16", "--osl", "300", "--concurrency", "2"])
        .args(["--request-count", "2", "--warmup-request-count", "0"])
        .args(["--runs", "3"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let second = dir.path().join("out/run-2/summary.json");
    let end = Instant::now() + Duration::from_secs(120);
    while !second.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(sim);
    let out = child.wait_with_output().unwrap();
    let shown = text(&out);
    let root = dir.path().join("out");
    let third = json(&root.join("run-3/summary.json"));
    assert_eq!(third["completed"], 0, "{third:#}");

    let top = json(&root.join("summary.json"));
    assert_valid(&top, Some("repeats_summary"));
    let r = &top["repeats"];
    assert_eq!(r["runs"], 3, "{r:#}");
    let per_run = r["per_run"].as_array().unwrap();
    assert!(
        per_run[..2].iter().all(|e| e.get("left_out").is_none()),
        "{r:#}"
    );
    let why = per_run[2]["left_out"].as_str().unwrap();
    assert!(why.starts_with("error: target unusable"), "{why}");
    // Every figure is over the two runs that completed requests: no 0 req/s among them.
    for m in r["metrics"].as_array().unwrap() {
        assert_eq!(m["n"], 2, "{m}");
    }
    let tp = r["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "request_throughput")
        .unwrap();
    let values: Vec<f64> = serde_json::from_value(tp["values"].clone()).unwrap();
    assert!(values.iter().all(|v| *v > 0.0), "{values:?}");
    assert!(shown.contains("3 of 3 runs (1 left out, below)"), "{shown}");
    assert!(
        shown.contains("left out of the estimates: run-3 (error: target unusable"),
        "{shown}"
    );
    // The worst run's status is still the command's: run 3 completed nothing.
    assert_ne!(out.status.code(), Some(0), "{shown}");
}

// Audit finding 4: each run's own table said `TTFT (ms, bound)`, yet the experiment's table,
// `summary.json` and `repeats.csv` gave the means of those bounds with no mark. With
// `--no-kernel-timestamps` every client time is canaryd's read, so every run's TTFT, ITL and
// e2e are bounds, and so are their means; rates and the schedule lag are not.
#[test]
fn the_means_of_runs_whose_times_are_bounds_are_marked_bounds() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--runs", "2", "--no-kernel-timestamps"];
    let out = replay(dir.path(), &url, &flags);
    assert!(out.status.success(), "{}", text(&out));
    let root = dir.path().join("out");
    let top = json(&root.join("summary.json"));
    assert_valid(&top, Some("repeats_summary"));
    let bound = |metric: &str, stat: &str| {
        top["repeats"]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == metric && m["statistic"] == stat)
            .unwrap_or_else(|| panic!("no {metric} {stat} in {top}"))["bound"]
            .clone()
    };
    for (m, s) in [
        ("time_to_first_token", "p50"),
        ("time_to_first_token", "p99"),
        ("inter_token_latency", "p50"),
        ("request_latency", "p99"),
    ] {
        assert_eq!(bound(m, s), true, "{m} {s}");
    }
    for (m, s) in [("request_throughput", "value"), ("schedule_lag", "p99")] {
        assert_eq!(bound(m, s), false, "{m} {s}");
    }
    let csv = std::fs::read_to_string(root.join("repeats.csv")).unwrap();
    assert!(csv.starts_with(
        "metric,statistic,unit,n,mean,std,confidence,half_width,low,high,clipped,bound\n"
    ));
    let row = |metric: &str| {
        csv.lines()
            .find(|l| l.starts_with(metric))
            .unwrap_or_else(|| panic!("no {metric} in {csv}"))
            .to_string()
    };
    assert!(row("time_to_first_token,p50").ends_with(",true"), "{csv}");
    assert!(row("request_throughput,value").ends_with(",false"), "{csv}");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(shown.contains("  TTFT p50 (bound)   "), "{shown}");
    assert!(shown.contains("  e2e p99 (bound)    "), "{shown}");
    assert!(!shown.contains("throughput (bound)"), "{shown}");
    assert!(
        shown.contains("(bound): not exact")
            && shown.contains("the mean of TTFT and e2e is an upper bound"),
        "{shown}"
    );
}

// Audit finding 17: `--runs 1` listed its folders as `run-1 … run-1`, and an experiment whose
// every run was left out (a dead target) promised `estimates, …` and then listed none.
#[test]
fn one_run_is_named_once_and_runs_all_left_out_say_there_are_no_estimates() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = replay(dir.path(), &url, &["--runs", "1", "--max-requests", "2"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.contains("artifacts: out (summary.json, repeats.csv, run-1)\n"),
        "{shown}"
    );

    let dead = format!("http://127.0.0.1:{}", crate::common::free_port());
    let dir = tempfile::tempdir().unwrap();
    let out = replay(dir.path(), &dead, &["--runs", "2", "--max-requests", "2"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.contains(
            "2 of 2 runs (2 left out, below): no estimates: every run is left out of them\n"
        ),
        "{shown}"
    );
    assert!(!shown.contains("estimates, mean over runs"), "{shown}");
    assert!(shown.contains("run-1 … run-2)"), "{shown}");
    let top = json(&dir.path().join("out/summary.json"));
    assert_valid(&top, Some("repeats_summary"));
    assert_eq!(top["repeats"]["metrics"], serde_json::json!([]));
}

// A run too short for a rate (here one request each: a rate needs two) has no throughput:
// the experiment's table dropped the throughput row without a word, and a run among others
// that had one was left out of the mean unsaid. Each figure now says which runs it is
// without and why, and a figure no run gave is listed as such.
#[test]
fn runs_too_short_for_a_rate_are_named_where_the_throughput_would_be() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = replay(dir.path(), &url, &["--runs", "2", "--max-requests", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    let why = "1 measured request: a rate needs at least 2";
    let line = shown
        .lines()
        .find(|l| l.trim_start().starts_with("throughput "))
        .unwrap_or_else(|| panic!("no throughput line in\n{shown}"));
    assert_eq!(
        line,
        format!(
            "  throughput         no figure: none of the 2 runs gave one: run-1 ({why}); \
             run-2 ({why})"
        ),
        "{shown}"
    );
    // The latencies are still estimated over both runs.
    assert!(shown.contains("TTFT p50"), "{shown}");

    let root = dir.path().join("out");
    let top = json(&root.join("summary.json"));
    assert_valid(&top, Some("repeats_summary"));
    let r = &top["repeats"];
    let unavailable: Vec<&str> = r["unavailable"]
        .as_array()
        .unwrap_or_else(|| panic!("no unavailable in {r:#}"))
        .iter()
        .map(|u| u["metric"].as_str().unwrap())
        .collect();
    assert_eq!(
        unavailable,
        ["request_throughput", "output_token_throughput"],
        "{r:#}"
    );
    let tp = &r["unavailable"][0];
    assert_eq!(tp["without"][1]["dir"], "run-2", "{tp}");
    assert_eq!(tp["without"][1]["why"], why, "{tp}");
    let ttft = r["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "time_to_first_token")
        .unwrap();
    assert_eq!(ttft["n"], 2, "{ttft}");
    assert!(ttft.get("without").is_none(), "{ttft}");
}

// The report page and `canaryd compare` read the figures over the runs: a rate no run gave
// was a missing row, said nowhere, and a throughput over fewer runs would read as one over all.
// Both now say it as the command's table does.
#[test]
fn the_report_and_compare_name_runs_without_a_rate_as_the_table_does() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = replay(dir.path(), &url, &["--runs", "2", "--max-requests", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let why = "1 measured request: a rate needs at least 2";
    let none = format!("no figure: none of the 2 runs gave one: run-1 ({why}); run-2 ({why})");

    let said = canaryd(&["report", "out", "-o", "r.html"], dir.path());
    assert!(said.status.success(), "{}", text(&said));
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    for label in ["throughput", "output tokens/s"] {
        let line = format!("{label}: {none}");
        assert!(html.contains(&line), "no {line:?} in the report");
    }

    let compared = canaryd(&["compare", "out", "out"], dir.path());
    assert!(compared.status.success(), "{}", text(&compared));
    let shown = String::from_utf8_lossy(&compared.stdout);
    for side in ["A", "B"] {
        let line = format!("{side}'s throughput: {none}");
        assert!(shown.contains(&line), "no {line:?} in\n{shown}");
    }
    let c: Value =
        serde_json::from_slice(&canaryd(&["compare", "out", "out", "--json"], dir.path()).stdout)
            .unwrap();
    let notes: Vec<&str> = c["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        notes.contains(&format!("A's output tokens/s: {none}").as_str()),
        "{notes:#?}"
    );
}

// `canaryd compare` named the runs without a figure on the rate rows alone: a latency no run
// gave (one-token answers have no ITL) was a `–` said nowhere, and one over fewer runs would
// read as one over all. Every row kind now says which runs lack its figure, in the rates'
// words; a side of one run says it by its `–` alone, as it did.
#[test]
fn compare_names_the_runs_without_a_latency_as_it_names_those_without_a_rate() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["profile", "--url", &url, "--model", "canary-sim"];
    args.extend([
        "--output-dir",
        "out",
        "--no-nvml",
        "--no-ebpf",
        "--runs",
        "2",
    ]);
    args.extend(["--concurrency", "1", "--request-count", "4"]);
    args.extend(["--isl", "16", "--osl", "1"]);
    let out = canaryd(&args, dir.path());
    assert!(out.status.success(), "{}", text(&out));
    let why = "no ITL among its completed requests";
    let none = format!("no figure: none of the 2 runs gave one: run-1 ({why}); run-2 ({why})");
    // The experiment's own summary says it in the same words (it said "none of its requests
    // gave a inter_token_latency").
    let top = json(&dir.path().join("out/summary.json"));
    let itl = top["repeats"]["unavailable"]
        .as_array()
        .unwrap_or_else(|| panic!("no unavailable in {top:#}"))
        .iter()
        .find(|u| u["metric"] == "inter_token_latency" && u["statistic"] == "p50")
        .unwrap_or_else(|| panic!("no ITL p50 among unavailable in {top:#}"));
    assert_eq!(itl["without"][0]["why"], why, "{itl}");

    let compared = canaryd(&["compare", "out", "out"], dir.path());
    assert!(compared.status.success(), "{}", text(&compared));
    let shown = String::from_utf8_lossy(&compared.stdout);
    for side in ["A", "B"] {
        let line = format!("note: {side}'s ITL p50, p90 and p99: {none}");
        assert!(shown.contains(&line), "no {line:?} in\n{shown}");
    }
    // TTFT and e2e: every run has them, so nothing is said of them.
    assert!(!shown.contains("'s TTFT p50"), "{shown}");
    assert!(!shown.contains("'s e2e p50"), "{shown}");

    // Against one run: the experiment's side is named, the single run's is not.
    let c: Value = serde_json::from_slice(
        &canaryd(&["compare", "out", "out/run-1", "--json"], dir.path()).stdout,
    )
    .unwrap();
    let notes: Vec<&str> = c["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let a = format!("A's ITL p50, p90 and p99: {none}");
    assert!(notes.contains(&a.as_str()), "{notes:#?}");
    assert!(!notes.iter().any(|n| n.starts_with("B's ")), "{notes:#?}");
    let itl = c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "ITL p50")
        .unwrap();
    assert!(itl["a"].is_null() && itl["b"].is_null(), "{itl}");
}
