//! The metric instruments: GenAI semantic-convention histograms where a convention exists,
//! `canary.*` for everything else. Names, units and attributes are listed in the README.
//!
//! Per-request instruments are recorded as each record is written; per-run gauges when a
//! run ends ([`Instruments::record_run`]). Histograms use the conventions' recommended
//! bucket boundaries, so dashboards built for other GenAI clients read ours.

mod latest;
mod slices;
mod states;

use crate::exemplars::Exemplars;
use crate::labels::{attr, metric, RunLabels};
use canary_core::{Goodput, RequestRecord, RunSummary, RunTelemetry, SloMetric};
use latest::LatestGauge;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{Instrument, MeterProviderBuilder, Stream};
use std::sync::Arc;

/// Series one slice gauge may hold. A run's latency slice gauges write 768 points per
/// workload (256 slices × p50/p90/p99); at the SDK's default of 2,000 a third workload's
/// points were folded, silently, into one `otel.metric.overflow` series.
pub(crate) const MAX_SLICE_SERIES: usize = 1 << 16;

/// `builder` with the views canaryd's instruments need: room for every workload's slices.
pub(crate) fn with_views(builder: MeterProviderBuilder) -> MeterProviderBuilder {
    builder.with_view(|i: &Instrument| {
        if !i.name().starts_with("canary.slice.") {
            return None;
        }
        Stream::builder()
            .with_cardinality_limit(MAX_SLICE_SERIES)
            .build()
            .ok()
    })
}

/// `gen_ai.client.operation.duration` (semconv): doubling from 10 ms to 82 s.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Time to first chunk/token (semconv's `gen_ai.server.time_to_first_token` boundaries).
const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Time per output chunk/token (semconv's `gen_ai.server.time_per_output_token`).
const TPOT_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// canaryd's own ITL: from 1 ms, finer than semconv's per-token boundaries (which start at
/// 10 ms), where a server decoding at 6 ms and one at 9 ms both read as "under 10 ms".
const ITL_BUCKETS: [f64; 19] = [
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.5, 1.0, 2.5,
];
/// `gen_ai.client.token.usage` (semconv): powers of 4 up to 64 Mi tokens.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// Schedule lag: canaryd aims at well under a millisecond, a slow host shows seconds.
const LAG_BUCKETS: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Kernel-timed parts (eBPF): from 10 µs, so a client overhead near its 100 µs goal resolves.
const PART_BUCKETS: [f64; 19] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const TTFO: &str = "canary.request.time_to_first_output_token";
const ITL: &str = "canary.request.inter_token_latency";

/// Every instrument canaryd records.
pub(crate) struct Instruments {
    duration: Histogram<f64>,
    ttfc: Histogram<f64>,
    tpoc: Histogram<f64>,
    tokens: Histogram<u64>,
    ttfo: Histogram<f64>,
    itl: Histogram<f64>,
    lag: Histogram<f64>,
    dispatch_lag: Histogram<f64>,
    ttft_part: Histogram<f64>,
    connect: Histogram<f64>,
    chunk_delay: Histogram<f64>,
    requests: Counter<u64>,
    errors: Counter<u64>,
    good: Counter<u64>,
    gpu_util: LatestGauge,
    gpu_power: LatestGauge,
    queue: LatestGauge,
    kv: LatestGauge,
    running: LatestGauge,
    runs: Counter<u64>,
    run_goodput: LatestGauge,
    run_good_ratio: LatestGauge,
    run_goodput_bound: LatestGauge,
    run_good_ratio_bound: LatestGauge,
    run_error_ratio: LatestGauge,
    run_ttft: LatestGauge,
    run_energy: LatestGauge,
    run_energy_per_token: LatestGauge,
    run_gpu_util: LatestGauge,
    run_gpu_power: LatestGauge,
    run_gpu_sm_clock: LatestGauge,
    run_gpu_mem_clock: LatestGauge,
    run_gpu_mem_util: LatestGauge,
    run_prefix_hit: LatestGauge,
    run_server_latency: LatestGauge,
    verdict_state: LatestGauge,
    trend_state: LatestGauge,
    bottleneck_state: LatestGauge,
    confidence_state: LatestGauge,
    source_state: LatestGauge,
    slo: LatestGauge,
    capacity: LatestGauge,
    capacity_not_established: LatestGauge,
    knee: LatestGauge,
    slices: slices::SliceInstruments,
    /// The latency histograms' exemplars (see [`crate::exemplars`]).
    pub exemplars: Arc<Exemplars>,
}

fn hist(
    meter: &Meter,
    name: &'static str,
    unit: &'static str,
    desc: &'static str,
    b: &[f64],
) -> Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_unit(unit)
        .with_description(desc)
        .with_boundaries(b.to_vec())
        .build()
}

fn counter(
    meter: &Meter,
    name: &'static str,
    unit: &'static str,
    desc: &'static str,
) -> Counter<u64> {
    meter
        .u64_counter(name)
        .with_unit(unit)
        .with_description(desc)
        .build()
}

