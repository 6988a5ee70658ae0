//! A `--runs N` experiment: each headline figure's mean over its runs with its confidence
//! interval, as its `summary.json` states them, and each run with its verdict, those its
//! estimates leave out named. Its runs repeat one load, so there is no knee and no front: a
//! step between two of them is noise, not load.
//!
//! A mean over runs some of whose figures are bounds is a bound: a latency mean is marked `≤`
//! (an upper bound) and an ITL mean `*` (exact in neither direction) where any run the
//! estimates are over has such times, by the runs' own `summary.json`
//! ([`super::bounds::of_run`], the sweep's rule).

use super::bounds;
use super::num;
use crate::artifacts::repeats::pairs;
use crate::artifacts::{Repeats, Run};
use crate::html::{esc, table};
use canary_core::runs_without;
use canary_core::PERCENTILE_PRECISION_SPACED;

/// A figure's label (`TTFT p99`) and unit as the page writes them.
fn label(metric: &str, statistic: &str) -> String {
    let name = match metric {
        "time_to_first_token" => "TTFT",
        "inter_token_latency" => "ITL",
        "request_latency" => "e2e",
        "request_throughput" => "throughput",
        "output_token_throughput" => "output tokens/s",
        "goodput" => "goodput",
        "good_request_fraction" => "good fraction",
        "schedule_lag" => "schedule lag",
        other => other,
    };
    match statistic {
        "" | "value" => name.to_string(),
        s => format!("{name} {s}"),
    }
}

fn unit(unit: &str) -> &str {
    match unit {
        "requests/s" => "req/s",
        "tokens/s" => "tok/s",
        // A fraction is a bare number.
        "fraction" => "",
        u => u,
    }
}

/// Empty when no goodput judgement rests on a bound; else ` 193 of the runs' goodput
/// judgements rest on a bound (…), so the goodput and good fraction marked * are exact in
/// neither direction: the runs' good requests are truly 41 to 115, 62 to 134, 43 to 90.`
fn good_said(good: &[(u64, Option<(u64, u64)>)]) -> String {
    let n: u64 = good.iter().map(|g| g.0).sum();
    if n == 0 {
        return String::new();
    }
    let ranges: Vec<String> = good
        .iter()
        .map(|g| g.1.map_or("–".to_string(), |(l, h)| format!("{l} to {h}")))
        .collect();
    format!(
        " {n} of the runs' goodput judgements rest on a bound (a time read late: a TTFT miss \
         may be a meet, an ITL meet a miss; summary.json's uncertain_misses and \
         uncertain_meets), so the goodput and good fraction marked * are exact in neither \
         direction: the runs' good requests are truly {}.",
        ranges.join(", ")
    )
}

