//! Where a page (`report -o`, `compare -o`) may be written: never over a file of a run it
//! reads. `report RUN -o RUN/summary.json` used to replace the run's summary with HTML and
//! say it had worked.

use crate::ReportError;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Refuses `out` when it lies inside one of the `inputs` (a run's, a series', a sweep's or an
/// experiment's folder, at any depth) and is not a page: a name that does not end in `.html`
/// (or `.htm`), or an existing file that does not start as one. Nothing a run writes ends in
/// `.html`, so a page beside a run's files (and a rerun replacing it) is still written.
pub(crate) fn check(out: &Path, inputs: &[&Path]) -> Result<(), ReportError> {
    let Some(resolved) = resolved(out) else {
        return Ok(()); // no such parent folder: writing fails with its own error
    };
    let Some(input) = inputs.iter().find(|i| {
        std::fs::canonicalize(i).is_ok_and(|i| resolved.starts_with(&i) && resolved != i)
    }) else {
        return Ok(());
    };
    let refuse = |what: &str| {
        Err(ReportError::Output {
            path: out.to_path_buf(),
            why: format!(
                "{what} inside {}, which is read here: it would replace a file of that run. \
                 Write the page elsewhere, or to a new name ending in .html",
                input.display()
            ),
        })
    };
    let named_as_page = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"));
    if !named_as_page {
        return refuse("not named *.html and");
    }
    match out.symlink_metadata() {
        Err(_) => Ok(()),
        Ok(_) if is_page(out) => Ok(()),
        Ok(_) => refuse("an existing file that is not an HTML page,"),
    }
}

/// `out` with its folder's links and `..` resolved, its own name kept (a link there is
/// replaced, not followed, when the page is written).
fn resolved(out: &Path) -> Option<PathBuf> {
    let name = out.file_name()?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

/// Whether the file starts as an HTML page does (an earlier report or comparison).
fn is_page(path: &Path) -> bool {
    let mut head = [0u8; 64];
    let Ok(n) = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)) else {
        return false;
    };
    let text = String::from_utf8_lossy(&head[..n]);
    text.trim_start()
        .get(..14)
        .is_some_and(|s| s.eq_ignore_ascii_case("<!doctype html"))
}
