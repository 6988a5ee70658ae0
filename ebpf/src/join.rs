//! Socket events kept per connection, and the join of one request to them.
//!
//! With HTTP/1.1 and one request per connection at a time, a request *is* its socket between
//! the moment canaryd sent it and the moment it ended. Inside that window the kernel saw:
//!
//! ```text
//! sent ──request_write──▶ last send ──server_wait──▶ first bytes in ──remainder──▶
//!      first-token bytes in ──client_overhead──▶ canaryd saw the first token (TTFT)
//! ```
//!
//! `remainder` is what the server took between its first bytes and the first token's (the
//! time after an early response head: prefill, when the head is flushed first). The four parts
//! tile TTFT exactly when every boundary was seen; a boundary the kernel did not see leaves its
//! parts absent.

use crate::abi::{tcp_state, EventKind, SocketEvent};
use canary_core::KernelTiming;
use std::collections::{HashMap, HashSet};

/// Events kept per socket between two releases (one request, on HTTP/1.1): a stream has one
/// data event per segment read, and a response that never ends would grow its list without
/// end. Past it the socket's later events are dropped and that request's kernel figures left
/// out: computed from part of what happened, they would be wrong, not bounds.
pub const MAX_EVENTS_PER_SOCKET: usize = 65_536;

/// What the client measured of one request, on the monotonic clock (ns).
#[derive(Debug, Clone, Default)]
pub struct RequestSpan {
    /// The connection's socket cookie.
    pub cookie: u64,
    /// Request handed to the connection.
    pub sent_ns: u64,
    /// Response complete (or failed).
    pub end_ns: u64,
    /// canaryd saw the first token.
    pub first_token_ns: Option<u64>,
    /// canaryd saw each token-bearing chunk (the first included), in order.
    pub chunk_reads_ns: Vec<u64>,
    /// The request opened its connection (so the connect belongs to it).
    pub new_connection: bool,
    /// … and that connection speaks TLS: a TLS 1.3 server sends its session tickets once the
    /// handshake ends, so they arrive after the request, and the kernel cannot tell them from
    /// the response's first bytes (measured: server wait 0.2 ms, the rest of a 41 ms TTFT
    /// taken for the remainder). Such a request gets no server wait nor remainder.
    pub new_tls_connection: bool,
}

/// Events per socket cookie, in time order.
#[derive(Debug, Default)]
pub struct SocketLog {
    sockets: HashMap<u64, Vec<SocketEvent>>,
    /// Sockets that reached [`MAX_EVENTS_PER_SOCKET`] since their last release.
    full: HashSet<u64>,
    /// Events dropped at the cap.
    over_cap: u64,
    /// Stretches of time in which the kernel lost events (its ring buffer was full),
    /// oldest first: a request overlapping one may lack its own events, and another's
    /// would stand in for them, so it gets no kernel figures.
    losses: Vec<(u64, u64)>,
    /// Events pushed (kept or over the cap) per socket since [`SocketLog::take_counts`] last
    /// took them: the observer books them to the run that owns the socket.
    counts: HashMap<u64, (u64, u64)>,
}

/// Loss stretches kept at most (adjacent ones merge, so this is many separate losses).
const MAX_LOSSES: usize = 4096;

impl SocketLog {
    /// Adds one event.
    pub fn push(&mut self, e: SocketEvent) {
        let counts = self.counts.entry(e.cookie).or_default();
        let events = self.sockets.entry(e.cookie).or_default();
        if events.len() >= MAX_EVENTS_PER_SOCKET {
            self.full.insert(e.cookie);
            self.over_cap += 1;
            counts.1 += 1;
            return;
        }
        counts.0 += 1;
        // Events come from every CPU through one ring buffer, timestamped just before they
        // were queued, so they are nearly but not strictly in order.
        let at = events.partition_point(|x| x.ts_ns <= e.ts_ns);
        events.insert(at, e);
    }

    /// Sockets with events held.
    pub fn sockets(&self) -> usize {
        self.sockets.len()
    }

    /// Events dropped because their socket held `MAX_EVENTS_PER_SOCKET`.
    pub fn over_cap(&self) -> u64 {
        self.over_cap
    }

