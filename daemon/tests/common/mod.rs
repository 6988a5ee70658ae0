//! What the `canaryd` integration tests share: free loopback ports, the shared data path,
//! a guard that kills and reaps a child process on every path, `canaryd sim` and
//! `canaryd run` as real processes, and a minimal HTTP/1.1 client for the status API.
//!
//! Each test file includes it with `mod common;`, so an item one file does not use carries
//! `#[allow(dead_code)]`.

pub mod page;

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
#[allow(dead_code)]
pub const CANARYD: &str = env!("CARGO_BIN_EXE_canaryd");

/// A file of the shared real data (traces, fixtures) beside the repository.
#[allow(dead_code)]
pub fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared")
        .join(rel)
}

/// A loopback port nothing listens on (at the moment of asking).
#[allow(dead_code)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (up to 10 s) until something accepts connections on `port`; `what` names it.
#[allow(dead_code)]
pub fn wait_listening(port: u16, what: &str) {
    for _ in 0..200 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {port}");
}

/// A child process killed and reaped when dropped. Wrap it right after `spawn`, so no
/// panic in between can leave it running.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Child {
    #[allow(dead_code)]
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(self.0.id() as i32, sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }

    /// Waits for the process to exit on its own; its exit code.
    #[allow(dead_code)]
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the process did not exit within {within:?}");
    }
}

/// `canaryd ARGS` in `cwd`, run to its end: warnings only, and no API key or OTLP endpoint
/// taken from the environment the tests run in.
#[allow(dead_code)]
pub fn canaryd(args: &[&str], cwd: &Path) -> Output {
    Command::new(CANARYD)
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("canaryd runs")
}

/// A finished process's stdout, as text, after checking that it succeeded (its output says why
/// not).
#[allow(dead_code)]
pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A finished process's stdout then stderr, as text.
#[allow(dead_code)]
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `canaryd sim --profile fast` plus `extra` flags, on a port it binds itself; listening
/// when it returns.
#[allow(dead_code)]
pub fn sim(extra: &[&str]) -> (Child, u16) {
    spawn_sim(
        Command::new(CANARYD)
            .args(["sim", "--profile", "fast"])
            .args(extra),
    )
}

/// `canaryd sim` with the profile `profile` (JSON, a named base plus overrides, written to
/// `dir/profile.json`) and `extra` flags, on a port it binds itself; listening when it
/// returns.
#[allow(dead_code)]
pub fn sim_with_profile(dir: &Path, profile: &str, extra: &[&str]) -> (Child, u16) {
    let file = dir.join("profile.json");
    std::fs::write(&file, profile).unwrap();
    spawn_sim(
        Command::new(CANARYD)
            .args(["sim", "--profile"])
            .arg(&file)
            .args(extra),
    )
}

/// What `canaryd sim` logs (info, on stderr) once it listens, before the bound address.
const SIM_LISTENING: &str = "canary-sim listening on http://";

/// Starts `sim` (a `canaryd sim` command) with `--port 0` and reads the port it bound from
/// its log line. A port found free and let go ([`free_port`]) can be taken by another
/// test's process before the sim binds it; the sim then exits and whatever answers on the
/// port is taken for it.
fn spawn_sim(sim: &mut Command) -> (Child, u16) {
    spawn_reading_port(
        sim.args(["--port", "0"])
            .env("RUST_LOG", "warn,canary_sim=info")
            // With it, log lines lose their timestamp and the INFO filter below its place.
            .env_remove("JOURNAL_STREAM"),
        SIM_LISTENING,
        "canaryd sim",
    )
}

/// Starts `cmd`, told to bind port 0, and reads the port it bound from the first line of its
/// stderr holding `said` followed by the address (`said` ends where the address begins:
/// `…http://`); `what` names it in a failure.
///
/// Its stderr is read by a thread for as long as it runs (a full pipe would stall it); its
/// warnings and errors go on to the test's stderr, and its info lines (the one read here
/// among them) do not.
#[allow(dead_code)]
pub fn spawn_reading_port(cmd: &mut Command, said: &'static str, what: &str) -> (Child, u16) {
    let mut child = Child(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} starts: {e}")),
    );
    let stderr = child.0.stderr.take().expect("stderr is piped");
    let (port, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || drain_log(stderr, said, port));
    match heard.recv_timeout(Duration::from_secs(10)) {
        Ok(port) => (child, port),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let exit = child.0.wait().unwrap();
            panic!("{what} exited ({exit}) before listening (its log is above)");
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not say it listens within 10 s")
        }
    }
}

