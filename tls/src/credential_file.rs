//! Reading a credential file (an API key, a header's secret, a CA bundle), which ought to be
//! small, without trusting it to be: a FIFO would block the reader for ever, `/dev/zero`
//! would fill memory.

use std::io::{self, Read};
use std::path::Path;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