impl Instruments {
    pub fn new(meter: &Meter, exemplars: Arc<Exemplars>) -> Instruments {
        let m = meter;
        Instruments {
            slices: slices::SliceInstruments::new(m),
            exemplars,
            duration: hist(
                m,
                metric::GEN_AI_CLIENT_OPERATION_DURATION,
                "s",
                "GenAI operation duration (send to last byte; to the failure for errors)",
                &DURATION_BUCKETS,
            ),
            ttfc: hist(
                m,
                metric::GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
                "s",
                "Time to the first chunk carrying a token (TTFT)",
                &TTFT_BUCKETS,
            ),
            tpoc: hist(
                m,
                metric::GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
                "s",
                "Time per output chunk after the first",
                &TPOT_BUCKETS,
            ),
            tokens: meter
                .u64_histogram(metric::GEN_AI_CLIENT_TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Input and output tokens per request")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            ttfo: hist(
                m,
                TTFO,
                "s",
                "Time to the first output (non-reasoning) token",
                &TTFT_BUCKETS,
            ),
            itl: hist(
                m,
                ITL,
                "s",
                "(e2e - TTFT) / (output tokens - 1), one per request",
                &ITL_BUCKETS,
            ),
            lag: hist(
                m,
                "canary.request.schedule_lag",
                "s",
                "Actual send time minus the trace's scheduled time",
                &LAG_BUCKETS,
            ),
            dispatch_lag: hist(
                m,
                "canary.request.dispatch_lag",
                "s",
                "Schedule lag less the hold and the wait for a connection: canaryd's own delay",
                &LAG_BUCKETS,
            ),
            ttft_part: hist(
                m,
                "canary.request.ttft.part",
                "s",
                "TTFT split by the kernel's view of the socket (eBPF)",
                &PART_BUCKETS,
            ),
            connect: hist(
                m,
                "canary.request.connect",
                "s",
                "TCP handshake of a new connection as the kernel saw it (eBPF); before TTFT starts",
                &PART_BUCKETS,
            ),
            chunk_delay: hist(
                m,
                "canary.request.chunk_delay",
                "s",
                "Per request, the p50 and p99 of token chunks' kernel arrival to canaryd's read (eBPF)",
                &PART_BUCKETS,
            ),
            requests: counter(
                m,
                "canary.requests",
                "{request}",
                "Requests finished, by status",
            ),
            errors: counter(
                m,
                "canary.request.errors",
                "{request}",
                "Failed requests, by error class (error.type)",
            ),
            good: counter(
                m,
                "canary.requests.good",
                "{request}",
                "Requests that completed and met every SLO",
            ),
            gpu_util: LatestGauge::new(
                m,
                "canary.gpu.utilization",
                "1",
                "GPU utilization over the last request's lifetime (0-1), while a run goes on",
            ),
            gpu_power: LatestGauge::new(
                m,
                "canary.gpu.power",
                "W",
                "GPU board power over the last request's lifetime, while a run goes on",
            ),
            queue: LatestGauge::new(
                m,
                "canary.server.queue.depth",
                "{request}",
                "Requests waiting in the server when the last request was sent, while a run goes on",
            ),
            kv: LatestGauge::new(
                m,
                "canary.server.kv_cache.usage",
                "1",
                "Server KV-cache usage when the last request was sent (0-1), while a run goes on",
            ),
            running: LatestGauge::new(
                m,
                "canary.server.running",
                "{request}",
                "Requests the server ran at the last request's first token, while a run goes on",
            ),
            runs: counter(m, "canary.runs", "{run}", "Runs finished, by verdict"),
            run_goodput: LatestGauge::new(
                m,
                "canary.run.goodput",
                "{request}/s",
                "Good requests per second over the last run",
            ),
            run_good_ratio: LatestGauge::new(
                m,
                "canary.run.good_request.ratio",
                "1",
                "Share of the last run's requests that were good",
            ),
            run_goodput_bound: LatestGauge::new(
                m,
                "canary.run.goodput.bound",
                "{request}/s",
                "Bounds of the last run's goodput when a judgement rested on a bound: \
                 canary.statistic at_least (lower_bound) and at_most (upper_bound)",
            ),
            run_good_ratio_bound: LatestGauge::new(
                m,
                "canary.run.good_request.ratio.bound",
                "1",
                "Bounds of the last run's good share when a judgement rested on a bound: \
                 canary.statistic at_least (lower_bound) and at_most (upper_bound)",
            ),
            run_error_ratio: LatestGauge::new(
                m,
                "canary.run.error.ratio",
                "1",
                "Share of the last run's requests that failed",
            ),
            run_ttft: LatestGauge::new(
                m,
                "canary.run.time_to_first_token",
                "s",
                "The last run's TTFT as the client measured it (exact) and, when the server's \
                 counts match the client's completed requests, as the server did (its \
                 percentiles estimated from its histogram's buckets)",
            ),
            run_energy: LatestGauge::new(
                m,
                "canary.run.gpu.energy",
                "J",
                "GPU energy used during the last run",
            ),
            run_energy_per_token: LatestGauge::new(
                m,
                "canary.run.gpu.energy_per_output_token",
                "J/{token}",
                "GPU energy per output token over the last run",
            ),
            run_gpu_util: LatestGauge::new(
                m,
                "canary.run.gpu.utilization",
                "1",
                "Mean GPU utilization over the last run (0-1)",
            ),
            run_gpu_power: LatestGauge::new(
                m,
                "canary.run.gpu.power",
                "W",
                "Mean GPU power over the last run",
            ),
            run_gpu_sm_clock: LatestGauge::new(
                m,
                "canary.run.gpu.sm_clock",
                "Hz",
                "SM clock over the last run, from readings at sample instants: the mean \
                 (an estimate) and the lowest (an upper bound on the lowest; far below the \
                 mean, a GPU's clock was pulled down)",
            ),
            run_gpu_mem_clock: LatestGauge::new(
                m,
                "canary.run.gpu.memory_clock",
                "Hz",
                "Mean memory clock over the last run, from readings at sample instants (an \
                 estimate)",
            ),
            run_gpu_mem_util: LatestGauge::new(
                m,
                "canary.run.gpu.memory_utilization",
                "1",
                "Share of time GPU memory was read or written over the last run (0-1): the \
                 mean of the samples (an estimate) and the highest (a lower bound)",
            ),
            run_prefix_hit: LatestGauge::new(
                m,
                "canary.run.server.prefix_cache.hit_ratio",
                "1",
                "Server prefix-cache hit rate over the last run",
            ),
            run_server_latency: LatestGauge::new(
                m,
                "canary.run.server.latency",
                "s",
                "The server's own latencies over the last run's scrape window (every client's \
                 requests it served then), by canary.server.phase: inter_token_latency \
                 (canary.server.itl_observation: token_gap or request_mean), request_latency, \
                 queue_time, prefill_time, decode_time; the mean exact, the percentiles \
                 estimated from the histogram's buckets",
            ),
            verdict_state: LatestGauge::new(
                m,
                "canary.run.verdict.state",
                "{run}",
                "1 for the last run's verdict, 0 for the others (a state set)",
            ),
            trend_state: LatestGauge::new(
                m,
                "canary.run.trend.state",
                "{run}",
                "1 for the last run's trend against its baseline, 0 for the others (a state set)",
            ),
            bottleneck_state: LatestGauge::new(
                m,
                "canary.run.bottleneck.state",
                "{run}",
                "1 for the last run's diagnosed bottleneck class, 0 for the others (a state set)",
            ),
            confidence_state: LatestGauge::new(
                m,
                "canary.run.bottleneck.confidence.state",
                "{run}",
                "1 for the last run's diagnosis confidence, 0 for the others (a state set)",
            ),
            source_state: LatestGauge::new(
                m,
                "canary.run.telemetry_source.state",
                "{run}",
                "Per telemetry source of the last run (canary.telemetry.source), 1 for its \
                 state (canary.telemetry.state), 0 for the others (a state set)",
            ),
            capacity: LatestGauge::new(
                m,
                "canary.capacity.rate",
                "{request}/s",
                "The last capacity search's bracket at the workload's SLOs, by canary.capacity.bound: \
                 passed (a lower bound), failed (the capacity is below it), baseline",
            ),
            capacity_not_established: LatestGauge::new(
                m,
                "canary.capacity.not_established",
                "{end}",
                "1 for an end of the last capacity search's bracket (canary.capacity.bound: \
                 passed, failed) whose probe's pass or fail rests on goodput judgements made on \
                 bounds (the truth could decide it the other way), else 0",
            ),
            knee: LatestGauge::new(
                m,
                "canary.sweep.knee",
                "{request}/s",
                "The last sweep's knee (the last point that still scaled: its completed \
                 requests/s), by canary.sweep.figure: knee, baseline",
            ),
            slo: LatestGauge::new(
                m,
                "canary.slo.threshold",
                "s",
                "The workload's latency SLOs, so dashboards draw them on the latency panels",
            ),
        }
    }

