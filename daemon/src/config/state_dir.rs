//! Whether the daemon can make and write its `state_dir`, found when the file is read: one
//! under `/proc` or through a file passed check-config, and the daemon then failed at start.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// `Err(why)` when no user could make or write `dir` (a file in the way, a filesystem that
/// takes no folder); `Ok(Some(warning))` when this user may not, which the daemon's own user
/// may (check-config is often run as another); `Ok(None)` when it can. The check makes and
/// removes one empty folder or file of its own, nothing else.
pub(super) fn check(dir: &Path) -> Result<Option<String>, String> {
    // The nearest folder that exists: the daemon creates the rest.
    let mut existing = dir;
    let meta = loop {
        match std::fs::metadata(existing) {
            Ok(m) => break m,
            Err(e) if e.kind() == ErrorKind::NotFound => match existing.parent() {
                Some(p) if !p.as_os_str().is_empty() => existing = p,
                _ => return Ok(None), // relative, under the working folder
            },
            Err(e) => return Err(format!("cannot be created: {e}")),
        }
    };
    if !meta.is_dir() {
        return Err(format!(
            "cannot be created: {} is not a folder",
            existing.display()
        ));
    }
    let probe = existing.join(probe_name());
    let made = match existing == dir {
        true => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .map(drop)
            .and_then(|_| std::fs::remove_file(&probe)),
        false => std::fs::create_dir(&probe).and_then(|_| std::fs::remove_dir(&probe)),
    };
    let what = match existing == dir {
        true => "cannot be written",
        false => "cannot be created",
    };
    match made {
        Ok(()) => Ok(None),
        // Writable by someone: perhaps by the daemon's user.
        Err(e)
            if e.kind() == ErrorKind::PermissionDenied
                && meta.permissions().mode() & 0o222 != 0 =>
        {
            Ok(Some(format!(
                "state_dir: {} {what} by this user ({e}): the daemon fails at start unless its \
                 own user can",
                dir.display()
            )))
        }
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// A name no other check (another test's, another process') uses at the same time.
fn probe_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        ".canaryd-check-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
