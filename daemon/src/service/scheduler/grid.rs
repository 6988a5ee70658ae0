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
    /// daemon started) is said once in the log, and the run goes to the next one. After the
    /// wall clock steps back, the next instant is the next one from now ([`next_instant`]).
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
        let mut watch = super::wall::WallWatch::new(self.wall, &w.name);
        loop {
            let now = crate::instant::unix_ns((self.wall)());
            let Some(grid) = next_instant(&w.cadence, start.unix_ns, now, lead_ns, taken) else {
                tracing::warn!(workload = %w.name, "no grid instant from {} on: no more runs", start.text);
                return;
            };
            self.metrics.set_next_run(
                &w.name,
                std::time::UNIX_EPOCH + std::time::Duration::from_nanos(grid.max(0) as u64),
            );
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
            tokio::select! {
                launched = crate::config::cadence::wait_until(launch, self.wall, &stop) => {
                    if launched.is_none() {
                        return;
                    }
                }
                // The launch waited for lies further ahead by the step: again, from now.
                () = watch.stepped_back() => continue,
            }
            taken = Some(grid);
            let mut run = w.clone();
            run.start_at = Some(canary_replay::StartAt {
                text: crate::instant::rfc3339(grid),
                unix_ns: grid,
                max_late: start.max_late,
            });
            let Some(task) = self.start_run(config.clone(), run) else {
                let (reason, why) = self.why_busy(&w.name);
                tracing::info!(
                    workload = %w.name,
                    "grid instant {} missed: {why}; the next grid instant is taken",
                    crate::instant::rfc3339(grid)
                );
                self.sinks.run_skipped(&w.name, reason);
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
/// at least `lead_ns` ahead, but never `taken` (the last one taken or missed) twice in a row.
/// From now, not from past `taken`: after the clock steps back an hour, the instants past
/// `taken` are an hour away, and the grid would stop for that hour. Without a step, `taken`
/// was launched no later than now + lead, so what follows now + lead is past it anyway.
fn next_instant(
    cadence: &Cadence,
    start: i64,
    now: i64,
    lead_ns: i64,
    taken: Option<i64>,
) -> Option<i64> {
    let next = cadence.next_on_grid(start, now.saturating_add(lead_ns))?;
    match taken {
        // Stepped back less than a period: the instant just taken lies ahead again.
        Some(t) if t == next => cadence.next_on_grid(start, t.saturating_add(1)),
        _ => Some(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const S: i64 = 1_795_518_000 * 1_000_000_000; // 2026-11-24T11:00:00Z
    const SEC: i64 = 1_000_000_000;

    /// The clock steps back: the next instant is the next from now (no hour's wait for the
    /// one after the last taken, no burst), but never the one just taken again.
    #[test]
    fn after_the_clock_steps_back_the_next_instant_is_from_now_but_not_the_last_again() {
        let every = Cadence::Every {
            period: Duration::from_secs(600),
            jitter: None,
        };
        let quarter = Cadence::cron("*/15 * * * *", None).unwrap();
        let lead = 30 * SEC;
        for (cadence, p) in [(every, 600 * SEC), (quarter, 900 * SEC)] {
            let g = S + 8 * p; // just launched, `lead` before it
            let next = |back: i64| next_instant(&cadence, S, g - lead - back, lead, Some(g));
            assert_eq!(next(0), Some(g + p), "{cadence:?}");
            // Back 50 minutes: the next instant after 50 minutes before.
            let back = 50 * 60 * SEC;
            let expected = cadence.next_on_grid(S, g - back).unwrap();
            assert!(expected < g, "{cadence:?}");
            assert_eq!(next(back), Some(expected), "{cadence:?}");
            // Back under a period: `g` lies ahead again but was just taken.
            assert_eq!(next(p / 2), Some(g + p), "{cadence:?}");
        }
    }
}
