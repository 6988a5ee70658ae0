//! Load generator for measuring canary-sim's own throughput (see `bench/sim/README.md`).
//!
//! `sim_load --addr 127.0.0.1:8000 --conns 64 --max-tokens 256 --secs 10 [--stream false]`
//! keeps `--conns` keep-alive connections busy with completions requests and reports requests/s
//! and SSE chunks/s. Runs on a current-thread runtime so that it can be pinned to one core.
//! It parses only the HTTP framing and counts `data:` events, to stay cheaper than the server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Parser)]
struct Opts {
    #[arg(long, default_value = "127.0.0.1:8000")]
    addr: SocketAddr,
    #[arg(long, default_value_t = 64)]
    conns: usize,
    #[arg(long, default_value_t = 256)]
    max_tokens: u32,
    #[arg(long, default_value_t = 10)]
    secs: u64,
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    stream: bool,
    /// Server pid, to report the server's CPU seconds over the run (from /proc).
    #[arg(long)]
    server_pid: Option<u32>,
}

#[derive(Default)]
struct Totals {
    requests: AtomicU64,
    chunks: AtomicU64,
    errors: AtomicU64,
}

fn main() -> anyhow::Result<()> {
    let o = Opts::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(o))
}

async fn run(o: Opts) -> anyhow::Result<()> {
    let totals = Arc::new(Totals::default());
    let stop = Arc::new(AtomicBool::new(false));
    let body = format!(
        r#"{{"model":"canary-sim","prompt":"the quick brown fox jumps over the lazy dog","max_tokens":{},"stream":{}}}"#,
        o.max_tokens, o.stream
    );
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let req: Arc<[u8]> = req.into_bytes().into();
    // Warm up connections, then measure.
    let mut tasks = Vec::new();
    for _ in 0..o.conns {
        let (t, s, r) = (totals.clone(), stop.clone(), req.clone());
        let addr = o.addr;
        tasks.push(tokio::spawn(async move {
            if let Err(e) = conn_loop(addr, r, t.clone(), s).await {
                eprintln!("connection failed: {e}");
                t.errors.fetch_add(1, Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu0 = o.server_pid.map(cpu_secs);
    let (r0, c0) = (totals.requests.load(Relaxed), totals.chunks.load(Relaxed));
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(o.secs)).await;
    let dt = t0.elapsed().as_secs_f64();
    let (r1, c1) = (totals.requests.load(Relaxed), totals.chunks.load(Relaxed));
    let cpu1 = o.server_pid.map(cpu_secs);
    stop.store(true, Relaxed);
    let reqs = (r1 - r0) as f64 / dt;
    let chunks = (c1 - c0) as f64 / dt;
    println!(
        "conns={} max_tokens={} stream={} secs={dt:.1}: {reqs:.0} req/s, {chunks:.0} chunks/s, errors={}",
        o.conns,
        o.max_tokens,
        o.stream,
        totals.errors.load(Relaxed)
    );
    if let (Some(Some(a)), Some(Some(b))) = (cpu0, cpu1) {
        println!("server CPU: {:.2} s per wall second", (b - a) / dt);
    }
    Ok(())
}

async fn conn_loop(
    addr: SocketAddr,
    req: Arc<[u8]>,
    totals: Arc<Totals>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut tmp = vec![0u8; 64 * 1024];
    while !stop.load(Relaxed) {
        s.write_all(&req).await?;
        let chunks = read_response(&mut s, &mut buf, &mut tmp).await?;
        totals.requests.fetch_add(1, Relaxed);
        totals.chunks.fetch_add(chunks, Relaxed);
    }
    Ok(())
}

/// Reads one response; returns the number of SSE `data:` events in it.
async fn read_response(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    tmp: &mut [u8],
) -> anyhow::Result<u64> {
    let mut pos = 0;
    // Head.
    let head_end = loop {
        if let Some(p) = find(&buf[..], b"\r\n\r\n", 0) {
            break p + 4;
        }
        fill(s, buf, tmp).await?;
    };
    let head = std::str::from_utf8(&buf[..head_end])?.to_ascii_lowercase();
    anyhow::ensure!(head.starts_with("http/1.1 200"), "status: {head}");
    pos = pos.max(head_end);
    if let Some(cl) = head.lines().find_map(|l| l.strip_prefix("content-length:")) {
        let len: usize = cl.trim().parse()?;
        while buf.len() < pos + len {
            fill(s, buf, tmp).await?;
        }
        buf.drain(..pos + len);
        return Ok(0);
    }
    let mut events = 0;
    loop {
        let line_end = loop {
            if let Some(p) = find(&buf[..], b"\r\n", pos) {
                break p;
            }
            fill(s, buf, tmp).await?;
        };
        let size = usize::from_str_radix(std::str::from_utf8(&buf[pos..line_end])?, 16)?;
        let start = line_end + 2;
        while buf.len() < start + size + 2 {
            fill(s, buf, tmp).await?;
        }
        let mut p = start;
        while let Some(q) = find(&buf[..start + size], b"data: ", p) {
            events += 1;
            p = q + 6;
        }
        pos = start + size + 2;
        if size == 0 {
            buf.drain(..pos);
            return Ok(events);
        }
    }
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, tmp: &mut [u8]) -> anyhow::Result<()> {
    let n = s.read(tmp).await?;
    anyhow::ensure!(n > 0, "server closed the connection");
    buf.extend_from_slice(&tmp[..n]);
    Ok(())
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// utime + stime of a process, in seconds.
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
