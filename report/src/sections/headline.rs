//! The figures a reader wants first: counts, rates, and the latency percentiles, counted or
//! timed per request from `records.jsonl`: exact, except a latency whose records say some of
//! its times are only bounds (`rx`), which is labelled a bound and counted: TTFB, TTFT and e2e
//! upper bounds, ITL a bound by [`canary_core::itl_is_bound`] (its first token or end not
//! exact).

use super::{ms, num, pct};
use crate::artifacts::{Metric, Run, RxKind};
use crate::html::{esc, table};
use crate::sample::{quantile, sorted};
use canary_core::RxSource;

/// The percentiles a report prints, with their labels.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("max", 1.0),
];

/// Tiles of counts and rates, then the latency table.
pub fn render(run: &Run) -> String {
    let f = run.figures();
    // A rate over no request the target was sent (every one cancelled, or canaryd's own
    // failure) is no rate (summary.json's null): not a clean 0 %.
    let share = |x: Option<f64>| x.map_or_else(|| "–".to_string(), pct);
    let mut tiles = vec![
        (num(f.requests as f64), "requests".to_string()),
        (
            format!("{} ({})", num(f.errors as f64), share(f.error_rate)),
            if f.error_rate.is_some() {
                "errors (rate of the target's)".to_string()
            } else {
                "errors (no request reached the target: no rate)".to_string()
            },
        ),
        (
            rate(f.request_throughput, "req/s"),
            over_duration("completed per second", f.request_throughput, run),
        ),
        (
            rate(f.output_token_throughput, "tok/s"),
            over_duration("output tokens per second", f.output_token_throughput, run),
        ),
        (
            format!("{} s", num(f.duration_s)),
            match run.merged {
                Some(_) => format!("first send to last end, across shards ({DURATION_KIND}; within their alignment, below)"),
                None => format!("first send to last end ({DURATION_KIND})"),
            },
        ),
    ];
    let per_user = PerUser::of(run);
    if let Some(median) = per_user.median() {
        tiles.push((
            rate(Some(median), "tok/s"),
            format!(
                "output tokens/s per user, 1000 / ITL{} (median of {} requests{})",
                // As ITL's row: some rate is a bound when some ITL is.
                if itl_bounds(run).is_some() {
                    ", a bound"
                } else {
                    ""
                },
                num(per_user.rates.len() as f64),
                if per_user.unmeasured > 0 {
                    ", not all: see below"
                } else {
                    ""
                }
            ),
        ));
    }
    if f.cancelled > 0 {
        // Neither completed nor the target's errors: said, so the tiles add up.
        tiles.insert(
            2,
            (
                num(f.cancelled as f64),
                "cancelled by canaryd on purpose".to_string(),
            ),
        );
    }
    if let Some(why) = &f.rate_unavailable {
        tiles.push(("no rates".into(), why.clone()));
    }
    // With SLOs, whether or not any request was judged by them.
    if f.slos {
        let (g, frac) = (f.goodput, f.good_fraction);
        let slos = run
            .summary
            .as_ref()
            .and_then(|s| s.goodput_slos())
            .unwrap_or_default();
        tiles.push((
            format!("{} ({})", rate(g, "req/s"), share(frac)),
            format!("goodput against {slos}{}", goodput_kind(&f)),
        ));
        if let Some(on_bound) = met_on_bound(&f) {
            tiles.push(on_bound);
        }
        if let Some(range) = good_range(&f) {
            tiles.push(range);
        }
    }
    let mut html = String::new();
    if let Some(newer) = run.summary.as_ref().and_then(|s| s.newer_schema(&run.dir)) {
        // Said first too (the notes are at the page's end): anything below may be misread.
        html.push_str(&format!("<p class=\"warn\">{}</p>\n", esc(&newer)));
    }
    let left_out = run.records.left_out;
    if left_out > 0 {
        // Said first: every figure below is of the run's start, not of the run.
        html.push_str(&format!(
            "<p class=\"warn\">Drawn from the first {} records of records.jsonl only: {} \
             more were left out (a report draws at most {}). The counts, rates and \
             percentiles below are of those first requests; summary.json has the whole \
             run's.</p>\n",
            num(run.records.requests.len() as f64),
            num(left_out as f64),
            num(crate::artifacts::MAX_REQUESTS as f64)
        ));
    }
    html.push_str("<div class=\"tiles\">");
    for (value, what) in tiles {
        html.push_str(&format!(
            "<div class=\"tile\"><b>{}</b><span>{}</span></div>",
            esc(&value),
            esc(&what)
        ));
    }
    html.push_str("</div>\n");
    if let Some(note) = per_user.note() {
        html.push_str(&format!("<p class=\"note\">{}.</p>\n", esc(&note)));
    }
    if f.slos {
        html.push_str(&format!(
            "<p class=\"note\">{}</p>\n",
            esc(&goodput_note(&f))
        ));
    }
    if let Some(m) = &run.merged {
        html.push_str(&format!("<p class=\"note\">{}</p>\n", esc(&merged(m))));
    }
    html.push_str(&latency_table(run));
    html
}

