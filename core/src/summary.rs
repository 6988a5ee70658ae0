//! Per-run aggregation of request records into the figures `summary.json` reports.
//!
//! Every metric is a fixed-size [`Distribution`], so aggregating a million requests costs the
//! same memory as aggregating ten.

use crate::error_causes::{ErrorCause, ErrorCauses};
use crate::error_kinds::StatusCounts;
use crate::gaps::ChunkGaps;
use crate::goodput::{Goodput, OutputTokens, Shortfall, Uncertain};
use crate::record::{ErrorKind, RequestRecord, RxSource, RxTiming};
use crate::stats::{Distribution, Stats};
use crate::timeline::ClientTimeline;
use crate::SloMetric;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Folds request records into run statistics.
#[derive(Debug, Default)]
pub struct Aggregator {
    goodput: Goodput,
    metrics: BTreeMap<&'static str, (&'static str, Distribution)>,
    requests: u64,
    completed: u64,
    cancelled: u64,
    warmup: u64,
    good: u64,
    per_user: PerUserCounts,
    errors: BTreeMap<ErrorKind, u64>,
    causes: ErrorCauses,
    statuses: StatusCounts,
    client_errors: u64,
    slo_misses: BTreeMap<&'static str, u64>,
    slo_no_value: BTreeMap<(SloMetric, OutputTokens), u64>,
    slo_met_on_bound: BTreeMap<&'static str, u64>,
    slo_uncertain_misses: BTreeMap<&'static str, u64>,
    slo_uncertain_meets: BTreeMap<&'static str, u64>,
    /// Good requests with a term met on a value that may hide a miss.
    good_uncertain: u64,
    /// Judged requests not good only for misses that may be meets (or one-read bounds that
    /// settle nothing).
    not_good_uncertain: u64,
    server_prompt_time_refused: BTreeMap<ServerTimeRefused, u64>,
    input_tokens: u64,
    output_tokens: u64,
    cached_tokens: u64,
    reasoning_tokens: u64,
    first_sent_ms: Option<f64>,
    last_sent_ms: Option<f64>,
    /// Sends less their wait for the connection to open: when canaryd was ready to send.
    first_ready_ms: Option<f64>,
    last_ready_ms: Option<f64>,
    first_scheduled_ms: Option<f64>,
    last_scheduled_ms: Option<f64>,
    last_end_ms: Option<f64>,
    agreement: TokenAgreement,
    by_url: crate::ByUrl,
    rx: RxSummary,
    timeline: ClientTimeline,
    timeslices: Option<crate::Timeslices>,
    ttft_trend: crate::trend::TrendSums,
}

/// Metric names (aiperf's where they exist) and their units.
const METRICS: [(&str, &str); 19] = [
    ("time_to_first_token", "ms"),
    ("time_to_second_token", "ms"),
    ("time_to_first_output_token", "ms"),
    ("inter_token_latency", "ms"),
    ("inter_chunk_latency", "ms"),
    ("request_latency", "ms"),
    ("time_to_first_byte", "ms"),
    ("connect_time", "ms"),
    ("output_token_throughput_per_user", "tokens/s"),
    ("input_sequence_length", "tokens"),
    ("output_sequence_length", "tokens"),
    ("schedule_lag", "ms"),
    ("schedule_hold", "ms"),
    // The part of the lag spent waiting for a connection to open (TCP connect and TLS
    // handshake past the prepare-ahead): the network's or the server's, not canaryd's.
    ("connect_wait", "ms"),
    ("dispatch_lag", "ms"),
    // Client TTFT minus the prompt time the server reported for the same request (llama.cpp's
    // `timings.prompt_ms`): network, queueing and client overhead, exact per request.
    ("ttft_minus_server_prompt_time", "ms"),
    // canaryd's own delay (issue 16): its read of the first token minus the kernel's receive
    // time, per request; the largest such delay over each request's events; and TTFT as
    // canaryd's reads saw it, beside the kernel-stamped `time_to_first_token`.
    ("client_read_delay", "ms"),
    ("client_read_delay_max", "ms"),
    ("time_to_first_token_userspace", "ms"),
];

impl Aggregator {
    /// An aggregator judging requests against `goodput` (may be empty).
    pub fn new(goodput: Goodput) -> Aggregator {
        let metrics = METRICS
            .iter()
            .map(|(name, unit)| (*name, (*unit, Distribution::new())))
            .collect();
        Aggregator {
            goodput,
            metrics,
            ..Default::default()
        }
    }

    /// The same, also keeping the run's figures in slices of `width` (issue 18).
    pub fn with_timeslices(mut self, width: std::time::Duration) -> Aggregator {
        self.timeslices = Some(crate::Timeslices::new(width));
        self
    }

    fn record(&mut self, name: &'static str, value: Option<f64>) {
        if let (Some(v), Some((_, d))) = (value, self.metrics.get_mut(name)) {
            d.record(v);
        }
    }

    /// Adds one finished request. `chunk_gaps` are its gaps between content chunks.
    /// Warm-up requests are counted but left out of every statistic.
    pub fn add(&mut self, r: &RequestRecord, chunk_gaps: &ChunkGaps) {
        if r.warmup {
            self.warmup += 1;
            return;
        }
        self.requests += 1;
        self.by_url.add(r);
        self.timeline.add(r);
        let low = |v: Option<f64>, x: f64| Some(v.map_or(x, |t| t.min(x)));
        let high = |v: Option<f64>, x: f64| Some(v.map_or(x, |t| t.max(x)));
        self.first_sent_ms = low(self.first_sent_ms, r.sent_at_ms);
        self.last_sent_ms = high(self.last_sent_ms, r.sent_at_ms);
        let ready = r.sent_at_ms - r.connect_wait_ms;
        self.first_ready_ms = low(self.first_ready_ms, ready);
        self.last_ready_ms = high(self.last_ready_ms, ready);
        self.first_scheduled_ms = low(self.first_scheduled_ms, r.scheduled_at_ms);
        self.last_scheduled_ms = high(self.last_scheduled_ms, r.scheduled_at_ms);
        self.last_end_ms = Some(
            self.last_end_ms
                .map_or(r.ended_at_ms, |t| t.max(r.ended_at_ms)),
        );
        self.record("schedule_lag", Some(r.schedule_lag_ms));
        self.record("schedule_hold", Some(r.hold_ms));
        self.record("connect_wait", Some(r.connect_wait_ms));
        self.record(
            "dispatch_lag",
            Some(r.schedule_lag_ms - r.hold_ms - r.connect_wait_ms),
        );
        self.record("connect_time", r.connect_ms);
        if let Some(t) = &mut self.timeslices {
            let tokens = if r.is_ok() {
                r.output_token_count() as u64
            } else {
                0
            };
            t.add(r, tokens);
        }
        // Cancelled on purpose: neither the target's error nor a miss, and its partial
        // latencies would skew every statistic of completed requests.
        if r.is_cancelled() {
            self.cancelled += 1;
            return;
        }
        for (metric, shortfall) in self.goodput.shortfalls(r) {
            match shortfall {
                Shortfall::Missed => *self.slo_misses.entry(metric.name()).or_default() += 1,
                Shortfall::NoValue(n) => *self.slo_no_value.entry((metric, n)).or_default() += 1,
            }
        }
        for metric in self.goodput.met_on_bound(r) {
            *self.slo_met_on_bound.entry(metric.name()).or_default() += 1;
        }
        let uncertain = self.goodput.uncertain(r);
        for (metric, how) in &uncertain {
            let counts = match how {
                Uncertain::Miss => &mut self.slo_uncertain_misses,
                Uncertain::Meet => &mut self.slo_uncertain_meets,
            };
            *counts.entry(metric.name()).or_default() += 1;
        }
        if r.is_ok() && !self.goodput.is_empty() {
            let shortfalls = self.goodput.shortfalls(r);
            if shortfalls.is_empty() {
                self.good_uncertain += uncertain.iter().any(|u| u.1 == Uncertain::Meet) as u64;
            } else {
                let may_meet = |(m, s): &(SloMetric, Shortfall)| match s {
                    Shortfall::NoValue(n) => *n == OutputTokens::OneRead,
                    Shortfall::Missed => uncertain.contains(&(*m, Uncertain::Miss)),
                };
                self.not_good_uncertain += shortfalls.iter().all(may_meet) as u64;
            }
        }
        if !r.is_ok() {
            let kind = r.error.as_ref().map_or(ErrorKind::StreamCut, |e| e.kind);
            *self.errors.entry(kind).or_default() += 1;
            if let Some(e) = &r.error {
                self.causes.add(e);
                self.statuses.add(e);
            }
            self.client_errors += kind.is_client_side() as u64;
            return;
        }
        self.completed += 1;
        if !self.goodput.is_empty() && self.goodput.is_good(r) {
            self.good += 1;
        }
        self.record("time_to_first_token", r.ttft_ms);
        if let Some(ttft) = r.ttft_ms {
            self.ttft_trend.add(r.sent_at_ms, ttft);
        }
        self.record("time_to_second_token", r.ttst_ms);
        self.record("time_to_first_output_token", r.ttfo_ms);
        self.record("inter_token_latency", r.itl_ms);
        self.record("request_latency", r.e2e_ms);
        self.record("time_to_first_byte", r.ttfb_ms);
        self.record("output_token_throughput_per_user", r.output_tokens_per_s);
        self.per_user.add(r);
        let server_prompt_ms = r.server_timings.as_ref().and_then(|t| t.prompt_ms);
        match server_prompt_ms.map(|p| ServerTimeRefused::check(p, r.e2e_ms)) {
            Some(Ok(prompt)) => {
                if let Some(ttft) = r.ttft_ms {
                    self.record("ttft_minus_server_prompt_time", Some(ttft - prompt));
                }
            }
            Some(Err(why)) => *self.server_prompt_time_refused.entry(why).or_default() += 1,
            None => {}
        }
        self.record("time_to_first_token_userspace", r.userspace_ttft_ms());
        self.record("client_read_delay", r.first_token_read_delay_ms());
        if let Some(rx) = &r.rx {
            self.record("client_read_delay_max", rx.read_delay_max_ms);
            self.rx.add(rx, r.itl_ms);
        }
        let usage = r.usage.clone().unwrap_or_default();
        let isl = usage
            .prompt_tokens
            .or(r.prompt_tokens_synthesized)
            .unwrap_or(r.input_tokens);
        let osl = r.output_token_count();
        self.record("input_sequence_length", Some(isl as f64));
        self.record("output_sequence_length", Some(osl as f64));
        self.input_tokens += isl as u64;
        self.output_tokens += osl as u64;
        self.cached_tokens += usage.cached_tokens.unwrap_or(0) as u64;
        self.reasoning_tokens += usage.reasoning_tokens.unwrap_or(0) as u64;
        if let Some(u) = &r.usage {
            let a = &mut self.agreement;
            a.requests_with_usage += 1;
            if let Some(p) = u.prompt_tokens {
                let want = r.prompt_tokens_synthesized.unwrap_or(r.input_tokens);
                a.prompt_compared += 1;
                a.prompt_exact += (p == want) as u64;
                a.prompt_delta_sum += p as i64 - want as i64;
            }
            match u.completion_tokens {
                Some(c) if r.completion_plausible(c) => {
                    a.completion_compared += 1;
                    a.completion_exact += (c == r.output_tokens) as u64;
                    a.completion_delta_sum += c as i64 - r.output_tokens as i64;
                }
                Some(_) => a.completion_implausible += 1,
                None => {}
            }
        }
        if let Some((_, d)) = self.metrics.get_mut("inter_chunk_latency") {
            chunk_gaps.record_into(d);
        }
    }