    /// Records one finished request (warm-up requests are left out by the caller); a
    /// `sampled` one (its trace is exported) is also offered as an exemplar of the latency
    /// histograms.
    pub fn record_request(
        &self,
        rec: &RequestRecord,
        labels: &RunLabels,
        base: &[KeyValue],
        sampled: bool,
    ) {
        let s = |ms: f64| ms / 1e3;
        let exemplar = |name: &str, bounds: &[f64], attrs: &[KeyValue], v: f64| {
            if sampled {
                self.exemplars
                    .offer(name, bounds, attrs, v, &rec.trace_id, &rec.span_id);
            }
        };
        let mut attrs = base.to_vec();
        if let Some(e) = &rec.error {
            attrs.push(KeyValue::new(attr::ERROR_TYPE, e.kind.as_str()));
        }
        // A request cancelled on purpose was cut short by canaryd: its time says nothing of
        // the server's, and without an `error.type` it would pass for a completion.
        let duration = rec
            .e2e_ms
            .or(Some(rec.ended_at_ms - rec.sent_at_ms))
            .filter(|d| d.is_finite() && *d >= 0.0 && !rec.is_cancelled());
        if let Some(d) = duration {
            self.duration.record(s(d), &attrs);
            exemplar(
                metric::GEN_AI_CLIENT_OPERATION_DURATION,
                &DURATION_BUCKETS,
                &attrs,
                s(d),
            );
        }
        // Latencies of completed requests only, as the summary's and the SLOs': a stream cut
        // after its first token has a TTFT, but a panel mixing such requests in reads an
        // outage as faster. Their duration above carries `error.type`.
        let completed = rec.is_ok();
        if let Some(t) = rec.ttft_ms.filter(|_| completed) {
            self.ttfc.record(s(t), base);
            exemplar(
                metric::GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
                &TTFT_BUCKETS,
                base,
                s(t),
            );
        }
        match &rec.chunk_gaps_ms {
            _ if !completed => {}
            Some(gaps) if !gaps.is_empty() => {
                for g in gaps {
                    self.tpoc.record(s(*g), base);
                }
            }
            _ => {
                if let Some(itl) = rec.itl_ms {
                    self.tpoc.record(s(itl), base);
                }
            }
        }
        if let Some(itl) = rec.itl_ms {
            self.itl.record(s(itl), base);
            exemplar(ITL, &ITL_BUCKETS, base, s(itl));
        }
        if let Some(t) = rec.ttfo_ms.filter(|_| completed) {
            self.ttfo.record(s(t), base);
            exemplar(TTFO, &TTFT_BUCKETS, base, s(t));
        }
        if rec.sent_at_ms.is_finite() {
            self.lag.record(s(rec.schedule_lag_ms.max(0.0)), base);
            let dispatch = rec.schedule_lag_ms - rec.hold_ms - rec.connect_wait_ms;
            self.dispatch_lag.record(s(dispatch.max(0.0)), base);
        }
        let input = rec
            .usage
            .as_ref()
            .and_then(|u| u.prompt_tokens)
            .or(rec.prompt_tokens_synthesized)
            .unwrap_or(rec.input_tokens);
        let with = |kv: KeyValue| {
            let mut a = base.to_vec();
            a.push(kv);
            a
        };
        // Completed requests' tokens, as the summary's totals: a request that failed may
        // never have reached the server, and its prompt is only what was planned.
        if rec.is_ok() {
            self.tokens.record(
                input as u64,
                &with(KeyValue::new(attr::GEN_AI_TOKEN_TYPE, "input")),
            );
            self.tokens.record(
                rec.output_token_count() as u64,
                &with(KeyValue::new(attr::GEN_AI_TOKEN_TYPE, "output")),
            );
        }
        let mut status = attrs.clone();
        status.push(KeyValue::new(attr::REQUEST_STATUS, rec.status.as_str()));
        self.requests.add(1, &status);
        if rec.error.is_some() {
            self.errors.add(1, &attrs);
        }
        if labels.goodput.is_good(rec) {
            // Good on a term met only on a bound (an ITL over a late first token): the
            // request may not be. The `exact` points sum to summary.json's
            // `good_requests_at_least`, all of them to `good_requests`.
            let doubtful = labels
                .goodput
                .uncertain(rec)
                .iter()
                .any(|u| u.1 == canary_core::Uncertain::Meet);
            let kind = if doubtful { "estimate" } else { "exact" };
            self.good
                .add(1, &with(KeyValue::new(attr::VALUE_KIND, kind)));
        }
        if let Some(t) = &rec.telemetry {
            if let Some(v) = t.gpu_util_avg_pct {
                self.gpu_util.record_one(base, Some(v / 100.0));
            }
            if let Some(v) = t.gpu_power_avg_w {
                self.gpu_power.record_one(base, Some(v));
            }
            if let Some(v) = t.server_queue_depth_at_send {
                self.queue.record_one(base, Some(v));
            }
            if let Some(v) = t.server_kv_usage_at_send {
                self.kv.record_one(base, Some(v));
            }
            if let Some(v) = t.server_running_at_first_token {
                self.running.record_one(base, Some(v));
            }
        }
        if let Some(k) = &rec.kernel {
            // The handshake precedes the send TTFT is timed from: not one of its parts.
            if let Some(v) = k.connect_ms.filter(|v| v.is_finite() && *v >= 0.0) {
                self.connect.record(s(v), base);
            }
            // Timed from the last segment before canaryd's read: when canaryd read late, a
            // chunk delay and the client overhead are lower bounds (the token's own segment
            // came earlier), and the remainder an upper bound by as much.
            for (stat, v) in [("p50", k.chunk_delay_p50_ms), ("p99", k.chunk_delay_p99_ms)] {
                if let Some(v) = v.filter(|v| v.is_finite() && *v >= 0.0) {
                    let mut a = with(KeyValue::new(attr::CHUNK_DELAY_STAT, stat));
                    a.push(KeyValue::new(attr::VALUE_KIND, "lower_bound"));
                    self.chunk_delay.record(s(v), &a);
                }
            }
            let parts = [
                ("request_write", "exact", k.request_write_ms),
                ("server_wait", "exact", k.server_wait_ms),
                ("client_overhead", "lower_bound", k.client_overhead_ms),
                ("remainder", "upper_bound", k.remainder_ms),
            ];
            // Only a request with all four: a stack of the parts' means is then a split of
            // the same requests' TTFT (a new https connection has no server wait, a failed
            // request no client overhead, and their parts would stack over other requests).
            let whole = parts
                .iter()
                .all(|(_, _, v)| v.is_some_and(|v| v.is_finite() && v >= 0.0));
            for (part, kind, v) in parts.into_iter().filter(|_| whole) {
                let mut a = with(KeyValue::new(attr::TTFT_PART, part));
                a.push(KeyValue::new(attr::VALUE_KIND, kind));
                self.ttft_part.record(s(v.unwrap_or_default()), &a);
            }
        }
    }

