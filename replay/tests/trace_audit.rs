//! Findings of the trace-reader audit (/work/audit-trace.md), each on a copy of a real trace
//! in `shared/traces/` (see its SOURCES.md) written to a temporary directory and damaged
//! there, the damage said where it is done.

use std::path::{Path, PathBuf};

use canary_replay::trace::{self, LoadOptions, Trace, TraceError};

fn real(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// Writes `text` as `name` in `dir`.
fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load(path: &Path, skip_invalid: bool) -> Result<Trace, TraceError> {
    let opts = LoadOptions {
        skip_invalid,
        ..LoadOptions::default()
    };
    trace::load(path, &opts)
}

fn lines(t: &Trace) -> Vec<u32> {
    let mut l: Vec<u32> = t.requests.iter().map(|r| r.line).collect();
    l.sort_unstable();
    l
}

/// The first `n` rows of the real Kimi conversation trace moved to epoch milliseconds
/// (+1732000000000 ms, 19 Nov 2024), as a trace exported with wall-clock times writes them.
fn epoch_rows(n: usize) -> Vec<serde_json::Value> {
    real("mooncake_conversation_first2000.jsonl")
        .lines()
        .take(n)
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let t = v["timestamp"].as_u64().unwrap();
            v["timestamp"] = (t + 1_732_000_000_000).into();
            v
        })
        .collect()
}

fn jsonl(rows: &[serde_json::Value]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

#[test]
fn one_stray_early_timestamp_is_the_row_blamed_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: row 51's timestamp set to 0 (a default written for a missing time).
    let mut rows = epoch_rows(100);
    rows[50]["timestamp"] = 0.into();
    let path = write(&dir, "stray.jsonl", &jsonl(&rows));

    let err = load(&path, false).unwrap_err().to_string();
    let at = format!(
        "{}:51: field \"timestamp\": expected a time no earlier than",
        path.display()
    );
    assert!(err.starts_with(&at), "{err}");
    assert!(
        err.contains("(line 1, 1732000000000 ms: 99 of the 100 rows lie within 365 days of it)"),
        "{err}"
    );
    assert!(err.ends_with("found 0 ms"), "{err}");

    // --skip-invalid drops the damaged row and keeps the 99 good ones.
    let t = load(&path, true).unwrap();
    let expected: Vec<u32> = (1..=100).filter(|&l| l != 51).collect();
    assert_eq!(lines(&t), expected);
    assert_eq!(t.report.invalid_skipped, 1);
    assert!(
        t.report.warnings[0].contains(":51: field \"timestamp\""),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn stray_times_on_both_sides_are_each_blamed() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: row 3 stamped 0, row 80 stamped in microseconds (×1000).
    let mut rows = epoch_rows(100);
    rows[2]["timestamp"] = 0.into();
    let late = rows[79]["timestamp"].as_u64().unwrap() * 1000;
    rows[79]["timestamp"] = late.into();
    let path = write(&dir, "both.jsonl", &jsonl(&rows));
    let t = load(&path, true).unwrap();
    let expected: Vec<u32> = (1..=100).filter(|&l| l != 3 && l != 80).collect();
    assert_eq!(lines(&t), expected);
    assert_eq!(t.report.invalid_skipped, 2);
    // In file order; the late one quoted exactly as written, not rounded through a float.
    assert!(
        t.report.warnings[0].contains(":3: field \"timestamp\""),
        "{:?}",
        t.report.warnings
    );
    assert!(
        t.report.warnings[1]
            .contains(":80: field \"timestamp\": expected a time at most 365 days after"),
        "{:?}",
        t.report.warnings
    );
    assert!(
        t.report.warnings[1].contains(&format!("found {late} ms")),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn a_late_timestamp_is_quoted_as_written() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: line 5 of the arXiv slice stamped 2^53 + 1 ms, which an f64 cannot hold.
    let text: String = real("mooncake_arxiv_first20.jsonl")
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let l = if i == 4 {
                l.replacen("\"timestamp\": 0", "\"timestamp\": 9007199254740993", 1)
            } else {
                l.to_string()
            };
            l + "\n"
        })
        .collect();
    assert!(text.contains("9007199254740993"));
    let path = write(&dir, "late.jsonl", &text);
    let err = load(&path, false).unwrap_err().to_string();
    assert!(err.contains(":5: field \"timestamp\""), "{err}");
    assert!(err.ends_with("found 9007199254740993 ms"), "{err}");

    // Damage: lines 1 and 2 made one session, its first turn stamped 2^53 + 1 ms.
    let text = arxiv_with(1, |l| {
        l.replacen(
            "{\"timestamp\": 0",
            "{\"session_id\": \"s\", \"timestamp\": 9007199254740993",
            1,
        )
    });
    let text = text.replacen("\n{", "\n{\"session_id\": \"s\", ", 1);
    let path = write(&dir, "turns.jsonl", &text);
    let err = load(&path, false).unwrap_err().to_string();
    assert!(
        err.ends_with(":2: field \"timestamp\": expected a time no earlier than the previous turn of session \"s\" (9007199254740993 ms), found 0"),
        "{err}"
    );
}

