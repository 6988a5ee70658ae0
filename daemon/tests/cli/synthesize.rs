//! `canaryd synthesize IN OUT` on the real Mooncake conversation trace, read back by
//! `canaryd analyze-trace` (issue 17).

use super::canaryd;
use crate::common::{shared, text};

fn analysis(dir: &std::path::Path, file: &str) -> serde_json::Value {
    let out = canaryd(&["analyze-trace", "--json", file], dir);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn synthesize_writes_a_trace_analyze_trace_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let input = shared("traces/mooncake_conversation_first2000.jsonl");
    let input = input.to_str().unwrap();
    let out = canaryd(
        &[
            "synthesize",
            input,
            "out.jsonl",
            "--synthesis-speedup-ratio",
            "2",
            "--prefix-root-multiplier",
            "3",
            "--synthesis-max-isl",
            "4096",
            "--max-osl",
            "256",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("wrote 2000 rows"), "{}", text(&out));
    let (a, b) = (
        analysis(dir.path(), input),
        analysis(dir.path(), "out.jsonl"),
    );
    assert_eq!(b["requests"], a["requests"]);
    assert_eq!(
        b["input_tokens"]["max"].as_u64().unwrap(),
        4096.min(a["input_tokens"]["max"].as_u64().unwrap())
    );
    assert!(b["output_tokens"]["max"].as_u64().unwrap() <= 256);
    let half = a["duration_s"].as_f64().unwrap() / 2.0;
    assert!(
        (b["duration_s"].as_f64().unwrap() - half).abs() < 1e-3,
        "{b}"
    );
    let reused = |v: &serde_json::Value| v["prefix_reuse"]["block_hit_rate"].as_f64().unwrap();
    assert!(reused(&b) < reused(&a), "three roots share less");

    // An existing file is never overwritten; a zero factor is refused before reading.
    let again = canaryd(&["synthesize", input, "out.jsonl"], dir.path());
    assert!(!again.status.success());
    assert!(text(&again).contains("out.jsonl"), "{}", text(&again));
    let zero = canaryd(
        &["synthesize", input, "other.jsonl", "--speedup-ratio", "0"],
        dir.path(),
    );
    // A bad flag value is a usage error (exit 2, as `replay --speedup 0`) naming the flag.
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero));
    assert!(
        text(&zero).contains("--speedup-ratio")
            && text(&zero).contains("expected a positive number"),
        "{}",
        text(&zero)
    );
    assert!(!dir.path().join("other.jsonl").exists());
    for (flag, value) in [
        ("--prefix-len-multiplier", "0"),
        ("--prompt-len-multiplier", "inf"),
        ("--prefix-root-multiplier", "0"),
        ("--max-isl", "0"),
        ("--max-osl", "0"),
    ] {
        let bad = canaryd(
            &["synthesize", input, "other.jsonl", flag, value],
            dir.path(),
        );
        assert_eq!(bad.status.code(), Some(2), "{flag}: {}", text(&bad));
        assert!(text(&bad).contains(flag), "{flag}: {}", text(&bad));
    }
    // The same checks on replay's spellings.
    let bad = canaryd(
        &["replay", "--trace", input, "--synthesis-speedup-ratio", "0"],
        dir.path(),
    );
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(
        text(&bad).contains("--synthesis-speedup-ratio"),
        "{}",
        text(&bad)
    );
    assert!(!dir.path().join("other.jsonl").exists());
}