    /// Requests added so far (excluding warm-up).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Errors added so far.
    pub fn errors(&self) -> u64 {
        self.requests - self.completed - self.cancelled
    }

    /// Every metric's distribution so far, by name, with its unit: what `histograms.json`
    /// keeps so that shard runs merge exactly (`canaryd merge`).
    pub fn distributions(
        &self,
    ) -> impl Iterator<Item = (&'static str, &'static str, &Distribution)> {
        self.metrics
            .iter()
            .map(|(name, (unit, d))| (*name, *unit, d))
    }

    /// The requests added so far over the run's time (for the diagnosis).
    pub fn timeline(&self) -> &ClientTimeline {
        &self.timeline
    }

    /// The run's statistics so far.
    pub fn summary(&self) -> RunSummary {
        let duration_s = match (self.first_sent_ms, self.last_end_ms) {
            (Some(a), Some(b)) if b > a => (b - a) / 1000.0,
            _ => 0.0,
        };
        let rate_unavailable = rate_unavailable(self.requests, duration_s);
        let has_rate = rate_unavailable.is_none();
        let per_s = |n: u64| has_rate.then(|| n as f64 / duration_s);
        let errors = self.errors();
        // Requests canaryd itself failed to send, or cancelled on purpose, say nothing of the
        // target.
        let judged = self.requests - self.client_errors - self.cancelled;
        let goodput = (!self.goodput.is_empty()).then(|| GoodputSummary {
            slos: self.goodput.to_string(),
            good_requests: self.good,
            good_request_fraction: fraction(self.good, judged),
            goodput: per_s(self.good),
            misses_by_metric: self
                .slo_misses
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            no_value: self
                .slo_no_value
                .iter()
                .map(|(&(metric, output_tokens), &requests)| NoValue {
                    metric,
                    output_tokens,
                    requests,
                })
                .collect(),
            met_on_bound: self
                .slo_met_on_bound
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            uncertain_misses: named(&self.slo_uncertain_misses),
            uncertain_meets: named(&self.slo_uncertain_meets),
            good_requests_at_least: Some(self.good - self.good_uncertain),
            good_requests_at_most: Some(self.good + self.not_good_uncertain),
        });
        RunSummary {
            requests: self.requests,
            completed: self.completed,
            errors,
            cancelled: self.cancelled,
            client_errors: self.client_errors,
            error_rate: fraction(errors - self.client_errors, judged),
            errors_by_kind: self
                .errors
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), *v))
                .collect(),
            errors_by_http_status: self.statuses.counts().clone(),
            error_causes: self.causes.top(),
            warmup_requests: self.warmup,
            duration_s,
            sends: self.sends(),
            ttft_trend: self.ttft_trend.trend(),
            rate_unavailable,
            request_throughput: per_s(self.completed),
            output_token_throughput: per_s(self.output_tokens),
            per_user_requests: self.per_user.rated,
            per_user_unmeasured: self.per_user.unmeasured,
            total_input_tokens: self.input_tokens,
            total_output_tokens: self.output_tokens,
            total_cached_tokens: self.cached_tokens,
            total_reasoning_tokens: self.reasoning_tokens,
            goodput,
            token_agreement: self.agreement.clone(),
            by_url: self.by_url.summary(),
            receive_timestamps: self.rx.clone(),
            server_prompt_time_refused: self.server_prompt_time_refused.clone(),
            metrics: self
                .metrics
                .iter()
                .filter_map(|(name, (unit, d))| Some((name.to_string(), d.stats_in(unit)?)))
                .collect(),
            timeslices: self
                .timeslices
                .as_ref()
                .map(|t| t.report(self.last_end_ms.unwrap_or(0.0))),
        }
    }
}

impl Aggregator {
    /// The measured requests' send span against their schedule's; `None` under 2 requests.
    fn sends(&self) -> Option<SendSpans> {
        if self.requests < 2 {
            return None;
        }
        let span = |a: Option<f64>, b: Option<f64>| Some((b? - a?).max(0.0) / 1000.0);
        Some(SendSpans {
            scheduled_s: span(self.first_scheduled_ms, self.last_scheduled_ms)?,
            sent_s: span(self.first_ready_ms, self.last_ready_ms)?,
        })
    }
}

/// How the client kept to its schedule over the measured phase (warm-up left out): the span
/// from the first to the last scheduled send, and from the first to the last actual send, each
/// less its wait for the connection to open (`connect_wait`: the server's accept and
/// handshake, or a connect that failed at its timeout, are not the client's pace). Both exact,
/// from each request's own times. A client that held requests for a free in-flight slot,
/// or could not send as fast as the schedule asked, sends over a longer span than the schedule
/// (`scheduled_s / sent_s` is then the share of the offered rate it achieved); the responses
/// after the last send do not count, so a short run is not made to look slow by its tail.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SendSpans {
    /// First to last scheduled send, seconds.
    pub scheduled_s: f64,
    /// First to last actual send, each less its `connect_wait`, seconds.
    pub sent_s: f64,
}

/// The shortest span over which canaryd states a rate (requests or tokens per second).
pub const MIN_RATE_SPAN_S: f64 = 0.1;

/// Why a run's counts over its duration are not a rate, or `None` when they are: one request
/// divided by its own latency is a latency, and a span under [`MIN_RATE_SPAN_S`] is
/// extrapolated more than ten-fold to a second.
pub fn rate_unavailable(requests: u64, duration_s: f64) -> Option<String> {
    if requests < 2 {
        Some(format!(
            "{requests} measured request{}: a rate needs at least 2",
            if requests == 1 { "" } else { "s" }
        ))
    } else if duration_s < MIN_RATE_SPAN_S {
        Some(format!(
            "the run spanned {:.1} ms, under the {} ms a rate needs",
            duration_s * 1e3,
            MIN_RATE_SPAN_S * 1e3
        ))
    } else {
        None
    }
}

