//! `kind = "sweep"` and its keys (`canaryd sweep`'s flags): one list of points, of the axis a
//! workload's load can vary (request rates need `request_rate`, speedups a trace), two
//! points or more (a knee is a step between two), each value once; the keys are refused on
//! other kinds.

use super::Source;
use crate::cli::sweep::point::Axis;
use crate::config::shape::Synthetic;
use crate::config::{raw, ConfigError, SweepSpec};

/// A list key: its axis, name, where it is, its values.
type AxisList<'a> = (Axis, &'a str, Option<usize>, Option<Vec<f64>>);

/// The sweep of `w`, when it is of `kind = "sweep"`.
pub(super) fn sweep_spec(
    name: &str,
    w: &raw::Workload,
    synthetic: &Option<Synthetic>,
    src: &Source,
) -> Result<Option<SweepSpec>, ConfigError> {
    let span = |s: Option<std::ops::Range<usize>>| s.map(|s| s.start);
    let lists: [AxisList; 3] = [
        (
            Axis::Concurrency,
            "sweep_concurrency",
            span(w.sweep_concurrency.as_ref().map(|l| l.span())),
            w.sweep_concurrency
                .as_ref()
                .map(|l| l.get_ref().iter().map(|c| c.0 as f64).collect()),
        ),
        (
            Axis::RequestRate,
            "sweep_request_rate",
            span(w.sweep_request_rate.as_ref().map(|l| l.span())),
            w.sweep_request_rate
                .as_ref()
                .map(|l| l.get_ref().iter().map(|r| r.0).collect()),
        ),
        (
            Axis::Speedup,
            "sweep_speedup",
            span(w.sweep_speedup.as_ref().map(|l| l.span())),
            w.sweep_speedup
                .as_ref()
                .map(|l| l.get_ref().iter().map(|x| x.0).collect()),
        ),
    ];
    let others = [
        ("cooldown", span(w.cooldown.as_ref().map(|k| k.span()))),
        ("gpus", span(w.gpus.as_ref().map(|k| k.span()))),
        (
            "knee_tolerance",
            span(w.knee_tolerance.as_ref().map(|k| k.span())),
        ),
    ];
    let kind = w.kind.as_ref().map(|k| (k.span().start, *k.get_ref()));
    let Some((kind_at, raw::WorkloadKind::Sweep)) = kind else {
        let set = lists
            .iter()
            .filter(|l| l.3.is_some())
            .map(|l| (l.1, l.2))
            .chain(others.iter().filter(|k| k.1.is_some()).copied());
        if let Some((key, key_at)) = set.into_iter().next() {
            return Err(src.err(
                key_at,
                format!("workloads.{name}.{key}: only taken by kind = \"sweep\""),
            ));
        }
        return Ok(None);
    };
    let given: Vec<_> = lists.iter().filter(|l| l.3.is_some()).collect();
    let (axis, key, key_at, values) = match given.as_slice() {
        [one] => (one.0, one.1, one.2, one.3.clone().unwrap_or_default()),
        [] => {
            return Err(src.err(
                Some(kind_at),
                format!(
                    "workloads.{name}.kind: a sweep needs its points: sweep_concurrency = [1, 4, \
                     16], sweep_request_rate = [10, 20, 40] or, with a trace, sweep_speedup = \
                     [1, 2, 4]"
                ),
            ))
        }
        [a, b, ..] => {
            return Err(src.err(
                b.2,
                format!(
                    "workloads.{name}.{}: a sweep varies one axis; {} is given too",
                    b.1, a.1
                ),
            ))
        }
    };
    if let (Axis::Concurrency, Some(c)) = (axis, &w.concurrency) {
        // Each point sets it: the value written was overwritten at every point.
        return Err(src.err(
            Some(c.span().start),
            format!(
                "workloads.{name}.concurrency: each point of {key} sets it; leave concurrency \
                 out"
            ),
        ));
    }
    if values.len() < 2 {
        return Err(src.err(
            key_at,
            format!(
                "workloads.{name}.{key}: {} point(s); a sweep needs two or more (its knee is \
                 a step between two)",
                values.len()
            ),
        ));
    }
    if let Some(v) = crate::cli::sweep::point::repeated_value(&values) {
        return Err(src.err(
            key_at,
            format!(
                "workloads.{name}.{key}: {v} is listed twice; a sweep's points are distinct \
                 loads (a step between two runs of one load is noise, not a knee): give each \
                 value once (the baseline repeats the sweep run after run; `canaryd sweep \
                 --runs N` repeats a point)"
            ),
        ));
    }
    match axis {
        Axis::RequestRate if !matches!(synthetic, Some(Synthetic::Rate(_))) => {
            return Err(src.err(
                key_at,
                format!(
                    "workloads.{name}.{key}: sweeps open-loop rates: give a synthetic load with \
                     request_rate (each point sets its own), not a trace or a closed loop"
                ),
            ))
        }
        Axis::Speedup if w.trace.is_none() => {
            return Err(src.err(
                key_at,
                format!("workloads.{name}.{key}: sweeps a trace's speedup: give a trace"),
            ))
        }
        _ => {}
    }
    Ok(Some(SweepSpec {
        axis,
        values,
        cooldown: w
            .cooldown
            .as_ref()
            .map_or_else(Default::default, |c| c.get_ref().0),
        gpus: w.gpus.as_ref().map(|g| g.get_ref().0 as u64),
        tolerance: w.knee_tolerance.as_ref().map_or(0.1, |t| t.get_ref().0),
    }))
}

