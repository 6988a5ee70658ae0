//! A run's timeslices (`--slice-duration`, issue 18) as gauge points, one per slice: each
//! carries the slice's start (`canary.slice.start_s`, seconds after the run's start) and
//! whether the run ended inside it (`canary.slice.partial`), so a panel plots drift within a
//! run. Latencies are in seconds, by statistic (`canary.statistic`: p50, p90, p99), and say
//! whether they are exact or bounds (`canary.value_kind`, the slice's `bound`).

use super::latency_kind;
use super::latest::LatestGauge;
use crate::labels::attr;
use canary_core::{SliceStats, TimesliceReport};
use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;

/// The slice start attribute.
const SLICE_START: &str = "canary.slice.start_s";
/// The partial-slice attribute.
const SLICE_PARTIAL: &str = "canary.slice.partial";

/// The slice gauges, each holding its workload's last run's slices (a later run with fewer
/// slices, or none, leaves no earlier slice showing).
pub(crate) struct SliceInstruments {
    requests: LatestGauge,
    errors: LatestGauge,
    throughput: LatestGauge,
    token_throughput: LatestGauge,
    ttft: LatestGauge,
    itl: LatestGauge,
    e2e: LatestGauge,
}

impl SliceInstruments {
    /// Every gauge, for [`super::Instruments::retain_workloads`].
    pub fn gauges(&self) -> [&LatestGauge; 7] {
        [
            &self.requests,
            &self.errors,
            &self.throughput,
            &self.token_throughput,
            &self.ttft,
            &self.itl,
            &self.e2e,
        ]
    }

    pub fn new(m: &Meter) -> SliceInstruments {
        let g = |name, unit, desc| LatestGauge::new(m, name, unit, desc);
        SliceInstruments {
            requests: g(
                "canary.slice.requests",
                "{request}",
                "Requests sent in the slice",
            ),
            errors: g(
                "canary.slice.errors",
                "{request}",
                "Requests sent in the slice that failed",
            ),
            throughput: g(
                "canary.slice.request_throughput",
                "{request}/s",
                "Requests that finished in the slice, per second",
            ),
            token_throughput: g(
                "canary.slice.output_token_throughput",
                "{token}/s",
                "Output tokens of the requests that finished in the slice, per second",
            ),
            ttft: g(
                "canary.slice.time_to_first_token",
                "s",
                "TTFT of the requests sent in the slice",
            ),
            itl: g(
                "canary.slice.inter_token_latency",
                "s",
                "Inter-token latency of the requests sent in the slice",
            ),
            e2e: g(
                "canary.slice.request_latency",
                "s",
                "End-to-end latency of the requests sent in the slice",
            ),
        }
    }

    /// One point per slice and figure of the run's slices (`None`: the run had none), in
    /// place of its workload's last run's.
    pub fn record(&self, t: Option<&TimesliceReport>, base: &[KeyValue]) {
        let slices = t.map_or(&[][..], |t| t.slices.as_slice());
        let at = |s: &canary_core::Timeslice| {
            vec![
                KeyValue::new(SLICE_START, s.start_s),
                KeyValue::new(SLICE_PARTIAL, s.partial),
            ]
        };
        let each = |v: fn(&canary_core::Timeslice) -> Option<f64>| {
            slices.iter().map(move |s| (at(s), v(s)))
        };
        self.requests
            .record(base, each(|s| Some(s.requests as f64)));
        self.errors.record(base, each(|s| Some(s.errors as f64)));
        self.throughput.record(base, each(|s| s.request_throughput));
        self.token_throughput
            .record(base, each(|s| s.output_token_throughput));
        // `from_send`: TTFT and e2e are upper bounds where not exact, ITL a bound either way.
        let latency =
            |g: &LatestGauge,
             from_send: bool,
             st: fn(&canary_core::Timeslice) -> Option<SliceStats>| {
                g.record(
                    base,
                    slices.iter().flat_map(|s| {
                        let stats = st(s);
                        let kind = latency_kind(stats.is_some_and(|st| st.bound), from_send);
                        [("p50", 0), ("p90", 1), ("p99", 2)].map(|(stat, i)| {
                            let mut a = at(s);
                            a.push(KeyValue::new(attr::STATISTIC, stat));
                            a.push(KeyValue::new(attr::VALUE_KIND, kind));
                            let v = stats.map(|st| [st.p50, st.p90, st.p99][i] / 1e3);
                            (a, v)
                        })
                    }),
                );
            };
        latency(&self.ttft, true, |s| s.time_to_first_token);
        latency(&self.itl, false, |s| s.inter_token_latency);
        latency(&self.e2e, true, |s| s.request_latency);
    }
}
