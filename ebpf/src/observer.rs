//! [`KernelObserver`]: kernel socket timing joined to every record of a run, and the
//! `doctor` [`probe`].
//!
//! The tracer follows the TCP connections this process opens. A drain thread empties its ring
//! buffer every few milliseconds into a [`SocketLog`]; when a record is annotated, the events
//! still in flight are drained first, then the record's socket cookie and time window pick its
//! events and the TTFT parts are computed ([`SocketLog::timing`]). A record the kernel saw
//! nothing of keeps `kernel` absent.

use crate::join::{RequestSpan, SocketLog};
use crate::tracer::{MissingHook, Tracer, Unavailable};
use canary_core::{
    Distribution, KernelProgramStats, KernelRunSummary, MonoTime, Observer, RequestRecord,
    RunSummary, RunTelemetry, Source, SourceState, TelemetryFuture,
};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which observer of this process claimed each socket cookie.
static CLAIMS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
/// Observer ids, unique within the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn claims<T>(f: impl FnOnce(&mut HashMap<u64, u64>) -> T) -> T {
    let mut guard = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// A loss is booked from this long before the previous read of the kernel's lost count: the
/// program takes an event's time just before it finds the ring full, so a loss counted after
/// one read may carry a slightly earlier time.
const LOSS_MARGIN: Duration = Duration::from_millis(1);

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
    /// This observer's id in [`CLAIMS`].
    id: u64,
    tracer: Tracer,
    log: SocketLog,
    /// Sockets this run claimed (a record of it named the cookie).
    claimed: HashSet<u64>,
    /// Events of the claimed sockets, kept and over the cap.
    events: u64,
    over_cap: u64,
    /// Time spent draining and joining: canaryd's own share of the cost.
    busy: Duration,
    last_expiry: MonoTime,
    /// The kernel's lost-event count at the last drain, and the time just before it was read.
    lost_seen: u64,
    last_drain: MonoTime,
    /// Measured requests joined, unseen, and without kernel figures because the kernel lost
    /// events while they were in flight.
    joined: u64,
    unseen: u64,
    lost_requests: u64,
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
        let id = self.id;
        // Events of sockets another run of this process claimed are its, not ours.
        claims(|claims| {
            self.tracer.drain(|e| match claims.get(&e.cookie) {
                Some(&owner) if owner != id => {}
                _ => log.push(e),
            })
        });
        // The time is read before the kernel's lost count, so that the stretch booked below
        // (the previous read to now) covers every loss this count includes.
        let before_read = MonoTime::now();
        let lost = self.tracer.lost();
        let now = MonoTime::now();
        // Events lost since the last drain: some request in that stretch may lack its own.
        if lost > self.lost_seen {
            let from = self
                .last_drain
                .as_nanos()
                .saturating_sub(LOSS_MARGIN.as_nanos() as u64);
            self.log.lost_between(from, now.as_nanos());
            self.lost_seen = lost;
        }
        self.last_drain = before_read;
        if now.since(self.last_expiry) > Duration::from_secs(1) {
            self.last_expiry = now;
            let before = |d: Duration| now.as_nanos().saturating_sub(d.as_nanos() as u64);
            let mut gone = self.log.expire_closed(before(KEEP_CLOSED));
            gone.extend(self.log.expire(before(KEEP_IDLE)));
            // Sockets other runs claimed since their events came in.
            let others: Vec<u64> = claims(|claims| {
                self.log
                    .cookies()
                    .into_iter()
                    .filter(|c| claims.get(c).is_some_and(|&o| o != id))
                    .collect()
            });
            for c in others {
                self.log.forget(c);
            }
            for c in gone {
                self.collect(c);
                if self.claimed.remove(&c) {
                    claims(|claims| {
                        if claims.get(&c) == Some(&id) {
                            claims.remove(&c);
                        }
                    });
                }
            }
        }
        self.busy += start.elapsed();
    }

    /// Books the events pushed on `cookie` since last time to this run, if it claimed it.
    fn collect(&mut self, cookie: u64) {
        let (kept, over) = self.log.take_counts(cookie);
        if self.claimed.contains(&cookie) {
            self.events += kept;
            self.over_cap += over;
        }
    }

    /// This run's socket from now on: other runs of the process drop its events.
    fn claim(&mut self, cookie: u64) {
        if self.claimed.insert(cookie) {
            let id = self.id;
            claims(|claims| {
                claims.entry(cookie).or_insert(id);
            });
        }
        self.collect(cookie);
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let id = self.id;
        claims(|claims| claims.retain(|_, owner| *owner != id));
    }
}

impl KernelObserver {
    /// Loads the programs for this process and starts draining their events; `tls` when
    /// the target is `https://`.
    pub fn start(tls: bool) -> Result<KernelObserver, Unavailable> {
        let tracer = Tracer::start(std::process::id())?;
        // Once per process: every run attaches the same hooks.
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !tracer.missing().is_empty() && !WARNED.swap(true, Ordering::Relaxed) {
            for m in tracer.missing() {
                tracing::warn!("kernel socket timing degraded: {m}");
            }
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                tracer,
                log: SocketLog::default(),
                claimed: HashSet::new(),
                events: 0,
                over_cap: 0,
                busy: Duration::ZERO,
                last_expiry: MonoTime::now(),
                lost_seen: 0,
                last_drain: MonoTime::now(),
                joined: 0,
                unseen: 0,
                lost_requests: 0,
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
        s.claim(cookie);
        rec.kernel = s.log.timing(&span);
        let lost = rec.kernel.is_none() && s.log.lost_in(&span);
        s.log.release(cookie, span.end_ns);
        s.busy += start.elapsed();
        // The run's counts are of measured requests, as its other figures are.
        if rec.warmup {
            return;
        }
        let Some(k) = &rec.kernel else {
            match lost {
                true => s.lost_requests += 1,
                false => s.unseen += 1,
            }
            return;
        };
        s.joined += 1;
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
            let mut guard = self.shared.state.lock().expect("kernel state");
            let kernel = guard.summary();
            let report = Report {
                summary: &kernel,
                lost_requests: guard.lost_requests,
                missing: guard.tracer.missing(),
            };
            if let Some(w) = report.loss_warning() {
                tracing::warn!("{w}");
            }
            let state = report.state();
            drop(guard);
            RunTelemetry {
                kernel: Some(kernel),
                sources: [(Source::Ebpf, state)].into(),
                ..Default::default()
            }
        })
    }
}