/// Counts by metric name, as `summary.json` keys them.
fn named(counts: &BTreeMap<&'static str, u64>) -> BTreeMap<String, u64> {
    counts.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// `n / d`, or `None` when there is nothing to divide by: a share of no requests (every one
/// cancelled on purpose, or canaryd's own failure) is no share, and a 0 there read as an exact
/// "no errors" or "none good".
fn fraction(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// The figures of one run, as written to `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Measured requests (warm-up excluded).
    pub requests: u64,
    /// Requests that completed.
    pub completed: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Requests the client cancelled on purpose (`--request-cancellation-rate`): neither
    /// completed nor failed, left out of every statistic but the schedule's and out of
    /// `error_rate` and goodput.
    #[serde(default)]
    pub cancelled: u64,
    /// Of those, requests canaryd failed itself for lack of its own resources
    /// (`client_resources`): canaryd was the bottleneck, not the target.
    #[serde(default)]
    pub client_errors: u64,
    /// The target's errors over the requests it was sent and not cancelled:
    /// `(errors - client_errors) / (requests - client_errors - cancelled)`; `None` (JSON
    /// `null`) when that denominator is 0: no request was judged, so there is no rate.
    pub error_rate: Option<f64>,
    /// Errors by class (`connect`, `http_status`, …).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// `http_status` errors by status code (`429`, `503`), exact for each status listed; at
    /// most [`StatusCounts::DISTINCT`] statuses, those past them only in `errors_by_kind`.
    /// Absent without such errors, and in summaries written before it was kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors_by_http_status: BTreeMap<u16, u64>,
    /// The most frequent causes of the errors (kind, HTTP status and message), most frequent
    /// first; at most [`ErrorCauses::LISTED`]. Absent without errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_causes: Vec<ErrorCause>,
    /// Warm-up requests sent before the measured phase.
    pub warmup_requests: u64,
    /// First send to last response end as canaryd read it (`ended_at_ms`), seconds: an
    /// upper bound of the span by canaryd's read delay of that end (the kernel's stamp, which
    /// ends e2e, can be 0.1 ms earlier), so the rates over it are lower bounds.
    pub duration_s: f64,
    /// The measured requests' sends against their schedule; absent under 2 measured
    /// requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sends: Option<SendSpans>,
    /// TTFT's least-squares growth per second of sending over the measured completed
    /// requests (an estimate): a queue that grows through the run shows here first. Absent
    /// under 10 such requests or a send span under 100 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_trend: Option<crate::TtftTrend>,
    /// Why the run has no rates (`request_throughput`, `output_token_throughput`, goodput):
    /// fewer than 2 measured requests, or a span under 100 ms. `None` when it has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_unavailable: Option<String>,
    /// Completed requests per second over `duration_s`; `None` when `rate_unavailable`.
    pub request_throughput: Option<f64>,
    /// Output tokens per second over `duration_s`; `None` when `rate_unavailable`.
    pub output_token_throughput: Option<f64>,
    /// Completed requests with a per-user rate (`output_token_throughput_per_user`, 1000 /
    /// ITL): the requests its statistics are over. Exact count. 0 in a summary written before
    /// it was kept.
    #[serde(default)]
    pub per_user_requests: u64,
    /// Completed requests with more than one output token but no per-user rate: every token
    /// came in one read, so no time between the first token and the end was measured (ITL 0
    /// ms; the rate is only a lower bound, (tokens - 1) / e2e). Left out of
    /// `output_token_throughput_per_user`, counted here ([`per_user_note`] says so). Exact
    /// count; 0 in a summary written before it was kept.
    #[serde(default)]
    pub per_user_unmeasured: u64,
    /// Prompt tokens of completed requests (server count when reported).
    pub total_input_tokens: u64,
    /// Output tokens of completed requests (server count when reported).
    pub total_output_tokens: u64,
    /// Prompt tokens the server served from its prefix cache.
    pub total_cached_tokens: u64,
    /// Reasoning tokens the server reported.
    pub total_reasoning_tokens: u64,
    /// Goodput against the run's SLOs, when any are set.
    pub goodput: Option<GoodputSummary>,
    /// How the server's token counts compare with what was asked.
    pub token_agreement: TokenAgreement,
    /// Each URL's share of the run, when requests named their URL (`--url` repeated shows an
    /// unbalanced replica here).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_url: BTreeMap<String, crate::UrlSummary>,
    /// How the completed requests' response times were taken: kernel receive timestamps,
    /// exact or bounds, or canaryd's reads.
    #[serde(default)]
    pub receive_timestamps: RxSummary,
    /// Completed requests whose server-reported prompt time (llama.cpp's `timings.prompt_ms`)
    /// could not be theirs, by why ([`ServerTimeRefused`]): left out of
    /// `ttft_minus_server_prompt_time`. Absent when there were none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_prompt_time_refused: BTreeMap<ServerTimeRefused, u64>,
    /// The run in slices of `--slice-duration` (issue 18); absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeslices: Option<crate::TimesliceReport>,
    /// One statistics block per metric, keyed by aiperf-style name.
    #[serde(flatten)]
    pub metrics: BTreeMap<String, Stats>,
}

/// Per-user rates counted as the requests come (exact counts, completed requests only).
#[derive(Debug, Default, Clone, Copy)]
struct PerUserCounts {
    /// Requests with a per-user rate.
    rated: u64,
    /// Requests with more than one output token and none.
    unmeasured: u64,
}

impl PerUserCounts {
    fn add(&mut self, r: &RequestRecord) {
        match r.output_tokens_per_s {
            Some(_) => self.rated += 1,
            None if r.output_token_count() > 1 => self.unmeasured += 1,
            None => {}
        }
    }
}

/// What tokens/s per user leaves out, when it leaves out some requests: `unmeasured` of them
/// had more than one token all in one read, and so no per-user rate; it is over the other
/// `rated`. `None` when none were left out. One sentence for the run table, the report page
/// and the sweep's notes.
pub fn per_user_note(unmeasured: u64, rated: u64) -> Option<String> {
    (unmeasured > 0).then(|| {
        format!(
            "{unmeasured} of the {} requests with more than one token had every token in one \
             read: no time between their first token and their end was measured, so they have \
             no tokens/s per user (only a lower bound, (tokens - 1) / e2e) and are left out of \
             it; tok/s/user is over the other {rated}",
            unmeasured + rated
        )
    })
}

/// Why a time the server reported for a request (its prompt time) is not taken as a figure:
/// a buggy or hostile server's number (`-1e200`) would otherwise become a TTFT gap of 1e200 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerTimeRefused {
    /// Below 0: no time.
    Negative,
    /// Longer than the request's own end-to-end latency as canaryd measured it, from before
    /// the server had the request to after it answered (an upper bound at worst): the
    /// server cannot have spent longer on a part of it.
    LongerThanRequest,
}

impl ServerTimeRefused {
    /// `ms` when it can be the request's (at least 0, at most `e2e_ms` when that is known),
    /// else why not.
    pub fn check(ms: f64, e2e_ms: Option<f64>) -> Result<f64, ServerTimeRefused> {
        if ms.is_nan() || ms < 0.0 {
            return Err(ServerTimeRefused::Negative);
        }
        match e2e_ms {
            Some(e2e) if ms > e2e => Err(ServerTimeRefused::LongerThanRequest),
            // Without the request's own span nothing bounds it but being finite.
            None if !ms.is_finite() => Err(ServerTimeRefused::LongerThanRequest),
            _ => Ok(ms),
        }
    }
}

/// Server-reported token counts against requested lengths, over completed requests that
/// reported usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenAgreement {
    /// Completed requests whose response carried `usage`.
    pub requests_with_usage: u64,
    /// Of those, how many had `prompt_tokens` equal to the synthesized prompt length.
    pub prompt_exact: u64,
    /// Sum of `prompt_tokens - requested` (chat templates add a few tokens per request).
    pub prompt_delta_sum: i64,
    /// How many had `completion_tokens` equal to the requested output length.
    pub completion_exact: u64,
    /// Sum of `completion_tokens - requested`.
    pub completion_delta_sum: i64,
    /// Requests with a `prompt_tokens`: those `prompt_delta_sum` is over (its mean's
    /// denominator).
    #[serde(default)]
    pub prompt_compared: u64,
    /// Requests with a plausible `completion_tokens`: those `completion_delta_sum` is over.
    #[serde(default)]
    pub completion_compared: u64,
    /// Requests whose `completion_tokens` could not be theirs (none for a stream that carried
    /// tokens, or more than the chunk cap allows): their chunks were counted instead, and
    /// they are left out of the two figures above.
    #[serde(default)]
    pub completion_implausible: u64,
}