// A tiny ratio wrote `null` timestamps (1e-300) or rows years apart (1e-9), "wrote 2000 rows"
// and exit 0, for a file no replay takes; a row refused half-way (its prompt too long) left
// the rows before it in OUT, which a rerun then refused to overwrite.
#[test]
fn synthesize_refuses_what_no_replay_could_read_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let input = shared("traces/mooncake_conversation_first2000.jsonl");
    let input = input.to_str().unwrap();
    let left = |dir: &std::path::Path| -> Vec<_> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    };
    for (flags, says) in [
        (
            ["--speedup-ratio", "1e-300"],
            "its timestamp would be past the largest",
        ),
        (
            ["--speedup-ratio", "1e-9"],
            "days after the trace's first request",
        ),
        (["--prompt-len-multiplier", "1000"], "over the limit"),
    ] {
        let out = canaryd(
            &[&["synthesize", input, "out.jsonl"][..], &flags].concat(),
            dir.path(),
        );
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {msg}");
        assert!(
            msg.contains(says) && msg.contains("line "),
            "{flags:?}: {msg}"
        );
        if flags[0] == "--speedup-ratio" {
            assert!(msg.contains("--speedup-ratio is too small"), "{msg}");
        }
        assert!(
            left(dir.path()).is_empty(),
            "{flags:?}: {:?}",
            left(dir.path())
        );
    }
    // The same OUT is free for the rerun.
    let out = canaryd(&["synthesize", input, "out.jsonl"], dir.path());
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(left(dir.path()), ["out.jsonl"]);

    // On the fly, the flag is named as replay spells it, before anything is sent (to a port
    // with nothing listening: a request sent by mistake fails rather than being answered).
    let url = format!("http://127.0.0.1:{}", crate::common::free_port());
    let args = [
        "replay", "--trace", input, "--url", &url, "--model", "m", "-o", "run",
    ];
    let out = canaryd(
        &[&args[..], &["--synthesis-speedup-ratio", "1e-9"]].concat(),
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--synthesis-speedup-ratio: too small for"),
        "{}",
        text(&out)
    );
}

/// `(trace_line, scheduled ms, input, output, usage prompt, usage completion)` of each record.
fn rows(dir: &std::path::Path) -> Vec<(u64, f64, u64, u64, u64, u64)> {
    let text = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let mut rows: Vec<_> = text
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(r["status"], "ok", "{r}");
            let n = |v: &serde_json::Value| v.as_u64().unwrap();
            (
                n(&r["trace_line"]),
                r["scheduled_at_ms"].as_f64().unwrap(),
                n(&r["input_tokens"]),
                n(&r["output_tokens"]),
                n(&r["usage"]["prompt_tokens"]),
                n(&r["usage"]["completion_tokens"]),
            )
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    rows
}

