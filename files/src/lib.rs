//! canary-files: canaryd's file I/O that a bad file cannot hurt.
//!
//! - Reading a file that ought to be small (an API key, a header's secret, a CA bundle, a
//!   run's summary) without trusting it to be: a FIFO would block the reader for ever,
//!   `/dev/zero` would fill memory ([`read_small_file`]).
//! - Writing an artifact never through a symbolic link found where the file goes (someone's
//!   link planted in a shared output folder such as /tmp would have had canaryd truncate the
//!   file it points to), and the files readers take whole, whole or not at all
//!   ([`create_artifact`], [`write_whole`], [`WholeFile`]).
#![deny(missing_docs)]

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The bytes of the regular file at `path`, at most `limit` of them; a larger file, or one
/// that is not a regular file (a FIFO, a device), is an error that says so.
pub fn read_small_file(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    // Before opening: opening a FIFO for reading waits for a writer.
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

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
    let mut file = WholeFile::create(path)?;
    file.write_all(bytes)?;
    file.finish()
}

/// A file written in pieces that appears at its path whole or not at all: it is written into
/// `path` + `.partial` and renamed over `path` by [`WholeFile::finish`]. Dropped unfinished
/// (an error on the way), the partial file is removed and `path` keeps what it held.
#[derive(Debug)]
pub struct WholeFile {
    file: File,
    partial: PathBuf,
    path: PathBuf,
    finished: bool,
}

impl WholeFile {
    /// Starts `path`'s partial file; a symbolic link there is an error (ELOOP). Something at
    /// `path` that is not a regular file or a link (a device such as `/dev/full`, a FIFO, a
    /// socket) is an error too: the rename would replace it with the file.
    pub fn create(path: &Path) -> io::Result<WholeFile> {
        // A link is replaced, not written through; but one to a device (`/dev/stdout`, a link
        // to /proc/self/fd/1) would have the system's link replaced: refused as the device is.
        // A dangling link is replaced.
        let here = std::fs::symlink_metadata(path).ok();
        let there = match &here {
            Some(m) if m.file_type().is_symlink() => std::fs::metadata(path).ok(),
            _ => here,
        };
        if there.is_some_and(|m| !m.file_type().is_file()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a device, FIFO, socket or folder): not replaced",
            ));
        }
        let partial = partial_of(path);
        Ok(WholeFile {
            file: create_artifact(&partial)?,
            partial,
            path: path.to_path_buf(),
            finished: false,
        })
    }

    /// Puts the file written at its path.
    pub fn finish(mut self) -> io::Result<()> {
        self.finished = true;
        let renamed = std::fs::rename(&self.partial, &self.path);
        if renamed.is_err() {
            let _ = std::fs::remove_file(&self.partial);
        }
        renamed
    }
}

impl Write for WholeFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for WholeFile {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

fn partial_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn devices_fifos_and_large_files_are_refused_small_ones_read() {
        let e = read_small_file(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            read_small_file(&fifo, 1024).unwrap_err().to_string(),
            "not a regular file"
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'k'; 2048]).unwrap();
        let e = read_small_file(&big, 1024).unwrap_err();
        assert_eq!(e.to_string(), "larger than 1024 bytes");
        assert_eq!(read_small_file(&big, 2048).unwrap().len(), 2048);
    }

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
    fn a_file_dropped_unfinished_leaves_the_earlier_one_and_no_partial() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        std::fs::write(&path, "earlier\n").unwrap();
        let mut f = WholeFile::create(&path).unwrap();
        f.write_all(b"half a line").unwrap();
        assert!(dir.path().join("records.jsonl.partial").exists());
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "earlier\n");
        assert!(!dir.path().join("records.jsonl.partial").exists());
        let mut f = WholeFile::create(&path).unwrap();
        f.write_all(b"whole\n").unwrap();
        f.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "whole\n");
        assert!(!dir.path().join("records.jsonl.partial").exists());
    }

    #[test]
    fn a_device_fifo_or_folder_where_the_file_goes_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("report.html");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = write_whole(&fifo, b"<html>").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(!dir.path().join("report.html.partial").exists());
        // A device (what `-o /dev/full` names): refused before anything is written.
        let e = write_whole(Path::new("/dev/full"), b"<html>").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let folder = dir.path().join("out");
        std::fs::create_dir(&folder).unwrap();
        assert!(write_whole(&folder, b"{}").is_err());
        assert!(folder.is_dir());
        // A link to a device (as /dev/stdout is): refused, the link kept.
        let link = dir.path().join("stdout");
        std::os::unix::fs::symlink("/dev/full", &link).unwrap();
        let e = write_whole(&link, b"<html>").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        // A dangling link is replaced.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        write_whole(&dangling, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&dangling).unwrap(), "{}");
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