/// What a run's source state and warnings are made of.
struct Report<'a> {
    summary: &'a KernelRunSummary,
    /// Measured requests without kernel figures because the kernel lost events.
    lost_requests: u64,
    missing: &'a [MissingHook],
}

impl Report<'_> {
    /// The run's one warning about lost events, if any were lost.
    fn loss_warning(&self) -> Option<String> {
        (self.summary.events_lost > 0).then(|| {
            format!(
                "eBPF lost {} events (ring buffer full): {} requests' kernel timing unseen",
                self.summary.events_lost, self.lost_requests
            )
        })
    }

    /// The eBPF source's state: available, with what it could not see said in the detail
    /// ("degraded: ..."), or unavailable when it saw none of the run.
    fn state(&self) -> SourceState {
        let k = self.summary;
        if k.requests_joined == 0 && k.requests_unseen > 0 && k.events == 0 {
            // Loaded and attached, yet blind to this process. The programs know canaryd by
            // its pid in its own PID namespace, found through /proc/self/ns/pid; without
            // /proc they fall back to the host's numbering, which a container's namespace
            // hides.
            return SourceState::unavailable(format!(
                "the socket programs attached but saw none of the run's {} requests ({} \
                 events); if /proc is not mounted in canaryd's PID namespace, the programs \
                 knew canaryd by a pid the kernel does not give it",
                k.requests_unseen, k.events
            ));
        }
        let mut degraded: Vec<String> = self.missing.iter().map(|m| m.to_string()).collect();
        if k.events_lost > 0 {
            degraded.push(format!(
                "{} events lost (ring buffer full), {} requests without kernel timing",
                k.events_lost, self.lost_requests
            ));
        }
        match degraded.is_empty() {
            true => SourceState::available("socket timing joined by cookie"),
            false => SourceState::available(format!(
                "socket timing joined by cookie; degraded: {}",
                degraded.join("; ")
            )),
        }
    }
}

impl State {
    /// The run so far, once the ring buffer is drained.
    fn summary(&mut self) -> KernelRunSummary {
        self.drain();
        // Events of the run's sockets since their last request (a close, say).
        for c in self.claimed.clone() {
            self.collect(c);
        }
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
            events_over_cap: self.over_cap,
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
        Ok(t) if t.missing().is_empty() => SourceState::available(
            "tp_btf socket programs load and attach (inet_sock_set_state, sock_send_length, \
             sk_data_ready, tcp_destroy_sock)",
        ),
        Ok(t) => SourceState::available(format!(
            "tp_btf socket programs load; degraded: {}",
            t.missing()
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        )),
        Err(e) => SourceState::unavailable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(s: &SourceState) -> &str {
        match s {
            SourceState::Available { detail } => detail,
            other => panic!("not available: {other:?}"),
        }
    }

    #[test]
    fn lost_events_leave_the_source_available_but_degraded_and_warn() {
        let summary = KernelRunSummary {
            events: 900,
            events_lost: 37,
            requests_joined: 15,
            ..Default::default()
        };
        let r = Report {
            summary: &summary,
            lost_requests: 3,
            missing: &[],
        };
        let state = r.state();
        assert_eq!(
            detail(&state),
            "socket timing joined by cookie; degraded: 37 events lost (ring buffer full), \
             3 requests without kernel timing"
        );
        assert_eq!(
            r.loss_warning().as_deref(),
            Some("eBPF lost 37 events (ring buffer full): 3 requests' kernel timing unseen")
        );
        let clean = KernelRunSummary {
            events_lost: 0,
            ..summary
        };
        let r = Report {
            summary: &clean,
            lost_requests: 0,
            missing: &[],
        };
        assert_eq!(detail(&r.state()), "socket timing joined by cookie");
        assert_eq!(r.loss_warning(), None);
    }

    #[test]
    fn a_missing_hook_is_named_with_the_kernel_and_its_lost_figures() {
        let summary = KernelRunSummary {
            events: 40,
            requests_joined: 10,
            ..Default::default()
        };
        let missing = [MissingHook {
            tracepoint: "sk_data_ready",
            reason: "tracepoint sk_data_ready: no BTF type btf_trace_sk_data_ready".into(),
        }];
        let r = Report {
            summary: &summary,
            lost_requests: 0,
            missing: &missing,
        };
        let state = r.state();
        let d = detail(&state);
        for part in [
            "degraded: no sk_data_ready hook",
            "exists since Linux 6.4",
            &crate::tracer::kernel_release(),
            "lost: server_wait, remainder, client_overhead, chunk delay",
        ] {
            assert!(d.contains(part), "{part:?} not in {d:?}");
        }
        assert_eq!(r.loss_warning(), None);
    }
}