/// How a run's response times were taken, over its completed requests (issue 16).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RxSummary {
    /// `on`, `off` (turned off) or `refused` (the kernel refused the socket option; the run
    /// said so once), set by the run; absent when folded again from records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why they are off or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Completed requests timed with receive timestamps on (records with `rx`).
    pub requests: u64,
    /// Of those, by where the first token's time came from: `kernel` (exact),
    /// `kernel_bound` (an upper bound), `userspace` (no stamp: canaryd's read).
    pub first_token: BTreeMap<String, u64>,
    /// Of those, by where the end's time (`e2e_ms`) came from, as `first_token`.
    #[serde(default)]
    pub end: BTreeMap<String, u64>,
    /// Of those, by where the response head's time (`ttfb_ms`) came from, as `first_token`: a
    /// head that shared its read with later bytes (a whole response in one write) is a bound.
    /// Absent in summaries written before heads were counted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub head: BTreeMap<String, u64>,
    /// Token events of those requests.
    pub token_events: u64,
    /// Of those, events whose time is only a bound.
    pub token_events_bound: u64,
    /// Requests with at least one such event: their TTST and inter-chunk gaps are bounds (not
    /// their ITL, which is over the first token and the end alone: see
    /// `itl_bound_requests`). Absent (0) in summaries written before they were counted.
    #[serde(default)]
    pub token_events_bound_requests: u64,
    /// Of those requests, the ones with an ITL (more than one token, in more than one event).
    /// Absent in summaries written before they were counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_requests: Option<u64>,
    /// Of those, the ones whose ITL, and so per-user rate, is only a bound ([`itl_is_bound`]:
    /// their first token or end not `kernel`). Absent in summaries written before they were
    /// counted: ITL is then taken as a bound wherever some first token or end is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_bound_requests: Option<u64>,
    /// The largest clock-mapping uncertainty of any request, µs.
    pub clock_map_uncertainty_max_us: Option<f64>,
}

impl RxSummary {
    /// Counts one completed request timed with receive timestamps, whose ITL is `itl_ms`.
    fn add(&mut self, rx: &RxTiming, itl_ms: Option<f64>) {
        self.requests += 1;
        let with_itl = self.itl_requests.get_or_insert(0);
        *with_itl += u64::from(itl_ms.is_some());
        let itl_bound = self.itl_bound_requests.get_or_insert(0);
        *itl_bound += u64::from(itl_ms.is_some() && itl_is_bound(rx.first_token, rx.end, itl_ms));
        if let Some(source) = rx.first_token {
            *self
                .first_token
                .entry(source.as_str().to_string())
                .or_default() += 1;
        }
        if let Some(source) = rx.end {
            *self.end.entry(source.as_str().to_string()).or_default() += 1;
        }
        if let Some(source) = rx.head {
            *self.head.entry(source.as_str().to_string()).or_default() += 1;
        }
        self.token_events += u64::from(rx.token_events);
        self.token_events_bound += u64::from(rx.token_events_bound);
        if rx.token_events_bound > 0 {
            self.token_events_bound_requests += 1;
        }
        let u = rx.clock_map_uncertainty_us;
        self.clock_map_uncertainty_max_us =
            Some(self.clock_map_uncertainty_max_us.map_or(u, |m| m.max(u)));
    }

    /// Which of the run's client times are not exact, as these counts say.
    pub fn bounds(&self) -> RxBounds {
        if self.requests == 0 {
            // Receive timestamps off or refused (or a summary folded from such records):
            // every client time is canaryd's read.
            return RxBounds::ALL;
        }
        let bound = |m: &BTreeMap<String, u64>| {
            m.iter().any(|(k, n)| k != "kernel" && *n > 0)
                || m.get("kernel").copied().unwrap_or(0) < self.requests
        };
        let first_token = bound(&self.first_token);
        // Summaries written before the ends were counted do not say: not exact then.
        let end = self.end.is_empty() || bound(&self.end);
        RxBounds {
            first_token,
            token_events: self.token_events_bound > 0,
            end,
            // Nor those written before the heads were.
            head: self.head.is_empty() || bound(&self.head),
            itl: self
                .itl_bound_requests
                .map_or(first_token || end, |n| n > 0),
        }
    }
}

/// Whether one request's ITL, `(e2e − TTFT) / (n − 1)`, and so its per-user rate (1000 / ITL),
/// is only a bound, by where the two times it is made of came from (`rx.first_token`,
/// `rx.end`; `None`: no stamp, canaryd's read). Exact when both are `kernel`; a bound
/// otherwise: a lower bound when only the first token is one (read late, it shortens the
/// span), an upper bound when only the end is, in neither direction when both are. The token
/// events between them do not enter ITL, so several of them in one read leave it exact (they
/// make TTST and the inter-chunk gaps bounds). An ITL of 0 ms is a response whose tokens came
/// in one read: no time between them was measured, so it is only a lower bound (its first
/// token is not `kernel` then anyway: its read carried the rest). One rule for the run's
/// table, `summary.json`, a sweep's `*` and the report.
pub fn itl_is_bound(
    first_token: Option<RxSource>,
    end: Option<RxSource>,
    itl_ms: Option<f64>,
) -> bool {
    first_token != Some(RxSource::Kernel) || end != Some(RxSource::Kernel) || itl_ms == Some(0.0)
}

/// Which client times of a run are upper bounds rather than exact ([`RxSummary::bounds`]):
/// some first tokens, token events or ends were a later segment's stamp or canaryd's read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxBounds {
    /// Some first tokens' times are upper bounds.
    pub first_token: bool,
    /// Some token events' times are upper bounds (several in one read).
    pub token_events: bool,
    /// Some ends' times are upper bounds.
    pub end: bool,
    /// Some response heads' times (TTFB) are upper bounds.
    pub head: bool,
    /// Some requests' ITL is a bound ([`itl_is_bound`]).
    pub itl: bool,
}

impl RxBounds {
    /// Every time exact (nothing folded yet).
    pub const NONE: RxBounds = RxBounds {
        first_token: false,
        token_events: false,
        end: false,
        head: false,
        itl: false,
    };

    /// Every time a bound (canaryd's reads alone: receive timestamps off or refused).
    pub const ALL: RxBounds = RxBounds {
        first_token: true,
        token_events: true,
        end: true,
        head: true,
        itl: true,
    };

    /// One completed request's, by the rule of [`RxSummary::bounds`]: a time not stamped
    /// `kernel` is a bound, and a record without receive timestamps (off or refused) has
    /// only canaryd's reads, all bounds.
    pub fn of_record(r: &RequestRecord) -> RxBounds {
        let Some(rx) = &r.rx else {
            return RxBounds::ALL;
        };
        RxBounds {
            first_token: rx.first_token != Some(RxSource::Kernel),
            token_events: rx.token_events_bound > 0,
            end: rx.end != Some(RxSource::Kernel),
            head: rx.head != Some(RxSource::Kernel),
            itl: r.itl_ms.is_some() && itl_is_bound(rx.first_token, rx.end, r.itl_ms),
        }
    }

    /// Bound where either is.
    pub fn or(self, o: RxBounds) -> RxBounds {
        RxBounds {
            first_token: self.first_token || o.first_token,
            token_events: self.token_events || o.token_events,
            end: self.end || o.end,
            head: self.head || o.head,
            itl: self.itl || o.itl,
        }
    }

    /// Whether any client time is a bound. The head's is left out: no table that asks shows
    /// TTFB, and a head read with the body (a whole response in one write) would mark
    /// exact rows as bounds there.
    pub fn any(&self) -> bool {
        self.first_token || self.token_events || self.end || self.itl
    }

    /// Whether the figures of `metric` (a `summary.json` metric name) are not exact: upper
    /// bounds for TTFT, TTFO, TTFB and latency, and in neither direction for the gaps between
    /// such times: TTST and the inter-chunk gaps over token events, ITL and the per-user rate
    /// (1000 / ITL) over the first token and the end alone ([`itl_is_bound`]); canaryd's
    /// read delay of the first token a lower bound where its stamp was a later segment's.
    pub fn is_bound(&self, metric: &str) -> bool {
        match metric {
            "time_to_first_token" => self.first_token,
            "time_to_first_output_token" => self.first_token || self.token_events,
            "time_to_second_token" | "inter_chunk_latency" => self.token_events || self.first_token,
            "inter_token_latency" | "output_token_throughput_per_user" => self.itl,
            "request_latency" => self.end,
            "time_to_first_byte" => self.head,
            // canaryd's read less a later segment's stamp: a lower bound of its delay.
            "client_read_delay" => self.first_token,
            _ => false,
        }
    }
}

/// Goodput figures of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodputSummary {
    /// The SLOs, in aiperf syntax.
    pub slos: String,
    /// Requests that completed and met every SLO.
    pub good_requests: u64,
    /// `good_requests / (requests - client_errors - cancelled)`; `None` (JSON `null`) when
    /// that denominator is 0: no request was judged, so there is no share.
    pub good_request_fraction: Option<f64>,
    /// Good requests per second; `None` when the run has no rates (see
    /// [`RunSummary::rate_unavailable`]).
    pub goodput: Option<f64>,
    /// How many requests missed each SLO term: they failed, or their value is past the
    /// threshold.
    pub misses_by_metric: BTreeMap<String, u64>,
    /// Completed requests not good for want of a value, not for missing a threshold: one
    /// output token has no ITL (aiperf's rule: not good). By term and why.
    #[serde(default)]
    pub no_value: Vec<NoValue>,
    /// Completed requests that met a term only on a bound, by term: their token events came
    /// in one read (one stamp), so ITL and TTST are known only from above and the per-user
    /// rate from below (see [`crate::Reading::Bound`]); those whose bound falls short are in
    /// `no_value` as `one_read`, not known.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub met_on_bound: BTreeMap<String, u64>,
    /// Of `misses_by_metric`, the misses judged on a time that is only a bound on the side
    /// that could turn them (a TTFT over a first token not stamped `kernel` is an upper
    /// bound): the request may have met the term. By term; see
    /// [`crate::SloMetric::doubt`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub uncertain_misses: BTreeMap<String, u64>,
    /// Terms counted met on a time that is only a bound on the side that could turn them
    /// (an ITL over a late first token is a lower bound): the request may have missed it.
    /// By term.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub uncertain_meets: BTreeMap<String, u64>,
    /// How many requests truly met every term at least: `good_requests` less those good
    /// on an uncertain meet. Absent in summaries written before it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_requests_at_least: Option<u64>,
    /// And at most: `good_requests` plus those not good only for uncertain misses (or
    /// one-read bounds that settle nothing). `good_requests` is exact as a count of
    /// judgements; the truth lies between the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_requests_at_most: Option<u64>,
}

