//! What canaryd logs, as its users read it: every event of the test process, formatted as
//! the daemon's stderr is, kept in memory (capped) for tests that check what a warning says.
//! The tests of the binary run in parallel: a test picks out its own lines by its collector's
//! address.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The most kept: later lines are dropped.
const MAX_BYTES: usize = 8 * 1024 * 1024;

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Sink;

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut log = LOG.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() + buf.len() <= MAX_BYTES {
            log.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts capturing (once per process); call before the code under test runs.
pub fn capture() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(|| Sink)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
    });
}

/// The captured lines that contain `needle` (a collector's address, say).
pub fn lines_with(needle: &str) -> Vec<String> {
    let log = LOG.lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// The captured lines that contain any of `needles`, once for each (a secret's parts, say).
pub fn lines_with_any(needles: &[&str]) -> Vec<String> {
    needles.iter().flat_map(|s| lines_with(s)).collect()
}
