//! Steps back of the wall clock, as a workload's schedule sees them: NTP correcting a clock
//! that ran ahead, a VM resumed from a snapshot. A schedule waits for a wall-clock instant
//! computed before the step, which then lies further ahead by the step: an hour's step was an
//! hour without runs. On seeing one, a schedule computes its next run from now again.

use crate::config::cadence::WallClock;
use std::time::{Duration, SystemTime};

/// How often a waiting schedule reads the clock for a step (as often as its wait does).
const READ_EVERY: Duration = Duration::from_secs(5);

/// The wall clock as one workload's schedule last read it.
pub(super) struct WallWatch<'a> {
    wall: WallClock,
    seen: SystemTime,
    workload: &'a str,
}

impl<'a> WallWatch<'a> {
    pub(super) fn new(wall: WallClock, workload: &'a str) -> WallWatch<'a> {
        WallWatch {
            wall,
            seen: wall(),
            workload,
        }
    }

    /// Returns once the clock reads earlier than it last did, said once in the log. A step
    /// shorter than the time between two reads is not seen, and needs not be: it only makes
    /// the wait that much longer.
    pub(super) async fn stepped_back(&mut self) {
        loop {
            let now = (self.wall)();
            let seen = std::mem::replace(&mut self.seen, now);
            if let Ok(back) = seen.duration_since(now) {
                if !back.is_zero() {
                    tracing::warn!(
                        workload = %self.workload,
                        "the wall clock stepped back {:?}: the next run is the schedule's next from now",
                        Duration::from_millis(back.as_millis() as u64)
                    );
                    return;
                }
            }
            tokio::time::sleep(READ_EVERY).await;
        }
    }
}