/// Tokens/s per user over the completed measured requests drawn: the rates of those that have
/// one, and how many with more than one token have none (every token in one read), counted as
/// `summary.json`'s `per_user_unmeasured` is.
struct PerUser {
    rates: Vec<f64>,
    unmeasured: u64,
}

impl PerUser {
    fn of(run: &Run) -> PerUser {
        let mut rates = Vec::new();
        let mut unmeasured = 0;
        for r in run.measured().filter(|r| r.ok) {
            match r.tokens_per_s.filter(|v| v.is_finite()) {
                Some(v) => rates.push(v),
                None => unmeasured += u64::from(r.output_tokens > 1),
            }
        }
        PerUser {
            rates: sorted(rates),
            unmeasured,
        }
    }

    /// The nearest-rank median, exact over the requests with a rate.
    fn median(&self) -> Option<f64> {
        (!self.rates.is_empty()).then(|| quantile(&self.rates, 0.5))
    }

    /// The requests the median leaves out, as the run table and the sweep say it.
    fn note(&self) -> Option<String> {
        canary_core::per_user_note(self.unmeasured, self.rates.len() as u64)
    }
}

/// What a merged run's span and rates rest on: its shards placed on one time axis, within the
/// alignment's bound, as its `summary.json` labels its own.
fn merged(m: &crate::artifacts::Merged) -> String {
    let within = match (m.bound_ms, &m.unbounded_because) {
        (Some(b), _) => format!("within ±{} ms (merged.alignment.bound_ms", num(b)),
        (None, Some(why)) => format!("with no bound: {why} (merged.alignment"),
        (None, None) => "with no bound (merged.alignment".to_string(),
    };
    let basis = m
        .basis
        .as_deref()
        .map_or(String::new(), |b| format!("; {b}"));
    format!(
        "Merged from {} shards (canaryd merge): each shard's records are placed on the merged \
         time axis by its t0 offset (merged.inputs[].t0_offset_ms). The duration, the rates and \
         the timelines span the shards on that axis {within}{basis}); each request's latencies \
         and schedule lag are measured on its own shard's clock, exactly.",
        m.offsets.len()
    )
}

/// What the goodput tile's figures are: over exact judgements, the share is exact and the
/// rate a lower bound (an exact count over the duration, an upper bound); where a judgement
/// rests on a bound, both are estimates within the range the next tile gives.
fn goodput_kind(f: &crate::Figures) -> &'static str {
    let doubted: u64 =
        f.uncertain_misses.values().sum::<u64>() + f.uncertain_meets.values().sum::<u64>();
    match (f.goodput, f.good_fraction, doubted) {
        (None, None, _) => "",
        (_, _, 1..) => " (estimates: some judgements rest on a bound, see below)",
        (Some(_), Some(_), 0) => {
            " (the rate a lower bound: the good count over the duration; the share exact)"
        }
        (Some(_), None, 0) => " (a lower bound: the good count over the duration)",
        (None, Some(_), 0) => " (the share exact)",
    }
}

