//! Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! commands on its fd 3, replies and events on its fd 4, each message ending in a NUL byte),
//! so tests load a page as a person's browser would and read back what happened: console
//! errors, every network request, the DOM, a screenshot. No WebDriver, no Node.
//!
//! The flags are the ones known to work on these machines: headless, no sandbox (root), no
//! GPU, no background networking (the closed network refuses it), a fresh profile.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long one command or one page load may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The Chromium binary to use: `CANARYD_CHROMIUM`, else `chromium` on the `PATH`; `Err` says
/// why there is none.
pub fn chromium() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("CANARYD_CHROMIUM").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "no chromium (set CANARYD_CHROMIUM, or run scripts/setup/chromium.sh)".to_string()
        })
}

/// A running headless Chromium.
pub struct Browser {
    child: Child,
    commands: std::fs::File,
    messages: Receiver<Value>,
    next_id: u64,
    profile: PathBuf,
}

/// What loading one page showed.
#[derive(Debug, Default)]
pub struct PageLoad {
    /// The DevTools session of the page's tab.
    pub session: String,
    /// Console errors, uncaught exceptions and error log entries (CSP violations, failed
    /// loads), as text.
    pub errors: Vec<String>,
    /// The URL of every request the page made, the page's own included.
    pub requests: Vec<String>,
}

impl Browser {
    /// Starts `bin` headless with a fresh profile under `std::env::temp_dir()`.
    pub fn launch(bin: &Path) -> Result<Browser, String> {
        let (cmd_read, cmd_write) = pipe()?;
        let (msg_read, msg_write) = pipe()?;
        let profile = std::env::temp_dir().join(format!(
            "canaryd-chromium-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let mut command = Command::new(bin);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let (r, w) = (cmd_read.as_raw_fd(), msg_write.as_raw_fd());
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl, dup2): move the
        // two pipe ends above any fd number they could collide with, then onto 3 and 4,
        // which dup2 leaves open across exec.
        unsafe {
            command.pre_exec(move || {
                let r2 = libc::fcntl(r, libc::F_DUPFD_CLOEXEC, 10);
                let w2 = libc::fcntl(w, libc::F_DUPFD_CLOEXEC, 10);
                if r2 < 0 || w2 < 0 || libc::dup2(r2, 3) < 0 || libc::dup2(w2, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        drop((cmd_read, msg_write));
        let (tx, messages) = std::sync::mpsc::channel();
        let mut reader = std::fs::File::from(msg_read);
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 64 * 1024];
            while let Ok(n) = reader.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|&b| b == 0) {
                    let msg: Vec<u8> = buf.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&msg[..end]) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(Browser {
            child,
            commands: std::fs::File::from(cmd_write),
            messages,
            next_id: 0,
            profile,
        })
    }

    /// Sends a command (to the page's `session`, or to the browser) and waits for its reply;
    /// events that arrive meanwhile go to `events`.
    fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        events: &mut Vec<Value>,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).expect("json");
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .map_err(|e| format!("{method}: writing to chromium: {e}"))?;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(v) if v["id"] == json!(id) => {
                    if let Some(e) = v.get("error") {
                        return Err(format!("{method}: {e}"));
                    }
                    return Ok(v["result"].clone());
                }
                Ok(v) => events.push(v),
                Err(RecvTimeoutError::Timeout) => return Err(format!("{method}: no reply")),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("{method}: chromium exited"))
                }
            }
        }
    }

    /// Opens `url` in a new tab of `width` CSS pixels and waits for its load event; returns
    /// what the load showed (errors and requests seen until then).
    pub fn open(&mut self, url: &str, width: u32) -> Result<PageLoad, String> {
        let mut events = Vec::new();
        let target = self.call(
            None,
            "Target.createTarget",
            json!({"url": "about:blank"}),
            &mut events,
        )?;
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
            &mut events,
        )?;
        let session = attached["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let s = Some(session.as_str());
        for domain in ["Page", "Runtime", "Log", "Network"] {
            self.call(s, &format!("{domain}.enable"), json!({}), &mut events)?;
        }
        self.call(
            s,
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
            &mut events,
        )?;
        events.clear();
        self.call(s, "Page.navigate", json!({"url": url}), &mut events)?;
        let deadline = Instant::now() + TIMEOUT;
        let loaded =
            |e: &Value| e["method"] == "Page.loadEventFired" && e["sessionId"] == json!(session);
        while !events.iter().any(loaded) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(v) => events.push(v),
                Err(_) => return Err(format!("{url}: no load event")),
            }
        }
        // Anything the page does right after load (nothing, for a page without script)
        // still gets a moment to show.
        let settle = Instant::now() + Duration::from_millis(300);
        while let Ok(v) = self
            .messages
            .recv_timeout(settle.saturating_duration_since(Instant::now()))
        {
            events.push(v);
        }
        let mut load = PageLoad {
            session,
            ..Default::default()
        };
        for e in &events {
            if e["sessionId"] != json!(load.session) {
                continue;
            }
            let p = &e["params"];
            match e["method"].as_str().unwrap_or_default() {
                "Runtime.consoleAPICalled" if p["type"] == "error" || p["type"] == "assert" => {
                    load.errors.push(format!("console: {}", p["args"]))
                }
                "Runtime.exceptionThrown" => load
                    .errors
                    .push(format!("exception: {}", p["exceptionDetails"])),
                "Log.entryAdded" if p["entry"]["level"] == "error" => {
                    load.errors.push(format!("log: {}", p["entry"]["text"]))
                }
                "Network.requestWillBeSent" => load
                    .requests
                    .push(p["request"]["url"].as_str().unwrap_or_default().to_string()),
                _ => {}
            }
        }
        Ok(load)
    }

    /// Evaluates `expression` in the page and returns its value (JSON).
    pub fn eval(&mut self, page: &PageLoad, expression: &str) -> Result<Value, String> {
        let mut events = Vec::new();
        let r = self.call(
            Some(&page.session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
            &mut events,
        )?;
        if let Some(e) = r.get("exceptionDetails") {
            return Err(format!("evaluating: {e}"));
        }
        Ok(r["result"]["value"].clone())
    }

    /// Writes a PNG of the whole page (up to `max_height` CSS pixels) to `path`.
    pub fn screenshot(
        &mut self,
        page: &PageLoad,
        path: &Path,
        max_height: u32,
    ) -> Result<(), String> {
        use base64::Engine;
        let mut events = Vec::new();
        let s = Some(page.session.as_str());
        let metrics = self.call(s, "Page.getLayoutMetrics", json!({}), &mut events)?;
        let size = &metrics["cssContentSize"];
        let width = size["width"].as_f64().unwrap_or(1200.0).ceil() as u32;
        let height = (size["height"].as_f64().unwrap_or(900.0).ceil() as u32).min(max_height);
        self.call(
            s,
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
            &mut events,
        )?;
        let shot = self.call(
            s,
            "Page.captureScreenshot",
            json!({"format": "png"}),
            &mut events,
        )?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .map_err(|e| format!("screenshot: {e}"))?;
        std::fs::write(path, png).map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills both fds on success; each is owned once below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh fds from pipe2, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
