//! `canaryd merge` (issues 18 and 22): three shard processes of one trace, started apart but
//! given one `--start-at`, replay against one `canaryd sim`; their merge equals an unsharded
//! replay of the same trace in every count, sums the shards' histograms, places the shards on
//! one time axis with its bound, and validates against the summary schema. Shard sets that do
//! not cover the trace exactly once (a shard missing, one given twice, one of another trace)
//! are refused with a non-zero exit status naming the folder and the problem.

mod common;

use common::{shared, text, CANARYD};
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TRACE: &str = "traces/mooncake_arxiv_first20.jsonl";

/// The replays every test here reads: made once, kept for the test binary's life.
struct Runs {
    dir: PathBuf,
}

fn replay(dir: &Path, url: &str, trace: &str, out: &str, extra: &[&str]) -> Command {
    let trace = shared(trace);
    let mut c = Command::new(CANARYD);
    c.args(["replay", "--trace", trace.to_str().unwrap(), "--url", url])
        .args(["--model", "canary-sim", "--output-dir", out])
        .args(["--speedup", "4"])
        .args(extra)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// An RFC 3339 instant `offset_ms` from now, in UTC.
fn instant_in(offset_ms: i64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    common::rfc3339(now.as_nanos() as i64 + offset_ms * 1_000_000)
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("merge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (sim, port) = common::sim(&[]);
        let url = format!("http://127.0.0.1:{port}");
        let ok = |o: Output| assert!(o.status.success(), "{}", text(&o));
        ok(replay(&dir, &url, TRACE, "single", &[]).output().unwrap());
        // Three shards launched 300 ms apart, one instant after the last launch.
        let start = instant_in(2_500);
        let mut shards = Vec::new();
        for i in 0..3 {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let shard = format!("{i}/3");
            // With slices: the merge slices the union again (finding 13 of the README audit).
            let args = [
                "--shard",
                shard.as_str(),
                "--start-at",
                start.as_str(),
                "--slice-duration",
                "200ms",
            ];
            let out = format!("shard{i}");
            shards.push(replay(&dir, &url, TRACE, &out, &args).spawn().unwrap());
        }
        for c in shards {
            ok(c.wait_with_output().unwrap());
        }
        // Shard 2/3 of another trace (its first request only, to keep it short).
        let other = "traces/mooncake_synthetic.jsonl";
        let args = [
            "--shard",
            "2/3",
            "--max-requests",
            "1",
            "--max-input-tokens",
            "2048",
        ];
        ok(replay(&dir, &url, other, "other2", &args).output().unwrap());
        drop(sim);
        Runs { dir }
    })
}