    /// Ends every last-run gauge series (figures, states, SLOs, capacity, knee, slices) of
    /// the workloads `keep` says no to: those a reload took out of the config. Counters and
    /// per-request gauges are cumulative in the SDK and keep theirs until restart.
    pub fn retain_workloads(&self, keep: &dyn Fn(&str) -> bool) {
        let run = [
            &self.run_goodput,
            &self.run_good_ratio,
            &self.run_goodput_bound,
            &self.run_good_ratio_bound,
            &self.run_error_ratio,
            &self.run_ttft,
            &self.run_energy,
            &self.run_energy_per_token,
            &self.run_gpu_util,
            &self.run_gpu_power,
            &self.run_gpu_sm_clock,
            &self.run_gpu_mem_clock,
            &self.run_gpu_mem_util,
            &self.run_prefix_hit,
            &self.run_server_latency,
            &self.verdict_state,
            &self.trend_state,
            &self.bottleneck_state,
            &self.confidence_state,
            &self.source_state,
            &self.slo,
            &self.capacity,
            &self.capacity_not_established,
            &self.knee,
            &self.gpu_util,
            &self.gpu_power,
            &self.queue,
            &self.kv,
            &self.running,
        ];
        for g in run.into_iter().chain(self.slices.gauges()) {
            g.retain(keep);
        }
    }

    /// Ends the series of the gauges that follow each request (GPU, server queue and KV) of
    /// `base`'s workload when its run ends, once the next export has carried the run's last
    /// values: a synchronous gauge would go on exporting the last request's value between
    /// runs, and after a change of target, for ever.
    pub fn end_request_gauges(&self, base: &[KeyValue]) {
        for g in [
            &self.gpu_util,
            &self.gpu_power,
            &self.queue,
            &self.kv,
            &self.running,
        ] {
            g.end_after_next_export(base);
        }
    }

    /// Counts a finished run: `canary.runs` with the run's labels and its verdict (and trend).
    pub fn count_run(&self, base: &[KeyValue], verdict: &[KeyValue]) {
        let mut a = base.to_vec();
        a.extend_from_slice(verdict);
        self.runs.add(1, &a);
    }

