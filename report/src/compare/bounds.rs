//! Which of a side's figures are not exact: some of its first tokens, ends or token events were
//! a later segment's stamp or canaryd's read (`summary.json`'s `receive_timestamps`, counted
//! by [`SideTimes`]). One rule for `canaryd compare`'s `(bound)` rows and the `*` of a sweep
//! comparison's cells.

use super::first_token::SideTimes;

/// TTFT, as `summary.json` and `sweep.json`'s `bounds` name it.
pub(crate) const TTFT: &str = "time_to_first_token";
/// e2e.
pub(crate) const E2E: &str = "request_latency";
/// ITL.
pub(crate) const ITL: &str = "inter_token_latency";

/// The figures of a side's point that are not exact, in `sweep.json`'s `bounds` names: TTFT
/// and e2e upper bounds, ITL exact in neither direction. Only what is known to be a bound;
/// runs that do not say are counted in the rule line under the table.
pub(crate) fn of(t: &SideTimes) -> Vec<&'static str> {
    [
        (TTFT, t.first_tokens.bound > 0),
        (ITL, t.itl.any_bound()),
        (E2E, t.ends.bound > 0),
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