/// Reads a child's log to its end: sends the port of its first line holding `said` on
/// `port`, copies every line but the info ones to stderr. Lines are read up to 64 KiB each
/// (the rest of a longer one is read as the next line).
fn drain_log(log: std::process::ChildStderr, said: &str, port: std::sync::mpsc::Sender<u16>) {
    use std::io::BufRead;
    let mut log = std::io::BufReader::new(log);
    let mut port = Some(port);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut log).take(64 * 1024).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(bound) = port.as_ref().and(listening_port(&text, said)) {
            let _ = port.take().expect("checked above").send(bound);
        }
        // "TIMESTAMP  INFO target: message", as tracing's plain format writes it, or
        // "TIMESTAMP\tinfo\tsource\tmessage", as VictoriaMetrics does.
        if text
            .split_whitespace()
            .nth(1)
            .is_some_and(|level| level.eq_ignore_ascii_case("INFO"))
        {
            continue;
        }
        // Straight to the stderr file, as the inherited stderr was: the harness captures
        // only the print macros, so this is no part of a test's captured output.
        let _ = std::io::stderr().write_all(&line);
    }
}

/// The port in a line "…`said`ADDR…": the sim's "listening on http://ADDR (profile …)",
/// VictoriaMetrics' "started server at http://ADDR/".
fn listening_port(line: &str, said: &str) -> Option<u16> {
    let addr = line.split(said).nth(1)?.split_whitespace().next()?;
    let addr = addr.trim_end_matches('/');
    Some(addr.parse::<std::net::SocketAddr>().ok()?.port())
}

/// `canaryd run --config CONFIG` in `dir`, stderr to `dir/LOG`, `env` added to an
/// environment cleared of the variables that would change it (an API key, systemd's notify
/// socket and watchdog, OTLP settings), with its status endpoint on a port it binds itself
/// (`127.0.0.1:0`), read from its log; returns it. A port found free and let go
/// ([`free_port`]) can be taken by another process (another test's daemon) before this one
/// binds it: this one then exits, and whatever answers on the port is taken for it.
#[allow(dead_code)]
pub fn daemon_on_own_port(
    dir: &Path,
    config: &Path,
    log: &str,
    env: &[(&str, &str)],
) -> (Child, u16) {
    let mut child = spawn_daemon(dir, config, log, env);
    let said = "status endpoint on http://127.0.0.1:";
    let port = eventually(10, "canaryd run's status endpoint", || {
        if let Some(exit) = child.0.try_wait().unwrap() {
            let log = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
            panic!("canaryd run exited ({exit}) before listening:\n{log}");
        }
        let text = std::fs::read_to_string(dir.join(log)).ok()?;
        let rest = text.split(said).nth(1)?;
        rest[..rest.find(|c: char| !c.is_ascii_digit())?]
            .parse()
            .ok()
    });
    (child, port)
}

#[allow(dead_code)]
fn spawn_daemon(dir: &Path, config: &Path, log: &str, env: &[(&str, &str)]) -> Child {
    Child(
        Command::new(CANARYD)
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(["--status-listen", "127.0.0.1:0"])
            .current_dir(dir)
            .env("RUST_LOG", "info")
            .env_remove("OPENAI_API_KEY")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_HEADERS")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(log)).unwrap())
            .spawn()
            .expect("canaryd run starts"),
    )
}

/// One HTTP/1.1 request on loopback; (status, body).
#[allow(dead_code)]
pub fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // hyper answers with a content-length (no chunking) for these small bodies.
    (status, body.to_string())
}

