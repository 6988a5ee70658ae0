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
    /// A trend of `insufficient` whose direction was seen against a reference of one or two
    /// runs (`unconfirmed`: `regressed`, `improved`) has it on its point as
    /// `canary.run.trend.unconfirmed`.
    pub fn record_states(
        &self,
        base: &[KeyValue],
        verdict: &str,
        trend: Option<&str>,
        unconfirmed: Option<&str>,
    ) {
        record_state_set(
            &self.verdict_state,
            base,
            attr::VERDICT,
            &["pass", "fail", "error", "interrupted", "unjudged"],
            verdict,
        );
        let now = trend.unwrap_or("not_compared");
        let states = [
            "steady",
            "regressed",
            "improved",
            "insufficient",
            "not_compared",
        ];
        let all = states
            .iter()
            .chain((!states.contains(&now)).then_some(&now));
        self.trend_state.record(
            base,
            all.map(|s| {
                let mut a = vec![KeyValue::new(attr::TREND, s.to_string())];
                if *s == now {
                    if let Some(u) = unconfirmed {
                        a.push(KeyValue::new(attr::TREND_UNCONFIRMED, u.to_string()));
                    }
                }
                (a, Some(if *s == now { 1.0 } else { 0.0 }))
            }),
        );
    }

    /// Each telemetry source's state of the last run as a state set: for every source the
    /// run had a state for (`canary.telemetry.source`: `dcgm`, `ebpf`, `nvml`,
    /// `server_metrics`), 1 for its state (`canary.telemetry.state`) and 0 for the others.
    pub fn record_sources(
        &self,
        base: &[KeyValue],
        sources: &std::collections::BTreeMap<canary_core::Source, canary_core::SourceState>,
    ) {
        let states = ["available", "unavailable", "disabled", "pending"];
        let mut points = Vec::new();
        for (source, state) in sources {
            let now = state.name();
            for s in states
                .iter()
                .chain((!states.contains(&now)).then_some(&now))
            {
                let a = vec![
                    KeyValue::new(attr::TELEMETRY_SOURCE, source.as_str()),
                    KeyValue::new(attr::TELEMETRY_STATE, *s),
                ];
                points.push((a, Some(if *s == now { 1.0 } else { 0.0 })));
            }
        }
        self.source_state.record(base, points);
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
