//! A run's timeslices (`--slice-duration`, issue 18) as gauge points, one per slice: each
//! carries the slice's start (`canary.slice.start_s`, seconds after the run's start) and
//! whether the run ended inside it (`canary.slice.partial`), so a panel plots drift within a
//! run. Latencies are in seconds, by statistic (`canary.statistic`: p50, p90, p99).

use crate::labels::attr;
use canary_core::{SliceStats, TimesliceReport};
use opentelemetry::metrics::{Gauge, Meter};
use opentelemetry::KeyValue;

/// The slice start attribute.
const SLICE_START: &str = "canary.slice.start_s";
/// The partial-slice attribute.
const SLICE_PARTIAL: &str = "canary.slice.partial";

/// The slice gauges.
pub(crate) struct SliceInstruments {
    requests: Gauge<f64>,
    errors: Gauge<f64>,
    throughput: Gauge<f64>,
    token_throughput: Gauge<f64>,
    ttft: Gauge<f64>,
    itl: Gauge<f64>,
    e2e: Gauge<f64>,
}

impl SliceInstruments {
    pub fn new(m: &Meter) -> SliceInstruments {
        let g = |name: &'static str, unit: &'static str, desc: &'static str| {
            m.f64_gauge(name)
                .with_unit(unit)
                .with_description(desc)
                .build()
        };
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

    /// One point per slice and figure.
    pub fn record(&self, t: &TimesliceReport, base: &[KeyValue]) {
        for s in &t.slices {
            let mut a = base.to_vec();
            a.push(KeyValue::new(SLICE_START, s.start_s));
            a.push(KeyValue::new(SLICE_PARTIAL, s.partial));
            self.requests.record(s.requests as f64, &a);
            self.errors.record(s.errors as f64, &a);
            if let Some(v) = s.request_throughput {
                self.throughput.record(v, &a);
            }
            if let Some(v) = s.output_token_throughput {
                self.token_throughput.record(v, &a);
            }
            let latency = |g: &Gauge<f64>, st: Option<SliceStats>| {
                let Some(st) = st else { return };
                for (stat, v) in [("p50", st.p50), ("p90", st.p90), ("p99", st.p99)] {
                    let mut a = a.clone();
                    a.push(KeyValue::new(attr::STATISTIC, stat));
                    g.record(v / 1e3, &a);
                }
            };
            latency(&self.ttft, s.time_to_first_token);
            latency(&self.itl, s.inter_token_latency);
            latency(&self.e2e, s.request_latency);
        }
    }
}
