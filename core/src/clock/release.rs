//! `summary.json`'s `clock.release` block: how the thread that releases requests at their
//! deadlines was scheduled, and what its timer wake-ups cost on this host.

use serde::{Deserialize, Serialize};

/// How the release thread ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleaseReport {
    /// The thread's scheduling: `SCHED_FIFO` (real-time priority, preempts ordinary threads
    /// at once) or `SCHED_OTHER`.
    pub scheduling: String,
    /// Its real-time priority (absent when ordinary): 2, one above real-time workers, or 1
    /// where the process may have only that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Why real-time priority was not had (absent when it was): the release thread then waits
    /// behind ordinary threads for a core, which shows in schedule lag on a busy host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub realtime_unavailable: Option<String>,
    /// Timer wake-ups before a deadline (exact count).
    pub timer_wakeups: u64,
    /// How late the timer woke the thread past the instant asked, p50 over the last 64
    /// wake-ups (µs, exact over those; absent before any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake_error_p50_us: Option<f64>,
    /// The same, p95: what the spin margin is set from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake_error_p95_us: Option<f64>,
    /// How early the thread last asked to be woken before a deadline (µs): it spins the rest.
    pub spin_margin_us: f64,
    /// Time spent spinning before deadlines, in all (ms, exact sum of measured spins).
    pub spin_ms: f64,
}