/// The real Bailian row as a chain of two turns 5.5 s apart, written after a first line
/// `first` (the documented row is chat 0 at 0.0 s): chat 0 at 2.0 s, then its follow-up, chat
/// 1, at 7.5 s. `hash_ids` emptied, as the README allows for a trace without prefix data.
fn bailian_chain(first: &str) -> String {
    let row = real("bailian_documented_row.jsonl");
    let row = row.trim_end();
    let no_ids = |l: &str| {
        let start = l.find("\"hash_ids\": [").unwrap();
        let end = start + l[start..].find(']').unwrap();
        format!("{}\"hash_ids\": []{}", &l[..start], &l[end + 1..])
    };
    let root = row.replacen("\"timestamp\": 0.0", "\"timestamp\": 2.0", 1);
    let follow = row
        .replacen(
            "\"chat_id\": 0, \"parent_chat_id\": -1, \"timestamp\": 0.0",
            "\"chat_id\": 1, \"parent_chat_id\": 0, \"timestamp\": 7.5",
            1,
        )
        .replacen("\"turn\": 1", "\"turn\": 2", 1);
    assert!(root != row && follow.contains("\"turn\": 2"));
    format!("{first}\n{}\n{}\n", no_ids(&root), no_ids(&follow))
}

#[test]
fn a_bailian_trace_with_a_damaged_first_line_is_read_as_bailian() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: line 1 is the real row cut off after 120 bytes.
    let row = real("bailian_documented_row.jsonl");
    let path = write(&dir, "cut.jsonl", &bailian_chain(&row[..120]));
    let t = load(&path, true).unwrap();
    assert_eq!(t.format, trace::TraceFormat::Bailian);
    assert_eq!(t.report.invalid_skipped, 1);
    let reqs: Vec<_> = t.requests.iter().collect();
    // Seconds, not milliseconds; one session of two turns.
    assert_eq!(
        reqs.iter().map(|r| r.timestamp_us).collect::<Vec<_>>(),
        [2_000_000, 7_500_000]
    );
    assert!(reqs[0].session.is_some() && reqs[0].session == reqs[1].session);
    assert_eq!((reqs[0].turn, reqs[1].turn), (0, 1));
    // Without --skip-invalid, the damaged line is the error.
    let err = load(&path, false).unwrap_err();
    assert_eq!(err.line(), Some(1), "{err}");
}

#[test]
fn a_bailian_trace_whose_first_row_lacks_chat_id_is_not_read_as_mooncake() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: line 1 is the real row with its chain fields deleted.
    let row = real("bailian_documented_row.jsonl");
    let first = row
        .trim_end()
        .replacen("\"chat_id\": 0, \"parent_chat_id\": -1, ", "", 1);
    assert!(!first.contains("chat_id"));
    let path = write(&dir, "nochat.jsonl", &bailian_chain(&first));
    let err = load(&path, false).unwrap_err().to_string();
    assert!(
        err.ends_with(":1: missing required field \"chat_id\""),
        "{err}"
    );
    let t = load(&path, true).unwrap();
    assert_eq!(t.format, trace::TraceFormat::Bailian);
    assert_eq!(t.requests.len(), 2);
}