fn summary(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn replay_with_synthesis_flags_sends_what_a_replay_of_the_synthesized_file_sends() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = crate::common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let input = shared("traces/mooncake_arxiv_first20.jsonl");
    let input = input.to_str().unwrap();
    let common = ["--url", &url, "--model", "canary-sim", "--speedup", "4"];
    let common = [
        &common[..],
        &["--no-ebpf", "--no-nvml", "--no-server-metrics"],
    ]
    .concat();

    // On the fly: aiperf's spellings, and a short one.
    let synth = [
        "--synthesis-max-isl",
        "3000",
        "--synthesis-prompt-len-multiplier",
        "0.25",
        "--max-osl",
        "24",
        "--synthesis-speedup-ratio",
        "2",
    ];
    let args = [
        &["replay", "--trace", input, "-o", "fly"],
        &common[..],
        &synth,
    ]
    .concat();
    let out = canaryd(&args, dir.path());
    assert!(out.status.success(), "{}", text(&out));

    // The same through a file.
    let out = canaryd(
        &[&["synthesize", input, "synth.jsonl"], &synth[..]].concat(),
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let args = [
        &["replay", "--trace", "synth.jsonl", "-o", "file"],
        &common[..],
    ]
    .concat();
    let out = canaryd(&args, dir.path());
    assert!(out.status.success(), "{}", text(&out));

    let (fly, file) = (
        rows(&dir.path().join("fly")),
        rows(&dir.path().join("file")),
    );
    assert_eq!(fly.len(), 20);
    assert_eq!(fly, file, "same rows, schedule, lengths and usage");
    // Transformed: the arXiv rows ask for up to 87k tokens in and 794 out.
    assert!(fly.iter().all(|r| r.2 <= 3000 && r.3 <= 24), "{fly:?}");
    assert!(fly.iter().any(|r| r.2 == 3000), "{fly:?}");
    assert!(
        fly.iter().all(|r| r.5 == r.3),
        "usage shows the capped outputs: {fly:?}"
    );
    // Sped up 2 x 4: the second burst, 3052 ms into the trace, is due at 381.5 ms.
    assert!(fly.iter().any(|r| (r.1 - 381.5).abs() < 1e-6), "{fly:?}");

    // The run says what it replayed; the file's run replayed the same rows as read.
    let (a, b) = (
        summary(&dir.path().join("fly")),
        summary(&dir.path().join("file")),
    );
    crate::experiments::assert_valid(&a, None);
    let s = &a["run"]["trace"]["synthesis"];
    assert_eq!(s["max_isl"], 3000, "{s}");
    assert_eq!(s["max_osl"], 24, "{s}");
    assert_eq!(s["prompt_len_multiplier"], 0.25, "{s}");
    assert_eq!(s["speedup_ratio"], 2.0, "{s}");
    assert_eq!(s["rows"], 20, "{s}");
    assert!(b["run"]["trace"].get("synthesis").is_none());
    assert_eq!(a["run"]["trace"]["digest"], b["run"]["trace"]["digest"]);

    // A bad value is refused naming the flag, before anything is sent.
    let args = [
        &["replay", "--trace", input, "-o", "bad"],
        &common[..],
        &["--synthesis-max-isl", "0"],
    ]
    .concat();
    let out = canaryd(&args, dir.path());
    assert!(!out.status.success());
    assert!(
        text(&out).contains("'--synthesis-max-isl <N>': expected 1 or more"),
        "{}",
        text(&out)
    );
    // Synthetic requests have no trace to transform.
    let out = canaryd(
        &["profile", "--url", &url, "--model", "m", "--max-isl", "10"],
        dir.path(),
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--synthesis-max-isl applies to a --trace"),
        "{}",
        text(&out)
    );
}

#[test]
fn profile_trace_takes_the_synthesis_flags() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = crate::common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let input = shared("traces/mooncake_arxiv_first20.jsonl");
    let out = canaryd(
        &[
            "profile",
            "--trace",
            input.to_str().unwrap(),
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--synthesis-speedup-ratio",
            "8",
            "--synthesis-max-isl",
            "512",
            "--synthesis-max-osl",
            "4",
            "--random-seed",
            "7",
            "-o",
            "out",
            "--no-ebpf",
            "--no-nvml",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let rows = rows(&dir.path().join("out"));
    assert_eq!(rows.len(), 20);
    assert!(rows.iter().all(|r| r.2 <= 512 && r.3 <= 4), "{rows:?}");
    let s = summary(&dir.path().join("out"));
    assert_eq!(s["run"]["trace"]["synthesis"]["seed"], 7, "{s}");
}

/// The real Bailian row (16-token blocks) in, a Bailian trace out, which `analyze-trace` reads
/// back as Bailian; and a replay with the same transforms on the fly sends what a replay of
/// that file sends. Both used to be refused ("the written Mooncake trace can only say 512").
#[test]
fn a_bailian_trace_is_synthesized_as_bailian_and_replayed_the_same_on_the_fly() {
    let dir = tempfile::tempdir().unwrap();
    let input = shared("traces/bailian_documented_row.jsonl");
    let input = input.to_str().unwrap();
    let synth = ["--prompt-len-multiplier", "0.5", "--max-osl", "100"];
    let out = canaryd(
        &[&["synthesize", input, "out.jsonl"], &synth[..]].concat(),
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("wrote 1 rows"), "{}", text(&out));
    let row: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap())
            .unwrap();
    assert_eq!(row["chat_id"], 0, "{row}");
    assert_eq!(row["parent_chat_id"], -1, "{row}");
    assert_eq!(row["type"], "thinking", "{row}");
    assert_eq!(row["input_length"], 251, "{row}");
    assert_eq!(row["output_length"], 100, "{row}");
    assert_eq!(row["hash_ids"].as_array().unwrap().len(), 16, "{row}");
    let (a, b) = (
        analysis(dir.path(), input),
        analysis(dir.path(), "out.jsonl"),
    );
    assert_eq!(a["format"], "bailian", "{a}");
    assert_eq!(b["format"], "bailian", "{b}");
    assert_eq!(b["requests"], 1, "{b}");
    assert_eq!(b["input_tokens"]["max"], 251, "{b}");
    assert_eq!(b["output_tokens"]["max"], 100, "{b}");
    assert_eq!(b["sessions"], a["sessions"], "{b}");
    assert_eq!(b["load"]["categories"], a["load"]["categories"], "{b}");

    let (_sim, port) = crate::common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let common = [
        "--url",
        &url,
        "--model",
        "canary-sim",
        "--no-ebpf",
        "--no-nvml",
        "--no-server-metrics",
        "--max-output-tokens",
        "8",
    ];
    let fly_flags = [
        "--synthesis-prompt-len-multiplier",
        "0.5",
        "--synthesis-max-osl",
        "100",
    ];
    let fly = [
        &["replay", "--trace", input, "-o", "fly"],
        &common[..],
        &fly_flags,
    ]
    .concat();
    let out = canaryd(&fly, dir.path());
    assert!(out.status.success(), "{}", text(&out));
    let file = [
        &["replay", "--trace", "out.jsonl", "-o", "file"],
        &common[..],
    ]
    .concat();
    let out = canaryd(&file, dir.path());
    assert!(out.status.success(), "{}", text(&out));
    let (fly, file) = (
        rows(&dir.path().join("fly")),
        rows(&dir.path().join("file")),
    );
    assert_eq!(fly.len(), 1);
    assert_eq!(fly, file, "same rows, schedule, lengths and usage");
    assert_eq!(fly[0].2, 251, "{fly:?}");
    assert_eq!(fly[0].4, 251, "the simulator counted the prompt: {fly:?}");
    let (a, b) = (
        summary(&dir.path().join("fly")),
        summary(&dir.path().join("file")),
    );
    assert_eq!(a["run"]["trace"]["format"], "bailian", "{a}");
    assert_eq!(a["run"]["trace"]["digest"], b["run"]["trace"]["digest"]);
}

/// The first `n` lines of the real 300-row Mooncake slice, and then `tail`.
fn derived_trace(dir: &std::path::Path, name: &str, n: usize, tail: &str) -> String {
    let real = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("data/mooncake_conversation_first300.jsonl"),
    )
    .unwrap();
    let mut text: String = real.lines().take(n).map(|l| format!("{l}\n")).collect();
    text.push_str(tail);
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

// Audit F4: synthesize wrote into `OUT.partial` whoever made it, emptying it, then removed it,
// on success and on failure: a user's file of that name was lost. F11: an OUT that exists was
// refused only after the whole input was loaded.
#[test]
fn synthesize_never_touches_a_file_it_did_not_create_and_looks_at_out_first() {
    let dir = tempfile::tempdir().unwrap();
    let input = derived_trace(dir.path(), "in.jsonl", 300, "");
    let precious = dir.path().join("out.jsonl.partial");
    std::fs::write(&precious, "precious user data\n").unwrap();
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };

    // A failure half-way (the ratio puts a row past what a trace holds), then a success.
    let out = canaryd(
        &[
            "synthesize",
            &input,
            "out.jsonl",
            "--speedup-ratio",
            "1e-300",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(names(dir.path()), ["in.jsonl", "out.jsonl.partial"]);
    let out = canaryd(&["synthesize", &input, "out.jsonl"], dir.path());
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("wrote 300 rows"), "{}", text(&out));
    assert_eq!(
        names(dir.path()),
        ["in.jsonl", "out.jsonl", "out.jsonl.partial"]
    );
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "precious user data\n"
    );

    // OUT exists: refused before the input is read, so a broken input is not what is said.
    let broken = derived_trace(
        dir.path(),
        "broken.jsonl",
        10,
        "{\"timestamp\": \"soon\"}\n",
    );
    let out = canaryd(&["synthesize", &broken, "out.jsonl"], dir.path());
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("out.jsonl exists: choose another name"),
        "{msg}"
    );
    assert!(!msg.contains("broken.jsonl:11"), "{msg}");
    // Without OUT, the same input is refused at its broken line.
    let out = canaryd(&["synthesize", &broken, "other.jsonl"], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("broken.jsonl:11"), "{}", text(&out));
    assert!(!dir.path().join("other.jsonl").exists());
}