/// Asserts the exported gauge points `(figure, value)` are exactly one listed run's figures
/// (`figures`: each figure's JSON pointer into a run of `/api/runs`): a figure that run did
/// not have is not exported at all, never an earlier run's, nor NaN (which the SDK would drop
/// and so leave the earlier value showing).
#[allow(dead_code)]
pub fn assert_one_runs_figures(
    mut points: Vec<(String, f64)>,
    runs: &[Value],
    figures: &[(&str, &str)],
) {
    points.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let figures_of = |r: &Value| -> Vec<(String, f64)> {
        let mut f: Vec<(String, f64)> = figures
            .iter()
            .filter_map(|(name, key)| Some((name.to_string(), r.pointer(key)?.as_f64()?)))
            .collect();
        f.sort_by(|a, b| a.partial_cmp(b).unwrap());
        f
    };
    assert!(
        runs.iter().any(|r| figures_of(r) == points),
        "{points:?} are no run's figures: {:?}",
        runs.iter().map(figures_of).collect::<Vec<_>>()
    );
}

/// The status API's runs (up to 1000).
#[allow(dead_code)]
pub fn api_runs(port: u16) -> Vec<Value> {
    let (status, body) = http(port, "GET", "/api/runs?limit=1000", "");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["runs"].as_array().unwrap().clone()
}

/// Polls `f` until it returns `Some`, for at most `secs` seconds.
#[allow(dead_code)]
pub fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "gave up waiting for: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Every file under `dir` with its bytes, but those named in `except` (the secret files
/// themselves, when a test looks for leaks).
#[allow(dead_code)]
pub fn files_under(dir: &Path, except: &[&str]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path, except));
        } else if !path
            .file_name()
            .is_some_and(|n| except.iter().any(|e| n == *e))
        {
            out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
    out
}

/// Asserts that no file under `dir`, but those named in `except`, holds `secret`; the
/// files it checked.
#[allow(dead_code)]
pub fn assert_no_file_holds(dir: &Path, secret: &str, except: &[&str]) -> Vec<PathBuf> {
    let files = files_under(dir, except);
    for (path, bytes) in &files {
        assert!(
            !String::from_utf8_lossy(bytes).contains(secret),
            "{} leaks a secret ({secret})",
            path.display()
        );
    }
    files.into_iter().map(|(path, _)| path).collect()
}

/// Builds the fake `libnvidia-ml.so` of the telemetry tests (no GPU exists here); the real
/// nvml-wrapper loading path goes through it.
#[allow(dead_code)]
pub fn fake_nvml(dir: &Path) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../telemetry/tests/fake_nvml/fake_nvml.c");
    let out = dir.join("libnvidia-ml.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(src)
        .status()
        .expect("cc runs (gcc is part of the base image)");
    assert!(status.success());
    out
}

/// A loopback HTTP server answering its n-th request (from 0) with 200 and `page(n)` as
/// Prometheus text, a thread per connection, closing each: a server's `/metrics`. Returns that
/// URL.
#[allow(dead_code)]
pub fn serve_metrics_pages(page: impl Fn(u64) -> String + Send + Sync + 'static) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let page = std::sync::Arc::new(page);
    let n = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let (page, n) = (page.clone(), n.clone());
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => request.extend_from_slice(&buf[..k]),
                    }
                }
                let body = page(n.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://127.0.0.1:{port}/metrics")
}

/// The instant `ns` (Unix nanoseconds) in RFC 3339, UTC, to the nanosecond (`date -u`), as
/// `--start-at` takes it.
#[allow(dead_code)]
pub fn rfc3339(ns: i64) -> String {
    let out = Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000),
        ])
        .arg("+%Y-%m-%dT%H:%M:%S.%NZ")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A JSON file's document; panics naming the file.
#[allow(dead_code)]
pub fn json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON count (an unsigned integer); panics on anything else.
#[allow(dead_code)]
pub fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// An HTML page's words as a reader sees them: tags dropped, the entities canaryd writes
/// unescaped, spaces folded.
#[allow(dead_code)]
pub fn page_words(html: &str) -> String {
    let mut words = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                words.push(' ');
            }
            c if !in_tag => words.push(c),
            _ => {}
        }
    }
    words
        .replace("&amp;", "&")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