/// The estimates section's body; `runs`: the experiment's runs on the page (labelled by their
/// folder), whose own summaries say which of their figures are bounds.
pub fn render(e: &Repeats, runs: &[Run]) -> String {
    let level = e.confidence.unwrap_or(0.95) * 100.0;
    let complete = e.complete();
    let mut html = String::new();
    // Over the runs the estimates are over.
    let over: Vec<Vec<&'static str>> = runs
        .iter()
        .filter(|r| e.run(&r.label).is_some_and(|x| x.left_out.is_none()))
        .map(bounds::of_run)
        .collect();
    let bound = bounds::union(over.iter().map(Vec::as_slice));
    // Goodput judgements that rest on a bound (summary.json's uncertain_misses and
    // uncertain_meets) over the same runs, with the range of good requests they leave.
    let good: Vec<(u64, Option<(u64, u64)>)> = runs
        .iter()
        .filter(|r| e.run(&r.label).is_some_and(|x| x.left_out.is_none()))
        .map(|r| {
            let f = r.figures();
            let on_bound =
                f.uncertain_misses.values().sum::<u64>() + f.uncertain_meets.values().sum::<u64>();
            (on_bound, f.good_range)
        })
        .collect();
    let good_on_bound: u64 = good.iter().map(|g| g.0).sum();
    // The goodput and the good fraction rest on the same judgements.
    let on_good = |metric: &str| matches!(metric, "goodput" | "good_request_fraction");
    let is_bound = |metric: &str| bound.contains(&metric) || (on_good(metric) && good_on_bound > 0);
    let rows: Vec<Vec<String>> = e
        .estimates
        .iter()
        .map(|m| {
            let u = unit(&m.unit);
            let with = |v: f64| match u {
                "" => num(v),
                u => format!("{} {u}", num(v)),
            };
            let mean = m.mean.map_or("–".into(), |v| {
                match (is_bound(&m.metric), bounds::is_upper(&m.metric)) {
                    (false, _) => with(v),
                    (true, true) => format!("≤ {}", with(v)),
                    (true, false) => format!("{}*", with(v)),
                }
            });
            vec![
                esc(&label(&m.metric, &m.statistic)),
                esc(&mean),
                esc(&match (m.clipped, m.half_width) {
                    // A ± would reach past what the figure can be (below 0): its ends.
                    (Some((low, high)), _) => {
                        format!("{} to {} (clipped)", num(low), with(high))
                    }
                    // Not `± 0`: every run gave the same figure, which bounds nothing (as the
                    // command's table says it).
                    (None, Some(_)) if m.no_spread => {
                        "no spread: every run gave it; not estimable".into()
                    }
                    (None, Some(h)) => format!("± {}", with(h)),
                    (None, None) => "–".into(),
                }),
                // Over fewer runs than the estimates' when some gave none (named below).
                match m.without.len() {
                    0 => num(m.values.len() as f64),
                    n => format!("{} of {}", m.values.len(), m.values.len() + n),
                },
                esc(&m
                    .values
                    .iter()
                    .map(|v| num(*v))
                    .collect::<Vec<_>>()
                    .join(", ")),
            ]
        })
        .collect();
    if rows.is_empty() {
        html.push_str("<p class=\"note\">summary.json has no figure over the runs.</p>\n");
    } else {
        let half = format!("half-width ({level:.0} % CI)");
        html.push_str(&table(
            "estimates",
            &["figure", "mean", &half, "runs", "each run's"],
            &rows,
        ));
    }
    // A figure over fewer runs, or over none, said as the command's table says it, so it never
    // reads as one over all of them.
    let mut short: Vec<String> = e
        .estimates
        .iter()
        .filter(|m| !m.without.is_empty())
        .map(|m| {
            format!(
                "{}: {}",
                label(&m.metric, &m.statistic),
                runs_without::over_some(m.values.len() as u64, &pairs(&m.without))
            )
        })
        .collect();
    short.extend(e.unavailable.iter().map(|u| {
        format!(
            "{}: {}",
            label(&u.metric, &u.statistic),
            runs_without::none_gave(&pairs(&u.without))
        )
    }));
    if !short.is_empty() {
        html.push_str(&format!(
            "<p class=\"warn\">{}</p>\n",
            short
                .iter()
                .map(|l| esc(l))
                .collect::<Vec<_>>()
                .join("<br>\n")
        ));
    }
    html.push_str(&format!(
        "<p class=\"note\">Estimates, as summary.json states them: each figure the mean of the \
         runs' own, ± the half-width of its {level:.0} % confidence interval (Student's t, n−1 \
         degrees of freedom), over the {complete} of {} runs its estimates are over; an \
         interval a ± would take below 0 (or past 1 for a fraction) is given by its ends, \
         clipped there. Each run's \
         own is its summary.json's: throughputs exact (counted over the run), goodput an \
         exact count of judgements, percentiles estimates from its histograms, within \
         {PERCENTILE_PRECISION_SPACED}.{} The runs repeat one load: no knee and no Pareto \
         front.</p>\n",
        e.per_run.len(),
        good_said(&good)
    ));
    let shown = |upper: bool| {
        e.estimates.iter().any(|m| {
            !on_good(&m.metric) && is_bound(&m.metric) && bounds::is_upper(&m.metric) == upper
        })
    };
    let mut marks = Vec::new();
    if shown(true) {
        marks.push(
            "A mean marked ≤ is an upper bound: some of the runs' first tokens or ends were timed \
             at a later segment's stamp or canaryd's read, never before the event, so their \
             figures are upper bounds and so is their mean (and its interval is one of bounds)",
        );
    }
    if shown(false) {
        marks.push(
            "one marked * is exact in neither direction (gaps between times some of which are \
             bounds)",
        );
    }
    if !marks.is_empty() {
        html.push_str(&format!(
            "<p class=\"note\">{}; as each run's summary.json (receive_timestamps) says, by \
             the rule canaryd sweep marks its cells with.</p>\n",
            esc(&marks.join("; "))
        ));
    }
    let runs: Vec<Vec<String>> = e
        .per_run
        .iter()
        .map(|r| {
            vec![
                esc(&r.dir),
                esc(r.run_id.as_deref().unwrap_or("–")),
                esc(r.verdict.as_deref().unwrap_or("–")),
                esc(&match &r.left_out {
                    None => "yes".to_string(),
                    Some(why) if r.verdict.as_ref() == Some(why) => {
                        "left out: its verdict".to_string()
                    }
                    Some(why) => format!("left out: {why}"),
                }),
            ]
        })
        .collect();
    html.push_str(&table(
        "repeats",
        &["run", "run id", "verdict", "in the estimates"],
        &runs,
    ));
    let asked = e.runs_asked.unwrap_or(e.per_run.len() as u64);
    if e.interrupted || asked > e.per_run.len() as u64 {
        html.push_str(&format!(
            "<p class=\"warn\">A signal stopped the experiment: {} of {asked} runs ran.</p>\n",
            e.per_run.len()
        ));
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::repeats::Estimate;

    /// A ± that would reach below 0 (3 runs of TTFT p99 0.5, 0.6 and 8.5 ms: 3.2 ± 11.4) is
    /// shown by its clipped ends, as the command's table and summary.json give it.
    #[test]
    fn a_clipped_interval_is_shown_by_its_ends() {
        let e = Repeats {
            estimates: vec![
                Estimate {
                    metric: "time_to_first_token".into(),
                    statistic: "p99".into(),
                    unit: "ms".into(),
                    values: vec![0.5, 0.6, 8.5],
                    mean: Some(3.2),
                    half_width: Some(11.4),
                    clipped: Some((0.0, 14.6)),
                    no_spread: false,
                    without: Vec::new(),
                },
                Estimate {
                    metric: "request_throughput".into(),
                    statistic: "value".into(),
                    unit: "requests/s".into(),
                    values: vec![10.0, 11.0, 12.0],
                    mean: Some(11.0),
                    half_width: Some(2.5),
                    clipped: None,
                    no_spread: false,
                    without: Vec::new(),
                },
            ],
            ..Repeats::default()
        };
        let html = render(&e, &[]);
        assert!(html.contains("0 to 14.6 ms (clipped)"), "{html}");
        assert!(!html.contains("± 11.4"), "{html}");
        assert!(html.contains("± 2.50 req/s"), "{html}");
        assert!(!html.contains("no spread"), "{html}");
        // Every run the same: summary.json's `no_spread`, not a `± 0`.
        let mut same = e.clone();
        same.estimates[1] = Estimate {
            values: vec![11.0, 11.0, 11.0],
            half_width: Some(0.0),
            no_spread: true,
            ..e.estimates[1].clone()
        };
        let html = render(&same, &[]);
        assert!(!html.contains("± 0"), "{html}");
        assert!(html.contains("no spread: every run gave it"), "{html}");
    }

    /// A throughput over one of two runs names the other with why, as the command's table,
    /// and its runs column says over how many; a rate no run gave is listed, not left out.
    #[test]
    fn a_figure_over_fewer_runs_names_those_without_one() {
        use crate::artifacts::repeats::{NoEstimate, Without};
        let why = "1 measured request: a rate needs at least 2";
        let run2 = Without {
            dir: "run-2".into(),
            why: why.into(),
        };
        let e = Repeats {
            estimates: vec![Estimate {
                metric: "request_throughput".into(),
                statistic: "value".into(),
                unit: "requests/s".into(),
                values: vec![10.0],
                mean: Some(10.0),
                without: vec![run2.clone()],
                ..Estimate::default()
            }],
            unavailable: vec![NoEstimate {
                metric: "goodput".into(),
                statistic: "value".into(),
                without: vec![run2],
            }],
            ..Repeats::default()
        };
        let html = render(&e, &[]);
        assert!(
            html.contains(&format!(
                "throughput: over 1 of 2 runs; without a figure: run-2 ({why})"
            )),
            "{html}"
        );
        assert!(html.contains(">1 of 2</td>"), "{html}");
        assert!(
            html.contains(&format!(
                "goodput: no figure: none of the 1 runs gave one: run-2 ({why})"
            )),
            "{html}"
        );
    }
}