#[test]
fn a_mooncake_row_with_a_chat_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: line 3 of the arXiv slice given a Bailian parent link.
    let text: String = real("mooncake_arxiv_first20.jsonl")
        .lines()
        .enumerate()
        .map(|(i, l)| match i {
            2 => l.replacen('{', "{\"parent_chat_id\": -1, ", 1) + "\n",
            _ => l.to_string() + "\n",
        })
        .collect();
    let path = write(&dir, "m.jsonl", &text);
    let err = load(&path, false).unwrap_err().to_string();
    assert!(err.contains(":3: field \"parent_chat_id\""), "{err}");
    let t = load(&path, true).unwrap();
    assert_eq!(
        (t.format, t.requests.len()),
        (trace::TraceFormat::Mooncake, 19)
    );
}

#[test]
fn formats_are_not_guessed_from_lines_that_do_not_parse() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: every line of the arXiv slice cut in half.
    let text: String = real("mooncake_arxiv_first20.jsonl")
        .lines()
        .map(|l| format!("{}\n", &l[..l.len() / 2]))
        .collect();
    let path = write(&dir, "halves.jsonl", &text);
    let err = load(&path, true).unwrap_err();
    assert_eq!(err.kind(), trace::TraceErrorKind::UnknownFormat, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(":1: cannot tell the trace format: no line of lines 1 to 20 is a JSON object; pass --format"),
        "{msg}"
    );
    // Forced, every row is skipped, and the error says how they were read.
    let opts = LoadOptions {
        format: Some(trace::TraceFormat::Mooncake),
        skip_invalid: true,
        ..LoadOptions::default()
    };
    let msg = trace::load(&path, &opts).unwrap_err().to_string();
    assert!(
        msg.ends_with("empty trace: no usable rows in the mooncake format (20 rows read)"),
        "{msg}"
    );
}

#[test]
fn scaling_says_how_many_outputs_it_raised_to_one_token() {
    let dir = tempfile::tempdir().unwrap();
    // No damage: the real synthetic trace, whose outputs go down to 1 token.
    let path = write(&dir, "syn.jsonl", &real("mooncake_synthetic.jsonl"));
    let t = load(&path, false).unwrap();
    let outs: Vec<u32> = t.requests.iter().map(|r| r.output_tokens).collect();
    for (f, audited) in [(0.05, 937u64), (0.125, 391)] {
        // Independently: outputs whose product rounds to 0, and the tokens kept.
        let raised = outs
            .iter()
            .filter(|&&o| (o as f64 * f).round() == 0.0)
            .count() as u64;
        let kept: u64 = outs
            .iter()
            .map(|&o| ((o as f64 * f).round() as u64).max(1))
            .sum();
        let total: u64 = outs.iter().map(|&o| u64::from(o)).sum();
        assert_eq!(raised, audited, "the audit's count at {f}");
        let sel = trace::Selection {
            scale_lengths: Some(f),
            ..Default::default()
        };
        let (_, rep) = t.clone().select(&sel).unwrap();
        assert_eq!(rep.outputs_raised_to_1, raised);
        let eff = rep.output_scale_effective.unwrap();
        assert!((eff - kept as f64 / total as f64).abs() < 1e-12, "{eff}");
        assert!(eff > f, "{eff}");
        let note = rep
            .notes
            .iter()
            .find(|n| n.starts_with("scale_lengths"))
            .unwrap();
        assert!(
            note.contains(&format!(
                "{raised} of {} outputs rounded to 0 tokens",
                outs.len()
            )),
            "{note}"
        );
        // In summary.json too.
        let json = serde_json::to_value(&rep).unwrap();
        assert_eq!(json["outputs_raised_to_1"], raised);
        assert!(json["output_scale_effective"].is_f64());
    }

    // An absurd factor: every output is 1 token, and the note says so.
    let sel = trace::Selection {
        scale_lengths: Some(1e-300),
        ..Default::default()
    };
    let (_, rep) = t.clone().select(&sel).unwrap();
    assert_eq!(rep.outputs_raised_to_1, outs.len() as u64);
    assert!(
        rep.notes
            .iter()
            .any(|n| n.contains("every output is 1 token: is the factor 1e-300 meant?")),
        "{:?}",
        rep.notes
    );
    // No scaling, no note.
    let (_, rep) = t.select(&trace::Selection::default()).unwrap();
    assert_eq!((rep.outputs_raised_to_1, rep.notes.len()), (0, 0));
}

