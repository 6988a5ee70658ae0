//! One exchange's response events timed by the kernel's receive stamps.
//!
//! Each event (the response head, an SSE event, a non-streaming body) is timed when canaryd's
//! code sees it, by the stamp of the socket's latest read: the read that carried the event's
//! last byte, or a later one, so the stamp is never early. It is exact when nothing of the
//! response came after the event in that read; when more did (several events in one read, or
//! the start of the next), the stamp is the last segment's and only an upper bound. Which of
//! the two is known when the next body bytes reach the exchange: they came in the same read
//! or a later one. A read that filled its buffer may have left bytes behind, merged into its
//! last segment with the latest arrival's stamp: its events are bounds too.

use super::{LastRead, RxLog};
use canary_core::{MonoTime, RealtimeMap, RxSource, RxTiming, UserspaceTimes};
use std::sync::Arc;

/// When one response event happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// The kernel's receive time where the socket gave one, else canaryd's read.
    pub at: MonoTime,
    /// When canaryd's code saw it.
    pub read: MonoTime,
}

impl Stamp {
    /// An event only canaryd's read timed.
    pub fn read(t: MonoTime) -> Stamp {
        Stamp { at: t, read: t }
    }
}

/// What an event is to the record: which of its labelled times it sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Role {
    pub head: bool,
    pub token: bool,
    pub first_token: bool,
    pub end: bool,
}

/// Read delays kept per request for the median; the largest is exact over all.
const KEPT_DELAYS: usize = 4096;

/// Times one exchange's events; see the module docs.
#[derive(Debug)]
pub(crate) struct RxTimer {
    log: Option<Arc<RxLog>>,
    map: RealtimeMap,
    sent: MonoTime,
    /// The latest kernel time given: a later event never gets an earlier one.
    latest: Option<MonoTime>,
    /// The last event labelled exact, and its read: bound if more body bytes share that read.
    pending: Option<(u64, Role)>,
    head: Option<RxSource>,
    first_token: Option<RxSource>,
    end: Option<RxSource>,
    events: u32,
    stamped: u32,
    token_events: u32,
    token_bound: u32,
    delays_ms: Vec<f64>,
    delay_max_ms: Option<f64>,
}

impl RxTimer {
    /// Starts timing an exchange on a connection whose reads note their stamps in `log`
    /// (`None`: receive timestamps are off for it, every time is a read). The clock mapping
    /// is measured now, before the request goes out; [`RxTimer::sent`] says when it did.
    pub fn start(log: Option<Arc<RxLog>>) -> RxTimer {
        RxTimer {
            map: match log {
                Some(_) => RealtimeMap::measure(),
                None => RealtimeMap {
                    offset_ns: 0,
                    uncertainty_ns: 0,
                },
            },
            log,
            sent: MonoTime::default(),
            latest: None,
            pending: None,
            head: None,
            first_token: None,
            end: None,
            events: 0,
            stamped: 0,
            token_events: 0,
            token_bound: 0,
            delays_ms: Vec::new(),
            delay_max_ms: None,
        }
    }

    /// The request was handed to the connection at `t`: no response byte came before.
    pub fn sent(&mut self, t: MonoTime) {
        self.sent = t;
    }

    /// Response bytes reached the exchange (a head, a body frame): the socket's latest read,
    /// which carried them or came after. The last event labelled exact becomes a bound if
    /// these bytes came in its read.
    pub fn bytes(&mut self) -> LastRead {
        let Some(log) = &self.log else {
            return LastRead::default();
        };
        let last = log.last();
        if let Some((seq, role)) = self.pending.take() {
            if seq == last.seq {
                self.relabel(role, RxSource::KernelBound);
            }
        }
        last
    }

    /// An event seen at `read`, whose bytes came in `last` (from [`RxTimer::bytes`]);
    /// `more_after`: bytes after it came in the same piece, so its stamp can only be a bound.
    pub fn event(&mut self, last: LastRead, read: MonoTime, role: Role, more_after: bool) -> Stamp {
        // Saturating: a record's count, not worth a panic on a stream past 4 G events.
        self.events = self.events.saturating_add(1);
        self.token_events = self.token_events.saturating_add(u32::from(role.token));
        let kernel = self.kernel_time(last, read);
        let source = match kernel {
            None => RxSource::Userspace,
            Some(_) if more_after || last.filled => RxSource::KernelBound,
            Some(_) => RxSource::Kernel,
        };
        if let Some(k) = kernel {
            self.stamped = self.stamped.saturating_add(1);
            let delay = read.since(k).as_secs_f64() * 1e3;
            if self.delays_ms.len() < KEPT_DELAYS {
                self.delays_ms.push(delay);
            }
            self.delay_max_ms = Some(self.delay_max_ms.map_or(delay, |m| m.max(delay)));
        }
        self.relabel(role, source);
        self.pending = (source == RxSource::Kernel).then_some((last.seq, role));
        Stamp {
            at: kernel.unwrap_or(read),
            read,
        }
    }

