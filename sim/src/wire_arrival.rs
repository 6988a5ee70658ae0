//! When a request's bytes reached the sim's socket: the kernel's receive stamp of its first
//! byte (`TruthRecord::arrival_kernel_ns`), beside `arrival_ns`, when the sim's task had read
//! and parsed its head.
//!
//! The two answer different questions. `arrival_ns` is the server's view: it includes the sim's
//! own scheduling delay (a connection task waiting for a core), which at high rates on a busy
//! host is milliseconds. The kernel stamp is the wire's view: on loopback the kernel stamps a
//! segment when it enters the receive path, inside the client's `write`, so kernel arrival −
//! scheduled time is the client's dispatch precision alone.
//!
//! Design:
//! - **One setsockopt for all connections.** `SO_TIMESTAMPING` is set on the listener; accepted
//!   sockets inherit it. Every read of a connection is then one `recvmsg` (instead of one
//!   `read`) that returns the stamp with the data: no syscall more per request or connection.
//! - **Which read brought the first byte.** A stamp belongs to a read, and a read can hold the
//!   end of one request and the start of the next (pipelining, or a request sent before the
//!   previous response ended). [`ReadStamps`] remembers, per connection, the stream offset each
//!   unconsumed read ends at, so the first byte of a request is matched to the read that
//!   brought it. Bounded: past [`KEPT_READS`] reads the newest are merged into one entry,
//!   which keeps the later stamp (still an upper bound for every byte in it).
//! - **What the stamp means.** The kernel gives the stamp of the *last* segment a read
//!   consumed (and moves a segment's stamp to the latest when it merges later ones into it).
//!   So the stamp is never earlier than the first byte's arrival: it is that arrival exactly
//!   when the first byte's segment was the last one the read took, and otherwise an upper
//!   bound, later by how long the rest of what that read took was in coming (for a request
//!   written in one `write` on loopback, microseconds).
//! - **Clock conversion.** Kernel software stamps are `CLOCK_REALTIME`; truth times are
//!   `CLOCK_MONOTONIC`. [`KernelClock`] converts with a [`RealtimeMap`] (the tightest of four
//!   monotonic brackets around a realtime reading), re-measured when it is over
//!   [`REMEASURE_AFTER`] old, checked as a request's head is parsed, so it costs no clock read
//!   per request. Error: at most the map's uncertainty (half the bracket, tens of ns with a
//!   vDSO clock; logged at start), unless `CLOCK_REALTIME` was stepped since the map was
//!   measured. A step is seen at the next re-measure (and logged once); a forward step also
//!   shows as a stamp after the read, which triggers a re-measure at once, and a stamp still
//!   after the read beyond the uncertainty is dropped (`None`), never recorded late.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use canary_core::{MonoTime, RealtimeMap};
use tokio::net::TcpListener;

/// Unconsumed reads remembered per connection before the newest are merged.
pub(crate) const KEPT_READS: usize = 8;

/// Age after which the realtime→monotonic map is measured again.
pub(crate) const REMEASURE_AFTER: Duration = Duration::from_secs(1);

/// Longest wait at start for the kernel to begin stamping.
const STAMPING_WAIT: Duration = Duration::from_secs(1);

/// Turns stamps on for `listener`'s connections; an error means the kernel refused.
pub(crate) type Enable = fn(&TcpListener) -> io::Result<()>;

/// The stamps for the whole server: whether the kernel gives them, and the clock map.
#[derive(Debug)]
pub(crate) struct KernelClock {
    /// Why the kernel refused stamps; `None`: they are on.
    refused: Option<String>,
    /// The map and when it was measured.
    map: Mutex<(RealtimeMap, MonoTime)>,
    /// A stamp after its read was dropped (said once).
    dropped_late: AtomicBool,
}

impl KernelClock {
    /// Asks for stamps on `listener` (with `enable`) and waits until the kernel gives them
    /// (see `canary_rxstamp::wait_until_stamped`; normally well under a millisecond); says
    /// once, here, if the kernel refused.
    pub async fn enable(listener: &TcpListener, enable: Enable) -> KernelClock {
        let refused = match enable(listener) {
            Ok(()) => {
                match canary_rxstamp::wait_until_stamped(STAMPING_WAIT).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(
                        "canary-sim: the kernel did not stamp received packets within {} ms of \
                         turning receive timestamps on; requests until it does have no \
                         arrival_kernel_ns",
                        STAMPING_WAIT.as_millis()
                    ),
                    Err(e) => tracing::warn!(
                        "canary-sim: could not check that the kernel stamps received packets \
                         ({e}); the first requests may have no arrival_kernel_ns"
                    ),
                }
                None
            }
            Err(e) => {
                let why = format!("setsockopt(SO_TIMESTAMPING): {e}");
                tracing::warn!(
                    "canary-sim: kernel receive timestamps off, the kernel refused them \
                     ({why}): truth records have no arrival_kernel_ns"
                );
                Some(why)
            }
        };
        let map = RealtimeMap::measure();
        if refused.is_none() {
            tracing::info!(
                "canary-sim: kernel receive timestamps on; arrival_kernel_ns converted from \
                 CLOCK_REALTIME within ±{} ns (re-measured every {} s)",
                map.uncertainty_ns,
                REMEASURE_AFTER.as_secs()
            );
        }
        KernelClock {
            refused,
            map: Mutex::new((map, MonoTime::now())),
            dropped_late: AtomicBool::new(false),
        }
    }

    /// Whether connections read with stamps.
    pub fn on(&self) -> bool {
        self.refused.is_none()
    }

    /// The kernel's `realtime_ns` stamp on the monotonic clock, for bytes the sim had read by
    /// `read_by`; `None` when it cannot be placed before that (see the module docs).
    pub fn to_mono(&self, realtime_ns: u64, read_by: MonoTime) -> Option<u64> {
        let mut g = self.map.lock().expect("kernel clock lock");
        if read_by.since(g.1) > REMEASURE_AFTER {
            remeasure(&mut g);
        }
        let mut t = g.0.to_mono(realtime_ns);
        if t > read_by {
            // Stamped after it was read: the realtime clock moved since the map was measured.
            remeasure(&mut g);
            t = g.0.to_mono(realtime_ns);
        }
        if t > read_by {
            if t.since(read_by).as_nanos() as u64 > g.0.uncertainty_ns {
                if !self.dropped_late.swap(true, Relaxed) {
                    tracing::warn!(
                        "canary-sim: a kernel receive stamp fell {} ns after its read (realtime \
                         clock stepped?); such stamps are left out of the truth",
                        t.since(read_by).as_nanos()
                    );
                }
                return None;
            }
            // Within the conversion's error: the read's time is the better estimate.
            t = read_by;
        }
        Some(t.as_nanos())
    }
}

