//! One daemon per `state_dir`: an exclusive `flock` on `<state_dir>/canaryd.lock`, held for
//! the life of the process, with the holder's PID written in the file (and the same in the
//! `artifacts_dir`, inside the `state_dir` or not, which is as much the daemon's own).
//!
//! Two daemons on one state directory would replay the same workloads twice and interleave
//! one history and one baseline. The kernel drops the lock when the process ends, however it
//! ends (`kill -9` included), so a lock file left behind never blocks a restart: only a live
//! holder does, and the second daemon refuses to start, naming it.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The lock file's name inside `state_dir`.
pub const LOCK_FILE: &str = "canaryd.lock";

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct StateLock {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    key: String,
}

impl StateLock {
    /// Takes the lock of `dir` (created if missing), the daemon's `key` (`state_dir`), and
    /// writes this process's PID in it (a write that fails, on a full disk, is a warning:
    /// the lock is held); an error naming the holder's PID when another process holds it.
    pub fn acquire(dir: &Path, key: &str) -> Result<StateLock> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        // Not truncated on open: the PID in it belongs to the holder until the lock is ours.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening the lock file {}", path.display()))?;
        // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = match text.trim().parse::<u32>() {
                Ok(pid) => format!("pid {pid}"),
                Err(_) => "a process that has not written its pid yet".to_string(),
            };
            bail!(
                "another canaryd ({holder}) is running with {key} {}: it holds {}; \
                 two daemons on one {key} would run every workload twice and share one \
                 history and baseline (stop it, or give this one another {key})",
                dir.display(),
                path.display()
            );
        }
        let pid = format!("{}\n", std::process::id());
        // Written over the old content, then cut to length: the file never reads empty.
        // The flock is the exclusion, the pid only what a second daemon's refusal names: a
        // full disk failing its write must not keep the daemon from starting (it would go
        // dark, where a running daemon degrades). The file is then emptied, so that no
        // pid in it (a dead holder's, or half of this one's) is named.
        if let Err(e) = file
            .write_all_at(pid.as_bytes(), 0)
            .and_then(|_| file.set_len(pid.len() as u64))
        {
            let _ = file.set_len(0);
            tracing::warn!(
                "writing the pid to {}: {e}; the lock is held all the same (a second canaryd \
                 is still refused, without this one's pid)",
                path.display()
            );
        }
        Ok(StateLock {
            file,
            path,
            dir: dir.to_path_buf(),
            key: key.to_string(),
        })
    }

    /// When the lock file at its path is no longer the one held (removed, or replaced), the
    /// lock guards nothing: a second daemon would take the new file. Takes the lock of the
    /// file there now (creating it); true when it did, an error when another process holds
    /// it already.
    pub fn keep(&mut self) -> Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        let held = self.file.metadata().map(id).ok();
        let there = std::fs::metadata(&self.path).map(id).ok();
        if held.is_some() && held == there {
            return Ok(false);
        }
        *self = StateLock::acquire(&self.dir, &self.key)?;
        Ok(true)
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Refuses `dir` (an output folder, existing or not) when it lies in a running daemon's
/// `state_dir` or `artifacts_dir`: one of its folders up the tree holds a [`LOCK_FILE`] a live
/// process has locked. A one-shot run writing there (`canaryd replay -o <a run folder>
/// --overwrite`) wrote over a run in progress, which the daemon kept writing through its open
/// files (a hole of NUL bytes in its records), or put its own figures under a finished run's id
/// and verdict. `--overwrite` does not override this. A folder of a daemon that is not running
/// is the user's to overwrite.
pub fn refuse_daemon_folder(dir: &Path) -> Result<()> {
    // Resolved, so that `..` and links name the folders the daemon locked; the nearest
    // folder that exists stands for one not made yet.
    let absolute = match dir.is_absolute() {
        true => dir.to_path_buf(),
        false => std::env::current_dir()
            .context("reading the current directory")?
            .join(dir),
    };
    let Some(resolved) = absolute.ancestors().find_map(|a| a.canonicalize().ok()) else {
        return Ok(());
    };
    for folder in resolved.ancestors() {
        let lock = folder.join(LOCK_FILE);
        let Ok(mut file) = File::open(&lock) else {
            continue;
        };
        // Tried, never waited for; a lock taken is let go at once when the file closes. A
        // daemon starting in that instant is refused as by a second daemon, and says so.
        // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        if rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) {
            continue;
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let holder = match text.trim().parse::<u32>() {
            Ok(pid) => format!("pid {pid}"),
            Err(_) => "pid not written yet".to_string(),
        };
        bail!(
            "{} is inside the folder of a running canaryd daemon ({holder} holds {}): writing              there would corrupt its runs (--overwrite does not change this); give another              --output-dir",
            dir.display(),
            lock.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = StateLock::acquire(&state, "state_dir").unwrap();
        let pid = std::fs::read_to_string(first.path()).unwrap();
        assert_eq!(pid, format!("{}\n", std::process::id()));
        // flock locks belong to the open file, so a second open in this process conflicts
        // just as another process would.
        let e = format!("{:#}", StateLock::acquire(&state, "state_dir").unwrap_err());
        assert!(
            e.contains(&format!(
                "another canaryd (pid {}) is running with state_dir",
                std::process::id()
            )) && e.contains(LOCK_FILE),
            "{e}"
        );
        drop(first);
        // The file stays behind; the lock does not.
        assert!(state.join(LOCK_FILE).exists());
        StateLock::acquire(&state, "state_dir").unwrap();
    }

    /// A one-shot output folder inside a running daemon's artifacts (a run folder, existing
    /// or not, named through `..`) is refused naming the daemon; once it stops, it is not.
    #[test]
    fn an_output_folder_inside_a_running_daemons_artifacts_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let artifacts = dir.path().join("state/artifacts");
        let run = artifacts.join("chat/20261130T130554Z-8c52a16c");
        std::fs::create_dir_all(&run).unwrap();
        let held = StateLock::acquire(&artifacts, "artifacts_dir").unwrap();
        for out in [
            run.clone(),
            run.join("new"),
            artifacts.join("chat/../chat/20261130T130554Z-8c52a16c"),
        ] {
            let e = format!("{:#}", refuse_daemon_folder(&out).unwrap_err());
            assert!(
                e.contains("inside the folder of a running canaryd daemon")
                    && e.contains(&format!("pid {}", std::process::id()))
                    && e.contains(LOCK_FILE),
                "{e}"
            );
        }
        // Beside it, not inside: the user's.
        refuse_daemon_folder(&dir.path().join("elsewhere")).unwrap();
        // The daemon still holds its lock after the check.
        assert!(StateLock::acquire(&artifacts, "artifacts_dir").is_err());
        drop(held);
        refuse_daemon_folder(&run).unwrap();
    }

    #[test]
    fn a_lock_file_removed_while_held_is_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut lock = StateLock::acquire(dir.path(), "state_dir").unwrap();
        assert!(!lock.keep().unwrap());
        std::fs::remove_file(lock.path()).unwrap();
        assert!(lock.keep().unwrap());
        assert!(lock.path().exists());
        // Held again: a second daemon is refused.
        assert!(StateLock::acquire(dir.path(), "state_dir").is_err());
        assert!(!lock.keep().unwrap());
        // Another process took the new file first: said, not taken over.
        std::fs::remove_file(lock.path()).unwrap();
        let _other = StateLock::acquire(dir.path(), "state_dir").unwrap();
        assert!(lock.keep().is_err());
    }
}
