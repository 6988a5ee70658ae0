//! `report -o` and `compare -o` never write their page over a file of a run they read.

use super::{canaryd, demo, ok};
use std::path::Path;

/// Every file under `dir` with its bytes, sorted by path.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = crate::common::files_under(dir, &[]);
    files.sort();
    files
}

#[test]
fn a_page_is_never_written_over_a_file_of_a_run_it_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("series")).unwrap();
    let a = demo(&dir.join("series"), "a", "fast", "20", "20");
    let b = demo(&dir.join("series"), "b", "fast", "20", "20");
    // Refused, and nothing under `dir` changed.
    let refused = |args: &[&str], what: &str| {
        let before = snapshot(dir);
        let o = canaryd(args, dir);
        let said = crate::common::text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {said}");
        assert!(said.contains(what), "{args:?}: {said}");
        assert!(
            said.contains("Write the page elsewhere"),
            "{args:?}: {said}"
        );
        assert!(snapshot(dir) == before, "{args:?} changed a run's files");
    };
    refused(
        &["report", "series/a", "-o", "series/a/summary.json"],
        "series/a/summary.json: not named *.html and inside series/a",
    );
    refused(
        &["report", "series", "-o", "series/b/records.jsonl"],
        "series/b/records.jsonl",
    );
    refused(
        &[
            "compare",
            "series/a",
            "series/b",
            "-o",
            "series/b/records.jsonl",
        ],
        "inside series/b",
    );
    // Through another spelling of the same folder.
    refused(
        &[
            "compare",
            "series/a",
            "series/b",
            "-o",
            "series/a/../b/summary.csv",
        ],
        "summary.csv",
    );
    // An existing file that is not a page, even named *.html.
    std::fs::write(a.join("notes.html"), "my notes\n").unwrap();
    refused(
        &["report", "series/a", "-o", "series/a/notes.html"],
        "an existing file that is not an HTML page",
    );
    // A page beside the run's files is written, and written again over the earlier page.
    let before = snapshot(dir);
    for _ in 0..2 {
        let said = ok(&canaryd(
            &["report", "series/a", "-o", "series/a/report.html"],
            dir,
        ));
        assert!(said.contains("series/a/report.html (1 run(s)"), "{said}");
        ok(&canaryd(
            &[
                "compare",
                "series/a",
                "series/b",
                "-o",
                "series/b/compare.html",
            ],
            dir,
        ));
    }
    let after: Vec<_> = snapshot(dir)
        .into_iter()
        .filter(|(p, _)| !p.ends_with("report.html") && !p.ends_with("compare.html"))
        .collect();
    assert!(after == before, "a run's files changed");
    assert!(b.join("compare.html").is_file());
}
