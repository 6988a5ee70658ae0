//! Which of a side's figures are not exact: some of its first tokens, ends or token events were
//! a later segment's stamp or canaryd's read (`summary.json`'s `receive_timestamps`, counted
//! by [`SideTimes`]), or a run's summary does not say how they were taken (none, or one from
//! before they were counted), as `canaryd sweep`'s table takes such a run's. One rule for
//! `canaryd compare`'s `(bound)` rows and the `*` of a sweep comparison's cells.

use super::first_token::SideTimes;

/// TTFT, as `summary.json` and `sweep.json`'s `bounds` name it.
pub(crate) const TTFT: &str = "time_to_first_token";
/// e2e.
pub(crate) const E2E: &str = "request_latency";
/// ITL.
pub(crate) const ITL: &str = "inter_token_latency";

/// The figures of a side's point that are not exact, in `sweep.json`'s `bounds` names: TTFT
/// and e2e upper bounds, ITL exact in neither direction. Exact only on positive evidence: a
/// run that does not say how its times were taken makes them bounds too (a time canaryd took
/// is never before the truth), and the rule line under the table counts such runs.
pub(crate) fn of(t: &SideTimes) -> Vec<&'static str> {
    [
        (TTFT, t.first_tokens.not_exact()),
        (ITL, t.itl.any_bound()),
        (E2E, t.ends.not_exact()),
    ]
    .into_iter()
    .filter_map(|(name, bound)| bound.then_some(name))
    .collect()
}

/// The name in `bounds` of a table metric (`TTFT p99`), `None` for one that cannot be a bound.
pub(crate) fn name_of(metric: &str) -> Option<&'static str> {
    [("TTFT", TTFT), ("e2e", E2E), ("ITL", ITL)]
        .into_iter()
        .find(|(m, _)| metric.starts_with(m))
        .map(|(_, name)| name)
}
