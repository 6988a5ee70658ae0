//! Skips that are counted, never passed off as passes.
//!
//! `cargo test` has no runtime skip: a test that returns early is reported as passed, and its
//! `eprintln!` is hidden because it passed. So a skip is written down where the suite can count
//! it: one line appended to the file named by `CANARYD_SKIP_LOG` (scripts/test.sh sets it, then
//! lists every skip with its reason and counts them in its closing line,
//! `N passed, N failed, N skipped`, taking them out of the passes). A tier listed in
//! `CANARYD_REQUIRE` (the tiers whose setup worked) cannot be skipped: the test fails instead.

use std::io::Write;

/// The variable naming the file skips are appended to.
pub const SKIP_LOG: &str = "CANARYD_SKIP_LOG";
/// The variable listing the tiers that must run (space-separated).
pub const REQUIRE: &str = "CANARYD_REQUIRE";

/// Says that the calling test does not run here and why, and records it as a skip; the test
/// then returns: `return canary_testkit::skip("ebpf", "not root");`.
///
/// Panics (failing the test) when `tier` is listed in `CANARYD_REQUIRE`, or when the skip
/// cannot be written to `CANARYD_SKIP_LOG`: a skip nobody counts would be a silent pass.
#[track_caller]
pub fn skip(tier: &str, why: &str) {
    let required = std::env::var(REQUIRE).unwrap_or_default();
    if required.split_whitespace().any(|t| t == tier) {
        panic!("the {tier} tier is required here ({REQUIRE}={required}) but: {why}");
    }
    let caller = std::panic::Location::caller();
    let thread = std::thread::current();
    let line = skip_line(
        tier,
        &format!("{}:{}", caller.file(), caller.line()),
        thread.name().unwrap_or("unnamed thread"),
        why,
    );
    eprint!("SKIP {line}");
    if let Some(path) = std::env::var_os(SKIP_LOG).filter(|p| !p.is_empty()) {
        // One write(2) of one line with O_APPEND: lines from parallel tests and test binaries
        // never interleave.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!(
                "cannot record this skip in {SKIP_LOG}={}: {e}",
                path.to_string_lossy()
            );
        }
    }
}

/// `tier<TAB>file:line<TAB>test<TAB>why\n`, with tabs and line breaks in the parts turned into
/// spaces so that one skip is always one line of four fields. libtest runs each test on a
/// thread named after it (`load::follows_own_connection_by_cookie`); with the call site, that
/// names one test of one binary, which is what the suite counts once.
fn skip_line(tier: &str, site: &str, test: &str, why: &str) -> String {
    let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    format!(
        "{}\t{}\t{}\t{}\n",
        clean(tier),
        clean(site),
        clean(test),
        clean(why)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_skip_is_one_line_of_four_fields() {
        let line = skip_line("ebpf", "a.rs:3", "t", "not root:\n\tEPERM");
        assert_eq!(line, "ebpf\ta.rs:3\tt\tnot root:  EPERM\n");
    }

    #[test]
    fn a_skip_is_written_where_the_suite_counts_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips");
        // The variables are this process's; no other test here reads them.
        std::env::set_var(SKIP_LOG, &log);
        std::env::set_var(REQUIRE, "victoria-metrics");
        skip("ebpf", "not root");
        skip("ebpf", "again");
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0][0], "ebpf");
        assert!(lines[0][1].starts_with("testkit/src/skip.rs:"), "{text}");
        assert_eq!(
            lines[0][2],
            "skip::tests::a_skip_is_written_where_the_suite_counts_it"
        );
        assert_eq!(lines[1][3], "again");
        // A required tier fails instead.
        let required = std::panic::catch_unwind(|| skip("victoria-metrics", "no binary"));
        assert!(required.is_err());
        assert_eq!(std::fs::read_to_string(&log).unwrap(), text, "not recorded");
    }
}