    /// Events pushed on `cookie` since the last call, as (kept, over the cap); zero after.
    pub fn take_counts(&mut self, cookie: u64) -> (u64, u64) {
        self.counts.remove(&cookie).unwrap_or_default()
    }

    /// Forgets a socket altogether (another run's), returning its uncollected counts.
    pub fn forget(&mut self, cookie: u64) -> (u64, u64) {
        self.sockets.remove(&cookie);
        self.full.remove(&cookie);
        self.take_counts(cookie)
    }

    /// The cookies of the sockets with events held.
    pub fn cookies(&self) -> Vec<u64> {
        self.sockets.keys().copied().collect()
    }

    /// Whether the kernel lost events while `span` was in flight: the request then gets no
    /// kernel figures ([`SocketLog::timing`]) for that reason.
    pub fn lost_in(&self, span: &RequestSpan) -> bool {
        self.losses
            .iter()
            .any(|&(from, to)| from <= span.end_ns && span.sent_ns <= to)
    }

    /// Forgets a socket's events up to `ns`, keeping the last one as the baseline its next
    /// request's byte and retransmit counts start from.
    pub fn release(&mut self, cookie: u64, ns: u64) {
        let since = self
            .sockets
            .get(&cookie)
            .and_then(|e| e.first())
            .map_or(0, |e| e.ts_ns);
        let lost = self
            .losses
            .iter()
            .any(|&(from, to)| from <= ns && since <= to);
        if self.full.remove(&cookie) || lost {
            // Events were dropped (past the cap, or lost by the kernel since the baseline):
            // the counters of the last one kept are no baseline for the next request, which
            // then has none (no byte or retransmit counts) rather than the lost one's too.
            self.sockets.remove(&cookie);
            return;
        }
        if let Some(events) = self.sockets.get_mut(&cookie) {
            let upto = events.partition_point(|x| x.ts_ns <= ns);
            if upto > 1 {
                events.drain(..upto - 1);
            }
        }
    }

    /// Notes that the kernel lost events between `from_ns` and `to_ns` (two drains).
    pub fn lost_between(&mut self, from_ns: u64, to_ns: u64) {
        if let Some(last) = self.losses.last_mut() {
            if from_ns <= last.1 {
                last.1 = last.1.max(to_ns);
                return;
            }
        }
        if self.losses.len() == MAX_LOSSES {
            self.losses.remove(0);
        }
        self.losses.push((from_ns, to_ns));
    }

    /// Forgets sockets whose newest event is older than `ns` (idle, or never joined);
    /// returns their cookies (their counts stay for [`SocketLog::take_counts`]).
    pub fn expire(&mut self, ns: u64) -> Vec<u64> {
        self.losses.retain(|&(_, to)| to >= ns);
        self.remove_where(|events| events.last().is_none_or(|e| e.ts_ns < ns))
    }

    /// Forgets closed sockets whose close is older than `ns`; returns their cookies.
    pub fn expire_closed(&mut self, ns: u64) -> Vec<u64> {
        self.remove_where(|events| {
            events
                .last()
                .is_some_and(|e| e.kind() == Some(EventKind::Close) && e.ts_ns < ns)
        })
    }

    fn remove_where(&mut self, gone: impl Fn(&[SocketEvent]) -> bool) -> Vec<u64> {
        let cookies: Vec<u64> = self
            .sockets
            .iter()
            .filter(|(_, events)| gone(events))
            .map(|(&c, _)| c)
            .collect();
        for c in &cookies {
            self.sockets.remove(c);
            self.full.remove(c);
        }
        cookies
    }

