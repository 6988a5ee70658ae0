//! [`KernelObserver`]: kernel socket timing joined to every record of a run, and the
//! `doctor` [`probe`].
//!
//! The tracer follows the TCP connections this process opens. A drain thread empties its ring
//! buffer every few milliseconds into a [`SocketLog`]; when a record is annotated, the events
//! still in flight are drained first, then the record's socket cookie and time window pick its
//! events and the TTFT parts are computed ([`SocketLog::timing`]). A record the kernel saw
//! nothing of keeps `kernel` absent.

use crate::join::{RequestSpan, SocketLog};
use crate::tracer::{Tracer, Unavailable};
use canary_core::{
    Distribution, KernelProgramStats, KernelRunSummary, MonoTime, Observer, RequestRecord,
    RunSummary, RunTelemetry, Source, SourceState, TelemetryFuture,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the drain thread empties the ring buffer: at 100k events/s that is 1,000
/// events a pass, far inside its 4 MiB.
const DRAIN_EVERY: Duration = Duration::from_millis(10);
/// A closed socket's events are kept this long for a record still to be annotated.
const KEEP_CLOSED: Duration = Duration::from_secs(30);
/// An idle socket's baseline is kept this long (pooled keep-alive connections).
const KEEP_IDLE: Duration = Duration::from_secs(900);

/// Joins kernel socket events to records.
pub struct KernelObserver {
    shared: Arc<Shared>,
    drainer: Option<std::thread::JoinHandle<()>>,
    /// The target speaks TLS: a new connection's first response bytes may be the server's
    /// session tickets.
    tls: bool,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
}

struct State {
    tracer: Tracer,
    log: SocketLog,
    events: u64,
    /// Time spent draining and joining: canaryd's own share of the cost.
    busy: Duration,
    last_expiry: MonoTime,
    /// The kernel's lost-event count at the last drain, and that drain's time.
    lost_seen: u64,
    last_drain: MonoTime,
    joined: u64,
    unseen: u64,
    request_write: Distribution,
    server_wait: Distribution,
    remainder: Distribution,
    client_overhead: Distribution,
    chunk_delay_p99: Distribution,
}

impl State {
    fn drain(&mut self) {
        let start = std::time::Instant::now();
        let log = &mut self.log;
        self.events += self.tracer.drain(|e| log.push(e)) as u64;
        let now = MonoTime::now();
        // Events lost since the last drain: some request in that stretch may lack its own.
        let lost = self.tracer.lost();
        if lost > self.lost_seen {
            self.log
                .lost_between(self.last_drain.as_nanos(), now.as_nanos());
            self.lost_seen = lost;
        }
        self.last_drain = now;
        if now.since(self.last_expiry) > Duration::from_secs(1) {
            self.last_expiry = now;
            let before = |d: Duration| now.as_nanos().saturating_sub(d.as_nanos() as u64);
            self.log.expire_closed(before(KEEP_CLOSED));
            self.log.expire(before(KEEP_IDLE));
        }
        self.busy += start.elapsed();
    }
}

impl KernelObserver {
    /// Loads the programs for this process and starts draining their events; `tls` when
    /// the target is `https://`.
    pub fn start(tls: bool) -> Result<KernelObserver, Unavailable> {
        let tracer = Tracer::start(std::process::id())?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                tracer,
                log: SocketLog::default(),
                events: 0,
                busy: Duration::ZERO,
                last_expiry: MonoTime::now(),
                lost_seen: 0,
                last_drain: MonoTime::now(),
                joined: 0,
                unseen: 0,
                request_write: Distribution::new(),
                server_wait: Distribution::new(),
                remainder: Distribution::new(),
                client_overhead: Distribution::new(),
                chunk_delay_p99: Distribution::new(),
            }),
            stop: AtomicBool::new(false),
        });
        let drainer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("ebpf-drain".into())
                .spawn(move || {
                    while !shared.stop.load(Ordering::Relaxed) {
                        shared.state.lock().expect("kernel state").drain();
                        std::thread::sleep(DRAIN_EVERY);
                    }
                })
                .map_err(|e| Unavailable::Load(format!("drain thread: {e}")))?
        };
        Ok(KernelObserver {
            shared,
            drainer: Some(drainer),
            tls,
        })
    }
}

impl Drop for KernelObserver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.drainer.take() {
            let _ = t.join();
        }
    }
}

/// A record time (ms after `t0`) back on the monotonic clock, in ns.
fn ns(t0: MonoTime, ms: f64) -> u64 {
    t0.as_nanos() + (ms.max(0.0) * 1e6).round() as u64
}