fn merge(args: &[&str]) -> Output {
    Command::new(CANARYD)
        .arg("merge")
        .args(args)
        .current_dir(&runs().dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

fn valid(doc: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let v = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn merged_shards_equal_the_unsharded_run() {
    let dir = &runs().dir;
    let out = merge(&["shard2", "shard0", "shard1", "-o", "merged"]);
    assert!(out.status.success(), "{}", text(&out));
    let table = text(&out);
    let (single, merged) = (summary(&dir.join("single")), summary(&dir.join("merged")));
    valid(&merged);
    valid(&summary(&dir.join("shard0")));
    for key in [
        "requests",
        "completed",
        "errors",
        "total_input_tokens",
        "total_output_tokens",
    ] {
        assert_eq!(merged[key], single[key], "{key}\n{table}");
    }
    assert_eq!(merged["requests"], 20);
    // The table marks TTFT a bound unless every first token was stamped by the kernel (the
    // merged summary counts them from the shards' records), as one run's table does.
    let rx = &merged["receive_timestamps"];
    let kernel = rx["first_token"]["kernel"].as_u64().unwrap_or(0);
    let ttft_row = table.lines().find(|l| l.starts_with("TTFT (ms")).unwrap();
    assert_eq!(
        ttft_row.contains("bound"),
        kernel < merged["completed"].as_u64().unwrap(),
        "{rx}\n{table}"
    );
    // ITL is a bound where some request's first token or end was (canary_core::itl_is_bound),
    // not wherever token events shared a read: it failed when none of those was a bound.
    let itl_bound = rx["itl_bound_requests"].as_u64().unwrap_or(0) > 0;
    let itl = table.lines().find(|l| l.starts_with("ITL (ms")).unwrap();
    assert_eq!(itl.contains("bound)"), itl_bound, "{rx}\n{table}");
    if itl_bound {
        assert!(table.contains("except that a row marked bound"), "{table}");
    }
    let m = &merged["merged"];
    assert_eq!(
        (m["shard_count"].as_u64(), m["replayed"].as_u64()),
        (Some(3), Some(20))
    );
    assert_eq!(m["metrics_from"], "histograms");
    assert!(merged["run"]["trace"]["asked"]["shard"].is_null());
    assert_eq!(merged["run"]["trace"]["selection"]["requests_out"], 20);
    // The shards' histograms summed: every metric counts what the shards counted together.
    let shards: Vec<Value> = (0..3)
        .map(|i| summary(&dir.join(format!("shard{i}"))))
        .collect();
    for metric in [
        "time_to_first_token",
        "inter_chunk_latency",
        "request_latency",
        "schedule_lag",
    ] {
        let sum: u64 = shards
            .iter()
            .map(|s| s[metric]["count"].as_u64().unwrap())
            .sum();
        assert_eq!(merged[metric]["count"].as_u64(), Some(sum), "{metric}");
        let max = shards
            .iter()
            .map(|s| s[metric]["max"].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert_eq!(merged[metric]["max"].as_f64(), Some(max), "{metric}");
    }
    assert_eq!(
        merged["time_to_first_token"]["count"],
        single["time_to_first_token"]["count"]
    );
    // Every field of the shards' selection is in the union's: it kept eight fixed keys and
    // dropped the scale-lengths and context counts. The counts sum over the shards; the
    // context limit (the simulator states one in /v1/models) is the shards' own.
    let selection = |s: &Value| s["run"]["trace"]["selection"].clone();
    let union = selection(&merged);
    for key in selection(&shards[0]).as_object().unwrap().keys() {
        assert!(union.get(key).is_some(), "{key} left out: {union}");
    }
    for key in ["outputs_raised_to_1", "inputs_clamped", "over_context"] {
        let sum: u64 = shards
            .iter()
            .map(|s| selection(s)[key].as_u64().unwrap())
            .sum();
        assert_eq!(union[key].as_u64(), Some(sum), "{key}: {union}");
    }
    assert!(union["context_limit"].as_u64().is_some(), "{union}");
    assert_eq!(
        union["context_limit"],
        selection(&shards[0])["context_limit"]
    );
    // One host: the shards are placed on one monotonic clock, exactly.
    let a = &m["alignment"];
    assert_eq!(a["bound_ms"].as_f64(), Some(0.0), "{a}");
    assert_eq!(a["basis"], "one host (one CLOCK_MONOTONIC)");
    assert!(a["common_start"].is_string(), "{a}");
    assert!(m["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["offset_basis"] == "monotonic"));
    assert_eq!(m["cross_host_schedule_lag"]["count"], 20);
    // Every record once, each with its shard.
    let records = std::fs::read_to_string(dir.join("merged/records.jsonl")).unwrap();
    let lines: Vec<Value> = records
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 20);
    let distinct: HashSet<u64> = lines
        .iter()
        .map(|r| r["trace_line"].as_u64().unwrap())
        .collect();
    assert_eq!(distinct.len(), 20);
    assert!(lines
        .iter()
        .all(|r| r["shard"].as_str().is_some_and(|s| s.ends_with("/3"))));
    assert!(
        table.contains("20 of the window's 20 requests replayed"),
        "{table}"
    );
    assert!(table.contains("within ±0.000 ms (a bound)"), "{table}");
    // A second merge into the same folder would replace the first.
    let again = merge(&["shard0", "shard1", "shard2", "-o", "merged"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("holds an earlier run"),
        "{}",
        text(&again)
    );
}

#[test]
fn shards_without_histograms_are_folded_from_their_records_and_say_so() {
    let dir = &runs().dir;
    // As an older canaryd left them: no histograms.json.
    for i in 0..3 {
        let (from, to) = (dir.join(format!("shard{i}")), dir.join(format!("old{i}")));
        if !to.exists() {
            std::fs::create_dir_all(&to).unwrap();
            for f in ["summary.json", "records.jsonl"] {
                std::fs::copy(from.join(f), to.join(f)).unwrap();
            }
        }
    }
    let out = merge(&["old0", "old1", "old2", "-o", "from-records"]);
    assert!(out.status.success(), "{}", text(&out));
    let (single, m) = (
        summary(&dir.join("single")),
        summary(&dir.join("from-records")),
    );
    valid(&m);
    assert_eq!(m["merged"]["metrics_from"], "records");
    for key in [
        "requests",
        "completed",
        "errors",
        "total_input_tokens",
        "total_output_tokens",
    ] {
        assert_eq!(m[key], single[key], "{key}");
    }
    // The records hold every request's TTFT: the same histogram as the shards' summed.
    let out = merge(&["shard0", "shard1", "shard2", "-o", "from-histograms"]);
    assert!(out.status.success(), "{}", text(&out));
    let h = summary(&dir.join("from-histograms"));
    for p in ["count", "min", "max", "p50", "p90", "p99"] {
        assert_eq!(
            m["time_to_first_token"][p], h["time_to_first_token"][p],
            "{p}"
        );
    }
    // Without --record-chunks the records hold no chunk gaps: absent, and said.
    assert!(m.get("inter_chunk_latency").is_none(), "{m}");
    assert!(h["inter_chunk_latency"]["count"].as_u64().unwrap() > 0);
    let notes = m["merged"]["notes"].to_string();
    assert!(
        notes.contains("no histograms.json in old0, old1, old2"),
        "{notes}"
    );
}

#[test]
fn a_missing_shard_is_refused_by_its_index() {
    let out = merge(&["shard0", "shard2", "-o", "missing"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("shard 1/3 is missing"),
        "{}",
        text(&out)
    );
    assert!(!runs().dir.join("missing/summary.json").exists());
}

#[test]
fn a_shard_given_twice_is_refused_naming_both_folders() {
    let dir = &runs().dir;
    let copy = dir.join("shard1-copy");
    if !copy.exists() {
        std::fs::create_dir_all(&copy).unwrap();
        for f in ["summary.json", "records.jsonl", "histograms.json"] {
            std::fs::copy(dir.join("shard1").join(f), copy.join(f)).unwrap();
        }
    }
    let out = merge(&["shard0", "shard1", "shard1-copy", "shard2", "-o", "twice"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("shard 1/3 appears more than once: shard1, shard1-copy"),
        "{t}"
    );
}

#[test]
fn a_shard_of_another_trace_is_refused_naming_its_folder() {
    let out = merge(&["shard0", "shard1", "other2", "-o", "other"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("other2: replayed another trace"), "{t}");
    assert!(t.contains("mooncake_synthetic.jsonl"), "{t}");
}

/// A copy of `shard1` as `name`, with `damage` done to its file `file` (read as text).
fn damaged_shard1(name: &str, file: &str, mut damage: impl FnMut(String) -> String) {
    let dir = &runs().dir;
    let copy = dir.join(name);
    if copy.exists() {
        return;
    }
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["summary.json", "records.jsonl", "histograms.json"] {
        let text = std::fs::read_to_string(dir.join("shard1").join(f)).unwrap();
        let text = if f == file { damage(text) } else { text };
        std::fs::write(copy.join(f), text).unwrap();
    }
}

// A crafted shard count of 2^32 - 1 used to list every missing index: billions of lines,
// out of memory. The first five are named, the rest counted.
#[test]
fn a_crafted_shard_count_is_refused_in_a_few_lines() {
    damaged_shard1("shard1-huge-count", "summary.json", |text| {
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        doc["run"]["trace"]["asked"]["shard"] = "1/4294967295".into();
        doc.to_string()
    });
    let out = merge(&["shard1-huge-count", "shard0", "-o", "huge-count"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("shard 0/4294967295 is missing"), "{t}");
    assert!(t.contains("shard 5/4294967295 is missing"), "{t}");
    assert!(
        t.contains("and 4294967289 more of the 4294967295 shards are missing"),
        "{t}"
    );
    assert!(t.len() < 10_000, "{} bytes", t.len());
}

#[test]
fn a_damaged_shard_is_refused_naming_its_file_line_and_field() {
    // Line 2 of the records: a field of the wrong type (as a hand edit or a disk might leave).
    damaged_shard1("shard1-bad-line", "records.jsonl", |text| {
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let mut record: Value = serde_json::from_str(&lines[1]).unwrap();
        record["trace_line"] = "x".into();
        lines[1] = record.to_string();
        lines.join("\n") + "\n"
    });
    let out = merge(&["shard0", "shard1-bad-line", "shard2", "-o", "bad-line"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains(
            "shard1-bad-line: records.jsonl line 2 is unreadable: \
             field \"trace_line\": invalid type: string \"x\", expected u32 (column"
        ),
        "{t}"
    );
    // The last line cut short, as a copy stopped mid-file leaves it: said as that, where it
    // was `field "?": EOF while parsing a value` (audit L4).
    let mut last = 0;
    damaged_shard1("shard1-cut", "records.jsonl", |text| {
        last = text.lines().count();
        let cut = text.trim_end().len() - 10;
        text[..cut].to_string()
    });
    let out = merge(&["shard0", "shard1-cut", "shard2", "-o", "cut"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains(&format!(
            "shard1-cut: records.jsonl line {last} is unreadable: the last line is cut short: \
             the file is truncated (it ends inside "
        )),
        "{t}"
    );
    assert!(!t.contains("\"?\""), "{t}");
    // A histogram whose numbers are finite but impossible (the merged std was null).
    damaged_shard1("shard1-bad-m2", "histograms.json", |text| {
        let mut h: Value = serde_json::from_str(&text).unwrap();
        let m2 = &mut h["metrics"]["time_to_first_token"]["m2"];
        assert!(m2.is_f64(), "histograms.json's layout changed: {text}");
        *m2 = (-1.0).into();
        h.to_string()
    });
    let out = merge(&["shard0", "shard1-bad-m2", "shard2", "-o", "bad-m2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("shard1-bad-m2: histograms.json: metric time_to_first_token"),
        "{t}"
    );
    assert!(
        t.contains("m2 (the sum of squared deviations) negative"),
        "{t}"
    );
    // Refused before anything is written: a records.jsonl left there made a rerun without
    // --overwrite refuse the folder.
    assert!(!runs().dir.join("bad-m2").exists());
}

// A histograms.json of another run beside a shard's records (an earlier run's, left when
// this one's could not be written): its percentiles would be that run's. Folded from the
// records instead, and said.
#[test]
fn a_shard_whose_histograms_count_other_requests_is_folded_from_its_records() {
    let dir = &runs().dir;
    let single = std::fs::read_to_string(dir.join("single/histograms.json")).unwrap();
    damaged_shard1("shard1-stale", "histograms.json", |_| single.clone());
    let out = merge(&["shard0", "shard1-stale", "shard2", "-o", "stale"]);
    assert!(out.status.success(), "{}", text(&out));
    let m = summary(&dir.join("stale"));
    valid(&m);
    assert_eq!(m["merged"]["metrics_from"], "records");
    let notes = m["merged"]["notes"].to_string();
    assert!(
        notes.contains("shard1-stale: histograms.json counts"),
        "{notes}"
    );
    assert!(!notes.contains("no histograms.json in"), "{notes}");
    let single = summary(&dir.join("single"));
    assert_eq!(
        m["time_to_first_token"]["count"],
        single["time_to_first_token"]["count"]
    );
}

// A shard may own none of the window (BurstGPT's 3 README rows over 4 shards leave 2/4 and
// 3/4 empty): it sends nothing, exits 0 saying so, and writes its empty run, which the merge
// counts so that the shards still cover the trace exactly once. It used to fail ("selection
// keeps no requests", exit 1, nothing written), and the merge of the others then said
// "shard 2/4 is missing".
#[test]
fn a_shard_that_owns_no_request_writes_an_empty_run_the_merge_counts() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("merge-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let trace = "traces/burstgpt_readme_rows.csv";
    let mut empty = 0;
    for i in 0..4 {
        let shard = format!("{i}/4");
        let out = replay(&dir, &url, trace, &format!("s{i}"), &["--shard", &shard])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "shard {shard}: {}", text(&out));
        let s = summary(&dir.join(format!("s{i}")));
        valid(&s);
        if s["run"]["trace"]["selection"]["requests_out"] == 0 {
            empty += 1;
            assert_eq!(s["requests"], 0, "{s}");
            assert!(
                text(&out).contains(&format!("shard {shard} owns none of the 3 requests")),
                "{}",
                text(&out)
            );
            assert!(dir.join(format!("s{i}/records.jsonl")).exists());
        }
    }
    drop(sim);
    assert!(empty > 0, "every shard owned a request: pick another trace");
    let out = Command::new(CANARYD)
        .arg("merge")
        .args(["s0", "s1", "s2", "s3", "-o", "merged"])
        .current_dir(&dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let merged = summary(&dir.join("merged"));
    valid(&merged);
    assert_eq!(merged["requests"], 3);
    assert_eq!(merged["merged"]["replayed"], 3);
    assert_eq!(merged["merged"]["shard_count"], 4);
}

/// `canaryd merge ARGS`, failed if it has not ended within `secs` (a merge used to spin for
/// ever on a shard's records.jsonl that was a FIFO or /dev/zero).
fn merge_within(args: &[&str], secs: u64) -> Output {
    let mut child = Command::new(CANARYD)
        .arg("merge")
        .args(args)
        .current_dir(&runs().dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > end {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("merge {args:?} had not ended after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A copy of `shard1` as `name` whose `file` is not copied but made by `make`.
fn shard1_with(name: &str, file: &str, make: impl Fn(&Path)) {
    let dir = &runs().dir;
    let to = dir.join(name);
    if to.exists() {
        return;
    }
    std::fs::create_dir_all(&to).unwrap();
    for f in ["summary.json", "records.jsonl", "histograms.json"] {
        if f != file {
            std::fs::copy(dir.join("shard1").join(f), to.join(f)).unwrap();
        }
    }
    make(&to.join(file));
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(ok.success(), "mkfifo {}", path.display());
}

// A shard's records.jsonl that was a FIFO or /dev/zero kept `merge` running for ever, and its
// errors lost their cause: "miss1: miss1/records.jsonl" for a missing file, "reading
// fh/histograms.json" for a FIFO. Each is refused at once, saying why.
#[test]
fn a_shard_file_missing_or_not_a_file_is_refused_at_once_with_its_cause() {
    shard1_with("no-records", "records.jsonl", |_| {});
    shard1_with("fifo-records", "records.jsonl", mkfifo);
    shard1_with("zero-records", "records.jsonl", |p| {
        std::os::unix::fs::symlink("/dev/zero", p).unwrap()
    });
    shard1_with("fifo-histograms", "histograms.json", mkfifo);
    for (name, said) in [
        (
            "no-records",
            "no-records: no-records/records.jsonl: No such file or directory",
        ),
        (
            "fifo-records",
            "fifo-records: fifo-records/records.jsonl: not a regular file",
        ),
        (
            "zero-records",
            "zero-records: zero-records/records.jsonl: not a regular file",
        ),
        (
            "fifo-histograms",
            "fifo-histograms: reading fifo-histograms/histograms.json: not a regular file",
        ),
    ] {
        let out_dir = format!("{name}-merged");
        let out = merge_within(&["shard0", name, "shard2", "-o", &out_dir], 60);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out));
        assert!(text(&out).contains(said), "{name}: {}", text(&out));
        assert!(!runs().dir.join(&out_dir).join("summary.json").exists());
    }
}

// `merge --overwrite` of shards without histograms.json into a folder that held another run
// left that run's histograms.json (800 requests) beside the merged summary (90).
#[test]
fn merge_overwrite_leaves_none_of_the_replaced_runs_artifacts_it_does_not_write() {
    let dir = &runs().dir;
    for i in 0..3 {
        let to = dir.join(format!("nohist{i}"));
        if !to.exists() {
            std::fs::create_dir_all(&to).unwrap();
            for f in ["summary.json", "records.jsonl"] {
                std::fs::copy(dir.join(format!("shard{i}")).join(f), to.join(f)).unwrap();
            }
        }
    }
    let replaced = dir.join("replaced");
    std::fs::create_dir_all(&replaced).unwrap();
    for f in [
        "summary.json",
        "summary.csv",
        "records.jsonl",
        "histograms.json",
    ] {
        std::fs::copy(dir.join("single").join(f), replaced.join(f)).unwrap();
    }
    std::fs::write(replaced.join("timeslices.csv"), "slice\n").unwrap();
    let out = merge(&[
        "nohist0",
        "nohist1",
        "nohist2",
        "-o",
        "replaced",
        "--overwrite",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let m = summary(&replaced);
    assert_eq!(m["merged"]["metrics_from"], "records");
    assert!(!replaced.join("histograms.json").exists());
    // The shards have slices: the union's replace the stale ones.
    let csv = std::fs::read_to_string(replaced.join("timeslices.csv")).unwrap();
    assert!(csv.starts_with("slice,start_s,end_s,"), "{csv}");
    assert!(replaced.join("records.jsonl").exists());
}

/// The merged table's line starting with `prefix`.
fn line<'a>(table: &'a str, prefix: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line:\n{table}"))
}

// Finding 13 of the README audit: the shards' slices were dropped, the table printed no
// duration or rate, and lengths unrounded.
#[test]
fn the_union_is_sliced_again_on_the_merged_axis_and_the_table_says_its_span() {
    let dir = &runs().dir;
    let out = merge(&["shard0", "shard1", "shard2", "-o", "sliced"]);
    assert!(out.status.success(), "{}", text(&out));
    let table = text(&out);
    let merged = summary(&dir.join("sliced"));
    valid(&merged);
    let requests = merged["requests"].as_u64().unwrap();
    let t = &merged["timeslices"];
    assert_eq!(t["requested_slice_duration_s"].as_f64(), Some(0.2), "{t}");
    let width_s = t["slice_duration_s"].as_f64().unwrap();
    let slices = t["slices"].as_array().unwrap();
    // The replay spans about 0.8 s: several slices, so their boundaries matter.
    assert!(slices.len() >= 2, "{t}");
    let count = |s: &Value| s["requests"].as_u64().unwrap();
    assert_eq!(slices.iter().map(count).sum::<u64>(), requests, "{t}");
    assert!(dir.join("sliced/timeslices.csv").exists());
    // Each record in the slice of its send time on the merged axis: its own time plus its
    // shard's t0 offset.
    let offsets: std::collections::HashMap<String, f64> = merged["merged"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let shard = i["shard"].as_str().unwrap().to_string();
            (shard, i["t0_offset_ms"].as_f64().unwrap())
        })
        .collect();
    let records = std::fs::read_to_string(dir.join("sliced/records.jsonl")).unwrap();
    let mut expected = vec![0u64; slices.len()];
    // Whether every record is in the same slice on its shard's axis as on the merged one.
    let mut same_slices = true;
    for r in records
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
    {
        let sent = r["sent_at_ms"].as_f64().unwrap();
        let on_axis = sent + offsets[r["shard"].as_str().unwrap()];
        let slot = |ms: f64| (ms.max(0.0) / (width_s * 1e3)) as usize;
        expected[slot(on_axis)] += 1;
        same_slices &= slot(on_axis) == slot(sent);
    }
    assert_eq!(slices.iter().map(count).collect::<Vec<_>>(), expected);
    // The shards' own slices, summed slice by slice, where the boundaries agree.
    let shards: Vec<Value> = (0..3)
        .map(|i| summary(&dir.join(format!("shard{i}"))))
        .collect();
    let shard_slices = |i: usize| -> u64 {
        shards
            .iter()
            .map(|s| s["timeslices"]["slices"].get(i).map_or(0, count))
            .sum()
    };
    let summed: u64 = (0..slices.len()).map(shard_slices).sum();
    assert_eq!(summed, requests);
    if same_slices
        && shards
            .iter()
            .all(|s| s["timeslices"]["slice_duration_s"] == 0.2)
    {
        for (i, s) in slices.iter().enumerate() {
            assert_eq!(count(s), shard_slices(i), "slice {i}: {t}");
        }
    }
    // The duration and rates, as one run's table prints them.
    let duration = merged["duration_s"].as_f64().unwrap();
    assert!(
        line(&table, "duration ").starts_with(&format!(
            "duration {duration:.3} s (an upper bound: to the last end as canaryd read it)"
        )),
        "{table}"
    );
    let req = merged["request_throughput"].as_f64().unwrap();
    assert!(
        line(&table, "throughput ").starts_with(&format!("throughput {req:.2} req/s, ")),
        "{table}"
    );
    assert!(table.contains("timeslices of 0.2 s"), "{table}");
    assert!(
        table.contains("timeslices are the union's, sliced again from the earliest shard's t0"),
        "{table}"
    );
    assert!(table.contains("within ±0.000 ms (merged.alignment.bound_ms)"));
    // Lengths as one run's table writes them: the mean to 0.1 token, the rest whole.
    let row: Vec<&str> = line(&table, "output length (tokens)")
        .split_whitespace()
        .skip(3)
        .collect();
    assert_eq!(row.len(), 6, "{table}");
    assert_eq!(row[0].split('.').nth(1).map(str::len), Some(1), "{table}");
    assert!(row[1..].iter().all(|v| v.parse::<u64>().is_ok()), "{table}");
}

// Shards of different slice durations (one without slices here) have no common slices: the
// merge writes none, removes a replaced run's, and says why.
#[test]
fn shards_whose_slices_differ_merge_without_slices_and_say_so() {
    let dir = &runs().dir;
    damaged_shard1("shard1-no-slices", "summary.json", |text| {
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        doc.as_object_mut().unwrap().remove("timeslices");
        doc.to_string()
    });
    let replaced = dir.join("unsliced");
    std::fs::create_dir_all(&replaced).unwrap();
    std::fs::write(replaced.join("timeslices.csv"), "slice\n").unwrap();
    let out = merge(&[
        "shard0",
        "shard1-no-slices",
        "shard2",
        "-o",
        "unsliced",
        "--overwrite",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let merged = summary(&replaced);
    assert!(merged.get("timeslices").is_none());
    assert!(!replaced.join("timeslices.csv").exists());
    let t = text(&out);
    assert!(
        t.contains(
            "note: no merged timeslices: the shards' slice durations differ (0/3 0.2 s, 1/3 \
             none, 2/3 0.2 s)"
        ),
        "{t}"
    );
}

// A shard's slice duration that is no duration is refused naming its folder and field, not
// taken as "no slices".
#[test]
fn a_shard_whose_slice_duration_is_damaged_is_refused_naming_the_field() {
    damaged_shard1("shard1-bad-slices", "summary.json", |text| {
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        doc["timeslices"]["requested_slice_duration_s"] = "x".into();
        doc.to_string()
    });
    let out = merge(&["shard0", "shard1-bad-slices", "shard2", "-o", "bad-slices"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains(
            "shard1-bad-slices: summary.json timeslices.requested_slice_duration_s: expected \
             seconds, at least 1 ms, found \"x\""
        ),
        "{t}"
    );
}

// The merged table printed no goodput (the shards judged against SLOs) and no cancellations,
// where one run's table has both: they are counted from the union's records, exactly the
// shards' counts summed, and printed as one run prints them.
#[test]
fn merged_shards_judged_against_slos_with_cancels_print_goodput_and_cancellations() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("merge-slo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let trace = shared(TRACE);
    for i in 0..3 {
        let shard = format!("{i}/3");
        let out = Command::new(CANARYD)
            .args(["profile", "--trace", trace.to_str().unwrap(), "--url", &url])
            .args(["--model", "canary-sim", "--output-dir", &format!("s{i}")])
            .args([
                "--speedup",
                "10",
                "--scale-lengths",
                "0.05",
                "--shard",
                &shard,
            ])
            .args(["--no-nvml", "--no-ebpf"])
            // A quarter of the requests close right after their send, as users who give up.
            .args(["--request-cancellation-rate", "25"])
            .args(["--request-cancellation-delay", "0"])
            .args(["--slo", "time_to_first_token:60000"])
            .current_dir(&dir)
            .env("RUST_LOG", "warn")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "shard {shard}: {}", text(&out));
    }
    drop(sim);
    let out = Command::new(CANARYD)
        .arg("merge")
        .args(["s0", "s1", "s2", "-o", "merged"])
        .current_dir(&dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let merged = summary(&dir.join("merged"));
    valid(&merged);
    let shards: Vec<Value> = (0..3)
        .map(|i| summary(&dir.join(format!("s{i}"))))
        .collect();
    let sum = |f: &dyn Fn(&Value) -> u64| -> u64 { shards.iter().map(f).sum() };
    let cancelled = sum(&|s| s["cancelled"].as_u64().unwrap());
    let good = sum(&|s| s["goodput"]["good_requests"].as_u64().unwrap());
    assert!(cancelled > 0, "no request was cancelled: raise the rate");
    assert_eq!(merged["requests"], 20, "{table}");
    assert_eq!(merged["cancelled"].as_u64(), Some(cancelled), "{table}");
    let g = &merged["goodput"];
    assert_eq!(g["good_requests"].as_u64(), Some(good), "{g}");
    assert_eq!(g["slos"], "time_to_first_token:60000", "{g}");
    // Every completed request met a 60 s TTFT.
    assert_eq!(merged["completed"].as_u64(), Some(good), "{merged}");

    let requests = line(&table, "requests ");
    assert!(
        requests.starts_with(&format!(
            "requests 20 (completed {good}, cancelled {cancelled}, errors "
        )),
        "{table}"
    );
    // The goodput line, as one run's table writes it: the cancels are not judged.
    let judged = 20 - cancelled;
    let goodput = line(&table, "goodput ");
    let rate = g["goodput"].as_f64().unwrap();
    assert!(
        goodput.starts_with(&format!(
            "goodput {rate:.2} req/s: {good} of {judged} requests ({cancelled} of canaryd's own \
             failures or cancels left out) (100.0%) met time_to_first_token:60000"
        )),
        "{table}"
    );

    // The shards ran one after another: between one's last request's end and the next's t0,
    // no shard was running, yet the duration (and so every rate) spans it. The table and the
    // summary say how much, computed here from the t0 offsets and the merged records' ends.
    let offsets: std::collections::HashMap<String, f64> = merged["merged"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["shard"].as_str().unwrap().to_string(),
                i["t0_offset_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    let mut spans: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    let records = std::fs::read_to_string(dir.join("merged/records.jsonl")).unwrap();
    for l in records.lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        if r["warmup"].as_bool() == Some(true) {
            continue;
        }
        let shard = r["shard"].as_str().unwrap().to_string();
        let ended = r["ended_at_ms"].as_f64().unwrap() + offsets[&shard];
        let e = spans
            .entry(shard.clone())
            .or_insert((offsets[&shard], f64::NEG_INFINITY));
        e.1 = e.1.max(ended);
    }
    let mut spans: Vec<(f64, f64)> = spans.into_values().collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(spans.len(), 3, "{spans:?}");
    let gaps_ms: f64 = spans.windows(2).map(|w| (w[1].0 - w[0].1).max(0.0)).sum();
    assert!(gaps_ms > 0.0, "the shards' spans overlap: {spans:?}");
    let idle = merged["merged"]["no_shard_sending_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("no no_shard_sending_s in {:#}", merged["merged"]));
    assert!(
        (idle - gaps_ms / 1000.0).abs() < 1e-9,
        "{idle} vs {gaps_ms} ms"
    );
    let duration = merged["duration_s"].as_f64().unwrap();
    let said = format!(
        "note: the shards ran one after another: their runs (each shard's t0 to its last \
         request's end on the merged time axis) leave {idle:.3} s of the {duration:.3} s with \
         no shard running"
    );
    let note = line(&table, "note: the shards ran one after another");
    assert!(note.starts_with(&said), "{table}");
    assert!(
        note.ends_with("the rates are over the whole span"),
        "{table}"
    );
    // Beside the rates, once.
    assert_eq!(table.matches("ran one after another").count(), 1, "{table}");
    let notes = merged["merged"]["notes"].to_string();
    assert!(
        notes.contains("the shards ran one after another"),
        "{notes}"
    );
}

// The merged table printed `errors N` with no kind: a merge of shards answered with 429s and
// 503s says them as one run's table does, from the union's records.
#[test]
fn the_merged_table_says_the_error_kinds_and_statuses() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("merge-errors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (sim, port) = common::sim(&[
        "--fault-rate",
        "0.5",
        "--fault",
        "status=429",
        "--fault",
        "status=503",
        "--seed",
        "7",
    ]);
    let url = format!("http://127.0.0.1:{port}");
    for i in 0..2 {
        let shard = format!("{i}/2");
        let out = replay(&dir, &url, TRACE, &format!("s{i}"), &["--shard", &shard])
            .output()
            .unwrap();
        // A shard fails its verdict on its error rate; its artifacts are written all the same.
        assert!(out.status.code().is_some(), "{}", text(&out));
        assert!(
            dir.join(format!("s{i}/records.jsonl")).exists(),
            "{}",
            text(&out)
        );
    }
    drop(sim);
    let out = Command::new(CANARYD)
        .arg("merge")
        .args(["s0", "s1", "-o", "merged"])
        .current_dir(&dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let merged = summary(&dir.join("merged"));
    valid(&merged);
    let count = |s: &Value, k: &str| s["errors_by_http_status"][k].as_u64().unwrap_or(0);
    let shards = [summary(&dir.join("s0")), summary(&dir.join("s1"))];
    let (a, b) = (count(&merged, "429"), count(&merged, "503"));
    assert!(
        a > 0 && b > 0,
        "no 429 and 503 both in the merged errors_by_http_status (another seed?): {merged}"
    );
    // The union's counts are the shards' own.
    assert_eq!(a, shards.iter().map(|s| count(s, "429")).sum::<u64>());
    assert_eq!(b, shards.iter().map(|s| count(s, "503")).sum::<u64>());
    let n = merged["errors"].as_u64().unwrap();
    assert_eq!(n, a + b, "{merged}");
    let table = text(&out);
    let errors = format!(", errors {n}: http_status {n} (429 ×{a}, 503 ×{b})), ");
    assert!(
        line(&table, "requests ").contains(&errors),
        "{errors:?} not in {table}"
    );
}
