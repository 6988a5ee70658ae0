//! The machine's floor for open-loop pacing (see `bench/pacer.sh`): the most trivial tokio
//! client that sends a schedule on time, to stand beside canaryd in one run.
//!
//! `floor_client --addr 127.0.0.1:8000 --out sends.jsonl (--trace FILE | --rate R --pattern
//! constant|poisson --count N) [--words 64] [--max-tokens 8]`
//!
//! Each request opens its own connection 20 ms ahead, then waits with `tokio::time::sleep_until`
//! (tokio's 1 ms timer wheel, the usual way to pace in tokio) and writes a streaming completions
//! request, reading to the stream's last chunk without parsing it. One JSON line
//! per request: `{"id","scheduled_ns","sent_ns"}` on CLOCK_MONOTONIC, so the simulator's
//! truth log referees it exactly as it referees canaryd (`x-request-id` is `id`).

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Parser)]
struct Opts {
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long)]
    out: std::path::PathBuf,
    /// A JSONL trace: each row's `timestamp` (ms) is its send time, from the first row's.
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value = "constant")]
    pattern: String,
    #[arg(long, default_value_t = 2000)]
    count: usize,
    #[arg(long, default_value_t = 64)]
    words: usize,
    #[arg(long, default_value_t = 8)]
    max_tokens: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn now_ns() -> u64 {
    canary_core::MonoTime::now().as_nanos()
}

/// Offsets from the start, in ns.
fn schedule(o: &Opts) -> anyhow::Result<Vec<u64>> {
    if let Some(path) = &o.trace {
        let text = std::fs::read_to_string(path)?;
        let ts: Vec<f64> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l)?;
                v["timestamp"]
                    .as_f64()
                    .ok_or_else(|| anyhow::anyhow!("no timestamp in {l}"))
            })
            .collect::<anyhow::Result<_>>()?;
        let first = ts.iter().cloned().fold(f64::INFINITY, f64::min);
        let mut offs: Vec<u64> = ts.iter().map(|t| ((t - first) * 1e6) as u64).collect();
        offs.sort_unstable();
        return Ok(offs);
    }
    let rate = o.rate.ok_or_else(|| anyhow::anyhow!("--trace or --rate"))?;
    let gap = 1e9 / rate;
    // xorshift64*: enough for exponential gaps in a benchmark.
    let mut x = o.seed.max(1);
    let mut t = 0f64;
    let mut offs = Vec::with_capacity(o.count);
    for _ in 0..o.count {
        offs.push(t as u64);
        t += match o.pattern.as_str() {
            "constant" => gap,
            "poisson" => {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                let u = (x.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64;
                -gap * (1.0 - u).ln()
            }
            p => anyhow::bail!("unknown pattern {p}"),
        };
    }
    Ok(offs)
}

fn main() -> anyhow::Result<()> {
    let o = Opts::parse();
    let offs = schedule(&o)?;
    let rt = tokio::runtime::Runtime::new()?;
    let prompt = vec!["word"; o.words].join(" ");
    let lines = rt.block_on(async {
        // Start 100 ms from now, on the monotonic clock tokio's Instant also reads.
        let base_ns = now_ns() + 100_000_000;
        let base = tokio::time::Instant::now() + Duration::from_millis(100);
        let mut tasks = Vec::with_capacity(offs.len());
        for (i, off) in offs.iter().copied().enumerate() {
            let at = base + Duration::from_nanos(off);
            tokio::time::sleep_until(at - Duration::from_millis(20)).await;
            let body = format!(
                r#"{{"model":"canary-sim","prompt":"{prompt}","max_tokens":{},"stream":true,"ignore_eos":true}}"#,
                o.max_tokens
            );
            let req = format!(
                "POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\nx-request-id: floor-{i}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let addr = o.addr;
            tasks.push(tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.ok()?;
                s.set_nodelay(true).ok()?;
                tokio::time::sleep_until(at).await;
                let sent = now_ns();
                s.write_all(req.as_bytes()).await.ok()?;
                // To the stream's last (empty) chunk: the simulator keeps the connection open.
                let (mut buf, mut got) = ([0u8; 4096], Vec::with_capacity(4096));
                while !got.ends_with(b"\r\n0\r\n\r\n") {
                    let n = s.read(&mut buf).await.ok()?;
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                Some(format!(
                    r#"{{"id":"floor-{i}","scheduled_ns":{},"sent_ns":{sent}}}"#,
                    base_ns + off
                ))
            }));
        }
        let mut lines = Vec::with_capacity(tasks.len());
        for t in tasks {
            lines.push(t.await.ok().flatten());
        }
        lines
    });
    let mut f = std::io::BufWriter::new(std::fs::File::create(&o.out)?);
    let mut failed = 0;
    for l in lines {
        match l {
            Some(l) => writeln!(f, "{l}")?,
            None => failed += 1,
        }
    }
    anyhow::ensure!(failed == 0, "{failed} requests failed");
    Ok(())
}