    /// The kernel's view of one request, `None` when the kernel saw nothing of it (a socket
    /// opened before tracing started, say).
    pub fn timing(&self, span: &RequestSpan) -> Option<KernelTiming> {
        if self.full.contains(&span.cookie) {
            return None;
        }
        if self.lost_in(span) {
            return None;
        }
        let events = self.sockets.get(&span.cookie)?;
        let is = |e: &SocketEvent, k: EventKind| e.kind() == Some(k);
        let start = events.partition_point(|e| e.ts_ns < span.sent_ns);
        let stop = events.partition_point(|e| e.ts_ns <= span.end_ns);
        let window = &events[start..stop];
        if window.is_empty() {
            return None;
        }
        // Counters are cumulative per socket: the request's share starts from the last event
        // before it (0 on a new connection). A reused connection without one (its earlier
        // events expired while it sat idle in the pool, or it was opened before tracing
        // began) has no baseline: its counts would be the socket's whole life, so none.
        let base = match events[..start].last() {
            Some(e) => Some((payload_received(events, e), e.total_retrans)),
            None if span.new_connection => Some((0, 0)),
            None => None,
        };
        let ms = |ns: u64| ns as f64 / 1e6;
        let mut t = KernelTiming::default();

        let sends: Vec<&SocketEvent> = window.iter().filter(|e| is(e, EventKind::Send)).collect();
        if !sends.is_empty() {
            t.bytes_sent = Some(sends.iter().map(|e| u64::from(e.bytes)).sum());
        }
        let data: Vec<&SocketEvent> = window.iter().filter(|e| is(e, EventKind::Data)).collect();
        if let (Some(last), Some((base_rx, _))) = (data.last(), base) {
            t.bytes_received = Some(payload_received(events, last).saturating_sub(base_rx));
        }
        if let Some(s) = sends.first() {
            t.first_send_ms = Some(ms(s.ts_ns.saturating_sub(span.sent_ns)));
        }
        if let Some(d) = data.last() {
            t.last_received_ms = Some(ms(d.ts_ns.saturating_sub(span.sent_ns)));
        }
        if let Some(c) = window.iter().find(|e| is(e, EventKind::Close)) {
            t.closed_ms = Some(ms(c.ts_ns.saturating_sub(span.sent_ns)));
        }
        // The last data event at or before a read: a binary search (`data` is in time
        // order), since a long stream has thousands of reads and of data events, and the
        // join holds the lock the ring buffer's drain needs.
        let arrival = |read: u64| {
            let n = data.partition_point(|d| d.ts_ns <= read);
            n.checked_sub(1).map(|i| data[i].ts_ns)
        };
        // Where the response began: its first bytes TCP received. Behind a new TLS
        // connection's session tickets that is unknown; the first token's bytes are the
        // response's, so the request was written before they came.
        let first_in = data.first().map(|d| d.ts_ns);
        let response_by = match span.new_tls_connection {
            false => first_in,
            true => span.first_token_ns.and_then(arrival),
        };
        // The request's last byte handed to TCP before the response began.
        let last_send = sends
            .iter()
            .rev()
            .find(|s| response_by.is_none_or(|d| s.ts_ns <= d));
        if let Some(s) = last_send {
            t.request_write_ms = Some(ms(s.ts_ns - span.sent_ns));
        }
        let first_in = first_in.filter(|_| !span.new_tls_connection);
        if let (Some(s), Some(d)) = (last_send, first_in) {
            t.server_wait_ms = Some(ms(d - s.ts_ns));
        }
        if let Some(ft) = span.first_token_ns {
            if let Some(a) = arrival(ft) {
                t.client_overhead_ms = Some(ms(ft - a));
                // TTFT minus the other three parts, computed in whole ns so that the parts
                // add up exactly.
                if let (Some(_), Some(d)) = (last_send, first_in) {
                    t.remainder_ms = Some(ms(a.saturating_sub(d)));
                }
            }
        }
        let mut delays: Vec<f64> = span
            .chunk_reads_ns
            .iter()
            .filter_map(|&r| arrival(r).map(|a| ms(r - a)))
            .collect();
        if !delays.is_empty() {
            delays.sort_by(f64::total_cmp);
            t.chunk_delay_p50_ms = Some(nearest_rank(&delays, 0.50));
            t.chunk_delay_p99_ms = Some(nearest_rank(&delays, 0.99));
        }
        if let (Some(last), Some((_, base_retrans))) = (window.last(), base) {
            t.retransmits = Some(last.total_retrans.saturating_sub(base_retrans));
        }
        t.srtt_us = window.iter().rev().map(|e| e.srtt_us).find(|&s| s > 0);
        if span.new_connection {
            let syn = events
                .iter()
                .find(|e| is(e, EventKind::State) && e.state == tcp_state::SYN_SENT);
            let est = events
                .iter()
                .find(|e| is(e, EventKind::State) && e.state == tcp_state::ESTABLISHED);
            if let (Some(s), Some(e)) = (syn, est) {
                if e.ts_ns >= s.ts_ns {
                    t.connect_ms = Some(ms(e.ts_ns - s.ts_ns));
                }
            }
        }
        Some(t)
    }
}

