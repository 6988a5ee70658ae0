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

    /// A due run of `workload` was skipped because its previous run was still going.
    fn run_skipped(&self, _workload: &str) {}

    /// The daemon is stopping: send what is buffered.
    fn flush(&self) {}
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

    fn run_skipped(&self, workload: &str) {
        for s in &self.0 {
            s.run_skipped(workload);
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

    fn run_skipped(&self, workload: &str) {
        self.record_skip(workload);
    }
}
