//! `max_held_bytes` bounds what responses in flight cost in resident memory, not only what
//! canaryd counts: a server that stalls many streams inside large unfinished `data:` lines
//! must not take the process past the cap, its baseline and the documented allowance per
//! connection (README, "Limits").
//!
//! Audit (hostile servers, finding 1): 1000 streams each stalled inside a 1000 KiB line peaked
//! at 1.34 GB against about 1 GB counted. glibc's moving mmap threshold put the growing line
//! buffers in its arenas, whose holes stayed resident (bench/RESULTS.md, "held bytes and
//! RSS"). A memory bound, measured by the kernel for the child alone (`wait4`), not a timing.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Streams stalled at once.
const STREAMS: usize = 160;

/// Bytes of each stream's unfinished `data:` line.
const LINE: usize = 1000 << 10;

/// The run's `--max-held-bytes`: well under `STREAMS × LINE`, so some responses are refused
/// (and their buffers freed) while the others stay held.
const HELD_CAP: u64 = 96 << 20;

/// Resident memory a connection in flight may cost beyond the bytes counted against
/// `max_held_bytes`, as the README's "Limits" says: hyper's read buffer (it grows to about
/// twice the 64 KiB head cap) and the connection's own state. Measured: 120–140 KB; before
/// the fix, 210–290 KB.
const PER_CONNECTION: u64 = 160 << 10;

/// A loopback server answering `/v1/models` with a one-model list and every other request
/// with an SSE stream whose first `data:` line of `line` bytes never ends; it then holds the
/// connection until the client closes it. Returns its port.
fn stalling_server(line: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve(conn, line));
        }
    });
    port
}

fn serve(mut conn: TcpStream, line: usize) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    if request.starts_with(b"GET /v1/models") {
        let body = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
    } else {
        let mut answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                           cache-control: no-cache\r\n\r\n\
                           data: {\"choices\":[{\"delta\":{\"content\":\""
            .to_vec();
        answer.resize(answer.len() + line, b'a');
        if conn.write_all(&answer).is_err() {
            return;
        }
    }
    // Held (the request body, then nothing) until canaryd closes the connection.
    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
}

/// `canaryd profile` of `STREAMS` requests at once against a [`stalling_server`] of `line`
/// bytes, each timed out after 4 s: its output and its peak resident memory in bytes (the
/// kernel's count for this one child, from `wait4`).
// The child is reaped by `wait4`, which `std` does not see.
#[allow(clippy::zombie_processes)]
fn profile_peak_rss(line: usize, cwd: &Path) -> (Output, u64) {
    use std::os::unix::process::ExitStatusExt;
    let url = format!("http://127.0.0.1:{}", stalling_server(line));
    let streams = STREAMS.to_string();
    let cap = HELD_CAP.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(["profile", "--url", &url, "--model", "m", "--isl", "10"])
        .args([
            "--osl",
            "10",
            "--no-nvml",
            "--no-server-metrics",
            "-o",
            "out",
        ])
        .args(["--overwrite", "--request-timeout", "4s"])
        .args(["--concurrency", &streams, "--request-count", &streams])
        .args(["--max-held-bytes", &cap])
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("MALLOC_ARENA_MAX")
        .env_remove("MALLOC_MMAP_THRESHOLD_")
        .env_remove("GLIBC_TUNABLES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("canaryd runs");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it in for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid out-pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    // ru_maxrss is in KiB on Linux.
    (output, usage.ru_maxrss as u64 * 1024)
}

#[test]
fn streams_stalled_in_long_lines_stay_within_the_held_cap_and_the_allowance() {
    let dir = tempfile::tempdir().unwrap();
    // The same run whose lines are 1 KiB: what the process and its connections cost anyway.
    let (out, baseline) = profile_peak_rss(1 << 10, dir.path());
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{said}");
    let summary = std::fs::read_to_string(dir.path().join("out/summary.json")).unwrap();
    assert!(summary.contains("\"timeout\""), "{summary}");

    let (out, peak) = profile_peak_rss(LINE, dir.path());
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{said}");
    let summary = std::fs::read_to_string(dir.path().join("out/summary.json")).unwrap();
    // Held to their timeout (how many were refused past the cap depends on how fast the
    // lines came in; the bound holds either way).
    assert!(summary.contains("\"timeout\""), "{summary}");
    let bound = baseline + HELD_CAP + STREAMS as u64 * PER_CONNECTION;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    assert!(
        peak <= bound,
        "peak RSS {:.1} MiB over {:.1} MiB: baseline {:.1} + cap {:.1} + {STREAMS} × {} KiB \
         (over the bound by {:.0} KiB per stream)",
        mib(peak),
        mib(bound),
        mib(baseline),
        mib(HELD_CAP),
        PER_CONNECTION >> 10,
        (peak - bound) as f64 / 1024.0 / STREAMS as f64
    );
    eprintln!(
        "peak RSS {:.1} MiB, baseline {:.1} MiB: {:.0} KiB per stream above the cap",
        mib(peak),
        mib(baseline),
        (peak.saturating_sub(baseline + HELD_CAP)) as f64 / 1024.0 / STREAMS as f64
    );
}