    /// A capacity search's figures, each `(bound, requests/s)`: `passed`, `failed`,
    /// `baseline` (see [`attr::CAPACITY_BOUND`]); they replace the workload's earlier ones,
    /// and a bound that is `None` is not exported from now on.
    pub fn record_capacity(&self, base: &[KeyValue], figures: &[(&'static str, Option<f64>)]) {
        self.capacity
            .record_figures(base, attr::CAPACITY_BOUND, figures);
    }

    /// Whether each end of a capacity search's bracket is not established, `(bound, 1 or
    /// 0)`: `passed`, `failed` (see [`attr::CAPACITY_BOUND`]); as
    /// [`Instruments::record_capacity`], an end that is `None` (the bracket has none) is not
    /// exported from now on.
    pub fn record_capacity_not_established(
        &self,
        base: &[KeyValue],
        ends: &[(&'static str, Option<f64>)],
    ) {
        self.capacity_not_established
            .record_figures(base, attr::CAPACITY_BOUND, ends);
    }

    /// A sweep's knee figures, each `(figure, requests/s)`: `knee`, `baseline` (see
    /// [`attr::SWEEP_FIGURE`]); as [`Instruments::record_capacity`].
    pub fn record_knee(&self, base: &[KeyValue], figures: &[(&'static str, Option<f64>)]) {
        self.knee.record_figures(base, attr::SWEEP_FIGURE, figures);
    }

    /// The latency SLOs of a run's workload, in seconds (throughput SLOs have no line to
    /// draw on a latency panel); an SLO taken out of the workload is no longer exported.
    pub fn record_slos(&self, goodput: &Goodput, base: &[KeyValue]) {
        let latency = goodput
            .slos
            .iter()
            .filter(|slo| slo.metric != SloMetric::OutputTokenThroughputPerUser);
        self.slo.record(
            base,
            latency.map(|slo| {
                (
                    vec![KeyValue::new(attr::SLO_METRIC, slo.metric.name())],
                    Some(slo.threshold / 1e3),
                )
            }),
        );
    }

    /// Records a finished run's figures: the client's, and what the server and the GPUs
    /// saw (`telemetry`). Each replaces its workload's last run's: a figure this run does not
    /// have (no GPU, no server metrics, a run too short for a rate) is no longer exported.
    pub fn record_run(&self, summary: &RunSummary, telemetry: &RunTelemetry, base: &[KeyValue]) {
        let [goodput, ratio, goodput_bounds, ratio_bounds] = goodput_points(summary);
        // A run too short for a rate (one request) has none, and one that judged no request
        // (every one cancelled on purpose) no ratio: no point, rather than a 0 that reads as
        // "no errors" or "none good".
        self.run_goodput.record(base, goodput);
        self.run_good_ratio.record(base, ratio);
        // Gauges of their own, so a panel's `max` over the judged figure's series never
        // draws the upper bound.
        self.run_goodput_bound.record(base, goodput_bounds);
        self.run_good_ratio_bound.record(base, ratio_bounds);
        self.run_error_ratio.record_one(base, summary.error_rate);
        self.slices.record(summary.timeslices.as_ref(), base);
        let ttft = |by: &'static str, stat: &'static str, kind: &'static str, v: Option<f64>| {
            let a = vec![
                KeyValue::new(attr::MEASURED_BY, by),
                KeyValue::new(attr::STATISTIC, stat),
                KeyValue::new(attr::VALUE_KIND, kind),
            ];
            (a, v)
        };
        let mut ttfts = Vec::new();
        if let Some(c) = summary
            .metrics
            .get("time_to_first_token")
            .filter(|c| c.count > 0)
        {
            // Upper bounds where some first tokens were not stamped `kernel`, as summary.json's
            // `receive_timestamps` says and the run table marks.
            let kind = latency_kind(
                summary
                    .receive_timestamps
                    .bounds()
                    .is_bound("time_to_first_token"),
                true,
            );
            ttfts.push(ttft("client", "mean", kind, Some(c.avg / 1e3)));
            ttfts.push(ttft("client", "p50", kind, Some(c.p50 / 1e3)));
            ttfts.push(ttft("client", "p90", kind, Some(c.p90 / 1e3)));
            ttfts.push(ttft("client", "p99", kind, Some(c.p99 / 1e3)));
        }
        let server = telemetry.server.as_ref();
        // Beside the client's only over the same requests: a server's histogram counts every
        // client's traffic and late warm-up requests, and summary.json withholds the
        // comparison when the counts differ (a gap of -8 s was once drawn from such a pair).
        let matched = server
            .is_some_and(|s| matches!(s.comparison, Some(canary_core::Comparison::Matched { .. })));
        if let Some(t) = server.and_then(|s| s.ttft_s.as_ref()).filter(|_| matched) {
            // Server percentiles are known to a bucket: the interpolated estimate goes out
            // under the same statistic names as before.
            let est = |q: Option<canary_core::BucketQuantile>| q.map(|q| q.estimate);
            // The mean is `_sum` over `_count`: exact over what the server counted.
            ttfts.push(ttft("server", "mean", "exact", t.mean));
            ttfts.push(ttft("server", "p50", "estimate", est(t.p50)));
            ttfts.push(ttft("server", "p90", "estimate", est(t.p90)));
            ttfts.push(ttft("server", "p99", "estimate", est(t.p99)));
        }
        self.run_ttft.record(base, ttfts);
        // Exact from the engine's counters, else the mean of its own gauge (an estimate), as
        // summary.json's `prefix_cache_hit_rate_kind`; an engine not recognised: an estimate.
        let hit_kind = match server.and_then(|s| s.engine) {
            Some(e) if e != canary_core::Engine::Unknown && e.hit_rate_from_counters() => "exact",
            _ => "estimate",
        };
        self.run_prefix_hit.record(
            base,
            [(
                vec![KeyValue::new(attr::VALUE_KIND, hit_kind)],
                server.and_then(|s| s.prefix_cache_hit_rate),
            )],
        );
        self.run_server_latency
            .record(base, server.map(server_latencies).unwrap_or_default());
        let gpu = telemetry.gpu.as_ref();
        self.run_energy
            .record_one(base, gpu.and_then(|g| g.energy.map(|e| e.joules)));
        self.run_energy_per_token
            .record_one(base, gpu.and_then(|g| g.energy_per_output_token_j));
        self.run_gpu_util
            .record_one(base, gpu.and_then(|g| g.util_avg_pct).map(|v| v / 100.0));
        self.run_gpu_power
            .record_one(base, gpu.and_then(|g| g.power_avg_w));
        // Readings at sample instants: a mean is an estimate, the lowest clock an upper bound
        // on the lowest, the highest utilization a lower bound on the highest.
        let stat = |stat: &'static str, kind: &'static str, v: Option<f64>| {
            let a = vec![
                KeyValue::new(attr::STATISTIC, stat),
                KeyValue::new(attr::VALUE_KIND, kind),
            ];
            (a, v)
        };
        let hz = |mhz: Option<f64>| mhz.map(|v| v * 1e6);
        self.run_gpu_sm_clock.record(
            base,
            [
                stat("mean", "estimate", hz(gpu.and_then(|g| g.sm_clock_avg_mhz))),
                stat(
                    "min",
                    "upper_bound",
                    hz(gpu.and_then(|g| g.sm_clock_min_mhz)),
                ),
            ],
        );
        self.run_gpu_mem_clock.record(
            base,
            [stat(
                "mean",
                "estimate",
                hz(gpu.and_then(|g| g.mem_clock_avg_mhz)),
            )],
        );
        let ratio = |pct: Option<f64>| pct.map(|v| v / 100.0);
        self.run_gpu_mem_util.record(
            base,
            [
                stat(
                    "mean",
                    "estimate",
                    ratio(gpu.and_then(|g| g.util_mem_avg_pct)),
                ),
                stat(
                    "max",
                    "lower_bound",
                    ratio(gpu.and_then(|g| g.util_mem_max_pct)),
                ),
            ],
        );
    }
}

/// A run's `canary.run.goodput` and `canary.run.good_request.ratio` points, each with its
/// `canary.statistic` and `canary.value_kind`: `judged` (the count summary.json gives as
/// `good_requests`); when no judgement rested on a bound the ratio is `exact` and the rate a
/// `lower_bound` (an exact count over the run's duration, itself an upper bound: to the last
/// end as canaryd read it), else both are `estimate`; and
/// their `….bound` points, only then: `at_least` (`lower_bound`) and `at_most`
/// (`upper_bound`) from `good_requests_at_least` and `_at_most`. Without SLOs every completed request is good, out of the requests the
/// target was sent (as with SLOs: canaryd's own failures and cancellations say nothing of
/// it): the ratio exact, the rate (the request throughput) a lower bound. A figure the run has
/// none of (no rate, no request judged) is `None`.
pub(crate) type Points = Vec<(Vec<KeyValue>, Option<f64>)>;

/// The `canary.value_kind` of a run's rate over exact counts: a lower bound, as the run's
/// duration (to the last end as canaryd read it, not the kernel's stamp) is an upper bound.
pub(crate) const RATE_KIND: &str = "lower_bound";

fn goodput_points(summary: &RunSummary) -> [Points; 4] {
    let judged = summary
        .requests
        .saturating_sub(summary.client_errors + summary.cancelled);
    let ratio_of = |n: u64| (judged > 0).then(|| n as f64 / judged as f64);
    let has_rate = summary.duration_s > 0.0;
    let point = |stat: &'static str, kind: &'static str, v: Option<f64>| {
        let a = vec![
            KeyValue::new(attr::STATISTIC, stat),
            KeyValue::new(attr::VALUE_KIND, kind),
        ];
        (a, v)
    };
    let Some(g) = &summary.goodput else {
        return [
            vec![point("judged", RATE_KIND, summary.request_throughput)],
            vec![point("judged", "exact", ratio_of(summary.completed))],
            Vec::new(),
            Vec::new(),
        ];
    };
    // The count of good requests is exact as a count of judgements; it is the truth only
    // when the bounds agree with it (a summary without them is taken as unknown).
    let bounds = match (g.good_requests_at_least, g.good_requests_at_most) {
        (Some(lo), Some(hi)) => Some((lo, hi)),
        _ => None,
    };
    let certain = bounds.is_some_and(|(lo, hi)| lo == hi && lo == g.good_requests);
    let (rate_kind, ratio_kind) = if certain {
        (RATE_KIND, "exact")
    } else {
        ("estimate", "estimate")
    };
    let rate = vec![point("judged", rate_kind, g.goodput)];
    let ratio = vec![point("judged", ratio_kind, g.good_request_fraction)];
    let (mut rate_bounds, mut ratio_bounds) = (Vec::new(), Vec::new());
    if let Some((lo, hi)) = bounds.filter(|_| !certain) {
        // The same denominators as the judged figures: the run's duration, the requests
        // judged.
        let per_s =
            |n: u64| (g.goodput.is_some() && has_rate).then(|| n as f64 / summary.duration_s);
        rate_bounds.push(point("at_least", "lower_bound", per_s(lo)));
        rate_bounds.push(point("at_most", "upper_bound", per_s(hi)));
        ratio_bounds.push(point("at_least", "lower_bound", ratio_of(lo)));
        ratio_bounds.push(point("at_most", "upper_bound", ratio_of(hi)));
    }
    [rate, ratio, rate_bounds, ratio_bounds]
}

/// The server's latencies other than TTFT, as `canary.run.server.latency` points: per phase
/// the mean (`exact`: `_sum` over `_count`) and the p50, p90 and p99 (`estimate`: within
/// the bucket). Its ITL says whether the engine observes each token gap or one mean per
/// request (`canary.server.itl_observation`), as summary.json's `itl_observation`.
fn server_latencies(s: &canary_core::RunServerSummary) -> Points {
    let observation = match s.engine {
        Some(canary_core::Engine::Unknown) | None => None,
        Some(e) if e.itl_is_request_mean() => Some("request_mean"),
        Some(_) => Some("token_gap"),
    };
    let phases = [
        ("inter_token_latency", s.itl_s.as_ref()),
        ("request_latency", s.e2e_s.as_ref()),
        ("queue_time", s.queue_time_s.as_ref()),
        ("prefill_time", s.prefill_time_s.as_ref()),
        ("decode_time", s.decode_time_s.as_ref()),
    ];
    let mut points = Vec::new();
    for (phase, est) in phases {
        let Some(est) = est.filter(|e| e.count > 0.0) else {
            continue;
        };
        let q = |q: Option<canary_core::BucketQuantile>| q.map(|q| q.estimate);
        for (stat, kind, v) in [
            ("mean", "exact", est.mean),
            ("p50", "estimate", q(est.p50)),
            ("p90", "estimate", q(est.p90)),
            ("p99", "estimate", q(est.p99)),
        ] {
            let mut a = vec![
                KeyValue::new(attr::SERVER_PHASE, phase),
                KeyValue::new(attr::STATISTIC, stat),
                KeyValue::new(attr::VALUE_KIND, kind),
            ];
            if let Some(o) = observation.filter(|_| phase == "inter_token_latency") {
                a.push(KeyValue::new(attr::SERVER_ITL_OBSERVATION, o));
            }
            points.push((a, v));
        }
    }
    points
}

/// The `canary.value_kind` of a client latency: `exact`, or when `bound`, `upper_bound` for
/// a time from the send (TTFT, e2e: a bound is never below the truth) and `bound` for a gap
/// between two times (ITL: exact in neither direction).
pub(crate) fn latency_kind(bound: bool, from_send: bool) -> &'static str {
    match (bound, from_send) {
        (false, _) => "exact",
        (true, true) => "upper_bound",
        (true, false) => "bound",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::{Aggregator, RunGpuSummary, Status};
    use opentelemetry::metrics::MeterProvider;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use std::time::Duration;

    /// Instruments on a provider built from `builder` whose exports collect in memory: the
    /// exporter to read them, the provider to flush.
    fn in_memory(
        builder: MeterProviderBuilder,
    ) -> (InMemoryMetricExporter, SdkMeterProvider, Instruments) {
        let exporter = InMemoryMetricExporter::default();
        let provider = builder
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        let m = Instruments::new(&provider.meter("test"), Arc::default());
        (exporter, provider, m)
    }

    /// The last export's points of every `canary.run.*`, `canary.slice.*` and
    /// `canary.slo.threshold` gauge: (metric, server.address, value), sorted.
    fn exported(exporter: &InMemoryMetricExporter) -> Vec<(String, String, f64)> {
        let all = exporter.get_finished_metrics().unwrap();
        let last = all.last().expect("an export");
        let mut out = Vec::new();
        for sm in last.scope_metrics() {
            for m in sm.metrics() {
                let AggregatedMetrics::F64(MetricData::Gauge(g)) = m.data() else {
                    continue;
                };
                for p in g.data_points() {
                    let host = p
                        .attributes()
                        .find(|kv| kv.key.as_str() == attr::SERVER_ADDRESS)
                        .map(|kv| kv.value.to_string())
                        .unwrap_or_default();
                    out.push((m.name().to_string(), host, p.value()));
                }
            }
        }
        out.sort_by(|a, b| a.partial_cmp(b).unwrap());
        out
    }

    /// A summary of `n` requests sent 600 ms apart, 40 ms TTFT each, in 1 s slices.
    fn summary(n: u32, slos: &str) -> RunSummary {
        let mut agg =
            Aggregator::new(slos.parse().unwrap()).with_timeslices(Duration::from_secs(1));
        for i in 0..n {
            let sent = f64::from(i) * 600.0;
            let r = RequestRecord {
                status: Status::Ok,
                sent_at_ms: sent,
                ended_at_ms: sent + 50.0,
                ttft_ms: Some(40.0),
                e2e_ms: Some(50.0),
                ..Default::default()
            };
            agg.add(&r, &Default::default());
        }
        agg.summary()
    }

    fn gpu(power_w: f64) -> RunGpuSummary {
        RunGpuSummary {
            util_avg_pct: Some(50.0),
            util_max_pct: Some(60.0),
            power_avg_w: Some(power_w),
            power_max_w: Some(power_w),
            energy: None,
            energy_per_output_token_j: None,
            gpus: 1,
            sources: Vec::new(),
            mem_used_max_bytes: None,
            mem_used_max_pct: None,
            temp_max_c: None,
            throttle_reasons: None,
            process_sm_util_avg_pct: None,
            process_sm_util_max_pct: None,
            process_mem_util_avg_pct: None,
            sm_clock_min_mhz: None,
            sm_clock_avg_mhz: None,
            mem_clock_avg_mhz: None,
            util_mem_avg_pct: None,
            util_mem_max_pct: None,
            per_gpu: Vec::new(),
        }
    }

    // Four workloads with 240 one-second slices each: 720 latency points apiece, 2,880 in
    // all, past the SDK's default limit of 2,000 series an instrument.
    #[test]
    fn every_workloads_slices_are_exported_however_many_workloads() {
        let (exporter, provider, m) = in_memory(with_views(SdkMeterProvider::builder()));
        let hosts = ["a", "b", "c", "d"];
        for host in hosts {
            let labels = RunLabels::new(host, "chat", "m", host, 8000).attributes();
            m.record_run(&summary(400, ""), &RunTelemetry::default(), &labels);
        }
        provider.force_flush().unwrap();
        let points = exported(&exporter);
        for host in hosts {
            let n = points
                .iter()
                .filter(|p| p.0 == "canary.slice.time_to_first_token" && p.1 == host)
                .count();
            assert_eq!(n, 720, "{host}");
        }
    }

    /// `summary`'s requests, each timed as `rx` says (`None`: receive timestamps off).
    fn summary_timed(n: u32, rx: Option<canary_core::RxTiming>) -> RunSummary {
        let mut agg = Aggregator::new("".parse().unwrap()).with_timeslices(Duration::from_secs(1));
        for i in 0..n {
            let sent = f64::from(i) * 600.0;
            let r = RequestRecord {
                status: Status::Ok,
                sent_at_ms: sent,
                ended_at_ms: sent + 50.0,
                ttft_ms: Some(40.0),
                itl_ms: Some(5.0),
                e2e_ms: Some(50.0),
                rx: rx.clone(),
                ..Default::default()
            };
            agg.add(&r, &Default::default());
        }
        agg.summary()
    }

    /// The last export's `canary.value_kind` of each point of `metric`, sorted.
    fn kinds(exporter: &InMemoryMetricExporter, metric: &str) -> Vec<String> {
        let all = exporter.get_finished_metrics().unwrap();
        let mut out = Vec::new();
        for sm in all.last().expect("an export").scope_metrics() {
            for m in sm.metrics().filter(|m| m.name() == metric) {
                let AggregatedMetrics::F64(MetricData::Gauge(g)) = m.data() else {
                    continue;
                };
                for p in g.data_points() {
                    let kind = p
                        .attributes()
                        .find(|kv| kv.key.as_str() == attr::VALUE_KIND)
                        .map_or_else(|| "none".to_string(), |kv| kv.value.to_string());
                    out.push(kind);
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    // Audit: the run's goodput went out as `exact` when no judgement rested on a bound, yet
    // it is an exact count over the run's duration, an upper bound (to the last end as
    // canaryd read it): the rate is a lower bound; the good share, over the requests judged,
    // stays exact. Without SLOs (every completed request good) the same.
    #[test]
    fn goodput_rate_is_a_lower_bound_and_its_share_exact_when_judgements_are() {
        let (exporter, provider, m) = in_memory(SdkMeterProvider::builder());
        let base = RunLabels::new("nightly", "chat", "m", "a", 8000).attributes();
        for slos in ["", "time_to_first_token:100"] {
            let s = summary(4, slos);
            assert_eq!(s.goodput.is_some(), !slos.is_empty(), "{slos}");
            if let Some(g) = &s.goodput {
                assert_eq!(g.good_requests_at_least, Some(g.good_requests), "{g:?}");
                assert_eq!(g.good_requests_at_most, Some(g.good_requests), "{g:?}");
            }
            m.record_run(&s, &RunTelemetry::default(), &base);
            provider.force_flush().unwrap();
            assert_eq!(
                kinds(&exporter, "canary.run.goodput"),
                ["lower_bound"],
                "{slos}"
            );
            assert_eq!(
                kinds(&exporter, "canary.run.good_request.ratio"),
                ["exact"],
                "{slos}"
            );
        }
    }

    // Audit: the OTLP gauges never said a latency was a bound. Every first token and end
    // stamped `kernel` makes the run's TTFT and the slices' latencies exact; a later run with
    // receive timestamps off makes them bounds, and its points replace the exact ones (a new
    // series each, the old ones ended, never both at once).
    #[test]
    fn latency_points_say_exact_or_bound_by_the_runs_receive_timestamps() {
        let (exporter, provider, m) = in_memory(SdkMeterProvider::builder());
        let base = RunLabels::new("nightly", "chat", "m", "a", 8000).attributes();
        let stamped = canary_core::RxTiming {
            first_token: Some(canary_core::RxSource::Kernel),
            end: Some(canary_core::RxSource::Kernel),
            token_events: 2,
            ..Default::default()
        };
        let names = [
            "canary.run.time_to_first_token",
            "canary.slice.time_to_first_token",
            "canary.slice.inter_token_latency",
            "canary.slice.request_latency",
        ];
        m.record_run(
            &summary_timed(4, Some(stamped.clone())),
            &RunTelemetry::default(),
            &base,
        );
        provider.force_flush().unwrap();
        for name in names {
            assert_eq!(kinds(&exporter, name), ["exact"], "{name}");
        }
        m.record_run(&summary_timed(4, None), &RunTelemetry::default(), &base);
        provider.force_flush().unwrap();
        assert_eq!(kinds(&exporter, names[0]), ["upper_bound"]);
        assert_eq!(kinds(&exporter, names[1]), ["upper_bound"]);
        assert_eq!(kinds(&exporter, names[2]), ["bound"]);
        assert_eq!(kinds(&exporter, names[3]), ["upper_bound"]);
        // First tokens a later segment's stamp, ends exact: TTFT and ITL bounds, e2e exact.
        let mut bound = stamped;
        bound.first_token = Some(canary_core::RxSource::KernelBound);
        m.record_run(
            &summary_timed(4, Some(bound)),
            &RunTelemetry::default(),
            &base,
        );
        provider.force_flush().unwrap();
        assert_eq!(kinds(&exporter, names[0]), ["upper_bound"]);
        assert_eq!(kinds(&exporter, names[1]), ["upper_bound"]);
        assert_eq!(kinds(&exporter, names[2]), ["bound"]);
        assert_eq!(kinds(&exporter, names[3]), ["exact"]);
    }

    // The daemon exports each workload's runs for its whole life. Its last run's gauges must
    // be that run's figures only: with plain gauges a figure the last run lacked (no GPU, no
    // SLOs, fewer slices) and every series of its old target stayed at an earlier run's value.
    #[test]
    fn a_workloads_last_run_replaces_every_figure_of_its_earlier_runs() {
        let (exporter, provider, m) = in_memory(SdkMeterProvider::builder());
        let base = |host: &str| RunLabels::new("nightly", "chat", "m", host, 8000).attributes();
        let other = RunLabels::new("other", "chat", "m", "c", 8000).attributes();
        let telemetry = RunTelemetry {
            gpu: Some(gpu(300.0)),
            ..Default::default()
        };
        let slos: Goodput = "time_to_first_token:100 request_latency:200"
            .parse()
            .unwrap();
        m.record_run(
            &summary(5, "time_to_first_token:100"),
            &telemetry,
            &base("a"),
        );
        m.record_slos(&slos, &base("a"));
        m.record_states(&base("a"), "pass", Some("steady"), None);
        m.record_run(&summary(3, ""), &telemetry, &other);
        provider.force_flush().unwrap();
        let first = exported(&exporter);
        let count = |points: &[(String, String, f64)], name: &str, host: &str| {
            points.iter().filter(|p| p.0 == name && p.1 == host).count()
        };
        // 5 requests 600 ms apart: three 1 s slices; two SLOs; the GPU's power.
        assert_eq!(count(&first, "canary.slice.requests", "a"), 3, "{first:?}");
        assert_eq!(count(&first, "canary.slo.threshold", "a"), 2, "{first:?}");
        assert_eq!(count(&first, "canary.run.gpu.power", "a"), 1, "{first:?}");
        assert_eq!(
            count(&first, "canary.run.verdict.state", "a"),
            5,
            "{first:?}"
        );

        // The next run: on a new target, one request (one slice, too short for a rate), no
        // GPU seen, one SLO left in the config.
        let slos: Goodput = "time_to_first_token:100".parse().unwrap();
        m.record_run(
            &summary(1, "time_to_first_token:100"),
            &Default::default(),
            &base("b"),
        );
        m.record_slos(&slos, &base("b"));
        m.record_states(&base("b"), "fail", None, None);
        provider.force_flush().unwrap();
        let last = exported(&exporter);
        assert!(
            last.iter().all(|p| p.1 != "a"),
            "the old target's series go on: {last:?}"
        );
        assert_eq!(count(&last, "canary.slice.requests", "b"), 1, "{last:?}");
        assert_eq!(count(&last, "canary.slo.threshold", "b"), 1, "{last:?}");
        assert_eq!(count(&last, "canary.run.gpu.power", "b"), 0, "{last:?}");
        assert_eq!(count(&last, "canary.run.goodput", "b"), 0, "{last:?}");
        assert_eq!(
            count(&last, "canary.run.good_request.ratio", "b"),
            1,
            "{last:?}"
        );
        // The other workload's last run is untouched.
        assert_eq!(count(&last, "canary.slice.requests", "c"), 2, "{last:?}");
        assert_eq!(count(&last, "canary.run.gpu.power", "c"), 1, "{last:?}");
    }

    // The GPU's clocks and memory utilization go out per run beside its utilization and
    // power, each point saying which statistic it is and that it comes from readings at
    // sample instants; a run without them (DCGM's field set without clocks) sends none.
    #[test]
    fn gpu_clocks_and_memory_utilization_go_out_per_run_with_their_kind() {
        let (exporter, provider, m) = in_memory(SdkMeterProvider::builder());
        let base = RunLabels::new("nightly", "chat", "m", "a", 8000).attributes();
        let mut g = gpu(300.0);
        (g.sm_clock_min_mhz, g.sm_clock_avg_mhz, g.mem_clock_avg_mhz) =
            (Some(1200.0), Some(1850.0), Some(2619.0));
        (g.util_mem_avg_pct, g.util_mem_max_pct) = (Some(35.0), Some(50.0));
        let telemetry = RunTelemetry {
            gpu: Some(g),
            ..Default::default()
        };
        m.record_run(&summary(2, ""), &telemetry, &base);
        provider.force_flush().unwrap();
        let points = exported(&exporter);
        let values = |name: &str| -> Vec<f64> {
            points.iter().filter(|p| p.0 == name).map(|p| p.2).collect()
        };
        assert_eq!(values("canary.run.gpu.sm_clock"), [1.2e9, 1.85e9]);
        assert_eq!(values("canary.run.gpu.memory_clock"), [2.619e9]);
        assert_eq!(values("canary.run.gpu.memory_utilization"), [0.35, 0.5]);
        assert_eq!(
            kinds(&exporter, "canary.run.gpu.sm_clock"),
            ["estimate", "upper_bound"]
        );
        assert_eq!(
            kinds(&exporter, "canary.run.gpu.memory_utilization"),
            ["estimate", "lower_bound"]
        );
        // The next run has no clocks: their series end.
        m.record_run(
            &summary(2, ""),
            &RunTelemetry {
                gpu: Some(gpu(300.0)),
                ..Default::default()
            },
            &base,
        );
        provider.force_flush().unwrap();
        let points = exported(&exporter);
        assert!(points.iter().all(|p| !p.0.contains("clock")), "{points:?}");
        assert!(points.iter().any(|p| p.0 == "canary.run.gpu.power"));
    }

    // Every request cancelled on purpose: summary.json's shares are null, and no ratio point
    // goes out (a 0 error ratio read as a clean run on the dashboards).
    #[test]
    fn a_run_that_judged_nothing_exports_no_ratio() {
        let (exporter, provider, m) = in_memory(SdkMeterProvider::builder());
        let base = RunLabels::new("nightly", "chat", "m", "a", 8000).attributes();
        for slos in ["", "time_to_first_token:100"] {
            m.record_run(&summary(3, slos), &RunTelemetry::default(), &base);
            provider.force_flush().unwrap();
            let points = exported(&exporter);
            let has = |name: &str| points.iter().any(|p| p.0 == name && p.1 == "a");
            assert!(has("canary.run.error.ratio") && has("canary.run.good_request.ratio"));

            let mut agg = Aggregator::new(slos.parse().unwrap());
            for i in 0..3 {
                let r = RequestRecord {
                    status: Status::Cancelled,
                    sent_at_ms: f64::from(i) * 600.0,
                    ended_at_ms: f64::from(i) * 600.0 + 50.0,
                    ..Default::default()
                };
                agg.add(&r, &Default::default());
            }
            let cancelled = agg.summary();
            assert_eq!(cancelled.error_rate, None);
            m.record_run(&cancelled, &RunTelemetry::default(), &base);
            provider.force_flush().unwrap();
            let points = exported(&exporter);
            let has = |name: &str| points.iter().any(|p| p.0 == name && p.1 == "a");
            assert!(!has("canary.run.error.ratio"), "{slos:?}: {points:?}");
            assert!(
                !has("canary.run.good_request.ratio"),
                "{slos:?}: {points:?}"
            );
        }
    }
}
