//! Which of a run's figures are not exact, by the rule `canaryd sweep` marks its cells `*` with
//! and writes into `sweep.json`'s `bounds` ([`canary_core::RxBounds::is_bound`] over the
//! run's `summary.json` `receive_timestamps`): TTFT and e2e are upper bounds when some first
//! tokens (ends) were a later segment's stamp or canaryd's read; ITL and tokens/s per user are
//! exact in neither direction where some request's first token or end is such a bound
//! ([`canary_core::itl_is_bound`]). A mean over runs is a bound where any run's figure is.

use crate::artifacts::{Metric, Run};
use canary_core::{RxBounds, RxSummary};

/// TTFT, as `summary.json` and `sweep.json`'s `bounds` name it.
pub const TTFT: &str = "time_to_first_token";
/// e2e.
pub const E2E: &str = "request_latency";
/// ITL.
pub const ITL: &str = "inter_token_latency";
/// Output tokens/s seen by one user.
pub const PER_USER: &str = "output_token_throughput_per_user";

/// The figures a report shows that can be bounds, as `summary.json` names them.
const FIGURES: [&str; 4] = [PER_USER, TTFT, ITL, E2E];

/// The names of `run`'s figures that are not exact. From its `summary.json`'s
/// `receive_timestamps`, as the sweep reads them; a run whose summary does not count them
/// (none, or one from before) by its records' `rx`: a first token or end not stamped `kernel`
/// is a bound, and the gaps and rates over such a time are too.
pub fn of_run(run: &Run) -> Vec<&'static str> {
    let counted = run
        .summary
        .as_ref()
        .and_then(|s| s.section("receive_timestamps"))
        .and_then(|rx| serde_json::from_value::<RxSummary>(rx.clone()).ok());
    let b = match counted {
        Some(rx) => rx.bounds(),
        None => {
            let any = |m: Metric| run.valued(m).any(|r| m.rx(r).is_some_and(|k| k.is_bound()));
            // A request's ITL is over its first token and end (canary_core::itl_is_bound):
            // a bound where either is, or where its tokens came in one read (0 ms).
            let late = |k: Option<crate::artifacts::RxKind>| k.is_some_and(|k| k.is_bound());
            RxBounds {
                first_token: any(Metric::Ttft),
                token_events: false,
                end: any(Metric::E2e),
                head: any(Metric::Ttfb),
                itl: run
                    .valued(Metric::Itl)
                    .any(|r| late(r.ttft_rx) || late(r.e2e_rx) || Metric::Itl.of(r) == Some(0.0)),
            }
        }
    };
    FIGURES.into_iter().filter(|m| b.is_bound(m)).collect()
}

/// Every name of any of `each` (a mean's figure is a bound where any run's is), in
/// [`FIGURES`] order.
pub fn union<'a>(each: impl IntoIterator<Item = &'a [&'static str]>) -> Vec<&'static str> {
    let all: Vec<&'static str> = each.into_iter().flatten().copied().collect();
    FIGURES.into_iter().filter(|m| all.contains(m)).collect()
}

/// The name in `FIGURES` of `sweep.json`'s `name`, `None` for one a report does not show.
pub fn known(name: &str) -> Option<&'static str> {
    FIGURES.into_iter().find(|m| *m == name)
}

/// Whether `metric`'s figures are upper bounds (TTFT, e2e), not exact in neither direction.
pub fn is_upper(metric: &str) -> bool {
    matches!(metric, TTFT | E2E)
}