/// A tile of the SLO terms met only on a bound, when any were: those requests' tokens came in
/// one read, so ITL is known only from above and the per-user rate from below, and each was
/// judged good on its bound (the note below gives them by term).
fn met_on_bound(f: &crate::Figures) -> Option<(String, String)> {
    let terms: u64 = f.met_on_bound.values().sum();
    (terms > 0).then(|| {
        (
            num(terms as f64),
            "SLO terms met only on a bound (tokens in one read: see below)".to_string(),
        )
    })
}

/// A tile of how many requests truly met every term, when some judgements rest on a bound
/// that could turn them: the good count is then exact only as a count of judgements.
fn good_range(f: &crate::Figures) -> Option<(String, String)> {
    let doubted: u64 =
        f.uncertain_misses.values().sum::<u64>() + f.uncertain_meets.values().sum::<u64>();
    let (low, high) = f.good_range?;
    (doubted > 0).then(|| {
        (
            format!("{} to {}", num(low as f64), num(high as f64)),
            format!(
                "requests truly good ({} judged good; {} judgements rest on a bound: see below)",
                f.good_requests.map_or("–".into(), |g| num(g as f64)),
                num(doubted as f64)
            ),
        )
    })
}

/// Where the goodput figures come from and what they rest on: the terms missed, those met
/// only on a bound and the requests with no value for a term, as `canaryd replay`'s table
/// prints them.
fn goodput_note(f: &crate::Figures) -> String {
    let source = if f.goodput_from_summary {
        "Goodput as summary.json judged it (the figures a daemon run's verdict reads)"
    } else {
        "Goodput judged here from records.jsonl by canaryd's rules (no goodput block in \
         summary.json)"
    };
    let mut parts = Vec::new();
    if !f.slo_misses.is_empty() {
        let missed: Vec<String> = f
            .slo_misses
            .iter()
            .map(|(m, n)| format!("{m} {}", num(*n as f64)))
            .collect();
        parts.push(format!(
            "missed (failed, or past the threshold): {}",
            missed.join(", ")
        ));
    }
    if !f.met_on_bound.is_empty() {
        let met: Vec<String> = f
            .met_on_bound
            .iter()
            .map(|(m, n)| format!("{m} {}", num(*n as f64)))
            .collect();
        parts.push(format!(
            "met only on a bound, judged good on it (their tokens came in one read: ITL known \
             only from above, the per-user rate from below): {}",
            met.join(", ")
        ));
    }
    if !f.no_value.is_empty() {
        parts.push(format!(
            "not good for want of a value: {}",
            f.no_value.join(", ")
        ));
    }
    parts.extend(uncertain(f));
    if parts.is_empty() {
        format!("{source}.")
    } else {
        format!("{source}. {}.", parts.join("; "))
    }
}

/// The judgements that rest on a time that is only a bound, and could go the other way
/// (`summary.json`'s `uncertain_misses`, `uncertain_meets`), with the range they leave the
/// good count in: `good 180 (truly 180 to 186: 3 misses and 2 meets rest on a bound: …)`.
/// `None` when every judgement was on exact times.
fn uncertain(f: &crate::Figures) -> Option<String> {
    let total = |m: &std::collections::BTreeMap<String, u64>| m.values().sum::<u64>();
    let (misses, meets) = (total(&f.uncertain_misses), total(&f.uncertain_meets));
    if misses + meets == 0 {
        return None;
    }
    let plural = |n: u64, one: &str, many: &str| {
        format!("{} {}", num(n as f64), if n == 1 { one } else { many })
    };
    let mut rest = Vec::new();
    if misses > 0 {
        rest.push(plural(misses, "miss", "misses"));
    }
    if meets > 0 {
        rest.push(plural(meets, "meet", "meets"));
    }
    let verb = if misses + meets == 1 { "rests" } else { "rest" };
    let by_term = |m: &std::collections::BTreeMap<String, u64>, how: &str| {
        m.iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {how} {}", num(*n as f64)))
            .collect::<Vec<_>>()
    };
    let mut terms = by_term(&f.uncertain_misses, "missed");
    terms.extend(by_term(&f.uncertain_meets, "met"));
    let good = f.good_requests.map_or("–".into(), |g| num(g as f64));
    let truly = match f.good_range {
        Some((low, high)) => format!("truly {} to {}: ", num(low as f64), num(high as f64)),
        None => String::new(),
    };
    Some(format!(
        "good {good} ({truly}{} {verb} on a bound, a time read late, and may go the other way: \
         {})",
        rest.join(" and "),
        terms.join(", ")
    ))
}

