//! A slow link between the sim and its client: the `net_delay_ms` fault.
//!
//! With the fault, a response's writes go through a delay line: each is stamped when the sim
//! produces it (when it would have been written without the fault) and reaches the socket
//! `delay` later, in order. It is a constant one-way delay, like a long link, not a stall: the
//! spacing between writes is kept, and due writes go out while the request waits for tokens or
//! stalls ([`Conn::pause`], [`Conn::until_due`]). The queue is capped at 4 MiB; past the cap the
//! writer waits for the link, as a full send buffer would make it.
//!
//! At the end of the request [`settle`] moves the produced times into
//! [`TruthRecord::net_delay`] and puts the times the writes reached the socket in the top-level
//! fields, which keep their meaning ("right after the `write(2)` returned").

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use canary_core::MonoTime;

use crate::http::Conn;
use crate::truth::{NetDelay, TruthRecord};

/// Most bytes waiting on the link before the writer has to wait.
const MAX_QUEUED: usize = 4 << 20;

/// Writes on their way through a slow link.
#[derive(Debug)]
pub(crate) struct DelayLine {
    delay_ms: u64,
    queue: VecDeque<Pending>,
    queued_bytes: usize,
    last_produced: u64,
    /// `(produced, written)` of every write that reached the socket, in order.
    stamps: Vec<(u64, u64)>,
}

#[derive(Debug)]
struct Pending {
    produced: u64,
    bytes: Vec<u8>,
}

impl DelayLine {
    pub fn new(delay_ms: u64) -> DelayLine {
        DelayLine {
            delay_ms,
            queue: VecDeque::new(),
            queued_bytes: 0,
            last_produced: 0,
            stamps: Vec::new(),
        }
    }

    fn delay_ns(&self) -> u64 {
        self.delay_ms.saturating_mul(1_000_000)
    }

    /// When the front write is due, in ns.
    fn next_due(&self) -> Option<u64> {
        self.queue
            .front()
            .map(|p| p.produced.saturating_add(self.delay_ns()))
    }

    /// When the write produced at `produced` reached the socket, if it did.
    fn written(&self, produced: u64) -> Option<u64> {
        self.stamps
            .binary_search_by_key(&produced, |&(p, _)| p)
            .ok()
            .map(|i| self.stamps[i].1)
    }
}

impl Conn {
    /// Writes `bytes` to the socket, or queues them on the slow link when there is one.
    /// Returns the time right after the `write(2)` returned, or, on a slow link, the time the
    /// sim produced them (unique per write, so [`settle`] can find them again).
    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<u64> {
        let Some(link) = self.link.as_mut() else {
            self.write_all(bytes).await?;
            return Ok(MonoTime::now().as_nanos());
        };
        let produced = MonoTime::now().as_nanos().max(link.last_produced + 1);
        link.last_produced = produced;
        link.queued_bytes += bytes.len();
        link.queue.push_back(Pending {
            produced,
            bytes: bytes.to_vec(),
        });
        while self
            .link
            .as_ref()
            .is_some_and(|l| l.queued_bytes > MAX_QUEUED)
        {
            self.write_front().await?;
        }
        self.flush_due().await?;
        Ok(produced)
    }

    /// How long until the next write on the slow link is due (`None`: nothing queued).
    pub fn until_due(&self) -> Option<Duration> {
        let due = self.link.as_ref()?.next_due()?;
        Some(Duration::from_nanos(
            due.saturating_sub(MonoTime::now().as_nanos()),
        ))
    }

    /// Writes every queued write that is due.
    pub async fn flush_due(&mut self) -> io::Result<()> {
        loop {
            let now = MonoTime::now().as_nanos();
            match self.link.as_ref().and_then(DelayLine::next_due) {
                Some(due) if due <= now => self.write_front().await?,
                _ => return Ok(()),
            }
        }
    }

    /// Waits until the front write is due and writes it.
    async fn write_front(&mut self) -> io::Result<()> {
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        let Some(due) = link.next_due() else {
            return Ok(());
        };
        let now = MonoTime::now().as_nanos();
        if due > now {
            tokio::time::sleep(Duration::from_nanos(due - now)).await;
        }
        let link = self.link.as_mut().expect("checked above");
        let p = link.queue.pop_front().expect("checked above");
        link.queued_bytes -= p.bytes.len();
        self.write_all(&p.bytes).await?;
        let written = MonoTime::now().as_nanos();
        if let Some(link) = self.link.as_mut() {
            link.stamps.push((p.produced, written));
        }
        Ok(())
    }

