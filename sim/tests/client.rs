//! A raw HTTP/1.1 client over `TcpStream`: exact bytes, resets visible.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How the response body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Complete (content-length reached or last chunk seen).
    Complete,
    /// Connection closed before the body was complete.
    Eof,
    /// Connection reset.
    Reset,
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub end: End,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&self.body));
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `data:` payloads of an SSE body.
    pub fn events(&self) -> Vec<String> {
        sse_events(&self.text())
    }
}

pub fn sse_events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.strip_prefix("data: ").expect("data line").to_owned())
        .collect()
}

pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: sim\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        self.stream.write_all(req.as_bytes()).await.unwrap();
        self.read_response().await
    }

    /// Writes `bytes` as they are, in one `write_all`.
    pub async fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads the next response.
    pub async fn next_response(&mut self) -> Resp {
        self.read_response().await
    }

    /// Reads more; `Err(end)` when the connection is gone.
    async fn fill(&mut self) -> Result<(), End> {
        let mut tmp = [0u8; 16 * 1024];
        match self.stream.read(&mut tmp).await {
            Ok(0) => Err(End::Eof),
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Err(End::Reset),
            Err(e) => panic!("read: {e}"),
        }
    }

    async fn read_response(&mut self) -> Resp {
        let head_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            if let Err(end) = self.fill().await {
                return Resp {
                    status: 0,
                    headers: vec![],
                    body: vec![],
                    end,
                };
            }
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).unwrap();
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|l| {
                let (k, v) = l.split_once(':').unwrap();
                (k.trim().to_ascii_lowercase(), v.trim().to_owned())
            })
            .collect();
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        let end = if let Some(len) = get("content-length") {
            let len: usize = len.parse().unwrap();
            loop {
                if self.buf.len() >= len {
                    body = self.buf.drain(..len).collect();
                    break End::Complete;
                }
                if let Err(e) = self.fill().await {
                    body = std::mem::take(&mut self.buf);
                    break e;
                }
            }
        } else {
            // Chunked.
            'outer: loop {
                let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") else {
                    if let Err(e) = self.fill().await {
                        break e;
                    }
                    continue;
                };
                let size = usize::from_str_radix(std::str::from_utf8(&self.buf[..p]).unwrap(), 16)
                    .unwrap();
                while self.buf.len() < p + 2 + size + 2 {
                    if let Err(e) = self.fill().await {
                        break 'outer e;
                    }
                }
                body.extend_from_slice(&self.buf[p + 2..p + 2 + size]);
                self.buf.drain(..p + 2 + size + 2);
                if size == 0 {
                    break End::Complete;
                }
            }
        };
        Resp {
            status,
            headers,
            body,
            end,
        }
    }
}

/// One request on a fresh connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    Client::connect(addr)
        .await
        .send(method, path, headers, body)
        .await
}

/// A chat request body (with `stream_options.include_usage` when streaming, as vLLM
/// refuses it otherwise).
pub fn chat_body(prompt: &str, max_tokens: u32, stream: bool) -> String {
    let mut body = serde_json::json!({
        "model": "canary-sim",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
    });
    if stream {
        body["stream_options"] = serde_json::json!({"include_usage": true});
    }
    body.to_string()
}

pub fn completion_body(prompt: &str, max_tokens: u32, stream: bool) -> String {
    let mut body = serde_json::json!({
        "model": "canary-sim",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": stream,
    });
    if stream {
        body["stream_options"] = serde_json::json!({"include_usage": true});
    }
    body.to_string()
}

/// Parses a Prometheus sample value for `name{...}` (first match).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no {name} in metrics"))
        .parse()
        .unwrap()
}

/// Sends one request on a fresh connection and reads the raw response as it comes until
/// `until(bytes so far)` holds (or the connection ends). Returns the open stream (drop it to
/// disconnect), the bytes, and the time from the request's write to the read that satisfied
/// `until`.
pub async fn read_until(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    until: impl Fn(&[u8]) -> bool,
) -> (TcpStream, Vec<u8>, std::time::Duration) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: sim\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let sent = std::time::Instant::now();
    let mut got = Vec::new();
    let mut tmp = [0u8; 16 * 1024];
    while !until(&got) {
        match stream.read(&mut tmp).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&tmp[..n]),
        }
    }
    (stream, got, sent.elapsed())
}

/// Occurrences of `needle` in `hay`.
pub fn count(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

/// Polls `/metrics` until `pred` holds for it, for at most `secs`; returns the last scrape and
/// whether `pred` held.
pub async fn wait_metrics(
    addr: SocketAddr,
    secs: f64,
    pred: impl Fn(&str) -> bool,
) -> (String, bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    loop {
        let m = request(addr, "GET", "/metrics", &[], "").await.text();
        if pred(&m) {
            return (m, true);
        }
        if std::time::Instant::now() > deadline {
            return (m, false);
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// A Prometheus sample with an extra label, e.g. `finished_reason="abort"`.
pub fn labelled(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no {name} with {label} in metrics"))
        .parse()
        .unwrap()
}