/// The client's side of a record, as the join needs it.
fn span(rec: &RequestRecord, cookie: u64, gaps_ms: &[f64], t0: MonoTime, tls: bool) -> RequestSpan {
    let sent_ms = rec.sent_at_ms;
    // canaryd's own reads (the gaps are between them too): client overhead is kernel
    // arrival → canaryd's code, whatever clock `ttft_ms` is on.
    let first_ms = rec.userspace_ttft_ms().map(|t| sent_ms + t);
    let mut chunk_reads_ns = Vec::new();
    if let Some(mut at) = first_ms {
        chunk_reads_ns.push(ns(t0, at));
        for g in gaps_ms {
            at += g;
            chunk_reads_ns.push(ns(t0, at));
        }
    }
    RequestSpan {
        cookie,
        sent_ns: ns(t0, sent_ms),
        end_ns: ns(t0, rec.ended_at_ms.max(sent_ms)),
        first_token_ns: first_ms.map(|m| ns(t0, m)),
        chunk_reads_ns,
        new_connection: rec.connect_ms.is_some(),
        new_tls_connection: tls && rec.connect_ms.is_some(),
    }
}

impl Observer for KernelObserver {
    fn annotate(&self, rec: &mut RequestRecord, t0: MonoTime) {
        self.annotate_chunks(rec, &[], t0);
    }

    fn annotate_chunks(&self, rec: &mut RequestRecord, gaps_ms: &[f64], t0: MonoTime) {
        let Some(cookie) = rec.socket_cookie else {
            return;
        };
        let span = span(rec, cookie, gaps_ms, t0, self.tls);
        let mut guard = self.shared.state.lock().expect("kernel state");
        let s = &mut *guard;
        // The kernel queued this request's events before canaryd could see its bytes: they
        // are in the ring buffer by now.
        s.drain();
        let start = std::time::Instant::now();
        rec.kernel = s.log.timing(&span);
        s.log.release(cookie, span.end_ns);
        s.busy += start.elapsed();
        let Some(k) = &rec.kernel else {
            s.unseen += 1;
            return;
        };
        s.joined += 1;
        if rec.warmup {
            return;
        }
        let k = k.clone();
        for (d, v) in [
            (&mut s.request_write, k.request_write_ms),
            (&mut s.server_wait, k.server_wait_ms),
            (&mut s.remainder, k.remainder_ms),
            (&mut s.client_overhead, k.client_overhead_ms),
            (&mut s.chunk_delay_p99, k.chunk_delay_p99_ms),
        ] {
            if let Some(v) = v {
                d.record(v);
            }
        }
    }

    fn finish<'a>(&'a self, _: MonoTime, _: MonoTime, _: &'a RunSummary) -> TelemetryFuture<'a> {
        Box::pin(async move {
            let kernel = self.shared.state.lock().expect("kernel state").summary();
            let state = if kernel.requests_joined == 0
                && kernel.requests_unseen > 0
                && kernel.events == 0
            {
                // Loaded and attached, yet blind to this process. The programs know canaryd
                // by its pid in its own PID namespace, found through /proc/self/ns/pid;
                // without /proc they fall back to the host's numbering, which a container's
                // namespace hides.
                SourceState::unavailable(format!(
                    "the socket programs attached but saw none of the run's {} requests ({} \
                     events); if /proc is not mounted in canaryd's PID namespace, the \
                     programs knew canaryd by a pid the kernel does not give it",
                    kernel.requests_unseen, kernel.events
                ))
            } else {
                SourceState::available("socket timing joined by cookie")
            };
            RunTelemetry {
                kernel: Some(kernel),
                sources: [(Source::Ebpf, state)].into(),
                ..Default::default()
            }
        })
    }
}

impl State {
    /// The run so far, once the ring buffer is drained.
    fn summary(&mut self) -> KernelRunSummary {
        self.drain();
        let stats = |d: &Distribution| d.stats_in("ms");
        // Only with `sysctl kernel.bpf_stats_enabled=1` (the overhead bench sets it).
        let programs: std::collections::BTreeMap<String, KernelProgramStats> = self
            .tracer
            .program_stats()
            .iter()
            .map(|p| {
                let ns = p.run_time.as_nanos() as f64;
                let stats = KernelProgramStats {
                    runs: p.runs,
                    run_time_ms: ns / 1e6,
                    ns_per_run: ns / p.runs as f64,
                };
                (p.tracepoint.to_string(), stats)
            })
            .collect();
        KernelRunSummary {
            events: self.events,
            userspace_ms: self.busy.as_secs_f64() * 1e3,
            events_lost: self.tracer.lost(),
            events_over_cap: self.log.over_cap(),
            requests_joined: self.joined,
            requests_unseen: self.unseen,
            request_write: stats(&self.request_write),
            server_wait: stats(&self.server_wait),
            remainder: stats(&self.remainder),
            client_overhead: stats(&self.client_overhead),
            chunk_delay_p99: stats(&self.chunk_delay_p99),
            programs: (!programs.is_empty()).then_some(programs),
        }
    }
}

/// For `canaryd doctor`: whether the socket programs load and attach here, and why not.
pub fn probe() -> SourceState {
    match Tracer::start(std::process::id()) {
        Ok(_) => SourceState::available(
            "tp_btf socket programs load and attach (inet_sock_set_state, sock_send_length, \
             sk_data_ready, tcp_destroy_sock)",
        ),
        Err(e) => SourceState::unavailable(e.to_string()),
    }
}
