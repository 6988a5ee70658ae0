//! One run of a `kind = "capacity"` workload: the capacity search
//! ([`crate::capacity::search`], as `canaryd sweep --find-max-rate`) whose probes are runs of
//! the workload at each rate, each through the one run function into its own folder
//! (`<run>/probe-NN-<rate>rps/`), judged by the workload's SLOs. The run's summary is the
//! probe at the capacity (the highest passing rate); its verdict is `pass` until the
//! scheduler compares the capacity with the baseline (`crate::judge::capacity`), `fail` when
//! no rate passed, `error` when a probe could not run or errored, or its limits cut it (its
//! run deadline, a target that answered nothing: that error, naming the probe; not
//! `interrupted`).

use super::{RunContext, RunIds};
use crate::capacity::{self, Probed, Prober, SearchBounds};
use crate::config::shape::Synthetic;
use crate::config::{CapacitySearch, Config, Workload};
use crate::judge::capacity::{rate, rate_below, CapacityProbe, CapacityRun};
use crate::judge::verdict::{Verdict, VerdictKind};
use crate::service::run_result::RunResult;
use anyhow::{bail, Result};
use canary_core::RunOutcome;
use canary_replay::Progress;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The workload's runs as the search's probes.
struct WorkloadProber<'a> {
    ctx: &'a RunContext,
    config: &'a Config,
    workload: &'a Workload,
    result: &'a RunResult,
    shutdown: &'a CancellationToken,
    progress: Arc<Progress>,
    probes: Vec<CapacityProbe>,
    /// The outcome of the highest passing probe so far.
    at_capacity: Option<(f64, RunOutcome)>,
    /// The last probe's outcome, kept when none passed.
    last: Option<RunOutcome>,
    /// When a stop cut the first probe before it measured a request (see [`run`]).
    stopped_before: Option<&'static str>,
}

impl Prober for WorkloadProber<'_> {
    async fn probe(&mut self, r: f64, index: usize) -> Result<Probed> {
        let mut w = self.workload.clone();
        if index > 1 {
            // The run's start instant is the first probe's; later probes follow at once.
            w.start_at = None;
        }
        match &mut w.synthetic {
            Some(Synthetic::Rate(plan)) => plan.rate = r,
            _ => bail!("workloads.{}: a capacity search needs request_rate", w.name),
        }
        let run_id = format!("{}-p{index:02}", self.result.run.id);
        let dir = self
            .result
            .run
            .artifacts
            .join(format!("probe-{index:02}-{}rps", rate(r)));
        let ids = RunIds {
            run: &run_id,
            export: &self.result.run.id,
            artifacts: &dir,
        };
        let replayed = self
            .ctx
            .replay(
                self.config,
                &w,
                ids,
                None,
                self.shutdown.clone(),
                self.progress.clone(),
            )
            .await;
        let stopped = |p: &mut Self, when| {
            // Measured nothing: not a probe of its rate. The search ends, interrupted.
            if p.probes.is_empty() {
                p.stopped_before = Some(when);
            }
            Ok(Probed {
                passed: false,
                interrupted: true,
            })
        };
        let judged = match replayed {
            Err(e) if e.is::<super::StoppedLoading>() => {
                return stopped(self, super::STOPPED_LOADING);
            }
            Err(e) => return Err(e),
            // A probe its limits cut (a run deadline, a target that answered nothing) ran:
            // it is not a skip even when it measured nothing.
            Ok((judged, _))
                if judged.cut.is_none()
                    && index == 1
                    && super::measured_nothing(&judged.outcome) =>
            {
                return stopped(self, super::stopped_before_measuring(&w));
            }
            Ok((judged, _)) => judged,
        };
        let mut verdict = judged.verdict.unwrap_or_else(|| Verdict::error("unjudged"));
        if verdict.kind == VerdictKind::Pass {
            // A rate the client could not offer passed on requests the server never saw at
            // that rate, and one whose queue grew through the probe passed on a queue still
            // short: the probe fails, saying why.
            if let Some(why) = capacity::rate_not_held(&judged.outcome) {
                verdict = Verdict {
                    kind: VerdictKind::Fail,
                    reasons: vec![why],
                };
            }
        }
        if let Some(why) = &judged.cut {
            // No signal's interruption: the search ends with that error, naming the probe,
            // which is kept (its figures, its verdict) but neither passed nor failed its rate.
            tracing::info!(
                workload = %w.name,
                run = %self.result.run.id,
                "capacity probe {index} at {} req/s: {verdict}",
                rate(r)
            );
            self.probes.push(CapacityProbe {
                rate: r,
                passed: false,
                verdict: verdict.to_string(),
                interrupted: false,
            });
            let why = format!("{why} (at the probe at {} req/s, probe {index})", rate(r));
            self.last = Some(judged.outcome);
            bail!(why);
        }
        let interrupted = judged.outcome.interrupted;
        if verdict.kind == VerdictKind::Error && !interrupted {
            bail!("the probe at {} req/s: {verdict}", rate(r));
        }
        let passed = verdict.kind == VerdictKind::Pass;
        tracing::info!(
            workload = %w.name,
            run = %self.result.run.id,
            "capacity probe {index} at {} req/s: {verdict}",
            rate(r)
        );
        self.probes.push(CapacityProbe {
            rate: r,
            passed,
            verdict: verdict.to_string(),
            interrupted,
        });
        if passed && self.at_capacity.as_ref().is_none_or(|(best, _)| r > *best) {
            self.at_capacity = Some((r, judged.outcome));
        } else {
            self.last = Some(judged.outcome);
        }
        Ok(Probed {
            passed,
            interrupted,
        })
    }
}