/// The digest of `path` synthesized on the fly, and of the file `canaryd synthesize` writes
/// from it, read back.
async fn digests_on_the_fly_and_from_the_file(path: &Path, out: &Path) -> (String, String) {
    use canary_replay::TracePlan;
    let s = trace::Synthesis {
        max_osl: Some(100_000),
        ..Default::default()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let mut plan = TracePlan::file(path);
    plan.synthesis = Some(s.clone());
    let on_the_fly = plan.load(&stop).await.unwrap().unwrap().digest;
    let t = load(path, false).unwrap();
    let mut file = std::fs::File::create(out).unwrap();
    trace::synthesize(&t, &s, trace::DEFAULT_LENGTH_LIMIT, &mut file).unwrap();
    drop(file);
    let from_file = TracePlan::file(out)
        .load(&stop)
        .await
        .unwrap()
        .unwrap()
        .digest;
    (on_the_fly, from_file)
}

#[tokio::test]
async fn synthesis_on_the_fly_and_its_file_show_one_digest() {
    let dir = tempfile::tempdir().unwrap();
    // Damage 1: the real BurstGPT rows given the newer files' session columns (one session).
    let csv: String = real("burstgpt_readme_rows.csv")
        .lines()
        .enumerate()
        .map(|(i, l)| match i {
            0 => format!("{l},Session ID,Elapsed time\n"),
            _ => format!("{l},sess-1,1.5\n"),
        })
        .collect();
    let bg = write(&dir, "bg_sess.csv", &csv);
    // Damage 2: the arXiv slice's lines 16-20 moved before lines 1-15 (out of time order).
    let arxiv: Vec<&str> = real("mooncake_arxiv_first20.jsonl")
        .leak()
        .lines()
        .collect();
    let unsorted: String = arxiv[15..]
        .iter()
        .chain(&arxiv[..15])
        .map(|l| format!("{l}\n"))
        .collect();
    let m = write(&dir, "m_unsorted.jsonl", &unsorted);
    for (input, out) in [(bg, "bg.jsonl"), (m, "m.jsonl")] {
        let (fly, file) = digests_on_the_fly_and_from_the_file(&input, &dir.path().join(out)).await;
        assert_eq!(fly, file, "{}", input.display());
    }
    // A trace replayed as read keeps the digest it had (its rows' own lines).
    let sorted = write(&dir, "arxiv.jsonl", &real("mooncake_arxiv_first20.jsonl"));
    let t = load(&sorted, false).unwrap();
    assert_eq!(trace::digest(&t), trace::digest_synthesized(&t));
    let stop = tokio_util::sync::CancellationToken::new();
    let plain = canary_replay::TracePlan::file(&sorted)
        .load(&stop)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(plain.digest, trace::digest(&t));
}

/// The arXiv slice with line `n` passed through `edit`.
fn arxiv_with(n: usize, edit: impl Fn(&str) -> String) -> String {
    real("mooncake_arxiv_first20.jsonl")
        .lines()
        .enumerate()
        .map(|(i, l)| match i + 1 == n {
            true => edit(l) + "\n",
            false => l.to_string() + "\n",
        })
        .collect()
}

#[test]
fn a_huge_time_is_called_too_large_not_negative() {
    let dir = tempfile::tempdir().unwrap();
    for huge in ["1e300", "18446744073709551616"] {
        // Damage: line 5's timestamp made `huge`.
        let text = arxiv_with(5, |l| {
            l.replacen("\"timestamp\": 0", &format!("\"timestamp\": {huge}"), 1)
        });
        let path = write(&dir, "huge.jsonl", &text);
        let err = load(&path, false).unwrap_err().to_string();
        assert!(
            err.ends_with(&format!(
                ":5: field \"timestamp\": expected a non-negative number of milliseconds below 2^64 µs, found {huge}"
            )),
            "{err}"
        );
    }
}

#[test]
fn a_first_turns_delay_is_said_to_be_ignored() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: line 1 made the first turn of session "s" with a 60 s delay.
    let text = arxiv_with(1, |l| {
        l.replacen('{', "{\"session_id\": \"s\", \"delay\": 60000, ", 1)
    });
    let path = write(&dir, "delay.jsonl", &text);
    let t = load(&path, false).unwrap();
    assert_eq!(t.requests.len(), 20);
    assert!(
        t.report
            .warnings
            .iter()
            .any(|w| w.contains(": field \"delay\": ignored on 1 row (line 1):")),
        "{:?}",
        t.report.warnings
    );
    // A later turn's delay is no warning.
    let text = arxiv_with(2, |l| {
        l.replacen('{', "{\"session_id\": \"s\", \"delay\": 60000, ", 1)
    });
    let text = text.replacen('{', "{\"session_id\": \"s\", ", 1);
    let path = write(&dir, "later.jsonl", &text);
    assert!(load(&path, false).unwrap().report.warnings.is_empty());
}

