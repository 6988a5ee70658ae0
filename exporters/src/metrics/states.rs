//! Per-run state sets: the last run's verdict, baseline trend and diagnosis, each a gauge
//! per possible value, 1 for the one that holds and 0 for the others, so a dashboard asks
//! for "the last one" with `== 1` instead of guessing from counters.

use super::latest::LatestGauge;
use super::Instruments;
use crate::labels::attr;
use canary_core::{Bottleneck, Confidence, Diagnosis};
use opentelemetry::KeyValue;

/// Records a state set on `g`: 1 for `now` (added when not among `states`), 0 for the
/// others, each under `key`, in place of the workload's last set.
fn record_state_set(
    g: &LatestGauge,
    base: &[KeyValue],
    key: &'static str,
    states: &[&str],
    now: &str,
) {
    let all = states
        .iter()
        .chain((!states.contains(&now)).then_some(&now));
    g.record(
        base,
        all.map(|s| {
            let value = if *s == now { 1.0 } else { 0.0 };
            (vec![KeyValue::new(key, s.to_string())], Some(value))
        }),
    );
}

impl Instruments {
    /// The last run's verdict and trend as state sets: the one that holds is 1, the others
    /// 0, so "the last verdict" is a plain query (`== 1`) rather than a guess from counters.
    pub fn record_states(&self, base: &[KeyValue], verdict: &str, trend: Option<&str>) {
        record_state_set(
            &self.verdict_state,
            base,
            attr::VERDICT,
            &["pass", "fail", "error", "unjudged"],
            verdict,
        );
        record_state_set(
            &self.trend_state,
            base,
            attr::TREND,
            &[
                "steady",
                "regressed",
                "improved",
                "insufficient",
                "not_compared",
            ],
            trend.unwrap_or("not_compared"),
        );
    }

    /// The last run's diagnosis as two state sets, its class and its confidence, so "the
    /// last diagnosis" is a plain query like the last verdict. Every class is written each
    /// time, so the previous run's class drops to 0.
    pub fn record_diagnosis(&self, base: &[KeyValue], d: &Diagnosis) {
        self.record_diagnosis_of(base, d.class, d.confidence);
    }

    /// [`Instruments::record_diagnosis`] of a class and confidence alone (a stored run's).
    pub fn record_diagnosis_of(
        &self,
        base: &[KeyValue],
        class: Bottleneck,
        confidence: Confidence,
    ) {
        record_state_set(
            &self.bottleneck_state,
            base,
            attr::BOTTLENECK,
            &Bottleneck::ALL.map(Bottleneck::as_str),
            class.as_str(),
        );
        record_state_set(
            &self.confidence_state,
            base,
            attr::BOTTLENECK_CONFIDENCE,
            &[Confidence::High, Confidence::Medium, Confidence::Low].map(Confidence::as_str),
            confidence.as_str(),
        );
    }
}