/// What the duration is, as the run table says it: the last end is canaryd's read of it, never
/// before the end itself.
const DURATION_KIND: &str = "an upper bound: to the last end as canaryd read it";

/// The label of a rate over the run's duration (`what`), with its kind as the run table gives
/// it: an exact count over a duration that is an upper bound is a lower bound. A run with no
/// rate (`–`) has no kind to say.
fn over_duration(what: &str, v: Option<f64>, run: &Run) -> String {
    match (v, &run.merged) {
        (None, _) => what.to_string(),
        (Some(_), None) => format!("{what} (a lower bound: the exact count over the duration)"),
        (Some(_), Some(_)) => format!(
            "{what} (a lower bound: the exact count over the duration, within the shards' \
             alignment, below)"
        ),
    }
}

/// A rate with its unit, or "–" for a run that has none.
fn rate(v: Option<f64>, unit: &str) -> String {
    v.map_or("–".to_string(), |v| format!("{} {unit}", num(v)))
}

/// How many of a metric's values are only upper bounds (`rx`: the receive stamp of a later
/// segment than the one that completed the event, or canaryd's read), by kind; `None` when
/// none is.
fn bounds(run: &Run, m: Metric) -> Option<String> {
    let (mut all, mut kernel_bound, mut userspace, mut unknown) = (0u64, 0u64, 0u64, 0u64);
    for r in run.valued(m) {
        all += 1;
        match m.rx(r) {
            Some(RxKind::KernelBound) => kernel_bound += 1,
            Some(RxKind::Userspace) => userspace += 1,
            Some(RxKind::Unknown) => unknown += 1,
            Some(RxKind::Kernel) | None => {}
        }
    }
    let kinds: Vec<String> = [
        (kernel_bound, RxKind::KernelBound),
        (userspace, RxKind::Userspace),
        (unknown, RxKind::Unknown),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, k)| format!("{} {}", num(*n as f64), k.name()))
    .collect();
    (!kinds.is_empty()).then(|| {
        format!(
            "{}: {} of {} are upper bounds ({})",
            m.label(),
            num((kernel_bound + userspace + unknown) as f64),
            num(all as f64),
            kinds.join(", ")
        )
    })
}

/// The latency table's rows, in the order a response's times come: TTFB (the head) beside the
/// metrics charted.
const TABLE: [Metric; 4] = [Metric::Ttfb, Metric::Ttft, Metric::Itl, Metric::E2e];