/// A `delay` on rows that are not later turns was warned about once per row: a trace that
/// sets it on every row filled the report's warnings with it (and pushed every other warning
/// out). Said once per trace, with the exact count and the first lines.
#[test]
fn ignored_delays_are_said_once_per_trace_with_their_count_and_first_lines() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: every row of the first 200 of the real Kimi conversation trace given a 60 s
    // delay (none has a session_id, so none is a later turn).
    let text: String = real("mooncake_conversation_first2000.jsonl")
        .lines()
        .take(200)
        .map(|l| l.replacen('{', "{\"delay\": 60000, ", 1) + "\n")
        .collect();
    let path = write(&dir, "delays.jsonl", &text);
    let t = load(&path, false).unwrap();
    assert_eq!(t.requests.len(), 200);
    let said: Vec<&String> = t
        .report
        .warnings
        .iter()
        .filter(|w| w.contains("\"delay\""))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", t.report.warnings);
    assert_eq!(t.report.warnings_omitted, 0);
    assert_eq!(
        *said[0],
        format!(
            "{}: field \"delay\": ignored on 200 rows (lines 1, 2, 3, 4, 5 and 195 more): a row \
             that is not a later turn of a session (a first turn, or no session_id) is sent at \
             its timestamp",
            path.display()
        )
    );
}

#[test]
fn a_session_that_loses_its_first_turn_to_the_span_loses_its_later_turns() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: rows 1 and 2 made turns of session "s", row 1 stamped 0 (before the epoch times).
    let mut rows = epoch_rows(100);
    rows[0]["timestamp"] = 0.into();
    rows[0]["session_id"] = "s".into();
    rows[1]["session_id"] = "s".into();
    let path = write(&dir, "session.jsonl", &jsonl(&rows));
    let err = load(&path, false).unwrap_err().to_string();
    assert!(
        err.contains(":1: field \"timestamp\": expected a time no earlier than"),
        "{err}"
    );
    let t = load(&path, true).unwrap();
    assert_eq!(lines(&t), (3..=100).collect::<Vec<u32>>());
    assert_eq!(t.report.invalid_skipped, 2);
    assert!(
        t.report.warnings[1]
            .contains(":2: field \"timestamp\": expected a session whose earlier turns are kept"),
        "{:?}",
        t.report.warnings
    );
}