    /// Sleeps for `d` (a stall), watching for the client leaving: a stall of up to ten minutes
    /// must not outlive its client, whose sequence holds an engine slot until the response
    /// ends. Writes on a slow link still go out when due. `Err` when the client is gone.
    pub async fn pause(&mut self, d: Duration) -> io::Result<()> {
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let end = MonoTime::now().as_nanos().saturating_add(d);
        loop {
            let now = MonoTime::now().as_nanos();
            if now >= end {
                return self.flush_due().await;
            }
            let wake = self
                .link
                .as_ref()
                .and_then(DelayLine::next_due)
                .map_or(end, |due| due.min(end));
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_nanos(wake.saturating_sub(now))) => {
                    self.flush_due().await?;
                }
                alive = self.read_more() => if !alive {
                    let gone = "client closed the connection";
                    return Err(io::Error::new(io::ErrorKind::ConnectionAborted, gone));
                },
            }
        }
    }

    /// Writes everything still queued, each when due, watching for the client leaving
    /// meanwhile. `Err` is why the client is gone.
    pub async fn drain(&mut self) -> Result<(), String> {
        while let Some(d) = self.until_due() {
            tokio::select! {
                _ = tokio::time::sleep(d) => self.flush_due().await.map_err(|e| e.to_string())?,
                alive = self.read_more() => if !alive {
                    return Err("client closed the connection".into());
                },
            }
        }
        Ok(())
    }
}

/// Takes the slow link's stamps into the record: the times the sim produced go to
/// `rec.net_delay`, and the top-level times become the times the writes reached the socket.
/// Events never written (the client left first) drop out of `chunk_ns`, and out of
/// `completion_tokens` for a stream; `events_before_tokens` is 1 for a chat stream (the role
/// chunk), else 0. A client-gone `end_ns` is the time the sim noticed and stays.
pub(crate) fn settle(rec: &mut TruthRecord, link: &DelayLine, events_before_tokens: usize) {
    let produced = NetDelay {
        delay_ms: link.delay_ms,
        first_byte_ns: rec.first_byte_ns,
        first_chunk_ns: rec.first_chunk_ns,
        first_token_ns: rec.first_token_ns,
        first_output_ns: rec.first_output_ns,
        chunk_ns: std::mem::take(&mut rec.chunk_ns),
        end_ns: rec.end_ns,
    };
    let w = |t: Option<u64>| t.and_then(|t| link.written(t));
    rec.first_byte_ns = w(produced.first_byte_ns);
    if produced.first_byte_ns.is_some() && rec.first_byte_ns.is_none() {
        rec.status = 0; // no head reached the client
    }
    rec.first_chunk_ns = w(produced.first_chunk_ns);
    rec.first_token_ns = w(produced.first_token_ns);
    rec.first_output_ns = w(produced.first_output_ns);
    rec.chunk_ns = produced
        .chunk_ns
        .iter()
        .map_while(|&t| link.written(t))
        .collect();
    if rec.stream {
        let tokens = rec.chunk_ns.len().saturating_sub(events_before_tokens) as u32;
        rec.completion_tokens = rec.completion_tokens.min(tokens);
        rec.reasoning_tokens = rec.reasoning_tokens.min(rec.completion_tokens);
    }
    if !rec.disconnected {
        if let Some(t) = link.written(rec.end_ns) {
            rec.end_ns = t;
        }
    }
    rec.net_delay = Some(produced);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_maps_written_times_and_drops_unwritten_events() {
        let link = DelayLine {
            delay_ms: 50,
            queue: VecDeque::new(),
            queued_bytes: 0,
            last_produced: 30,
            stamps: vec![(10, 1010), (20, 1020)],
        };
        let mut rec = TruthRecord {
            stream: true,
            first_byte_ns: Some(10),
            first_chunk_ns: Some(20),
            first_token_ns: Some(20),
            first_output_ns: Some(30),
            // role + token 1 in the second write; token 2 in a third that never went out.
            chunk_ns: vec![20, 20, 30],
            completion_tokens: 2,
            reasoning_tokens: 2,
            end_ns: 30,
            disconnected: true,
            ..Default::default()
        };
        settle(&mut rec, &link, 1);
        assert_eq!(rec.first_byte_ns, Some(1010));
        assert_eq!(rec.first_token_ns, Some(1020));
        assert_eq!(rec.first_output_ns, None, "never reached the socket");
        assert_eq!(rec.chunk_ns, [1020, 1020]);
        assert_eq!((rec.completion_tokens, rec.reasoning_tokens), (1, 1));
        assert_eq!(rec.end_ns, 30, "a disconnect time stays");
        let nd = rec.net_delay.unwrap();
        assert_eq!(nd.delay_ms, 50);
        assert_eq!(nd.chunk_ns, [20, 20, 30]);
        assert_eq!(nd.first_output_ns, Some(30));
    }
}
