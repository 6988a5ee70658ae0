//! Why the history database did not open: its content damaged, or the file system around it
//! (full, unreadable, busy). Only the first is cured by moving the file away; said for the
//! second, that advice would throw every baseline away for nothing (the commonest cause, a
//! full disk, leaves SQLite unable to create its `-wal` and `-shm` files beside an intact
//! file).

use rusqlite::ErrorCode;
use std::path::Path;

/// Below this many bytes free (or with no inode free) the file system is called full: SQLite
/// needs 32 KiB for its `-shm` file and more for the `-wal`.
const FULL_BELOW_BYTES: u64 = 1 << 20;

/// At most this much of `/proc/self/mountinfo` is read to name the mount.
const MAX_MOUNTINFO_BYTES: u64 = 4 << 20;

/// Whether SQLite's error says the file's content is damaged: `SQLITE_CORRUPT` or
/// `SQLITE_NOTADB`. Every other code (I/O errors, a full disk, a file that cannot be opened,
/// a lock, memory) is about the file system or the process, not the file.
pub(super) fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

/// The error for a history that could not be opened or read for a reason other than damage:
/// the underlying error, SQLite's code, and the state of the file system holding it (full,
/// naming its mount, when it is); never the advice to move the file away.
pub(super) fn cannot_open(path: &Path, e: &rusqlite::Error) -> anyhow::Error {
    let code = match e {
        rusqlite::Error::SqliteFailure(f, _) => {
            format!("; SQLite {:?}, extended code {}", f.code, f.extended_code)
        }
        _ => String::new(),
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let what = match free_space(dir) {
        Some(space) if space.full() => format!(
            "the file system holding {} ({}) is full: {} (statvfs, exact when read); free \
             space there",
            dir.display(),
            space.mount_name(),
            space.describe()
        ),
        Some(space) => format!(
            "the file system holding {} ({}) has {}; check that the folder can be written \
             (permissions, a lock held by another program, I/O errors in the kernel log)",
            dir.display(),
            space.mount_name(),
            space.describe()
        ),
        None => format!(
            "check that {} can be written (free space, permissions, I/O errors in the kernel \
             log)",
            dir.display()
        ),
    };
    anyhow::anyhow!(
        "the history database {} cannot be opened or read ({e}{code}): {what}. The file is not \
         known to be damaged: do not move it away (a new history would lose every baseline)",
        path.display()
    )
}

/// What `statvfs` says of a file system, and where it is mounted.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FreeSpace {
    /// Bytes free to unprivileged users (`f_bavail × f_frsize`).
    pub bytes: u64,
    /// Inodes free to unprivileged users (`f_favail`); 0 on a file system that reports none
    /// at all is not taken as full (see [`FreeSpace::full`]).
    pub inodes: u64,
    /// Whether the file system counts inodes (`f_files > 0`).
    pub counts_inodes: bool,
    /// Its mount point, when `/proc/self/mountinfo` names one.
    pub mount: Option<String>,
    /// Mounted read-only (`ST_RDONLY` in `f_flag`).
    pub read_only: bool,
}

impl FreeSpace {
    /// Whether nothing more can be written there: under [`FULL_BELOW_BYTES`] free, or no
    /// inode free.
    pub fn full(&self) -> bool {
        self.bytes < FULL_BELOW_BYTES || (self.counts_inodes && self.inodes == 0)
    }

    fn describe(&self) -> String {
        match self.counts_inodes && self.inodes == 0 {
            true => format!("{} bytes and no inode free", self.bytes),
            false => format!("{} bytes free", self.bytes),
        }
    }

    fn mount_name(&self) -> String {
        match &self.mount {
            Some(m) => format!("mounted at {m}"),
            None => "mount point unknown".into(),
        }
    }
}

/// The free space of the file system holding `dir`; `None` when `statvfs` fails.
pub(super) fn free_space(dir: &Path) -> Option<FreeSpace> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) fills the struct it is given, through a valid pointer, from a
    // NUL-terminated path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(FreeSpace {
        bytes: (s.f_bavail as u64).saturating_mul(s.f_frsize as u64),
        inodes: s.f_favail as u64,
        counts_inodes: s.f_files > 0,
        mount: mount_of(dir),
        read_only: s.f_flag & libc::ST_RDONLY != 0,
    })
}

/// For `check-config`: why `dir` (the folder `key` names, or the nearest one of its parents
/// that exists: the daemon makes the rest) cannot take the daemon's files, in the words of
/// the error a full disk gives at start (`/var/lib/canaryd (mounted at /var) is full: 4096
/// bytes free (statvfs, exact when read)`), `consequence` after it; `None` when it can, or
/// when `statvfs` cannot say. With the mount point, for a caller to say a file system once.
pub(crate) fn space_warning(
    key: &str,
    dir: &Path,
    consequence: &str,
) -> Option<(Option<String>, String)> {
    let existing = dir.ancestors().find(|d| d.is_dir())?;
    let space = free_space(existing)?;
    let what = match (space.read_only, space.full()) {
        (true, _) => format!("is on a read-only file system ({})", space.mount_name()),
        (false, true) => format!(
            "is on a full file system ({}): {} (statvfs, exact when read)",
            space.mount_name(),
            space.describe()
        ),
        (false, false) => return None,
    };
    Some((
        space.mount.clone(),
        format!("{key}: {} {what}: {consequence}", dir.display()),
    ))
}

/// The mount point holding `dir`: the longest one in `/proc/self/mountinfo` that contains
/// its resolved path.
fn mount_of(dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let text = {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::fs::File::open("/proc/self/mountinfo")
            .ok()?
            .take(MAX_MOUNTINFO_BYTES)
            .read_to_end(&mut bytes)
            .ok()?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    text.lines()
        .filter_map(|line| line.split(' ').nth(4).map(unescape))
        .filter(|m| dir.starts_with(m))
        .max_by_key(|m| m.len())
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
pub(super) fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                let n = d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0'));
                out.push(n as u8);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