/// Where the sweep's list of points is in the file (its first line).
pub(super) fn list_at(w: &raw::Workload) -> Option<usize> {
    let at = |l: Option<std::ops::Range<usize>>| l.map(|s| s.start);
    at(w.sweep_concurrency.as_ref().map(|l| l.span()))
        .or(at(w.sweep_request_rate.as_ref().map(|l| l.span())))
        .or(at(w.sweep_speedup.as_ref().map(|l| l.span())))
}

/// Each point of `w`'s sweep checked as its run checks it (as `canaryd sweep` checks its
/// points before the first): the workload with the point's value, as a plan, validated. A
/// point no run could take (20 users for 10 requests, a rate past the range) is an error at
/// the list's line, where check-config said ok and every scheduled run was an error.
pub(super) fn check_points(
    w: &crate::config::Workload,
    target: &crate::config::Target,
    list_at: Option<usize>,
    src: &Source,
) -> Result<(), ConfigError> {
    let Some(spec) = &w.sweep else { return Ok(()) };
    let key = match spec.axis {
        Axis::Concurrency => "sweep_concurrency",
        Axis::RequestRate => "sweep_request_rate",
        Axis::Speedup => "sweep_speedup",
    };
    for &value in &spec.values {
        let mut point = w.clone();
        // As the run sets each point (service/workload/sweep.rs `point_workload`).
        match spec.axis {
            Axis::Concurrency => {
                point.concurrency = Some(value as usize);
                if let Some(Synthetic::ClosedLoop(c)) = &mut point.synthetic {
                    c.users = value as usize;
                }
            }
            Axis::RequestRate => {
                if let Some(Synthetic::Rate(plan)) = &mut point.synthetic {
                    plan.rate = value;
                }
            }
            Axis::Speedup => point.speedup = value,
        }
        let wp = crate::config::WorkloadPlan {
            workload: &point,
            target,
        };
        let checked = canary_replay::Plan::try_from(wp).and_then(|plan| {
            plan.validate().map_err(|e| {
                // The axis's own setting is the list; the others keep their key paths.
                let spelled = match e.setting.name() {
                    "concurrency" | "request_rate" | "speedup" => e.reason.clone(),
                    _ => e.spelled(&wp.key(e.setting)),
                };
                anyhow::anyhow!(spelled)
            })
        });
        if let Err(e) = checked {
            return Err(src.err(
                list_at,
                format!(
                    "workloads.{}.{key}: point {}: {e:#}; no run could take it",
                    w.name,
                    spec.axis.label(value)
                ),
            ));
        }
    }
    Ok(())
}
