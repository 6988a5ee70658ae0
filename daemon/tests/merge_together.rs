//! `canaryd merge` of shards that ran together (audit of sharded runs: M1, M2, L1, L5, L6, L7,
//! L8). Five shard processes of the BurstGPT README rows (3 rows: two shards own none, and the
//! trace idles 0.4 s and 0.73 s between rows at 100×) replay against one `canaryd sim`, all
//! given one `--start-at` and `--concurrency 1 --warmup-requests 1`; shard 2/5 is launched
//! after the instant under `--max-late-start`. The merge must say they ran together (the
//! trace's idle time is not shards run one after another), state the caps as per shard and
//! the union's, and name the late shard. Damaged copies of the shards check the refusals.

mod common;

use common::{json, rfc3339, shared, text, CANARYD};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TRACE: &str = "traces/burstgpt_readme_rows.csv";

fn replay(dir: &Path, url: &str, out: &str, extra: &[&str]) -> Command {
    let trace = shared(TRACE);
    let mut c = Command::new(CANARYD);
    c.args(["replay", "--trace", trace.to_str().unwrap(), "--url", url])
        .args(["--model", "canary-sim", "--output-dir", out])
        .args(["--speedup", "100", "--scale-lengths", "0.1"])
        .args(["--concurrency", "1", "--warmup-requests", "1"])
        .args(extra)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Unix ns now.
fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("merge-together-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (sim, port) = common::sim(&[]);
        let url = format!("http://127.0.0.1:{port}");
        let ok = |o: Output| assert!(o.status.success(), "{}", text(&o));
        // Unsharded, with the cap each shard has: what a compare sets the merge against.
        ok(replay(&dir, &url, "single", &[]).output().unwrap());
        // A --runs experiment of shard 1/5: its folder is not one run.
        ok(
            replay(&dir, &url, "runs2", &["--shard", "1/5", "--runs", "2"])
                .output()
                .unwrap(),
        );
        let start_ns = now_ns() + 4_000_000_000;
        let start = rfc3339(start_ns);
        let mut shards = Vec::new();
        for i in [0, 1, 3, 4] {
            let shard = format!("{i}/5");
            let args = ["--shard", shard.as_str(), "--start-at", start.as_str()];
            shards.push(
                replay(&dir, &url, &format!("shard{i}"), &args)
                    .spawn()
                    .unwrap(),
            );
        }
        // Shard 2/5 (the trace's last row, due 1.13 s after the instant) launched after the
        // instant: it starts late, as --max-late-start allows.
        let wait = start_ns + 300_000_000 - now_ns();
        std::thread::sleep(Duration::from_nanos(wait.max(0) as u64));
        let args = [
            "--shard",
            "2/5",
            "--start-at",
            start.as_str(),
            "--max-late-start",
            "60s",
        ];
        shards.push(replay(&dir, &url, "shard2", &args).spawn().unwrap());
        for c in shards {
            ok(c.wait_with_output().unwrap());
        }
        drop(sim);
        // Not `merge()`: it reads this very `OnceLock`.
        let out = Command::new(CANARYD)
            .args(["merge", "shard0", "shard1", "shard2", "shard3", "shard4"])
            .args(["-o", "merged"])
            .current_dir(&dir)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        std::fs::write(dir.join("merged.table"), &out.stdout).unwrap();
        ok(out);
        dir
    })
}

