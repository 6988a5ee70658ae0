//! Rows `--skip-invalid` left out of a replayed trace, said under the result table as well
//! as on stderr: the table's request count is otherwise short of the trace's rows with
//! nothing to say why.

use super::{replay_arxiv, summary};
use crate::common::{sim, text};

#[test]
fn a_row_skipped_as_invalid_gets_a_note_under_the_table() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    // Row 17 of the real trace asks for 87,162 input tokens: over this limit, it is invalid.
    let flags = ["--speedup", "1000", "--max-requests", "4"];
    let skip = ["--length-limit", "80000", "--skip-invalid"];
    let out = replay_arxiv(dir.path(), &url, &[&flags[..], &skip].concat());
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mooncake_arxiv_first20.jsonl:17"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let note = "\nnote: 1 invalid trace row of 20 skipped (--skip-invalid; stderr named it, \
                summary.json's run.trace.load counts them by kind)\n";
    assert!(stdout.contains(note), "{note:?} not in {stdout}");
    let s = summary(dir.path());
    assert_eq!(s["run"]["trace"]["load"]["invalid_skipped"], 1, "{s}");
    assert_eq!(s["requests"], 4, "{s}");
    // Without a skipped row, no note.
    let out = replay_arxiv(dir.path(), &url, &[&flags[..], &["--overwrite"]].concat());
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("invalid trace row"), "{}", text(&out));
}