fn remeasure(g: &mut (RealtimeMap, MonoTime)) {
    let fresh = RealtimeMap::measure();
    let step = fresh.step_since(&g.0);
    if step > 0 {
        tracing::warn!(
            "canary-sim: CLOCK_REALTIME stepped by about {step} ns; arrival_kernel_ns of \
             requests stamped just before this may be off by up to that"
        );
    }
    *g = (fresh, MonoTime::now());
}

/// Which read brought which bytes of one connection, for the reads not yet consumed.
#[derive(Debug, Default)]
pub(crate) struct ReadStamps {
    /// Bytes read so far on the connection.
    received: u64,
    /// Per read: the stream offset it ended at, and its stamp (`CLOCK_REALTIME` ns).
    reads: VecDeque<(u64, Option<u64>)>,
}

impl ReadStamps {
    /// Stream offset of the next byte to be read.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// A read of `n` bytes stamped `stamp`, made while `unconsumed` bytes read earlier were
    /// still buffered.
    pub fn note(&mut self, unconsumed: usize, n: usize, stamp: Option<u64>) {
        let consumed = self.received - unconsumed as u64;
        while self.reads.front().is_some_and(|&(end, _)| end <= consumed) {
            self.reads.pop_front();
        }
        if n == 0 {
            return;
        }
        self.received += n as u64;
        if self.reads.len() >= KEPT_READS {
            // Merge into the newest: its range grows, its stamp is the later one (an upper
            // bound for every byte in the range).
            *self.reads.back_mut().expect("full") = (self.received, stamp);
        } else {
            self.reads.push_back((self.received, stamp));
        }
    }

    /// The stamp of the read that brought the byte at stream `offset`, if it is remembered.
    pub fn at(&self, offset: u64) -> Option<u64> {
        self.reads
            .iter()
            .find(|&&(end, _)| end > offset)
            .and_then(|&(_, stamp)| stamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_is_matched_to_the_read_that_brought_it() {
        let mut s = ReadStamps::default();
        s.note(0, 10, Some(100)); // bytes 0..10
        s.note(10, 5, Some(200)); // 10..15, nothing consumed yet
        assert_eq!(
            (s.at(0), s.at(9), s.at(10), s.at(14)),
            (Some(100), Some(100), Some(200), Some(200))
        );
        assert_eq!(s.at(15), None, "not read yet");
        // 12 consumed (3 left), then a read: the first read is forgotten, the second kept.
        s.note(3, 4, None);
        assert_eq!(s.reads.len(), 2);
        assert_eq!((s.at(12), s.at(15)), (Some(200), None));
        assert_eq!(s.received(), 19);
    }

    #[test]
    fn past_the_bound_the_newest_reads_merge_with_the_later_stamp() {
        let mut s = ReadStamps::default();
        for i in 0..(KEPT_READS as u64 + 3) {
            s.note(i as usize, 1, Some(1000 + i));
        }
        assert_eq!(s.reads.len(), KEPT_READS);
        // The oldest keep their own stamps; the merged tail has the latest.
        assert_eq!(s.at(0), Some(1000));
        assert_eq!(
            s.at(KEPT_READS as u64 - 1),
            Some(1000 + KEPT_READS as u64 + 2)
        );
    }

    #[test]
    fn a_stamp_is_never_placed_after_its_read() {
        let clock = KernelClock {
            refused: None,
            map: Mutex::new((RealtimeMap::measure(), MonoTime::now())),
            dropped_late: AtomicBool::new(false),
        };
        let map = RealtimeMap::measure();
        let read_by = MonoTime::now();
        let realtime = |t: MonoTime| (t.0 as i64 + map.offset_ns) as u64;
        // A stamp 1 ms before the read lands within the map's error of 1 ms before it.
        let early = read_by - Duration::from_millis(1);
        let got = clock.to_mono(realtime(early), read_by).unwrap();
        assert!(
            got.abs_diff(early.0) <= 2 * map.uncertainty_ns + 1_000,
            "{got} vs {early:?}"
        );
        // One a second after the read (a stepped clock) is dropped, not recorded late.
        let late = read_by + Duration::from_secs(1);
        assert_eq!(clock.to_mono(realtime(late), read_by), None);
    }
}