/// Payload bytes received by the time of `e`: TCP counts the peer's FIN as one byte, taken
/// out again once the socket's states show the FIN had arrived.
fn payload_received(events: &[SocketEvent], e: &SocketEvent) -> u64 {
    let fin = events.iter().any(|s| {
        s.ts_ns <= e.ts_ns
            && s.kind() == Some(EventKind::State)
            && tcp_state::after_peer_fin(s.state)
    });
    e.bytes_received.saturating_sub(u64::from(fin))
}

/// The nearest-rank percentile of sorted values.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: u64 = 42;

    fn ev(ts_ns: u64, kind: EventKind, state: u32, bytes: u32, rx: u64) -> SocketEvent {
        let mut e = SocketEvent::new(ts_ns, C, kind, state, bytes);
        e.bytes_received = rx;
        e.srtt_us = 30;
        e
    }

    /// A new connection, then one streamed response: head at 5 ms, tokens at 9, 10, 11 ms.
    fn one_request() -> SocketLog {
        let mut log = SocketLog::default();
        // Pushed out of order on purpose: the log sorts.
        for e in [
            ev(1_000_100, EventKind::Send, 0, 700, 0),
            ev(100, EventKind::State, tcp_state::SYN_SENT, 0, 0),
            ev(160, EventKind::State, tcp_state::ESTABLISHED, 0, 0),
            ev(5_000_000, EventKind::Data, 0, 0, 150),
            ev(9_000_000, EventKind::Data, 0, 0, 300),
            ev(10_000_000, EventKind::Data, 0, 0, 400),
            ev(11_000_000, EventKind::Data, 0, 0, 520),
        ] {
            log.push(e);
        }
        log
    }

    fn span() -> RequestSpan {
        RequestSpan {
            cookie: C,
            sent_ns: 1_000_000,
            end_ns: 11_050_000,
            first_token_ns: Some(9_020_000),
            chunk_reads_ns: vec![9_020_000, 10_010_000, 11_040_000],
            new_connection: true,
            new_tls_connection: false,
        }
    }

    /// The next request on [`one_request`]'s connection: sent at 20 ms, its token at 25 ms.
    fn reused_span() -> RequestSpan {
        RequestSpan {
            sent_ns: 20_000_000,
            end_ns: 26_000_000,
            first_token_ns: Some(25_000_500),
            chunk_reads_ns: vec![25_000_500],
            new_connection: false,
            ..span()
        }
    }

    #[test]
    fn a_new_tls_connections_first_request_has_no_server_wait_nor_remainder() {
        let tls = RequestSpan {
            new_tls_connection: true,
            ..span()
        };
        let t = one_request().timing(&tls).unwrap();
        assert_eq!((t.server_wait_ms, t.remainder_ms), (None, None), "{t:?}");
        // What does not depend on where the response began stays: the request was written
        // before the first token's bytes came, whatever came before them.
        let plain = one_request().timing(&span()).unwrap();
        assert_eq!(t.request_write_ms, plain.request_write_ms);
        assert_eq!(t.client_overhead_ms, plain.client_overhead_ms);
        assert_eq!(t.bytes_received, plain.bytes_received);
        assert!(plain.server_wait_ms.is_some() && plain.remainder_ms.is_some());

        // The tickets came while a large request was still being written (two sends around
        // them): its write ends at its last send before the first token's bytes.
        let mut log = SocketLog::default();
        for e in [
            ev(500_000, EventKind::State, tcp_state::SYN_SENT, 0, 0),
            ev(600_000, EventKind::State, tcp_state::ESTABLISHED, 0, 0),
            ev(1_000_000, EventKind::Send, 0, 4000, 0),
            ev(1_200_000, EventKind::Data, 0, 0, 200),
            ev(1_500_000, EventKind::Send, 0, 4000, 200),
            ev(5_000_000, EventKind::Data, 0, 0, 700),
        ] {
            log.push(e);
        }
        let t = log
            .timing(&RequestSpan {
                sent_ns: 1_000_000,
                end_ns: 6_000_000,
                first_token_ns: Some(5_010_000),
                chunk_reads_ns: vec![5_010_000],
                ..tls
            })
            .unwrap();
        assert!((t.request_write_ms.unwrap() - 0.5).abs() < 1e-9, "{t:?}");
        assert_eq!((t.server_wait_ms, t.remainder_ms), (None, None), "{t:?}");
        assert!((t.client_overhead_ms.unwrap() - 0.01).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn splits_ttft_into_parts_that_add_up() {
        let t = one_request().timing(&span()).unwrap();
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert!(close(t.request_write_ms, 0.0001), "{t:?}");
        assert!(close(t.server_wait_ms, 3.9999), "{t:?}");
        assert!(close(t.remainder_ms, 4.0), "{t:?}");
        assert!(close(t.client_overhead_ms, 0.02), "{t:?}");
        assert!(close(t.connect_ms, 0.00006), "{t:?}");
        let ttft = (9_020_000 - 1_000_000) as f64 / 1e6;
        let sum = t.request_write_ms.unwrap()
            + t.server_wait_ms.unwrap()
            + t.remainder_ms.unwrap()
            + t.client_overhead_ms.unwrap();
        assert!((sum - ttft).abs() < 1e-9);
        assert!(close(t.first_send_ms, 0.0001), "{t:?}");
        assert!(close(t.last_received_ms, 10.0), "{t:?}");
        assert_eq!(t.closed_ms, None, "the connection stayed open");
        assert_eq!(t.bytes_sent, Some(700));
        assert_eq!(t.bytes_received, Some(520));
        assert_eq!(t.srtt_us, Some(30));
        assert_eq!(t.retransmits, Some(0));
        // Chunk delays 20, 10 and 40 µs.
        assert!(close(t.chunk_delay_p50_ms, 0.02), "{t:?}");
        assert!(close(t.chunk_delay_p99_ms, 0.04), "{t:?}");
    }

    // The ring buffer overflowed while the request was in flight: the head's Data event may
    // be the lost one, and the next would pass for it (a server wait 4 ms too long).
    #[test]
    fn a_request_overlapping_lost_events_has_no_kernel_figures() {
        let mut after = one_request();
        after.lost_between(20_000_000, 30_000_000);
        assert!(after.timing(&span()).is_some(), "a loss after the request");
        let mut log = one_request();
        log.lost_between(4_000_000, 6_000_000);
        assert!(log.timing(&span()).is_none(), "a loss within it");
        // Adjacent stretches (one drain to the next) merge; expired ones go.
        log.lost_between(6_000_000, 7_000_000);
        log.lost_between(20_000_000, 30_000_000);
        assert_eq!(
            log.losses,
            [(4_000_000, 7_000_000), (20_000_000, 30_000_000)]
        );
        log.expire(8_000_000);
        assert_eq!(log.losses, [(20_000_000, 30_000_000)]);
        assert!(log.timing(&span()).is_some());
    }

    #[test]
    fn a_reused_connection_counts_from_the_previous_request_and_has_no_connect() {
        let mut log = one_request();
        log.release(C, 11_050_000);
        let mut retrans = ev(20_000_100, EventKind::Send, 0, 650, 520);
        retrans.total_retrans = 2;
        log.push(retrans);
        // Counters are cumulative: later events carry the retransmits too.
        let mut data = ev(25_000_000, EventKind::Data, 0, 0, 900);
        data.total_retrans = 2;
        log.push(data);
        let s = reused_span();
        let t = log.timing(&s).unwrap();
        assert_eq!(t.bytes_received, Some(380));
        assert_eq!(t.bytes_sent, Some(650));
        assert_eq!(t.retransmits, Some(2));
        assert_eq!(t.connect_ms, None);
        assert_eq!(t.remainder_ms, Some(0.0));
        // The same request after its connection's earlier events expired (it sat idle in
        // the pool past the log's keep): no baseline, so no counts, rather than the socket's
        // totals since it opened as this request's own.
        let mut log = SocketLog::default();
        log.push(retrans);
        log.push(data);
        let t = log.timing(&s).unwrap();
        assert_eq!((t.bytes_received, t.retransmits), (None, None), "{t:?}");
        assert_eq!(t.bytes_sent, Some(650), "what the window itself saw stays");
        assert_eq!(t.remainder_ms, Some(0.0));
    }

    // The kernel lost events while one request was in flight: it got no figures, and the next
    // on the connection must not count from a baseline before the loss (its bytes would
    // include the lost request's).
    #[test]
    fn after_a_loss_the_next_request_on_the_connection_has_no_baseline() {
        let mut log = one_request();
        log.lost_between(4_000_000, 6_000_000);
        assert!(log.timing(&span()).is_none());
        log.release(C, 11_050_000);
        log.push(ev(20_000_100, EventKind::Send, 0, 650, 520));
        log.push(ev(25_000_000, EventKind::Data, 0, 0, 900));
        let s = reused_span();
        let t = log.timing(&s).unwrap();
        assert_eq!((t.bytes_received, t.retransmits), (None, None), "{t:?}");
        assert_eq!(t.bytes_sent, Some(650));
    }

    #[test]
    fn nothing_seen_is_absent_not_zero() {
        let log = one_request();
        let elsewhere = RequestSpan {
            sent_ns: 50_000_000,
            end_ns: 60_000_000,
            ..span()
        };
        assert_eq!(log.timing(&elsewhere), None);
        let other_socket = RequestSpan {
            cookie: 7,
            ..span()
        };
        assert_eq!(log.timing(&other_socket), None);
        // A request that failed before any response byte: sends only.
        let mut log = SocketLog::default();
        log.push(ev(1_000_100, EventKind::Send, 0, 700, 0));
        let t = log.timing(&span()).unwrap();
        assert_eq!(t.server_wait_ms, None);
        assert_eq!(t.client_overhead_ms, None);
        assert_eq!(t.bytes_received, None);
        assert_eq!(t.bytes_sent, Some(700));
        assert_eq!(t.last_received_ms, None);
        // A server that closes mid-response: the close is part of the request.
        let mut log = one_request();
        log.push(ev(10_500_000, EventKind::Close, 0, 0, 400));
        let t = log.timing(&span()).unwrap();
        assert!((t.closed_ms.unwrap() - 9.5).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn a_socket_past_the_cap_keeps_no_more_and_its_request_has_no_kernel_figures() {
        let mut log = one_request();
        let held = log.sockets[&C].len();
        // A stream that never ends: data events far past the cap.
        for i in 0..(MAX_EVENTS_PER_SOCKET + 100) as u64 {
            log.push(ev(12_000_000 + i, EventKind::Data, 0, 0, 600 + i));
        }
        assert_eq!(log.sockets[&C].len(), MAX_EVENTS_PER_SOCKET);
        assert_eq!(log.over_cap(), (held + 100) as u64);
        let long = RequestSpan {
            end_ns: u64::MAX,
            ..span()
        };
        assert_eq!(
            log.timing(&long),
            None,
            "partial events would give wrong figures"
        );
        // Released, the socket starts again, without a baseline for its next request.
        log.release(C, u64::MAX);
        assert_eq!(log.sockets(), 0);
        let mut data = ev(99_000_000_000, EventKind::Data, 0, 0, 70_000);
        data.total_retrans = 1;
        log.push(data);
        let next = RequestSpan {
            sent_ns: 98_000_000_000,
            end_ns: 99_500_000_000,
            first_token_ns: None,
            chunk_reads_ns: vec![],
            new_connection: false,
            ..span()
        };
        let t = log.timing(&next).unwrap();
        assert_eq!((t.bytes_received, t.retransmits), (None, None), "{t:?}");
    }

    #[test]
    fn release_and_expire_bound_memory() {
        let mut log = one_request();
        log.release(C, 11_050_000);
        assert_eq!(log.sockets[&C].len(), 1);
        log.expire_closed(20_000_000);
        assert_eq!(log.sockets(), 1, "not closed");
        log.push(ev(12_000_000, EventKind::Close, 0, 0, 520));
        log.expire_closed(11_000_000);
        assert_eq!(log.sockets(), 1, "closed too recently");
        log.expire_closed(12_000_001);
        assert_eq!(log.sockets(), 0);
        let mut log = one_request();
        log.expire(11_000_001);
        assert_eq!(log.sockets(), 0);
    }
}
