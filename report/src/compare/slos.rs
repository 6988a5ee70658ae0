//! Whether the sides judged their requests against the same SLOs, and whether a side's goodput
//! rests on bounds: goodput and the good fraction are counts of requests that met the SLOs, so
//! under other SLOs they are other figures (a stricter threshold is not a regression), and a
//! request judged on a time that is only a bound may have gone the other way.

use crate::artifacts::Run;
use crate::Experiment;
use canary_core::Goodput;
use serde::Serialize;
use std::collections::BTreeSet;

/// The sides' SLOs, when they differ: goodput and the good fraction are not compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DifferentSlos {
    /// A's SLOs as its runs wrote them (`none` for a run without; runs that differ among
    /// themselves are each named).
    pub a: String,
    /// B's.
    pub b: String,
    /// The sentence said above the table and in the goodput rows.
    pub why: String,
}

/// A run's SLO terms in one canonical spelling (terms sorted, thresholds as parsed), so that
/// `ttft:5 itl:2` and `itl:2.0 ttft:5` are the same SLOs. A spec that does not parse is kept
/// as written; `None` for a run without SLOs.
fn canonical(r: &Run) -> Option<String> {
    let spec = r.summary.as_ref()?.goodput_slos()?;
    Some(match spec.parse::<Goodput>() {
        Ok(g) => {
            let mut terms: Vec<String> = g.to_string().split(' ').map(str::to_string).collect();
            terms.sort();
            terms.join(" ")
        }
        Err(_) => spec.trim().to_string(),
    })
}

/// A side's distinct SLO sets over its runs.
fn of(e: &Experiment) -> BTreeSet<Option<String>> {
    e.runs.iter().map(canonical).collect()
}

fn said(set: &BTreeSet<Option<String>>) -> String {
    set.iter()
        .map(|s| s.clone().unwrap_or_else(|| "none".into()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `Some` when the sides' SLOs differ, or a side's runs were judged against more than one set.
pub(super) fn different(a: &Experiment, b: &Experiment) -> Option<DifferentSlos> {
    let (sa, sb) = (of(a), of(b));
    if sa == sb && sa.len() == 1 {
        return None;
    }
    let (a, b) = (said(&sa), said(&sb));
    let why = format!("different SLOs (A: {a}, B: {b})");
    Some(DifferentSlos { a, b, why })
}

/// When some run of a side judged a request on a bound that could turn it (summary.json's
/// `uncertain_misses`, `uncertain_meets`): the words for it, as `A: 12 misses and 0 meets
/// judged on a bound`, one clause per such side. `None` when every judgement was exact.
pub(super) fn on_bounds(fa: &[crate::Figures], fb: &[crate::Figures]) -> Option<String> {
    let side = |name: &str, f: &[crate::Figures]| {
        let sum = |get: fn(&crate::Figures) -> u64| f.iter().map(get).sum::<u64>();
        let misses = sum(|x| x.uncertain_misses.values().sum());
        let meets = sum(|x| x.uncertain_meets.values().sum());
        (misses + meets > 0)
            .then(|| format!("{name}: {misses} misses and {meets} meets judged on a bound"))
    };
    let said: Vec<String> = [side("A", fa), side("B", fb)]
        .into_iter()
        .flatten()
        .collect();
    (!said.is_empty()).then(|| format!("goodput rests on bounds ({})", said.join("; ")))
}

/// The line above the table: goodput and the good fraction are shown, not compared.
pub(super) fn note(d: &DifferentSlos) -> String {
    format!(
        "Not comparable: goodput and the good fraction: the sides judged their requests \
         against {}: a request good under one is not under the other, so those rows show \
         the values and no verdict.",
        d.why
    )
}
