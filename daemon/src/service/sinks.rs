//! Where finished runs go besides the history database: the status endpoint's metrics and,
//! when configured, OTLP ([`otlp`]). A sink is called once per finished run (every verdict,
//! interrupted runs included) and once per skipped schedule, and flushed on shutdown.

use crate::service::run_result::RunResult;
use crate::service::status::StatusMetrics;

pub mod last_run;
pub mod otlp;

/// Something that publishes finished runs.
pub trait RunSink: Send + Sync {
    /// A run of `workload` finished (its verdict and baseline comparison are filled in).
    fn run_finished(&self, workload: &str, run: &RunResult);

    /// A due run of `workload` was skipped, and why.
    fn run_skipped(&self, _workload: &str, _reason: SkipReason) {}

    /// The daemon is stopping: send what is buffered.
    fn flush(&self) {}
}

/// Why a due run was skipped: `canaryd_skips_total`'s `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipReason {
    /// The workload's previous run was still going.
    Overrun,
    /// The workload's previous run was still waiting for its turn on a server another
    /// workload's run held.
    Turn,
    /// The daemon stopped before the run's first measured request (while it waited for its
    /// turn, loaded its trace or warmed up).
    Stopping,
}

impl SkipReason {
    /// Every reason, in label order.
    pub const ALL: [SkipReason; 3] = [SkipReason::Overrun, SkipReason::Turn, SkipReason::Stopping];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Overrun => "overrun",
            SkipReason::Turn => "turn",
            SkipReason::Stopping => "stopping",
        }
    }
}

/// Several sinks, called in order.
#[derive(Default)]
pub struct Sinks(pub Vec<std::sync::Arc<dyn RunSink>>);

impl RunSink for Sinks {
    fn run_finished(&self, workload: &str, run: &RunResult) {
        for s in &self.0 {
            s.run_finished(workload, run);
        }
    }

    fn run_skipped(&self, workload: &str, reason: SkipReason) {
        for s in &self.0 {
            s.run_skipped(workload, reason);
        }
    }

    fn flush(&self) {
        for s in &self.0 {
            s.flush();
        }
    }
}

/// The status endpoint's metrics count every run and skip.
impl RunSink for StatusMetrics {
    fn run_finished(&self, workload: &str, run: &RunResult) {
        self.record_run(workload, run);
    }

    fn run_skipped(&self, workload: &str, reason: SkipReason) {
        self.record_skip(workload, reason);
    }
}
