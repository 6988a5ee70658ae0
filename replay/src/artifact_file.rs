//! How canaryd writes an artifact: never through a symbolic link found where the file goes
//! (someone's link planted in a shared output folder such as /tmp would have had canaryd
//! truncate the file it points to), and the files readers take whole, whole or not at all.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Creates `path`, or empties it, for writing; a symbolic link there is an error (ELOOP).
pub fn create_artifact(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Writes `bytes` to `path` whole or not at all: into `path` + `.partial`, then renamed over
/// it. A process killed mid-write, or a full disk, leaves the earlier file (or none), never a
/// torn one; the partial file is removed on failure.
pub fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let partial = partial_of(path);
    let written = create_artifact(&partial).and_then(|mut f| f.write_all(bytes));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::rename(&partial, path)
}

/// The largest artifact read whole (a summary is tens of KB, a histograms file hundreds):
/// past it, a file is not canaryd's, and reading it would cost its size several times over.
pub const MAX_ARTIFACT_BYTES: u64 = 64 << 20;

/// The bytes of the artifact at `path`, at most [`MAX_ARTIFACT_BYTES`] of them; a larger
/// file is an error that says so.
pub fn read_artifact(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_ARTIFACT_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_ARTIFACT_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {MAX_ARTIFACT_BYTES} bytes: not a canaryd artifact"),
        ));
    }
    Ok(bytes)
}

fn partial_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_link_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("records.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_artifact(&link).is_err());
        // The partial file as a link: refused too.
        std::os::unix::fs::symlink(&victim, dir.path().join("summary.json.partial")).unwrap();
        assert!(write_whole(&dir.path().join("summary.json"), b"{}").is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn a_whole_write_replaces_the_file_and_leaves_no_partial() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.json");
        write_whole(&path, b"old").unwrap();
        write_whole(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert!(!dir.path().join("summary.json.partial").exists());
        // A link where the file goes is replaced, not written through.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("sweep.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        write_whole(&link, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "{}");
    }
}
