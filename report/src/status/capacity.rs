//! A capacity or sweep workload's own chart and table cells: each run's capacity bracket at
//! the SLO (a pair of bounds, drawn as one) and its knee, with the baselines they met.

use super::{time_axis, RunLine, WorkloadRuns};
use crate::html::{attr, esc};
use crate::plot::{Axis, Colour, Mark, Plot, WIDE};
use crate::ReportError;
use canary_core::rate_text::{rate, rate_at_least, rate_below};

/// The capacity brackets and knees across the runs, by start time, with each baseline as a
/// band and the runs that did not pass crossed; `None` when no run has either.
pub(super) fn chart(now: i64, i: usize, w: &WorkloadRuns) -> Result<Option<String>, ReportError> {
    if !w
        .runs
        .iter()
        .any(|r| r.capacity.is_some() || r.sweep.is_some())
    {
        return Ok(None);
    }
    let (unit, x) = time_axis(now, w);
    let ok = |v: f64| v.is_finite() && v >= 0.0;
    let sorted = |mut v: Vec<(f64, f64, f64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let caps = || {
        w.runs
            .iter()
            .filter_map(|r| Some((x(r), r.capacity.as_ref()?)))
    };
    let knees = || {
        w.runs
            .iter()
            .filter_map(|r| Some((x(r), r.sweep.as_ref()?)))
    };
    let band = |b: Vec<(f64, (f64, f64))>| {
        sorted(
            b.into_iter()
                .filter(|(_, (c, s))| ok(*c) && ok(*s))
                .map(|(x, (c, s))| (x, (c - s).max(0.0), c + s))
                .collect(),
        )
    };
    let cap_base = band(caps().filter_map(|(x, c)| Some((x, c.baseline?))).collect());
    let knee_base = band(
        knees()
            .filter_map(|(x, k)| Some((x, k.baseline?)))
            .collect(),
    );
    let brackets: Vec<(f64, f64, f64)> = caps()
        .filter_map(|(x, c)| match (c.max_passing_rate, c.min_failing_rate) {
            (Some(lo), Some(hi)) if ok(lo) && ok(hi) => Some((x, lo, hi)),
            _ => None,
        })
        .collect();
    let open = |f: fn(&super::RunCapacity) -> Option<f64>, g: fn(&super::RunCapacity) -> bool| {
        let mut pts: Vec<(f64, f64)> = caps()
            .filter(|(_, c)| g(c))
            .filter_map(|(x, c)| f(c).filter(|v| ok(*v)).map(|v| (x, v)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    };
    let at_least = open(|c| c.max_passing_rate, |c| c.min_failing_rate.is_none());
    let below = open(|c| c.min_failing_rate, |c| c.max_passing_rate.is_none());
    let mut knee: Vec<(f64, f64)> = knees()
        .filter_map(|(x, k)| Some((x, k.knee.as_ref()?.1)).filter(|p| ok(p.1)))
        .collect();
    knee.sort_by(|a, b| a.0.total_cmp(&b.0));

    let mut plot = Plot::new(
        &format!("capacity-{i}"),
        "Capacity at the SLO across recent runs",
        Axis::linear(&format!("run start, {unit} before this page")),
        Axis::linear("req/s"),
        WIDE,
    );
    // The baselines' centres, from their bands (the ± is symmetric, unless clipped at 0).
    let cap_centre: Vec<(f64, f64)> = sorted(
        caps()
            .filter_map(|(x, c)| c.baseline.map(|(v, s)| (x, v, s)))
            .filter(|p| ok(p.1) && ok(p.2))
            .collect(),
    )
    .iter()
    .map(|p| (p.0, p.1))
    .collect();
    let knee_centre: Vec<(f64, f64)> = sorted(
        knees()
            .filter_map(|(x, k)| k.baseline.map(|(v, s)| (x, v, s)))
            .filter(|p| ok(p.1) && ok(p.2))
            .collect(),
    )
    .iter()
    .map(|p| (p.0, p.1))
    .collect();
    plot.layer(
        "baseline capacity ± spread",
        Colour::nth(0),
        Mark::Band(cap_base),
    )
    .layer(
        "baseline capacity",
        Colour::nth(0),
        Mark::LinePoints(cap_centre),
    )
    .layer(
        "capacity bracket (passing to failing rate)",
        Colour::nth(1),
        Mark::Intervals(brackets),
    )
    .layer(
        "at least (no rate failed)",
        Colour::nth(2),
        Mark::Points(at_least),
    )
    .layer(
        "below (no rate passed)",
        Colour::nth(3),
        Mark::Points(below),
    )
    .layer(
        "baseline knee ± spread",
        Colour::nth(4),
        Mark::Band(knee_base),
    )
    .layer(
        "baseline knee",
        Colour::nth(4),
        Mark::LinePoints(knee_centre),
    )
    .layer("knee", Colour::nth(5), Mark::LinePoints(knee));

    // The runs that did not pass, crossed at their failing end (the bound the verdict
    // judges), else their knee or passing end, else the chart's floor.
    let own = |r: &RunLine| {
        let c = r.capacity.as_ref();
        c.and_then(|c| c.min_failing_rate)
            .or_else(|| r.sweep.as_ref()?.knee.as_ref().map(|k| k.1))
            .or_else(|| c.and_then(|c| c.max_passing_rate))
            .filter(|v| ok(*v))
    };
    let drawn: Vec<f64> = plot
        .layers
        .iter()
        .flat_map(|l| match &l.mark {
            Mark::Intervals(b) | Mark::Band(b) => b.iter().map(|p| p.1).collect(),
            Mark::Points(p) | Mark::LinePoints(p) => p.iter().map(|p| p.1).collect(),
            _ => vec![],
        })
        .collect();
    let floor = drawn.iter().copied().fold(f64::INFINITY, f64::min);
    let failed = || w.runs.iter().filter(|r| r.verdict_kind != "pass");
    let bad: Vec<(f64, f64)> = failed()
        .map(|r| (x(r), own(r).unwrap_or(floor)))
        .filter(|p| p.1.is_finite())
        .collect();
    let without = match floor.is_finite() {
        true => failed().filter(|r| own(r).is_none()).count(),
        false => 0,
    };
    plot.layer("not a pass", Colour::ERROR, Mark::Crosses(bad));
    let mut note = format!(
        "{} run(s). A capacity is known only to lie in its bracket: at least the highest \
         offered rate that passed the SLO, below the lowest that failed; each bar is that pair \
         of bounds, not a measured point (an open bracket is a dot at its one end). A knee is \
         the sweep point's completed req/s. Baselines are drawn as they stood at each run \
         (capacity ± spread). A run that did not pass is crossed at its failing end (else its \
         knee or passing end)",
        w.runs.len()
    );
    if without > 0 {
        note.push_str(&format!(
            ", and {without} without either at the lowest rate drawn: that height is not theirs"
        ));
    }
    plot.note(format!("{note}."));
    plot.to_html().map(Some)
}

/// The capacity bracket's cell: the bounds rounded outward (so they still hold), the exact
/// ones on hover, and the baseline under them.
pub(super) fn capacity_cell(r: &RunLine) -> String {
    let Some(c) = &r.capacity else {
        return "–".into();
    };
    let (text, exact) = match (c.max_passing_rate, c.min_failing_rate) {
        (Some(lo), Some(hi)) => (
            format!("{} to {}", rate_at_least(lo), rate_below(hi)),
            format!("at least {lo}, below {hi} req/s"),
        ),
        (Some(lo), None) => (
            format!("≥ {} (no rate failed)", rate_at_least(lo)),
            format!("at least {lo} req/s"),
        ),
        (None, Some(hi)) => (
            format!("< {} (no rate passed)", rate_below(hi)),
            format!("below {hi} req/s"),
        ),
        (None, None) => return "–".into(),
    };
    format!(
        "<span class=\"bracket\" title=\"{}\">{}</span>{}{}",
        attr(&exact),
        esc(&text),
        not_established(c),
        baseline(c.baseline)
    )
}

/// `not established: the failing end (below 20 req/s) rests on bounds` for each end whose
/// probe's decision rests on goodput judgements made on bounds
/// ([`canary_core::EndOnBounds::end_said`]), the probe's reason on hover; empty when both ends
/// are established.
fn not_established(c: &super::RunCapacity) -> String {
    c.not_established
        .iter()
        .map(|e| {
            format!(
                "<br><small class=\"not-established\" title=\"{}\">not established: {} rests \
                 on bounds</small>",
                attr(&e.why),
                esc(&e.end_said())
            )
        })
        .collect()
}

/// The knee's cell: its point and req/s, or why there is none, and the baseline under them.
pub(super) fn knee_cell(r: &RunLine) -> String {
    let Some(k) = &r.sweep else {
        return "–".into();
    };
    let knee = match &k.knee {
        Some((label, v)) => format!(
            "<span title=\"{}\">{} at {}</span>",
            attr(&format!("{v} req/s")),
            esc(&rate(*v)),
            esc(label)
        ),
        // The sweep's own reason: a series cut short, or whose loaded points were left out,
        // did not show that it never saturated.
        None => format!(
            "<span class=\"no-knee\">{}</span>",
            esc(k.no_knee.as_deref().unwrap_or("no knee"))
        ),
    };
    format!("{knee}{}", baseline(k.baseline))
}

fn baseline(b: Option<(f64, f64)>) -> String {
    b.map(|(v, s)| {
        format!(
            "<br><small class=\"baseline\">baseline {} ± {}</small>",
            esc(&rate(v)),
            esc(&rate(s))
        )
    })
    .unwrap_or_default()
}