/// Count, mean and percentiles of each latency metric. A metric some of whose values are only
/// upper bounds (their records' `rx`) is labelled a bound, and the note says how many.
pub fn latency_table(run: &Run) -> String {
    let mut rows = Vec::new();
    let mut bounded = Vec::new();
    let mut itl_bound = false;
    for m in TABLE {
        let s = sorted(run.values(m));
        if s.is_empty() {
            continue;
        }
        let bound = match m {
            Metric::Itl => itl_bounds(run),
            _ => bounds(run, m),
        };
        let label = match (&bound, m) {
            (Some(_), Metric::Itl) => format!("{} (bound)", m.label()),
            (Some(_), _) => format!("{} (upper bound)", m.label()),
            (None, _) => m.label().to_string(),
        };
        itl_bound |= bound.is_some() && m == Metric::Itl;
        bounded.extend(bound);
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        let mut row = vec![esc(&label), num(s.len() as f64), ms(mean)];
        row.extend(PERCENTILES.iter().map(|&(_, q)| ms(quantile(&s, q))));
        rows.push(row);
    }
    if rows.is_empty() {
        return "<p class=\"note\">No completed request: no latency to show.</p>\n".into();
    }
    let mut head = vec!["metric", "count", "mean"];
    head.extend(PERCENTILES.iter().map(|p| p.0));
    let mut html = table("latency", &head, &rows);
    let over = if run.records.left_out > 0 {
        "over the completed, measured requests drawn (the first records of records.jsonl, see \
         above; nearest-rank percentiles, warm-up left out)"
    } else {
        "from every completed, measured request in records.jsonl (nearest-rank percentiles, \
         warm-up left out)"
    };
    if bounded.is_empty() {
        html.push_str(&format!("<p class=\"note\">Exact: {over}.</p>\n"));
    } else {
        // A bound is never below the truth, so its percentiles are upper bounds too; ITL is
        // a difference of two such times.
        let itl = if itl_bound {
            " (ITL's, a difference of two such times, are bounds as counted above)"
        } else {
            ""
        };
        let unknown = if bounded.iter().any(|b| b.contains(" unknown")) {
            " A time whose receive-stamp kind this report does not know (unknown: another \
             version's, or none named) is not taken as exact either; the notes on the \
             artifacts name the kinds."
        } else {
            ""
        };
        html.push_str(&format!(
            "<p class=\"note\">{}. A bound's time is its read's last segment's \
             (kernel_bound) or canaryd's read (userspace), never before the event: the figures \
             of a metric with bounds are upper bounds{itl}, the others exact; {over}.{unknown}</p>\n",
            esc(&bounded.join("; "))
        ));
    }
    html
}

/// How many ITLs are only bounds, by [`canary_core::itl_is_bound`]: ITL is (e2e − TTFT) /
/// (n − 1) from a request's first token and end, so a bound first token makes it a lower
/// bound, a bound end an upper bound, both a bound in neither direction. `None` when none is.
fn itl_bounds(run: &Run) -> Option<String> {
    let source = |k: Option<RxKind>| {
        k.map(|k| match k {
            RxKind::Kernel => RxSource::Kernel,
            RxKind::KernelBound => RxSource::KernelBound,
            // Unknown to this report: a bound, as canaryd's read is.
            RxKind::Userspace | RxKind::Unknown => RxSource::Userspace,
        })
    };
    let late = |k: Option<RxKind>| k.is_none_or(RxKind::is_bound);
    let (mut all, mut lower, mut upper, mut neither) = (0u64, 0u64, 0u64, 0u64);
    for r in run.valued(Metric::Itl) {
        all += 1;
        if !canary_core::itl_is_bound(source(r.ttft_rx), source(r.e2e_rx), r.itl_ms) {
            continue;
        }
        match (late(r.ttft_rx), late(r.e2e_rx)) {
            (true, true) => neither += 1,
            (false, true) => upper += 1,
            // A late first token; or none late, and 0 ms: tokens in one read.
            _ => lower += 1,
        }
    }
    let kinds: Vec<String> = [
        (lower, "lower (first token a bound)"),
        (upper, "upper (end a bound)"),
        (neither, "in neither direction (both)"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, k)| format!("{} {k}", num(*n as f64)))
    .collect();
    (!kinds.is_empty()).then(|| {
        format!(
            "ITL: {} of {} are bounds, (e2e − TTFT)/(n − 1) over a first token or end not \
             exact ({})",
            num((lower + upper + neither) as f64),
            num(all as f64),
            kinds.join(", ")
        )
    })
}