    /// The stamp of `last` on the monotonic clock, if it has one that makes sense: not after
    /// the read that returned it, nor before the request was sent (each beyond the mapping's
    /// uncertainty; within it, the stamp is moved to the nearer limit), and not before an
    /// earlier event's.
    fn kernel_time(&mut self, last: LastRead, read: MonoTime) -> Option<MonoTime> {
        self.log.as_ref()?;
        let k = self.map.to_mono(last.realtime_ns?);
        let u = self.map.uncertainty_ns as i64;
        if k.signed_nanos_since(read) > u || self.sent.signed_nanos_since(k) > u {
            return None;
        }
        let k = k
            .min(read)
            .max(self.sent)
            .max(self.latest.unwrap_or_default());
        self.latest = Some(k);
        Some(k)
    }

    /// Sets the labels `role` carries to `source`, counting a token that is only bounded.
    fn relabel(&mut self, role: Role, source: RxSource) {
        if role.token && source != RxSource::Kernel {
            self.token_bound = self.token_bound.saturating_add(1);
        }
        for (is, label) in [
            (role.head, &mut self.head),
            (role.first_token, &mut self.first_token),
            (role.end, &mut self.end),
        ] {
            if is {
                *label = Some(source);
            }
        }
    }

    /// What the record says of its times, with canaryd's reads beside them; `None` when the
    /// connection had receive timestamps off.
    pub fn finish(mut self, userspace: UserspaceTimes) -> Option<RxTiming> {
        self.log.as_ref()?;
        // The realtime clock may have been stepped meanwhile: then the mapping is off by the
        // step, and says so.
        let now = RealtimeMap::measure();
        let uncertainty_ns =
            self.map.uncertainty_ns.max(now.uncertainty_ns) + now.step_since(&self.map);
        self.delays_ms.sort_by(f64::total_cmp);
        let p50 = (!self.delays_ms.is_empty()).then(|| {
            // Nearest rank.
            let rank = (self.delays_ms.len() as f64 * 0.5).ceil() as usize;
            self.delays_ms[rank.max(1) - 1]
        });
        Some(RxTiming {
            head: self.head,
            first_token: self.first_token,
            end: self.end,
            events: self.events,
            stamped_events: self.stamped,
            token_events: self.token_events,
            token_events_bound: self.token_bound,
            clock_map_uncertainty_us: uncertainty_ns as f64 / 1e3,
            read_delay_p50_ms: p50,
            read_delay_max_ms: self.delay_max_ms,
            userspace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const TOKEN: Role = Role {
        head: false,
        token: true,
        first_token: false,
        end: false,
    };

    /// A timer on a log, and a way to stamp a read at a monotonic time.
    fn timer(sent: MonoTime) -> (RxTimer, Arc<RxLog>) {
        let log = Arc::new(RxLog::default());
        let mut t = RxTimer::start(Some(log.clone()));
        t.sent(sent);
        (t, log)
    }

    fn realtime(t: &RxTimer, at: MonoTime) -> u64 {
        (at.0 as i64 + t.map.offset_ns) as u64
    }

    /// The next piece of the response reached the exchange, completing one event.
    fn next(t: &mut RxTimer, read: MonoTime, role: Role, more_after: bool) -> Stamp {
        let last = t.bytes();
        t.event(last, read, role, more_after)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn one_event_per_read_gets_its_segments_time_exactly() {
        let sent = MonoTime::now();
        let (mut t, log) = timer(sent);
        let head = Role {
            head: true,
            ..Role::default()
        };
        log.note(Some(realtime(&t, sent + ms(2))), false);
        let s = next(&mut t, sent + ms(5), head, false);
        assert_eq!(
            s,
            Stamp {
                at: sent + ms(2),
                read: sent + ms(5)
            }
        );
        log.note(Some(realtime(&t, sent + ms(10))), false);
        let first = Role {
            first_token: true,
            ..TOKEN
        };
        let s = next(
            &mut t,
            sent + ms(10) + Duration::from_micros(300),
            first,
            false,
        );
        assert_eq!(s.at, sent + ms(10));
        let rx = t.finish(UserspaceTimes::default()).unwrap();
        assert_eq!(rx.head, Some(RxSource::Kernel));
        assert_eq!(rx.first_token, Some(RxSource::Kernel));
        assert_eq!((rx.events, rx.stamped_events), (2, 2));
        assert_eq!((rx.token_events, rx.token_events_bound), (1, 0));
        assert_eq!(rx.read_delay_max_ms, Some(3.0));
        assert!((rx.read_delay_p50_ms.unwrap() - 0.3).abs() < 1e-9, "{rx:?}");
        assert!(rx.clock_map_uncertainty_us < 1_000.0, "{rx:?}");
    }

    #[test]
    fn events_sharing_a_read_with_later_bytes_are_bounds() {
        let sent = MonoTime::now();
        let (mut t, log) = timer(sent);
        // Two events in one piece: the first is followed by the second.
        log.note(Some(realtime(&t, sent + ms(3))), false);
        let last = t.bytes();
        let first = Role {
            first_token: true,
            ..TOKEN
        };
        let a = t.event(last, sent + ms(4), first, true);
        let b = t.event(last, sent + ms(4), TOKEN, false);
        assert_eq!((a.at, b.at), (sent + ms(3), sent + ms(3)));
        // More bytes of that same read reach the exchange: the second is a bound too.
        t.bytes();
        // The next read's event, then a later read: exact.
        log.note(Some(realtime(&t, sent + ms(6))), false);
        let c = next(&mut t, sent + ms(7), TOKEN, false);
        log.note(Some(realtime(&t, sent + ms(8))), false);
        t.bytes();
        assert_eq!(c.at, sent + ms(6));
        let rx = t.finish(UserspaceTimes::default()).unwrap();
        assert_eq!(rx.first_token, Some(RxSource::KernelBound));
        assert_eq!((rx.token_events, rx.token_events_bound), (3, 2));
    }

    #[test]
    fn a_read_without_a_stamp_or_with_an_impossible_one_is_timed_by_the_read() {
        let sent = MonoTime::now();
        let (mut t, log) = timer(sent);
        let first = Role {
            first_token: true,
            ..TOKEN
        };
        log.note(None, false);
        let a = next(&mut t, sent + ms(1), first, false);
        assert_eq!(a, Stamp::read(sent + ms(1)));
        // Stamped after the read that returned it, or before the request went out: the
        // realtime clock was stepped in between.
        log.note(Some(realtime(&t, sent + ms(50))), false);
        let b = next(&mut t, sent + ms(2), TOKEN, false);
        log.note(Some(realtime(&t, sent - ms(50))), false);
        let c = next(&mut t, sent + ms(3), TOKEN, false);
        assert_eq!((b.at, c.at), (sent + ms(2), sent + ms(3)));
        let rx = t.finish(UserspaceTimes::default()).unwrap();
        assert_eq!(rx.first_token, Some(RxSource::Userspace));
        assert_eq!((rx.stamped_events, rx.token_events_bound), (0, 3));
        assert_eq!(rx.read_delay_max_ms, None);
    }

    #[test]
    fn an_event_ending_a_read_that_filled_its_buffer_is_a_bound() {
        let sent = MonoTime::now();
        let (mut t, log) = timer(sent);
        let first = Role {
            first_token: true,
            ..TOKEN
        };
        // The socket may have held more than the buffer took, later segments merged into
        // the one that completed this event.
        log.note(Some(realtime(&t, sent + ms(3))), true);
        let a = next(&mut t, sent + ms(4), first, false);
        assert_eq!(a.at, sent + ms(3));
        log.note(Some(realtime(&t, sent + ms(5))), false);
        next(&mut t, sent + ms(6), TOKEN, false);
        let rx = t.finish(UserspaceTimes::default()).unwrap();
        assert_eq!(rx.first_token, Some(RxSource::KernelBound));
        assert_eq!((rx.token_events, rx.token_events_bound), (2, 1));
    }

    #[test]
    fn kernel_times_never_go_backwards() {
        let sent = MonoTime::now();
        let (mut t, log) = timer(sent);
        log.note(Some(realtime(&t, sent + ms(5))), false);
        let a = next(&mut t, sent + ms(6), TOKEN, false);
        // Reordered segments: a later read's last segment arrived earlier.
        log.note(Some(realtime(&t, sent + ms(4))), false);
        let b = next(&mut t, sent + ms(7), TOKEN, false);
        assert_eq!((a.at, b.at), (sent + ms(5), sent + ms(5)));
    }

    #[test]
    fn without_a_log_every_time_is_the_read_and_no_record_section() {
        let sent = MonoTime::now();
        let mut t = RxTimer::start(None);
        t.sent(sent);
        let s = next(&mut t, sent + ms(1), TOKEN, false);
        assert_eq!(s, Stamp::read(sent + ms(1)));
        assert_eq!(t.finish(UserspaceTimes::default()), None);
    }
}