fn merge(args: &[&str]) -> Output {
    Command::new(CANARYD)
        .arg("merge")
        .args(args)
        .current_dir(dir())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn valid(doc: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let v = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// A copy of `shard{i}` as `name`, its `summary.json` or `histograms.json` changed by `edit`.
fn copy_shard(i: u32, name: &str, file: &str, edit: impl Fn(&mut Value)) {
    let copy = dir().join(name);
    if copy.exists() {
        return;
    }
    std::fs::create_dir_all(&copy).unwrap();
    let from = dir().join(format!("shard{i}"));
    for f in ["summary.json", "records.jsonl", "histograms.json"] {
        let bytes = std::fs::read(from.join(f)).unwrap();
        let bytes = if f == file {
            let mut doc: Value = serde_json::from_slice(&bytes).unwrap();
            edit(&mut doc);
            doc.to_string().into_bytes()
        } else {
            bytes
        };
        std::fs::write(copy.join(f), bytes).unwrap();
    }
}

// M1: shards on one --start-at were said not to have run together ("shards' sending spans
// leave 0.730 s … with no shard sending"), the gap being the trace's own idle time between
// rows that different shards own. The unsharded run has the same gap and no such note.
#[test]
fn shards_on_one_start_at_ran_together_whatever_the_traces_idle_time() {
    let m = json(&dir().join("merged/summary.json"));
    valid(&m);
    let table = std::fs::read_to_string(dir().join("merged.table")).unwrap();
    let merged = &m["merged"];
    assert_eq!(merged["replayed"], 3, "{merged:#}");
    assert!(
        merged["alignment"]["common_start"].is_string(),
        "{merged:#}"
    );
    // The trace idles between rows that different shards own: each shard's first to last
    // send leaves time no shard is sending, which used to read as shards run one after
    // another. The setup still has it.
    let mut spans: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for l in std::fs::read_to_string(dir().join("merged/records.jsonl"))
        .unwrap()
        .lines()
    {
        let r: Value = serde_json::from_str(l).unwrap();
        if r["warmup"].as_bool() == Some(true) {
            continue;
        }
        let sent = r["sent_at_ms"].as_f64().unwrap();
        let e = spans
            .entry(r["shard"].as_str().unwrap().to_string())
            .or_insert((f64::INFINITY, f64::NEG_INFINITY));
        *e = (e.0.min(sent), e.1.max(sent));
    }
    let mut spans: Vec<(f64, f64)> = spans.into_values().collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut reached = f64::NEG_INFINITY;
    let mut idle_ms = 0.0;
    for (start, end) in spans {
        if reached.is_finite() && start > reached {
            idle_ms += start - reached;
        }
        reached = reached.max(end);
    }
    assert!(
        idle_ms > 100.0,
        "no idle time between the shards' sends: {idle_ms} ms"
    );
    assert!(merged.get("no_shard_sending_s").is_none(), "{merged:#}");
    assert!(!table.contains("one after another"), "{table}");
    assert!(!table.contains("did not run together"), "{table}");
    assert!(!merged["notes"].to_string().contains("one after another"));
}

// M2: --concurrency and --warmup-requests are each shard's; the merged run stated the first
// shard's as the union's, and a compare with an unsharded run of that cap showed no
// difference in context.
#[test]
fn the_per_shard_caps_are_stated_as_the_unions_and_a_compare_shows_them() {
    let m = json(&dir().join("merged/summary.json"));
    assert_eq!(m["run"]["concurrency"], 5, "{:#}", m["run"]);
    assert_eq!(m["run"]["warmup_requests"], 5, "{:#}", m["run"]);
    assert_eq!(m["merged"]["per_shard_concurrency"], 1);
    assert_eq!(m["merged"]["per_shard_warmup_requests"], 1);
    // Only the shards that own a request warm up: the two of them.
    assert_eq!(m["warmup_requests"], 2);
    let notes = m["merged"]["notes"].to_string();
    assert!(
        notes.contains(
            "--concurrency 1 was each shard's cap: the union's bound on requests in flight is 5 \
             (1 per shard × 5 shards, run.concurrency)"
        ),
        "{notes}"
    );
    let out = Command::new(CANARYD)
        .args(["compare", "single", "merged"])
        .current_dir(dir())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(t.contains("Run context that differs:"), "{t}");
    assert!(t.contains("  concurrency: 1 → 5\n"), "{t}");
    assert!(t.contains("  warmup_requests: 1 → 5\n"), "{t}");
}

// L5: a shard that began late under --max-late-start was not mentioned: the merge said
// "start spread 0.000 ms" of the t0s and nothing else.
#[test]
fn a_shard_that_began_late_is_named_with_its_lateness() {
    let m = json(&dir().join("merged/summary.json"));
    let own = json(&dir().join("shard2/summary.json"));
    let late = own["clock"]["start_at"]["late_by_ms"].as_f64().unwrap();
    assert!(late > 0.0, "shard 2/5 was not late: {:#}", own["clock"]);
    let inputs = m["merged"]["inputs"].as_array().unwrap();
    for input in inputs {
        let expected = (input["shard"] == "2/5").then_some(late);
        assert_eq!(input["late_by_ms"].as_f64(), expected, "{input:#}");
    }
    let table = std::fs::read_to_string(dir().join("merged.table")).unwrap();
    assert!(
        table.contains(&format!(
            "note: shard 2/5 (shard2) began {late:.3} ms after its --start-at (--max-late-start \
             allowed it)"
        )),
        "{table}"
    );
}

// L8: with no bound on the alignment (another host, its clock not known to be synchronized),
// a note said the rates were "within merged.alignment.bound_ms", the footnote "within the
// alignment bound", and the one-axis lag and the rates carried no mark.
#[test]
fn with_no_alignment_bound_no_line_reads_as_bounded() {
    copy_shard(1, "shard1-otherhost", "summary.json", |s| {
        s["clock"]["boot_id"] = "other-host".into();
        s["clock"]["kernel"] = Value::Null;
    });
    let out = merge(&[
        "shard0",
        "shard1-otherhost",
        "shard2",
        "shard3",
        "shard4",
        "-o",
        "otherhost",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let m = json(&dir().join("otherhost/summary.json"));
    valid(&m);
    assert!(m["merged"]["alignment"]["bound_ms"].is_null());
    assert!(
        !table.contains("within merged.alignment.bound_ms"),
        "{table}"
    );
    assert!(!table.contains("within the alignment bound"), "{table}");
    assert!(table.contains("lag, one axis (ms, no bound)"), "{table}");
    assert!(
        table.contains("one axis: plus its shard's t0 offset, with no bound"),
        "{table}"
    );
    let rates = table
        .lines()
        .find(|l| l.starts_with("throughput "))
        .unwrap();
    assert!(rates.contains(" req/s (no bound)"), "{table}");
    assert!(rates.contains("over a duration with no bound)"), "{table}");
    assert!(!rates.contains("over the duration)"), "{table}");
}

// L6: only schedule_lag's count was checked against the records, so a histograms.json whose
// TTFT counted 5 more (count and a bucket alike) was summed into the union.
#[test]
fn a_histogram_whose_metric_count_disagrees_with_its_summary_is_not_summed() {
    let said = json(&dir().join("shard1/summary.json"))["time_to_first_token"]["count"]
        .as_u64()
        .unwrap();
    copy_shard(1, "shard1-ttft", "histograms.json", |h| {
        let m = &mut h["metrics"]["time_to_first_token"];
        m["count"] = (m["count"].as_u64().unwrap() + 5).into();
        let first = &mut m["buckets"][0][1];
        *first = (first.as_u64().unwrap() + 5).into();
    });
    let out = merge(&[
        "shard0",
        "shard1-ttft",
        "shard2",
        "shard3",
        "shard4",
        "-o",
        "ttft",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let m = json(&dir().join("ttft/summary.json"));
    assert_eq!(m["merged"]["metrics_from"], "records");
    let notes = m["merged"]["notes"].to_string();
    assert!(
        notes.contains(&format!(
            "shard1-ttft: histograms.json counts {} time_to_first_token values, summary.json \
             {said}",
            said + 5
        )),
        "{notes}"
    );
    assert_eq!(m["time_to_first_token"]["count"], 3);
}

// L1: a shard whose clock block cannot be used was reported under the first shard's folder
// (`shard0: shard2-noclock: …`).
#[test]
fn a_shard_without_a_clock_is_refused_under_its_own_folder_only() {
    copy_shard(2, "shard2-noclock", "summary.json", |s| {
        s.as_object_mut().unwrap().remove("clock");
    });
    let out = merge(&[
        "shard0",
        "shard1",
        "shard2-noclock",
        "shard3",
        "shard4",
        "-o",
        "noclock",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("error: merging shards: shard2-noclock: summary.json has no t0_monotonic_ns"),
        "{t}"
    );
    assert!(!t.contains("shard0"), "{t}");
}

// L7: refusals did not say what the folder was (a --runs experiment, a merge's output), and
// only the first of several unreadable folders was named.
#[test]
fn refusals_say_what_the_folder_is_and_name_every_unreadable_one() {
    dir();
    let t = text(&merge(&[
        "shard0", "runs2", "shard2", "shard3", "shard4", "-o", "x1",
    ]));
    assert!(
        t.contains(
            "runs2: is a --runs experiment (its summary.json holds repeats), not one run: its \
             runs are runs2/run-1 … runs2/run-2"
        ),
        "{t}"
    );
    let t = text(&merge(&[
        "shard0", "merged", "shard2", "shard3", "shard4", "-o", "x2",
    ]));
    assert!(
        t.contains("merged: is a merge's output (canaryd merge), not a shard run"),
        "{t}"
    );
    let out = merge(&["gone1", "shard0", "gone2", "-o", "x3"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("2 of the folders given are not usable shard runs"),
        "{t}"
    );
    assert!(t.contains("  - gone1: does not exist"), "{t}");
    assert!(t.contains("  - gone2: does not exist"), "{t}");
    let file = dir().join("a-file");
    std::fs::write(&file, "").unwrap();
    let t = text(&merge(&[
        "shard0", "shard1", "shard2", "shard3", "shard4", "-o", "a-file",
    ]));
    assert!(t.contains("a-file: is not a folder"), "{t}");
}