/// Why a search in which no rate passed fails: the lowest rate it tried, which is the floor
/// (`min_rate`) only when the search stopped there. It said "down to `min_rate`" when
/// `max_probes` ended it long before.
fn no_rate_passed(found: &capacity::Capacity, probes: &[CapacityProbe]) -> String {
    let n = probes.len();
    match probes.iter().map(|p| p.rate).min_by(f64::total_cmp) {
        None => format!(
            "capacity at SLO: no rate passed {} (no probe ran)",
            found.slo
        ),
        Some(lowest) if found.stopped_by == "floor" => format!(
            "capacity at SLO: no rate passed {} down to the floor, {} req/s (min_rate; {n} \
             probes)",
            found.slo,
            rate(lowest)
        ),
        Some(lowest) => format!(
            "capacity at SLO: no rate passed {}: below {} req/s, the lowest rate tried ({n} \
             probes, stopped by {})",
            found.slo,
            rate_below(lowest),
            found.stopped_by
        ),
    }
}

/// Runs the search of `w` into `result`: its capacity, probes, summary and verdict.
/// `Some(when)` when a stop came before its first probe measured a request (while loading
/// its trace, during its warm-up, before its first request): the search never started, a
/// skip as a latency run's ([`crate::service::run_result::Ran::NotStarted`]).
pub(super) async fn run(
    ctx: &RunContext,
    config: &Config,
    w: &Workload,
    search: CapacitySearch,
    result: &mut RunResult,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Option<&'static str> {
    let (start, load) = match &w.synthetic {
        Some(Synthetic::Rate(plan)) => (
            plan.rate,
            CapacityRun::load_of(
                &w.target,
                config.targets.get(&w.target),
                plan,
                w.warmup_requests,
            ),
        ),
        _ => {
            result.run.verdict = Verdict::error("a capacity search needs request_rate");
            return None;
        }
    };
    let bounds = SearchBounds {
        start,
        min_rate: search.min_rate,
        precision: search.precision,
        max_runs: search.max_probes,
    };
    let mut prober = WorkloadProber {
        ctx,
        config,
        workload: w,
        result,
        shutdown: &shutdown,
        progress,
        probes: Vec::new(),
        at_capacity: None,
        last: None,
        stopped_before: None,
    };
    let found = capacity::search(
        bounds,
        w.slos.to_string(),
        w.min_good_fraction,
        &mut prober,
        &shutdown,
    )
    .await;
    let WorkloadProber {
        probes,
        at_capacity,
        last,
        stopped_before,
        ..
    } = prober;
    if found.interrupted && probes.is_empty() {
        // Stopped before its first probe measured a request (or began at all).
        return Some(stopped_before.unwrap_or("before its first request"));
    }
    result.run.verdict = if found.interrupted {
        Verdict::interrupted()
    } else if let Some(e) = &found.failed {
        Verdict::error(format!("{e:#}"))
    } else if found.capacity.max_passing_rate.is_none() {
        Verdict {
            kind: VerdictKind::Fail,
            reasons: vec![no_rate_passed(&found.capacity, &probes)],
        }
    } else {
        Verdict {
            kind: VerdictKind::Pass,
            reasons: Vec::new(),
        }
    };
    result.outcome = at_capacity.map(|(_, o)| o).or(last);
    result.run.load = Some(load.clone());
    let mut searched = CapacityRun {
        found: found.capacity,
        probes,
        baseline: None,
        new_load: None,
        load: Some(load),
    };
    searched.note_bounds();
    result.run.capacity = Some(searched);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probes(rates: &[f64]) -> Vec<CapacityProbe> {
        rates
            .iter()
            .map(|&rate| CapacityProbe {
                rate,
                passed: false,
                verdict: "fail: …".into(),
                interrupted: false,
            })
            .collect()
    }

    // A search of 4 probes from 50 req/s ended at 6.25 by max_probes: it said "down to 0.1
    // req/s", the floor it never reached.
    #[test]
    fn no_rate_passed_names_the_lowest_rate_tried_and_the_floor_only_when_reached() {
        let found = |stopped_by| {
            capacity::Capacity::of(
                canary_core::RateBracket {
                    passed: None,
                    failed: Some(6.25),
                },
                "time_to_first_token:100".into(),
                0.95,
                stopped_by,
            )
        };
        let why = no_rate_passed(&found("max_runs"), &probes(&[50.0, 25.0, 12.5, 6.25]));
        assert_eq!(
            why,
            "capacity at SLO: no rate passed time_to_first_token:100: below 6.25 req/s, the \
             lowest rate tried (4 probes, stopped by max_runs)"
        );
        let why = no_rate_passed(&found("floor"), &probes(&[0.2, 0.1]));
        assert_eq!(
            why,
            "capacity at SLO: no rate passed time_to_first_token:100 down to the floor, 0.1 \
             req/s (min_rate; 2 probes)"
        );
    }
}
