//! The schedule of a workload with `start_at`: a grid of instants shared by every daemon
//! given the same `start_at` and schedule (issue 22).

use super::Daemon;
use crate::config::cadence::Cadence;
use crate::config::{Config, Workload};
use crate::service::sinks::RunSink;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl Daemon {
    /// The schedule of a workload with `start_at`: runs on the grid anchored there (see
    /// [`crate::config::cadence::Cadence::next_on_grid`]), each launched [`crate::config::cadence::Cadence::grid_lead`] ahead of its grid
    /// instant with that instant as its `start_at`, so that every daemon given the same
    /// `start_at` and schedule maps the same instant onto its monotonic clock and starts the
    /// run there. A grid instant missed (the previous run still going, or too close when the
    /// daemon started) is said once in the log, and the run goes to the next one.
    pub(super) async fn grid_loop(
        self: Arc<Self>,
        config: Arc<Config>,
        w: Workload,
        start: canary_replay::StartAt,
        stop: CancellationToken,
    ) {
        let lead = w.cadence.grid_lead();
        let lead_ns = i64::try_from(lead.as_nanos()).unwrap_or(i64::MAX);
        let mut first = true;
        // The last instant taken or missed.
        let mut taken = None;
        loop {
            let now = crate::instant::unix_ns((self.wall)());
            let Some(grid) = next_instant(&w.cadence, start.unix_ns, now, lead_ns, taken) else {
                tracing::warn!(workload = %w.name, "no grid instant from {} on: no more runs", start.text);
                return;
            };
            if first {
                tracing::info!(
                    workload = %w.name,
                    "runs on the grid from start_at {}; the first at {} (launched {:?} ahead)",
                    start.text,
                    crate::instant::rfc3339(grid),
                    lead
                );
                first = false;
            }
            let launch = grid.saturating_sub(lead_ns).max(0) as u64;
            let launch = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(launch);
            if crate::config::cadence::wait_until(launch, self.wall, &stop)
                .await
                .is_none()
            {
                return;
            }
            taken = Some(grid);
            let mut run = w.clone();
            run.start_at = Some(canary_replay::StartAt {
                text: crate::instant::rfc3339(grid),
                unix_ns: grid,
                max_late: start.max_late,
            });
            let Some(task) = self.start_run(config.clone(), run) else {
                tracing::info!(
                    workload = %w.name,
                    "grid instant {} missed: the previous run is still going; the next grid instant is taken",
                    crate::instant::rfc3339(grid)
                );
                self.sinks.run_skipped(&w.name);
                continue;
            };
            {
                let mut tasks = self.tasks.lock().unwrap();
                tasks.retain(|t| !t.is_finished());
                tasks.push(task);
            }
        }
    }
}

/// The grid instant to launch next when the wall clock reads `now` (Unix ns): the first one
/// at least `lead_ns` ahead, and past `taken`, the last one taken or missed: never the same
/// one twice.
fn next_instant(
    cadence: &Cadence,
    start: i64,
    now: i64,
    lead_ns: i64,
    taken: Option<i64>,
) -> Option<i64> {
    let from = now
        .saturating_add(lead_ns)
        .max(taken.map_or(i64::MIN, |t| t.saturating_add(1)));
    cadence.next_on_grid(start, from)
}