// Audit F12: synthesize had no reader flags, though the README said "a synthesized length over
// `--length-limit` is refused" and one bad row made a file unsynthesizable that `analyze-trace
// --skip-invalid` read; the on-the-fly error told a replay to "synthesize with
// --burstgpt-failed skip", a flag synthesize does not have. F15: `--max-line-bytes` had no
// ceiling.
#[test]
fn synthesize_takes_the_reader_flags_and_says_which_to_use() {
    let dir = tempfile::tempdir().unwrap();
    let input = derived_trace(dir.path(), "in.jsonl", 300, "");
    let run = |args: &[&str]| canaryd(&[&["synthesize", &input][..], args].concat(), dir.path());

    // The rows over the limit: refused by their line, or skipped and counted.
    let out = run(&["a.jsonl", "--length-limit", "100000"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("in.jsonl:98: field \"input_length\": expected at most 100000"),
        "{}",
        text(&out)
    );
    let out = run(&["a.jsonl", "--length-limit", "100000", "--skip-invalid"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("wrote 298 rows")
            && text(&out).contains("2 invalid rows of the input skipped"),
        "{}",
        text(&out)
    );
    // A synthesized length over the limit is refused naming its line; a higher limit takes it.
    let out = run(&["b.jsonl", "--prompt-len-multiplier", "3"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&[
        "c.jsonl",
        "--prompt-len-multiplier",
        "3",
        "--length-limit",
        "200000",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("over the limit of 200000") && text(&out).contains("line "),
        "{}",
        text(&out)
    );
    assert!(!dir.path().join("c.jsonl").exists());
    let out = run(&["c.jsonl", "--length-limit", "100000001"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--length-limit 100000001: expected at most 100000000"),
        "{}",
        text(&out)
    );
    // A line longer than --max-line-bytes; and a ceiling on it, here and for analyze-trace.
    let out = run(&["c.jsonl", "--max-line-bytes", "100"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("in.jsonl:1: line longer than 100 bytes"),
        "{}",
        text(&out)
    );
    for cmd in [
        vec!["synthesize", &input, "c.jsonl"],
        vec!["analyze-trace", &input],
    ] {
        let out = canaryd(
            &[&cmd[..], &["--max-line-bytes", "1073741825"]].concat(),
            dir.path(),
        );
        assert!(!out.status.success(), "{cmd:?}: {}", text(&out));
        assert!(
            text(&out).contains("--max-line-bytes") && text(&out).contains("1073741824"),
            "{cmd:?}: {}",
            text(&out)
        );
    }
    assert!(!dir.path().join("c.jsonl").exists());

    // On the fly, a failed BurstGPT row kept: the advice names the flag that drops it.
    let real = std::fs::read_to_string(shared("traces/burstgpt_readme_rows.csv")).unwrap();
    let failed = real.replacen("45,ChatGPT,1087,230,1317", "45,ChatGPT,1087,0,1087", 1);
    assert_ne!(failed, real);
    std::fs::write(dir.path().join("failed.csv"), failed).unwrap();
    // Refused before anything is sent: a port with nothing listening, as above.
    let url = format!("http://127.0.0.1:{}", crate::common::free_port());
    let out = canaryd(
        &[
            "replay",
            "--trace",
            "failed.csv",
            "--url",
            &url,
            "--model",
            "m",
            "-o",
            "run",
            "--burstgpt-failed",
            "send",
            "--synthesis-max-osl",
            "100",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("drop such rows with --burstgpt-failed skip"),
        "{}",
        text(&out)
    );
}