/// Completed requests without a value for one SLO term, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoValue {
    /// The term's metric.
    pub metric: SloMetric,
    /// Their output tokens (`one` for "no ITL (1 output token)").
    pub output_tokens: OutputTokens,
    /// How many.
    pub requests: u64,
}

impl std::fmt::Display for NoValue {
    /// `no ITL (1 output token): 11`; `ITL not known (only a bound, …): 3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.output_tokens == OutputTokens::OneRead {
            return write!(
                f,
                "{} not known ({}): {}",
                self.metric.short_name(),
                self.output_tokens.describe(),
                self.requests
            );
        }
        write!(
            f,
            "no {} ({}): {}",
            self.metric.short_name(),
            self.output_tokens.describe(),
            self.requests
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RequestError, Status, Usage};

    fn ok(id: u32, sent: f64, ttft: f64, e2e: f64, tokens: u32) -> RequestRecord {
        RequestRecord {
            id,
            sent_at_ms: sent,
            ended_at_ms: sent + e2e,
            scheduled_at_ms: sent - 0.5,
            schedule_lag_ms: 0.5,
            ttft_ms: Some(ttft),
            e2e_ms: Some(e2e),
            itl_ms: Some((e2e - ttft) / (tokens - 1) as f64),
            chunks: tokens,
            usage: Some(Usage {
                completion_tokens: Some(tokens),
                prompt_tokens: Some(100),
                cached_tokens: Some(64),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    // A client that held requests for an in-flight slot sent over a longer span than its
    // schedule's; TTFT, timed from the send, does not show it, so the spans are stated.
    #[test]
    fn sends_span_the_measured_requests_schedule_and_their_actual_sends() {
        let mut agg = Aggregator::new(Goodput::default());
        let at = |id, scheduled: f64, sent: f64, warmup| RequestRecord {
            warmup,
            scheduled_at_ms: scheduled,
            schedule_lag_ms: sent - scheduled,
            ..ok(id, sent, 5.0, 20.0, 2)
        };
        agg.add(&at(0, -500.0, -500.0, true), &ChunkGaps::default());
        agg.add(&at(1, 0.0, 0.0, false), &ChunkGaps::default());
        assert_eq!(
            agg.summary().sends,
            None,
            "one measured request spans nothing"
        );
        agg.add(&at(2, 100.0, 250.0, false), &ChunkGaps::default());
        agg.add(&at(3, 200.0, 400.0, false), &ChunkGaps::default());
        let s = agg.summary().sends.unwrap();
        assert!((s.scheduled_s - 0.2).abs() < 1e-12, "{s:?}");
        assert!((s.sent_s - 0.4).abs() < 1e-12, "{s:?}");
        // A connect that took 10 s (or failed at its timeout) is the server's time, not a
        // pace the client could not keep: the span is of when canaryd was ready to send.
        agg.add(
            &RequestRecord {
                connect_wait_ms: 10_000.0,
                ..at(4, 300.0, 10_300.0, false)
            },
            &ChunkGaps::default(),
        );
        let s = agg.summary().sends.unwrap();
        assert!((s.scheduled_s - 0.3).abs() < 1e-12, "{s:?}");
        assert!((s.sent_s - 0.4).abs() < 1e-12, "{s:?}");
    }

    #[test]
    fn aggregates_counts_throughput_goodput_and_errors() {
        let mut agg = Aggregator::new("time_to_first_token:50".parse().unwrap());
        agg.add(
            &ok(0, 0.0, 40.0, 1000.0, 11),
            &ChunkGaps::from(&[10.0; 10][..]),
        );
        agg.add(&ok(1, 500.0, 60.0, 1500.0, 11), &ChunkGaps::new());
        let mut failed = ok(2, 600.0, 1.0, 10.0, 1);
        failed.status = Status::Error;
        failed.error = Some(RequestError {
            kind: ErrorKind::HttpStatus,
            http_status: Some(503),
            message: String::new(),
        });
        agg.add(&failed, &ChunkGaps::new());
        let mut warm = ok(3, 0.0, 1.0, 1.0, 2);
        warm.warmup = true;
        agg.add(&warm, &ChunkGaps::new());

        let s = agg.summary();
        assert_eq!(
            (s.requests, s.completed, s.errors, s.warmup_requests),
            (3, 2, 1, 1)
        );
        assert_eq!(s.errors_by_kind["http_status"], 1);
        assert_eq!(s.duration_s, 2.0); // first send 0 ms, last end 2000 ms
        assert_eq!(s.request_throughput, Some(1.0));
        assert_eq!(s.rate_unavailable, None);
        assert_eq!(s.total_output_tokens, 22);
        assert_eq!(s.total_cached_tokens, 128);
        assert_eq!(s.metrics["time_to_first_token"].count, 2);
        assert_eq!(s.metrics["time_to_first_token"].unit, "ms");
        assert_eq!(s.metrics["inter_chunk_latency"].count, 10);
        assert_eq!(s.metrics["schedule_lag"].count, 3);
        let g = s.goodput.unwrap();
        assert_eq!(g.good_requests, 1);
        assert!((g.good_request_fraction.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(g.misses_by_metric["time_to_first_token"], 2);
        let a = &s.token_agreement;
        assert_eq!(
            (a.requests_with_usage, a.prompt_exact, a.prompt_delta_sum),
            (2, 0, 200)
        );
        let json = serde_json::to_value(agg.summary()).unwrap();
        assert!(json["time_to_first_token"]["p99"].is_number(), "{json}");
        assert!(json["request_latency"]["p50"].is_number());
    }

    // Issue 16, item 6: one request printed `throughput 228 req/s` over `duration 0.00 s`.
    #[test]
    fn a_single_request_or_a_too_short_span_has_no_rate() {
        let mut agg = Aggregator::new("time_to_first_token:50".parse().unwrap());
        agg.add(&ok(0, 0.0, 4.0, 4.4, 3), &ChunkGaps::new());
        let s = agg.summary();
        assert_eq!(s.request_throughput, None);
        assert_eq!(s.output_token_throughput, None);
        assert_eq!(s.goodput.as_ref().unwrap().goodput, None);
        assert_eq!(s.goodput.as_ref().unwrap().good_requests, 1);
        let why = s.rate_unavailable.clone().unwrap();
        assert!(why.contains("1 measured request"), "{why}");
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["request_throughput"].is_null(), "{json}");
        assert_eq!(json["rate_unavailable"], why.as_str());
        // Two requests within 50 ms: counted, but no rate either.
        agg.add(&ok(1, 40.0, 4.0, 5.0, 3), &ChunkGaps::new());
        let s = agg.summary();
        assert!(s.rate_unavailable.unwrap().contains("45.0 ms"));
        assert_eq!(s.request_throughput, None);
        // A third ending past 100 ms: a rate.
        agg.add(&ok(2, 90.0, 4.0, 110.0, 3), &ChunkGaps::new());
        let s = agg.summary();
        assert_eq!(s.rate_unavailable, None);
        assert_eq!(s.request_throughput, Some(3.0 / 0.2));
    }

    // A server's count that cannot be the request's: 2^32 - 1 tokens made a throughput of
    // billions, 0 hid the stream's tokens. Its chunks count instead, and it is counted apart.
    #[test]
    fn a_server_prompt_time_that_cannot_be_the_requests_is_refused_and_counted() {
        // Audit F5: -1e200 made a gap of 1e200 ms, and beside a sane one `std` overflowed to
        // infinity, written `null`.
        let mut agg = Aggregator::new(Goodput::default());
        for (id, prompt) in [(1, -1e200), (2, 3.0), (3, 1e200), (4, 4.0), (5, 20.5)] {
            let mut r = ok(id, 0.0, 8.0, 20.0, 3);
            r.server_timings = Some(crate::record::ServerTimings {
                prompt_ms: Some(prompt),
                ..Default::default()
            });
            agg.add(&r, &ChunkGaps::new());
        }
        let s = agg.summary();
        let gap = &s.metrics["ttft_minus_server_prompt_time"];
        assert_eq!(gap.count, 2, "{gap:?}");
        assert_eq!((gap.min, gap.max), (4.0, 5.0));
        assert!(gap.std.is_finite());
        assert_eq!(
            s.server_prompt_time_refused,
            BTreeMap::from([
                (ServerTimeRefused::Negative, 1),
                (ServerTimeRefused::LongerThanRequest, 2)
            ])
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["server_prompt_time_refused"],
            serde_json::json!({"negative": 1, "longer_than_request": 2})
        );
        assert_eq!(ServerTimeRefused::check(20.0, Some(20.0)), Ok(20.0));
        assert_eq!(ServerTimeRefused::check(0.0, None), Ok(0.0));
    }

    // Audit F6: 20 of canaryd's own failures and 80 good requests read "good 100 %" beside
    // "missed TTFT: 20".
    #[test]
    fn canaryds_own_failures_are_not_the_targets_slo_misses() {
        let mut agg = Aggregator::new("time_to_first_token:100".parse().unwrap());
        let failed = |id, kind| RequestRecord {
            status: Status::Error,
            error: Some(RequestError {
                kind,
                http_status: None,
                message: String::new(),
            }),
            ..ok(id, 0.0, 1.0, 2.0, 2)
        };
        for id in 0..4 {
            agg.add(&failed(id, ErrorKind::ClientResources), &ChunkGaps::new());
        }
        for id in 4..8 {
            agg.add(&ok(id, 0.0, 10.0, 20.0, 3), &ChunkGaps::new());
        }
        let g = agg.summary().goodput.unwrap();
        assert_eq!(g.good_request_fraction, Some(1.0));
        assert!(g.misses_by_metric.is_empty(), "{:?}", g.misses_by_metric);
        // The target's own failure still misses every term.
        agg.add(&failed(8, ErrorKind::HttpStatus), &ChunkGaps::new());
        let g = agg.summary().goodput.unwrap();
        assert_eq!(g.good_request_fraction, Some(0.8));
        assert_eq!(g.misses_by_metric["time_to_first_token"], 1);
    }

    #[test]
    fn an_implausible_completion_count_is_not_trusted() {
        let mut agg = Aggregator::new(Goodput::default());
        let with = |id, count| {
            let mut r = ok(id, 0.0, 10.0, 100.0, 3);
            r.output_tokens = 4;
            r.usage.as_mut().unwrap().completion_tokens = Some(count);
            r
        };
        let (huge, none, many) = (with(0, u32::MAX), with(1, 0), with(2, 40));
        assert_eq!(huge.output_token_count(), 3);
        assert_eq!(none.output_token_count(), 3);
        // Ten tokens a chunk (a server's stream interval) is within the cap: trusted.
        assert_eq!(many.output_token_count(), 40);
        // No length asked: bounded by the chunk cap of such requests, not unbounded.
        let mut unasked = with(3, u32::MAX);
        unasked.output_tokens = 0;
        assert_eq!(unasked.output_token_count(), 3);
        for r in [&huge, &none, &many] {
            agg.add(r, &ChunkGaps::new());
        }
        let s = agg.summary();
        assert_eq!(s.total_output_tokens, 3 + 3 + 40);
        let a = &s.token_agreement;
        assert_eq!((a.completion_implausible, a.completion_delta_sum), (2, 36));
        // The mean delta is over the one count compared, not the three with usage.
        assert_eq!((a.completion_compared, a.prompt_compared), (1, 3));
    }

    // Audit F5: goodput and its counts were called exact, yet a request whose first token
    // was a later segment's stamp (`kernel_bound`) was judged a TTFT miss on an upper bound
    // (it may have met it) and an ITL meet on a lower bound (it may have missed it).
    #[test]
    fn judgements_on_a_bound_are_counted_and_bound_the_good_count() {
        use RxSource::{Kernel, KernelBound};
        let stamped = |mut r: RequestRecord, first, end| {
            r.rx = Some(RxTiming {
                first_token: Some(first),
                end: Some(end),
                ..Default::default()
            });
            r
        };
        let mut agg = Aggregator::new(
            "time_to_first_token:10 inter_token_latency:5"
                .parse()
                .unwrap(),
        );
        // A TTFT miss on an exact time: a miss.
        agg.add(
            &stamped(ok(0, 0.0, 12.0, 30.0, 5), Kernel, Kernel),
            &ChunkGaps::new(),
        );
        // A TTFT miss on an upper bound, its ITL (4.75) met on a lower bound: may be good.
        let late_miss = stamped(ok(1, 0.0, 11.0, 30.0, 5), KernelBound, Kernel);
        agg.add(&late_miss, &ChunkGaps::new());
        // Good, but its ITL (4.25) met on a lower bound: may not be.
        let late_good = stamped(ok(2, 0.0, 5.0, 22.0, 5), KernelBound, Kernel);
        agg.add(&late_good, &ChunkGaps::new());
        // Good on exact times.
        agg.add(
            &stamped(ok(3, 0.0, 5.0, 22.0, 5), Kernel, Kernel),
            &ChunkGaps::new(),
        );
        let g = agg.summary().goodput.unwrap();
        assert_eq!(g.good_requests, 2);
        assert_eq!(g.misses_by_metric["time_to_first_token"], 2);
        assert_eq!(g.uncertain_misses["time_to_first_token"], 1);
        assert_eq!(g.uncertain_meets["inter_token_latency"], 2);
        assert!(!g.uncertain_meets.contains_key("time_to_first_token"));
        assert_eq!(
            (g.good_requests_at_least, g.good_requests_at_most),
            (Some(1), Some(3))
        );
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["uncertain_misses"]["time_to_first_token"], 1);
        assert_eq!(json["good_requests_at_least"], 1);
        assert_eq!(json["good_requests_at_most"], 3);
    }

    // Issue 16, item 4: one-token outputs were counted as ITL misses.
    #[test]
    fn one_token_outputs_are_counted_apart_from_misses() {
        let mut agg = Aggregator::new(
            "time_to_first_token:50 inter_token_latency:40"
                .parse()
                .unwrap(),
        );
        agg.add(&ok(0, 0.0, 10.0, 100.0, 5), &ChunkGaps::new());
        let mut one = ok(1, 0.0, 10.0, 10.0, 2);
        one.itl_ms = None;
        one.usage.as_mut().unwrap().completion_tokens = Some(1);
        agg.add(&one, &ChunkGaps::new());
        agg.add(&one, &ChunkGaps::new());
        let mut slow = ok(2, 0.0, 90.0, 1000.0, 3);
        slow.itl_ms = Some(455.0);
        agg.add(&slow, &ChunkGaps::new());
        let g = agg.summary().goodput.unwrap();
        assert_eq!(g.good_requests, 1);
        assert_eq!(g.misses_by_metric["inter_token_latency"], 1);
        assert_eq!(g.misses_by_metric["time_to_first_token"], 1);
        assert_eq!(
            g.no_value,
            vec![NoValue {
                metric: SloMetric::InterTokenLatency,
                output_tokens: OutputTokens::One,
                requests: 2
            }]
        );
        assert_eq!(g.no_value[0].to_string(), "no ITL (1 output token): 2");
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(
            json["no_value"][0],
            serde_json::json!({"metric": "inter_token_latency", "output_tokens": "one", "requests": 2})
        );
    }

    // A whole response in one read (one stamp): its rate was null and it was counted "no
    // output tokens/s per user (not measured)"; it is judged on its lower bound, and counted.
    #[test]
    fn one_read_responses_are_judged_on_a_bound_and_counted() {
        let mut agg = Aggregator::new("output_token_throughput_per_user:1000".parse().unwrap());
        let mut measured = ok(0, 0.0, 10.0, 100.0, 10); // ITL 10 ms: 100 tokens/s, a miss
        measured.output_tokens_per_s = Some(100.0);
        agg.add(&measured, &ChunkGaps::new());
        let one_read = ok(1, 0.0, 1.0, 1.0, 30); // ≥ 29,000 tokens/s: good on the bound
        assert_eq!(one_read.itl_ms, Some(0.0));
        agg.add(&one_read, &ChunkGaps::new());
        let slow_read = ok(2, 0.0, 100.0, 100.0, 30); // ≥ 290 tokens/s: not known
        agg.add(&slow_read, &ChunkGaps::new());
        let g = agg.summary().goodput.unwrap();
        assert_eq!(g.good_requests, 1);
        assert_eq!(g.met_on_bound["output_token_throughput_per_user"], 1);
        assert_eq!(g.misses_by_metric["output_token_throughput_per_user"], 1);
        assert_eq!(
            g.no_value[0].to_string(),
            "output tokens/s per user not known (only a bound, which falls short: its tokens \
             came in one read): 1"
        );
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["no_value"][0]["output_tokens"], "one_read");
        assert_eq!(json["met_on_bound"]["output_token_throughput_per_user"], 1);
    }

    // Issue 14, item 7: canaryd out of file descriptors was counted as the target's errors.
    #[test]
    fn the_clients_own_failures_are_not_the_targets_error_rate() {
        let mut agg = Aggregator::new("time_to_first_token:50".parse().unwrap());
        agg.add(&ok(0, 0.0, 40.0, 100.0, 5), &ChunkGaps::new());
        for (i, kind) in [
            ErrorKind::ClientResources,
            ErrorKind::ClientResources,
            ErrorKind::Timeout,
        ]
        .into_iter()
        .enumerate()
        {
            let mut failed = ok(i as u32 + 1, 0.0, 1.0, 1.0, 2);
            failed.status = Status::Error;
            failed.error = Some(RequestError {
                kind,
                http_status: None,
                message: String::new(),
            });
            agg.add(&failed, &ChunkGaps::new());
        }
        let s = agg.summary();
        assert_eq!((s.requests, s.errors, s.client_errors), (4, 3, 2));
        assert_eq!(s.errors_by_kind["client_resources"], 2);
        // One timeout over the two requests the target was sent.
        assert_eq!(s.error_rate, Some(0.5));
        assert_eq!(s.goodput.unwrap().good_request_fraction, Some(0.5));
    }

    #[test]
    fn ttft_gap_to_the_server_prompt_time_only_where_the_server_reported_it() {
        let mut agg = Aggregator::new(Goodput::default());
        let mut with_timings = ok(0, 0.0, 40.0, 100.0, 5);
        with_timings.server_timings = Some(crate::record::ServerTimings {
            prompt_ms: Some(31.5),
            ..Default::default()
        });
        agg.add(&with_timings, &ChunkGaps::new());
        agg.add(&ok(1, 0.0, 70.0, 100.0, 5), &ChunkGaps::new());
        let s = agg.summary();
        let gap = &s.metrics["ttft_minus_server_prompt_time"];
        assert_eq!(gap.count, 1);
        assert!((gap.avg - 8.5).abs() < 0.01, "{gap:?}");
        let without = Aggregator::new(Goodput::default());
        assert!(!without
            .summary()
            .metrics
            .contains_key("ttft_minus_server_prompt_time"));
    }

    // Issue 17: a request the client cancels on purpose is neither the target's error nor a
    // completion, and its partial latencies stay out of the completed requests' statistics.
    #[test]
    fn cancelled_requests_are_counted_apart() {
        let mut agg = Aggregator::new("time_to_first_token:50".parse().unwrap());
        agg.add(&ok(0, 0.0, 40.0, 100.0, 5), &ChunkGaps::new());
        let mut cut = ok(1, 0.0, 900.0, 1000.0, 3);
        cut.status = Status::Cancelled;
        cut.e2e_ms = None;
        agg.add(&cut, &ChunkGaps::from(&[5.0, 5.0][..]));
        let mut failed = ok(2, 0.0, 1.0, 1.0, 2);
        failed.status = Status::Error;
        failed.error = Some(RequestError {
            kind: ErrorKind::Timeout,
            http_status: None,
            message: String::new(),
        });
        agg.add(&failed, &ChunkGaps::new());
        let s = agg.summary();
        assert_eq!(
            (s.requests, s.completed, s.errors, s.cancelled),
            (3, 1, 1, 1)
        );
        assert_eq!(agg.errors(), 1);
        // One timeout over the two requests that were not cancelled.
        assert_eq!(s.error_rate, Some(0.5));
        let g = s.goodput.as_ref().unwrap();
        assert_eq!(g.good_request_fraction, Some(0.5));
        assert_eq!(g.misses_by_metric["time_to_first_token"], 1);
        assert_eq!(s.metrics["time_to_first_token"].count, 1);
        assert!(!s.metrics.contains_key("inter_chunk_latency"));
        assert_eq!(s.metrics["schedule_lag"].count, 3);
        assert_eq!(s.total_output_tokens, 5);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["cancelled"], 1);
        let rec = serde_json::to_value(&cut).unwrap();
        assert_eq!(rec["status"], "cancelled");
    }

    // A share of no requests is no share: every request cancelled on purpose (or failed by
    // canaryd itself) wrote `"error_rate": 0`, an exact "no errors", and a good fraction of 0.
    #[test]
    fn shares_of_no_judged_request_are_null_not_zero() {
        let mut agg = Aggregator::new("time_to_first_token:50".parse().unwrap());
        for id in 0..2 {
            let mut cut = ok(id, 0.0, 900.0, 1000.0, 3);
            cut.status = Status::Cancelled;
            agg.add(&cut, &ChunkGaps::new());
        }
        let mut own = ok(2, 0.0, 1.0, 1.0, 2);
        own.status = Status::Error;
        own.error = Some(RequestError {
            kind: ErrorKind::ClientResources,
            http_status: None,
            message: String::new(),
        });
        agg.add(&own, &ChunkGaps::new());
        let s = agg.summary();
        assert_eq!((s.requests, s.cancelled, s.client_errors), (3, 2, 1));
        assert_eq!(s.error_rate, None);
        assert_eq!(s.goodput.as_ref().unwrap().good_request_fraction, None);
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["error_rate"].is_null(), "{json}");
        assert!(json["goodput"]["good_request_fraction"].is_null(), "{json}");
        // Read back, and so is a summary.json of schema 2 that wrote a number.
        let back: RunSummary = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, s);
        let mut v2 = json;
        v2["error_rate"] = serde_json::json!(0.0);
        v2["goodput"]["good_request_fraction"] = serde_json::json!(0.0);
        let old: RunSummary = serde_json::from_value(v2).unwrap();
        assert_eq!(old.error_rate, Some(0.0));
        assert_eq!(old.goodput.unwrap().good_request_fraction, Some(0.0));
    }

    // Issue 16: TTFT on the kernel's receive clock, canaryd's own delay reported beside it.
    #[test]
    fn kernel_stamped_requests_report_canaryds_read_delay_beside_ttft() {
        use crate::record::{RxSource, RxTiming, UserspaceTimes};
        let stamped = |id, source, read_ttft: f64, u: f64| {
            let mut r = ok(id, 0.0, 40.0, 100.0, 5);
            r.rx = Some(RxTiming {
                first_token: Some(source),
                end: Some(source),
                token_events: 5,
                token_events_bound: 1,
                clock_map_uncertainty_us: u,
                read_delay_max_ms: Some(read_ttft - 40.0 + 1.0),
                userspace: UserspaceTimes {
                    ttft_ms: Some(read_ttft),
                    ..Default::default()
                },
                ..Default::default()
            });
            r
        };
        let mut agg = Aggregator::new(Goodput::default());
        agg.add(&stamped(0, RxSource::Kernel, 42.5, 0.05), &ChunkGaps::new());
        agg.add(
            &stamped(1, RxSource::KernelBound, 41.0, 0.2),
            &ChunkGaps::new(),
        );
        // No stamp came for this one's first token: no read delay to report.
        agg.add(
            &stamped(2, RxSource::Userspace, 40.0, 0.1),
            &ChunkGaps::new(),
        );
        agg.add(&ok(3, 0.0, 50.0, 100.0, 5), &ChunkGaps::new());
        let s = agg.summary();
        let delay = &s.metrics["client_read_delay"];
        assert_eq!(delay.count, 2);
        assert!((delay.avg - 1.75).abs() < 1e-9, "{delay:?}");
        assert_eq!(s.metrics["client_read_delay_max"].max, 3.5);
        let read = &s.metrics["time_to_first_token_userspace"];
        assert_eq!((read.count, read.max), (4, 50.0));
        assert_eq!(s.metrics["time_to_first_token"].max, 50.0);
        let rx = &s.receive_timestamps;
        assert_eq!(
            (rx.requests, rx.token_events, rx.token_events_bound),
            (3, 15, 3)
        );
        // Each of the three had one bound event: three requests whose gaps are bounds.
        assert_eq!(rx.token_events_bound_requests, 3);
        assert_eq!(rx.first_token["kernel"], 1);
        assert_eq!(rx.first_token["kernel_bound"], 1);
        assert_eq!(rx.first_token["userspace"], 1);
        assert_eq!(rx.end, rx.first_token, "the ends counted the same way");
        assert_eq!(rx.clock_map_uncertainty_max_us, Some(0.2));
        assert_eq!(rx.state, None, "the run sets it");
    }

    // Audit (README walkthrough) finding 3: ITL was called a bound wherever some token
    // events shared a read, though it is over the first token and the end alone, and the
    // report called it exact where its first token was a bound. One rule now: exact when both
    // are `kernel`.
    #[test]
    fn itl_is_exact_only_when_its_first_token_and_end_are_kernel_stamped() {
        use crate::record::RxSource::{Kernel, KernelBound, Userspace};
        assert!(!itl_is_bound(Some(Kernel), Some(Kernel), Some(5.0)));
        // A first token read late shortens the span (a lower bound); a late end lengthens it.
        assert!(itl_is_bound(Some(KernelBound), Some(Kernel), Some(5.0)));
        assert!(itl_is_bound(Some(Kernel), Some(KernelBound), Some(5.0)));
        assert!(itl_is_bound(Some(Kernel), Some(Userspace), Some(5.0)));
        // --no-kernel-timestamps: both canaryd's reads, or no stamp recorded at all.
        assert!(itl_is_bound(Some(Userspace), Some(Userspace), Some(5.0)));
        assert!(itl_is_bound(None, None, Some(5.0)));
        assert!(itl_is_bound(Some(Kernel), None, Some(5.0)));
        // Tokens in one read: 0 ms measured between them, only a lower bound.
        assert!(itl_is_bound(Some(Kernel), Some(Kernel), Some(0.0)));
    }

    #[test]
    fn a_runs_itl_is_bound_by_its_requests_first_tokens_and_ends_not_its_token_events() {
        use crate::record::{RxSource, RxTiming};
        let stamped = |id, tokens, first: RxSource, end: RxSource, bound_events| {
            let mut r = ok(id, 0.0, 40.0, 100.0, tokens);
            if tokens < 2 {
                r.itl_ms = None;
            }
            r.rx = Some(RxTiming {
                first_token: Some(first),
                end: Some(end),
                token_events: tokens,
                token_events_bound: bound_events,
                ..Default::default()
            });
            r
        };
        let fold = |records: &[RequestRecord]| {
            let mut agg = Aggregator::new(Goodput::default());
            for r in records {
                agg.add(r, &ChunkGaps::new());
            }
            agg.summary().receive_timestamps
        };
        use RxSource::{Kernel, KernelBound, Userspace};
        // As the audit's run1: every request with an ITL had its first token and end
        // stamped `kernel`, one event each read with another; the one-token request's first
        // token was a bound, but it has no ITL.
        let rx = fold(&[
            stamped(0, 5, Kernel, Kernel, 1),
            stamped(1, 9, Kernel, Kernel, 2),
            stamped(2, 1, KernelBound, Kernel, 1),
        ]);
        assert_eq!((rx.itl_requests, rx.itl_bound_requests), (Some(2), Some(0)));
        let b = rx.bounds();
        assert!(!b.is_bound("inter_token_latency"));
        assert!(!b.is_bound("output_token_throughput_per_user"));
        assert!(b.is_bound("time_to_first_token"));
        // TTST and the inter-chunk gaps are over the token events: bounds.
        assert!(b.is_bound("time_to_second_token"));
        assert!(b.is_bound("inter_chunk_latency"));
        assert!(!b.is_bound("request_latency"));
        // A request with an ITL whose first token, or end, is a bound makes ITL one.
        for (first, end) in [(KernelBound, Kernel), (Kernel, KernelBound)] {
            let rx = fold(&[
                stamped(0, 5, Kernel, Kernel, 0),
                stamped(1, 5, first, end, 0),
            ]);
            assert_eq!(rx.itl_bound_requests, Some(1));
            assert!(rx.bounds().is_bound("inter_token_latency"));
            assert!(rx.bounds().is_bound("output_token_throughput_per_user"));
            // The same request alone, by the record's rule.
            assert!(RxBounds::of_record(&stamped(1, 5, first, end, 0)).itl);
        }
        assert!(!RxBounds::of_record(&stamped(0, 5, Kernel, Kernel, 3)).itl);
        // Every time canaryd's read (receive timestamps off: no `rx`).
        let mut off = ok(0, 0.0, 40.0, 100.0, 5);
        off.rx = None;
        assert!(RxBounds::of_record(&off).itl);
        let rx = fold(&[off]);
        assert!(rx.bounds().is_bound("inter_token_latency"));
        // Stamped, but every one a read (userspace).
        let rx = fold(&[stamped(0, 5, Userspace, Userspace, 5)]);
        assert!(rx.bounds().is_bound("inter_token_latency"));
        // summary.json says the counts, and reads them back.
        let json = serde_json::to_value(&rx).unwrap();
        assert_eq!(
            (&json["itl_requests"], &json["itl_bound_requests"]),
            (&serde_json::json!(1), &serde_json::json!(1))
        );
        assert_eq!(serde_json::from_value::<RxSummary>(json).unwrap(), rx);
    }

    // TTFB was never a bound, though the head's stamp can be a later segment's (the head read
    // with the body) or canaryd's read: the heads are counted, and TTFB is a bound where some
    // is; a summary written before they were counted does not say, so it is not exact.
    #[test]
    fn ttfb_is_a_bound_where_some_head_is() {
        let headed = |head: RxSource| {
            let mut r = ok(0, 0.0, 10.0, 40.0, 5);
            r.ttfb_ms = Some(8.0);
            r.rx = Some(RxTiming {
                head: Some(head),
                first_token: Some(RxSource::Kernel),
                end: Some(RxSource::Kernel),
                ..Default::default()
            });
            r
        };
        let fold = |records: &[RequestRecord]| {
            let mut agg = Aggregator::new(Goodput::default());
            for r in records {
                agg.add(r, &ChunkGaps::new());
            }
            agg.summary().receive_timestamps
        };
        let exact = fold(&[headed(RxSource::Kernel)]);
        assert!(!exact.bounds().is_bound("time_to_first_byte"));
        let late = fold(&[headed(RxSource::Kernel), headed(RxSource::KernelBound)]);
        assert_eq!(late.head.get("kernel_bound"), Some(&1));
        assert!(late.bounds().is_bound("time_to_first_byte"));
        assert!(!late.bounds().is_bound("time_to_first_token"));
        assert!(RxBounds::of_record(&headed(RxSource::Userspace)).head);
        assert!(!RxBounds::of_record(&headed(RxSource::Kernel)).head);
        // summary.json says the counts and reads them back; one without them is not exact.
        let json = serde_json::to_value(&late).unwrap();
        assert_eq!(json["head"]["kernel_bound"], 1);
        let mut older = serde_json::to_value(&exact).unwrap();
        older.as_object_mut().unwrap().remove("head");
        let older: RxSummary = serde_json::from_value(older).unwrap();
        assert!(older.bounds().is_bound("time_to_first_byte"));
    }

    // A summary.json written before ITL's bounds were counted: ITL is a bound wherever some
    // first token or end is, never by the token events alone.
    #[test]
    fn an_older_summary_bounds_itl_by_its_first_tokens_and_ends() {
        let older = |first_token: serde_json::Value| -> RxSummary {
            serde_json::from_value(serde_json::json!({"state": "on", "requests": 2,
                "first_token": first_token, "end": {"kernel": 2}, "token_events": 20,
                "token_events_bound": 3, "token_events_bound_requests": 1,
                "clock_map_uncertainty_max_us": 0.1}))
            .unwrap()
        };
        let exact = older(serde_json::json!({"kernel": 2}));
        assert_eq!(exact.itl_bound_requests, None);
        assert!(!exact.bounds().is_bound("inter_token_latency"));
        assert!(exact.bounds().is_bound("time_to_second_token"));
        let bound = older(serde_json::json!({"kernel": 1, "kernel_bound": 1}));
        assert!(bound.bounds().is_bound("inter_token_latency"));
    }

    // Tokens/s per user is 1000 / ITL, so a response whose tokens all came in one read (ITL
    // 0 ms) has none: counted apart, not left out unsaid; one token has no ITL at all.
    #[test]
    fn requests_without_a_per_user_rate_are_counted() {
        let mut agg = Aggregator::new(Goodput::default());
        let mut streamed = ok(1, 0.0, 10.0, 50.0, 5);
        streamed.output_tokens_per_s = streamed.itl_ms.map(|itl| 1000.0 / itl);
        let one_read = ok(2, 1.0, 10.0, 10.0, 5);
        assert_eq!(one_read.itl_ms, Some(0.0));
        let mut one_token = ok(3, 2.0, 10.0, 10.0, 2);
        one_token.chunks = 1;
        one_token.usage = None;
        one_token.itl_ms = None;
        for r in [&streamed, &one_read, &one_token] {
            agg.add(r, &ChunkGaps::default());
        }
        let s = agg.summary();
        assert_eq!((s.per_user_requests, s.per_user_unmeasured), (1, 1));
        assert_eq!(s.metrics["output_token_throughput_per_user"].count, 1);
        let note = per_user_note(s.per_user_unmeasured, s.per_user_requests).unwrap();
        assert!(
            note.starts_with(
                "1 of the 2 requests with more than one token had every token in \
                 one read"
            ) && note.ends_with("tok/s/user is over the other 1"),
            "{note}"
        );
        assert_eq!(per_user_note(0, 7), None);
        // A summary written before the counts were kept still reads, with none.
        let mut old = serde_json::to_value(&s).unwrap();
        let o = old.as_object_mut().unwrap();
        o.remove("per_user_requests").unwrap();
        o.remove("per_user_unmeasured").unwrap();
        let read: RunSummary = serde_json::from_value(old).unwrap();
        assert_eq!((read.per_user_requests, read.per_user_unmeasured), (0, 0));
    }
}
