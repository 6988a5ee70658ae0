//! How far this host's wall clock can be trusted: the kernel's own view of its
//! synchronization (`adjtimex`), and `summary.json`'s `clock` block, which states it with the
//! run's wall-to-monotonic mapping. Shards on several hosts share a start only as well as
//! their wall clocks agree; this is what each says about its own.

use super::{MonoTime, RealtimeMap};
use serde::{Deserialize, Serialize};

/// The kernel's view of `CLOCK_REALTIME`'s synchronization, read with `adjtimex` (modes 0:
/// a read, no privilege needed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSync {
    /// Whether the kernel considers the clock synchronized: `STA_UNSYNC` clear and the state
    /// not `TIME_ERROR`. An NTP or PTP daemon clears `STA_UNSYNC` once it disciplines the
    /// clock; a host with none stays unsynchronized.
    pub synchronized: bool,
    /// The clock state `adjtimex` returned: `ok`, `insert_leap`, `delete_leap`,
    /// `leap_in_progress`, `leap_done`, `error` (or `unknown(N)`).
    pub state: String,
    /// The `STA_UNSYNC` status flag.
    pub unsync_flag: bool,
    /// Maximum error the kernel allows the clock, in µs (a bound, set by the sync daemon and
    /// growing while it is silent; 16 s when unsynchronized).
    pub maxerror_us: i64,
    /// Estimated error, in µs (an estimate, set by the sync daemon).
    pub esterror_us: i64,
}

impl KernelSync {
    /// Reads the kernel's view now.
    pub fn read() -> std::io::Result<KernelSync> {
        // SAFETY: an all-zero `timex` is a valid argument; modes 0 only reads.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        tx.modes = 0;
        // SAFETY: `tx` is a valid, writable `timex`.
        let state = unsafe { libc::adjtimex(&mut tx) };
        if state < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(KernelSync::from_raw(
            state,
            tx.status,
            tx.maxerror as i64,
            tx.esterror as i64,
        ))
    }

    /// The view from `adjtimex`'s return value and fields.
    pub fn from_raw(state: i32, status: i32, maxerror_us: i64, esterror_us: i64) -> KernelSync {
        let unsync_flag = status & libc::STA_UNSYNC != 0;
        let state_name = match state {
            libc::TIME_OK => "ok".to_string(),
            libc::TIME_INS => "insert_leap".to_string(),
            libc::TIME_DEL => "delete_leap".to_string(),
            libc::TIME_OOP => "leap_in_progress".to_string(),
            libc::TIME_WAIT => "leap_done".to_string(),
            libc::TIME_ERROR => "error".to_string(),
            n => format!("unknown({n})"),
        };
        KernelSync {
            synchronized: !unsync_flag && state != libc::TIME_ERROR,
            state: state_name,
            unsync_flag,
            maxerror_us,
            esterror_us,
        }
    }
}

/// `summary.json`'s `clock` block: how the run tied wall-clock time to its monotonic clock,
/// and how far that wall clock can be trusted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockReport {
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC` in ns, measured once when the run mapped its start.
    pub realtime_minus_monotonic_ns: i64,
    /// How far that mapping may be off, in ns (a bound: half the tightest monotonic bracket
    /// around a realtime reading). It does not include the wall clock's own error.
    pub mapping_uncertainty_ns: u64,
    /// When the mapping was taken, on CLOCK_MONOTONIC (ns).
    pub mapped_at_monotonic_ns: u64,
    /// The kernel's view of the wall clock's synchronization; absent when `adjtimex` failed
    /// (then `kernel_unavailable` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelSync>,
    /// Why `kernel` is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_unavailable: Option<String>,
    /// Set when the wall clock is not known to be synchronized: instants given in wall-clock
    /// time (`--start-at`) and wall-clock labels may be off by any amount.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The common start the run was given, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<StartReport>,
    /// How the thread releasing requests at their deadlines ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<super::ReleaseReport>,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`): runs that show the same one
    /// share one CLOCK_MONOTONIC (processes and containers on one host), so `canaryd merge`
    /// aligns them on it exactly, without the wall clock's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

/// A run started at a wall-clock instant shared with other shards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartReport {
    /// The instant as given (RFC 3339).
    pub requested: String,
    /// The same, in Unix ns.
    pub unix_ns: i64,
    /// Where it fell on this host's CLOCK_MONOTONIC: the run's t0.
    pub monotonic_ns: u64,
    /// How long before the instant the mapping was taken, in ms (negative: after it).
    pub lead_ms: f64,
    /// How late the measured phase began after the instant, in ms (0: on time). Requests due
    /// before then left at once, their lateness in their `schedule_lag_ms`.
    pub late_by_ms: f64,
    /// The lateness allowed (`--max-late-start`), in ms.
    pub max_late_ms: f64,
}

impl ClockReport {
    /// The report of `map`, taken at `at`, with the kernel's view read now.
    pub fn new(map: &RealtimeMap, at: MonoTime) -> ClockReport {
        let (kernel, kernel_unavailable) = match KernelSync::read() {
            Ok(k) => (Some(k), None),
            Err(e) => (None, Some(format!("adjtimex failed: {e}"))),
        };
        let warning = match &kernel {
            Some(k) if k.synchronized => None,
            Some(k) => Some(format!(
                "the wall clock is not synchronized (adjtimex: state {}, STA_UNSYNC {}, \
                 maxerror {} µs): wall-clock instants such as --start-at, and cross-host \
                 comparisons, may be off by any amount",
                k.state, k.unsync_flag, k.maxerror_us
            )),
            None => Some(
                "the wall clock's synchronization is unknown (adjtimex unavailable): \
                 wall-clock instants and cross-host comparisons may be off by any amount"
                    .to_string(),
            ),
        };
        ClockReport {
            realtime_minus_monotonic_ns: map.offset_ns,
            mapping_uncertainty_ns: map.uncertainty_ns,
            mapped_at_monotonic_ns: at.as_nanos(),
            kernel,
            kernel_unavailable,
            warning,
            start_at: None,
            release: None,
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|id| id.trim().to_string())
                .filter(|id| !id.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_view_reads_without_privilege() {
        let k = KernelSync::read().expect("adjtimex with modes 0 needs no privilege");
        assert!(k.maxerror_us >= 0 && k.esterror_us >= 0, "{k:?}");
        assert!(!k.state.starts_with("unknown"), "{k:?}");
    }

    #[test]
    fn unsync_flag_or_error_state_means_unsynchronized() {
        let synced = KernelSync::from_raw(libc::TIME_OK, 0x2001, 1_000, 10);
        assert!(synced.synchronized && !synced.unsync_flag);
        assert_eq!(synced.state, "ok");
        let unsync = KernelSync::from_raw(libc::TIME_OK, libc::STA_UNSYNC, 16_000_000, 0);
        assert!(!unsync.synchronized && unsync.unsync_flag);
        let error = KernelSync::from_raw(libc::TIME_ERROR, 0, 1_000, 10);
        assert!(!error.synchronized);
        assert_eq!(error.state, "error");
    }

    #[test]
    fn an_unsynchronized_clock_is_said_in_the_report() {
        let map = RealtimeMap::measure();
        let r = ClockReport::new(&map, MonoTime::now());
        assert_eq!(r.realtime_minus_monotonic_ns, map.offset_ns);
        match &r.kernel {
            Some(k) => assert_eq!(r.warning.is_some(), !k.synchronized, "{r:?}"),
            None => assert!(r.warning.is_some() && r.kernel_unavailable.is_some()),
        }
    }
}
