//! One rule per class. Each reads [`Figures`], tests its thresholds (the constants in
//! [`thresholds`]), and says where in the run its condition held.

use super::figures::{Fig, Figures};
use super::interval::{longest, spans_between, Span};
use super::{Bottleneck, DiagnosisInput, Evidence, FigureKind, Finding, RuleState, Threshold};
use crate::telemetry::ServerPoint;
use crate::timeline::ClientTimeline;

/// The rules' thresholds (documented with each class in the README).
pub mod thresholds {
    /// `target-errors`: the target failed at least this share of the requests it was sent.
    pub const ERROR_RATE: f64 = 0.05;
    /// `client-bound`: canaryd's read delay (kernel receive → read, eBPF) is at least this
    /// many ms …
    pub const CLIENT_DELAY_MIN_MS: f64 = 2.0;
    /// … and at least this share of the client's mean TTFT.
    pub const CLIENT_DELAY_SHARE: f64 = 0.10;
    /// `client-bound`: canaryd's cgroup was throttled by its CPU quota for at least this
    /// many seconds per second of the run (kernel `cpu.stat`, exact), and its p99 schedule
    /// lag is at least [`CLIENT_CPU_WAIT_MIN_MS`] (and [`CLIENT_CPU_WAIT_SHARE`] of the mean
    /// TTFT). Keyed on throttling, not on raw run delay: a busy host makes every thread wait
    /// a little, only a quota stops canaryd outright.
    pub const CLIENT_THROTTLED_SHARE: f64 = 0.10;
    /// `client-bound`: canaryd's threads waited, runnable, at least this many ms for a CPU
    /// per wake-up (`schedstat` run delay over timeslices) …
    pub const CLIENT_CPU_WAIT_MIN_MS: f64 = 10.0;
    /// … and at least [`CLIENT_DELAY_SHARE`] of the mean TTFT, while the client's p99
    /// schedule lag is at least as large: the wait showed in the requests it sent late.
    pub const CLIENT_CPU_WAIT_SHARE: f64 = 0.10;
    /// `client-bound`: canaryd used at least this share of the CPU it may use.
    pub const CLIENT_CPU_SATURATED: f64 = 0.90;
    /// `network`: client TTFT minus the server's own TTFT (minus canaryd's read delay) is at
    /// least this many ms …
    pub const NETWORK_MIN_MS: f64 = 5.0;
    /// … and at least this share of the client's mean TTFT.
    pub const NETWORK_SHARE: f64 = 0.20;
    /// `kv-memory-bound`: KV-cache usage at or above this …
    pub const KV_HIGH: f64 = 0.90;
    /// … on at least this many consecutive scrapes;
    pub const KV_HELD_SCRAPES: f64 = 2.0;
    /// or at least this many preemptions per request sent;
    pub const PREEMPTIONS_PER_REQUEST: f64 = 0.01;
    /// or at least this many requests swapped out (vLLM V0).
    pub const SWAPPED: f64 = 1.0;
    /// `queueing`: the server's mean queue time is at least this many ms …
    pub const QUEUE_MIN_MS: f64 = 10.0;
    /// … and at least this share of its TTFT (queueing dominates TTFT). Without a
    /// queue-time histogram: a mean queue depth of at least [`QUEUE_DEPTH`] whose wait by
    /// Little's law (depth / throughput) is at least [`QUEUE_MIN_MS`].
    pub const QUEUE_SHARE: f64 = 0.50;
    /// Requests waiting, on average.
    pub const QUEUE_DEPTH: f64 = 1.0;
    /// `prefill-bound`: the server's mean prefill time is at least this many ms, …
    pub const PREFILL_MIN_MS: f64 = 10.0;
    /// … at least this share of the server's TTFT (the same requests; the client's when the
    /// server gives none), …
    pub const PREFILL_SHARE: f64 = 0.50;
    /// … and TTFT is at least this share of the request's end-to-end latency.
    pub const TTFT_SHARE_OF_E2E: f64 = 0.50;
    /// `compute-bound`: mean GPU utilization at least this (percent), with KV-cache usage
    /// under [`KV_LOW`], nothing waiting and no preemptions.
    pub const GPU_BUSY_PCT: f64 = 90.0;
    /// KV-cache usage under this is "low".
    pub const KV_LOW: f64 = 0.50;
}

use thresholds::*;

/// `figure >= limit`, both in `unit`.
fn ge(figure: &str, observed: f64, limit: f64, unit: &str) -> Threshold {
    Threshold {
        figure: figure.into(),
        op: ">=".into(),
        limit,
        observed,
        unit: unit.into(),
        met: observed >= limit,
    }
}

/// `figure < limit`, both in `unit`.
fn lt(figure: &str, observed: f64, limit: f64, unit: &str) -> Threshold {
    Threshold {
        figure: figure.into(),
        op: "<".into(),
        limit,
        observed,
        unit: unit.into(),
        met: observed < limit,
    }
}

fn exact(name: &str, value: f64, unit: &str, source: &str) -> Evidence {
    Evidence {
        name: name.into(),
        value,
        unit: unit.into(),
        kind: FigureKind::Exact,
        source: source.into(),
    }
}

fn fire_all(x: &mut Finding) {
    let all = !x.thresholds.is_empty() && x.thresholds.iter().all(|t| t.met);
    x.state = if all {
        RuleState::Fired
    } else {
        RuleState::Clear
    };
}

fn fire_any(x: &mut Finding) {
    x.state = if x.thresholds.iter().any(|t| t.met) {
        RuleState::Fired
    } else {
        RuleState::Clear
    };
}

fn unknown(x: &mut Finding, why: impl Into<String>) {
    x.state = RuleState::Unknown;
    x.missing.push(why.into());
}

/// What the rules share: the figures, the time series and the run's length.
struct Ctx<'a> {
    f: &'a Figures,
    input: &'a DiagnosisInput<'a>,
    /// The run's duration (first send to last end), s: where a condition can hold, and
    /// what its share is of.
    run_s: f64,
}

impl Ctx<'_> {
    fn server(&self) -> &[ServerPoint] {
        &self.input.telemetry.series.server
    }

    fn timeline(&self) -> Option<&ClientTimeline> {
        self.input.timeline
    }

    /// Spans of the client's time buckets.
    fn client_spans(
        &self,
        held: impl Fn(&crate::timeline::ClientBucket) -> Option<(bool, f64)>,
    ) -> Vec<Span> {
        let Some(t) = self.timeline() else {
            return Vec::new();
        };
        let w = t.width_ms() / 1e3;
        t.buckets()
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let (h, v) = held(b)?;
                // A bucket is as wide as it is, however short the run: clipped to it.
                let start_s = i as f64 * w;
                let end_s = ((i + 1) as f64 * w).min(self.run_s);
                (end_s > start_s).then_some(Span {
                    start_s,
                    end_s,
                    held: h,
                    value: v,
                })
            })
            .collect()
    }

    fn server_spans(&self, held: impl Fn(&ServerPoint) -> Option<(bool, f64)>) -> Vec<Span> {
        spans_between(self.server(), |p| p.t_s, self.run_s, held)
    }

    /// The client's mean TTFT over the buckets whose middle lies in `(a, b]`, ms.
    fn client_ttft_between(&self, a: f64, b: f64) -> Option<f64> {
        let t = self.timeline()?;
        let w = t.width_ms() / 1e3;
        let (mut n, mut sum) = (0u64, 0.0);
        for (i, bk) in t.buckets().iter().enumerate() {
            let mid = (i as f64 + 0.5) * w;
            if mid > a && mid <= b {
                n += bk.ttft_n;
                sum += bk.ttft_sum_ms;
            }
        }
        (n > 0).then(|| sum / n as f64)
    }
}

/// Evaluates every rule, in [`Bottleneck::ALL`]'s order.
pub(super) fn evaluate(f: &Figures, input: &DiagnosisInput) -> Vec<Finding> {
    // The run's own duration, not the reach of its series: the client's buckets are at
    // least 1 s wide and the last scrape may come after the last response, so a 0.5 s run
    // read as 1 s held its condition for "52% of the run" and past its end.
    let run_s = input.summary.duration_s.max(0.0);
    let c = Ctx { f, input, run_s };
    vec![
        target_errors(&c),
        client_bound(&c),
        kv_memory_bound(&c),
        queueing(&c),
        prefill_bound(&c),
        network(&c),
        compute_bound(&c),
    ]
}

fn target_errors(c: &Ctx) -> Finding {
    let f = c.f;
    let mut x = Finding::new(Bottleneck::TargetErrors);
    if f.requests == 0 {
        unknown(&mut x, "no request was sent");
        return x;
    }
    let Some(error_rate) = f.error_rate else {
        unknown(
            &mut x,
            "no request was judged against the target (each was cancelled on purpose or \
             failed by canaryd itself): no error rate",
        );
        return x;
    };
    x.evidence
        .push(exact("error_rate", error_rate, "ratio", "client"));
    x.evidence.push(exact(
        "target_errors",
        f.target_errors as f64,
        "requests",
        "client",
    ));
    // Which statuses: a 429 asks for less load, a 503 says overloaded, a 500 is a bug.
    for (status, &n) in &f.http_statuses {
        x.evidence.push(exact(
            &format!("http_status_{status}"),
            n as f64,
            "requests",
            "client",
        ));
    }
    x.thresholds
        .push(ge("error_rate", error_rate, ERROR_RATE, "ratio"));
    fire_all(&mut x);
    let spans = c.client_spans(|b| b.error_share().map(|s| (s >= ERROR_RATE, s)));
    x.interval = longest(&spans, "error share >= 0.05", c.run_s);
    x
}

/// The delay that counts as canaryd's bottleneck for a run with this TTFT.
fn client_limit(f: &Figures) -> f64 {
    let ttft = f.client_ttft_ms.map_or(0.0, |t| t.value);
    CLIENT_DELAY_MIN_MS.max(CLIENT_DELAY_SHARE * ttft)
}

/// The CPU wait per wake-up that counts, for a run with this TTFT.
fn cpu_wait_limit(f: &Figures) -> f64 {
    let ttft = f.client_ttft_ms.map_or(0.0, |t| t.value);
    CLIENT_CPU_WAIT_MIN_MS.max(CLIENT_CPU_WAIT_SHARE * ttft)
}

/// Fires on any of: canaryd's own resource errors; its read delay (eBPF); its cgroup's CPU
/// throttling with a p99 schedule lag of at least [`cpu_wait_limit`]; its CPU wait per
/// wake-up together with as large a p99 schedule lag; its CPU use at its limit.
fn client_bound(c: &Ctx) -> Finding {
    let f = c.f;
    let mut x = Finding::new(Bottleneck::ClientBound);
    let limit = client_limit(f);
    if f.client_errors > 0 && f.requests > 0 {
        let share = f.client_errors as f64 / f.requests as f64;
        x.evidence.push(exact(
            "client_resource_errors",
            f.client_errors as f64,
            "requests",
            "client",
        ));
        x.thresholds
            .push(ge("client_error_share", share, ERROR_RATE, "ratio"));
    }
    let mut weight = None::<f64>;
    if let Some(rd) = f.read_delay_ms {
        x.evidence.push(rd.evidence("read_delay_mean", "ms"));
        x.thresholds
            .push(ge("read_delay_mean", rd.value, limit, "ms"));
        weight = Some(rd.value);
    }
    // Throttling counts with the lateness it caused (a host's whole container may be
    // throttled by other processes without canaryd falling behind). Lateness is the dispatch
    // lag: a session's turn held for its previous one, or a request waiting on a slow
    // handshake, is late against the schedule without canaryd having fallen behind.
    let lag = f.dispatch_lag_p99_ms;
    let mut throttled_and_late = false;
    if let Some(t) = f.cpu_throttled_share {
        x.evidence
            .push(t.evidence("cpu_throttled_s_per_run_s", "ratio"));
        let throttled = ge(
            "cpu_throttled_s_per_run_s",
            t.value,
            CLIENT_THROTTLED_SHARE,
            "ratio",
        );
        let late = ge(
            "dispatch_lag_p99",
            lag.map_or(0.0, |l| l.value),
            cpu_wait_limit(f),
            "ms",
        );
        throttled_and_late = throttled.met && late.met;
        x.thresholds.push(throttled);
        x.thresholds.push(late);
    }
    if let Some(l) =
        lag.filter(|_| f.cpu_throttled_share.is_some() || f.cpu_wait_per_wakeup_ms.is_some())
    {
        x.evidence.push(l.evidence("dispatch_lag_p99", "ms"));
    }
    // The wait counts only with the lateness it caused: one threshold on the smaller of
    // the two, met when both are.
    if let Some(w) = f.cpu_wait_per_wakeup_ms {
        let wl = cpu_wait_limit(f);
        x.evidence.push(w.evidence("cpu_wait_per_wakeup", "ms"));
        let lag = lag.map_or(0.0, |l| l.value);
        let both = ge(
            "cpu_wait_per_wakeup_and_dispatch_lag_p99",
            w.value.min(lag),
            wl,
            "ms",
        );
        if both.met {
            weight = Some(weight.map_or(w.value, |r| r.max(w.value)));
        }
        x.thresholds.push(both);
    }
    if let Some(u) = f.cpu_utilization {
        x.evidence.push(u.evidence("cpu_utilization", "ratio"));
        x.thresholds.push(ge(
            "cpu_utilization",
            u.value,
            CLIENT_CPU_SATURATED,
            "ratio",
        ));
    }
    if x.thresholds.is_empty() {
        let why = [&f.kernel_missing, &f.client_cpu_missing];
        unknown(
            &mut x,
            why.into_iter()
                .flatten()
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
        );
        return x;
    }
    x.weight_ms = weight;
    let met = |name: &str| x.thresholds.iter().any(|t| t.figure == name && t.met);
    let fired = throttled_and_late
        || [
            "client_error_share",
            "read_delay_mean",
            "cpu_wait_per_wakeup_and_dispatch_lag_p99",
            "cpu_utilization",
        ]
        .into_iter()
        .any(met);
    x.state = if fired {
        RuleState::Fired
    } else {
        RuleState::Clear
    };
    let spans = c.client_spans(|b| b.read_delay_mean_ms().map(|d| (d >= limit, d)));
    x.interval = longest(&spans, "first-token read delay >= its limit", c.run_s);
    x
}

fn kv_memory_bound(c: &Ctx) -> Finding {
    let f = c.f;
    let mut x = Finding::new(Bottleneck::KvMemoryBound);
    if f.kv_mean.is_none() && f.preemptions.is_none() && f.swapped_max.is_none() {
        let why = f.server_missing.clone().unwrap_or_else(|| {
            format!(
                "server_metrics ({}) exposes no KV-cache gauge and no preemption counter",
                f.engine.as_deref().unwrap_or("engine unknown")
            )
        });
        unknown(&mut x, why);
        return x;
    }
    for (name, fig, unit) in [
        ("kv_cache_usage_mean", f.kv_mean, "ratio"),
        ("kv_cache_usage_max", f.kv_max, "ratio"),
        ("preemptions", f.preemptions, "requests"),
        ("requests_swapped_max", f.swapped_max, "requests"),
    ] {
        if let Some(v) = fig {
            x.evidence.push(v.evidence(name, unit));
        }
    }
    if let Some(per) = preemptions_per_request(f) {
        x.thresholds.push(ge(
            "preemptions_per_request",
            per,
            PREEMPTIONS_PER_REQUEST,
            "per request",
        ));
    }
    let kv_points: Vec<f64> = c.server().iter().filter_map(|p| p.kv_usage).collect();
    if kv_points.len() >= 2 {
        let (mut run, mut best) = (0usize, 0usize);
        for kv in &kv_points {
            run = if *kv >= KV_HIGH { run + 1 } else { 0 };
            best = best.max(run);
        }
        x.thresholds.push(ge(
            "kv_high_consecutive_scrapes",
            best as f64,
            KV_HELD_SCRAPES,
            "scrapes",
        ));
    } else if let Some(kv) = f.kv_mean {
        x.thresholds
            .push(ge("kv_cache_usage_mean", kv.value, KV_HIGH, "ratio"));
    }
    if let Some(s) = f.swapped_max {
        x.thresholds
            .push(ge("requests_swapped_max", s.value, SWAPPED, "requests"));
    }
    fire_any(&mut x);
    let parts = [f.server_queue_ms, f.server_decode_ms];
    let w: f64 = parts.iter().flatten().map(|p| p.value).sum();
    x.weight_ms = if parts.iter().any(Option::is_some) {
        Some(w)
    } else {
        f.client_e2e_ms.map(|e| e.value)
    };
    let spans = c.server_spans(|p| {
        let kv = p.kv_usage.unwrap_or(0.0);
        let pre = p.preemptions.unwrap_or(0.0);
        (p.kv_usage.is_some() || p.preemptions.is_some())
            .then_some((kv >= KV_HIGH || pre > 0.0, kv))
    });
    x.interval = longest(&spans, "kv_cache_usage >= 0.9 or a preemption", c.run_s);
    x
}

/// The server's preemptions per request it counted (every client's, as its preemptions
/// are); over canaryd's own requests only when the server counts none.
fn preemptions_per_request(f: &Figures) -> Option<f64> {
    let requests = f
        .server_requests
        .or((f.requests > 0).then_some(f.requests as f64))?;
    Some(f.preemptions?.value / requests)
}

fn queueing(c: &Ctx) -> Finding {
    let f = c.f;
    let mut x = Finding::new(Bottleneck::Queueing);
    if let Some(q) = f.server_queue_ms {
        let reference = f.server_ttft_ms.or(f.client_ttft_ms);
        x.evidence.push(q.evidence("server_queue_time_mean", "ms"));
        x.thresholds
            .push(ge("server_queue_time_mean", q.value, QUEUE_MIN_MS, "ms"));
        if let Some(r) = reference.filter(|r| r.value > 0.0) {
            let name = if f.server_ttft_ms.is_some() {
                "server_ttft_mean"
            } else {
                "client_ttft_mean"
            };
            x.evidence.push(r.evidence(name, "ms"));
            x.thresholds.push(ge(
                "queue_share_of_ttft",
                q.value / r.value,
                QUEUE_SHARE,
                "ratio",
            ));
        }
        x.weight_ms = Some(q.value);
    } else if let Some(d) = f.queue_depth_mean {
        x.evidence.push(d.evidence("queue_depth_mean", "requests"));
        x.thresholds
            .push(ge("queue_depth_mean", d.value, QUEUE_DEPTH, "requests"));
        // The server's own rate (every client's requests, as its queue holds them); canaryd's
        // when the server counts none.
        let rate = match (f.server_requests, f.server_window_s) {
            (Some(n), Some(w)) => n / w,
            _ => f.throughput,
        };
        if rate > 0.0 {
            // Little's law: the mean wait is the mean queue over the arrival rate.
            let wait = d.value / rate * 1e3;
            x.evidence.push(Evidence {
                name: "queue_wait_littles_law".into(),
                value: wait,
                unit: "ms".into(),
                kind: FigureKind::Estimate,
                source: "server_metrics and client".into(),
            });
            x.thresholds
                .push(ge("queue_wait_littles_law", wait, QUEUE_MIN_MS, "ms"));
            x.weight_ms = Some(wait);
        }
        x.fallback = true;
    } else {
        let why = f.server_missing.clone().unwrap_or_else(|| {
            format!(
                "server_metrics ({}) exposes no queue-time histogram and no queue gauge",
                f.engine.as_deref().unwrap_or("engine unknown")
            )
        });
        unknown(&mut x, why);
        return x;
    }
    fire_all(&mut x);
    let has_depth = c.server().iter().any(|p| p.queue_depth.is_some());
    let spans = c.server_spans(|p| match (has_depth, p.queue_depth, p.queue_time) {
        (true, Some(d), _) => Some((d >= QUEUE_DEPTH, d)),
        (false, _, Some(w)) => w.mean().map(|m| (m * 1e3 >= QUEUE_MIN_MS, m * 1e3)),
        _ => None,
    });
    let condition = if has_depth {
        "queue_depth >= 1"
    } else {
        "queue time >= 10 ms"
    };
    x.interval = longest(&spans, condition, c.run_s);
    x
}

fn prefill_bound(c: &Ctx) -> Finding {
    let f = c.f;
    let mut x = Finding::new(Bottleneck::PrefillBound);
    let (Some(p), Some(ttft), Some(e2e)) = (f.server_prefill_ms, f.client_ttft_ms, f.client_e2e_ms)
    else {
        // Which side is missing: the server's prefill, or the client's TTFT and latency
        // (nothing completed).
        let server = f.server_prefill_ms.is_none().then(|| {
            f.server_missing.clone().unwrap_or_else(|| {
                "no server prefill figure (prefill histogram, TTFT and queue histograms, or \
                 per-request prompt timings)"
                    .to_string()
            })
        });
        let client = (f.client_ttft_ms.is_none() || f.client_e2e_ms.is_none()).then(no_client_ttft);
        unknown(
            &mut x,
            [client, server]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        );
        return x;
    };
    x.fallback = p.fallback;
    x.evidence
        .push(p.evidence("server_prefill_time_mean", "ms"));
    x.evidence.push(ttft.evidence("client_ttft_mean", "ms"));
    x.evidence.push(e2e.evidence("client_e2e_mean", "ms"));
    x.thresholds.push(ge(
        "server_prefill_time_mean",
        p.value,
        PREFILL_MIN_MS,
        "ms",
    ));
    // The share within the server's own figures when it gives its TTFT (the same requests
    // as its prefill), as queueing does; the client's TTFT covers canaryd's requests only.
    let reference = match f.server_ttft_ms.filter(|t| t.value > 0.0) {
        Some(t) => {
            x.evidence.push(t.evidence("server_ttft_mean", "ms"));
            t
        }
        None => ttft,
    };
    if reference.value > 0.0 && e2e.value > 0.0 {
        x.thresholds.push(ge(
            "prefill_share_of_ttft",
            p.value / reference.value,
            PREFILL_SHARE,
            "ratio",
        ));
        x.thresholds.push(ge(
            "ttft_share_of_e2e",
            ttft.value / e2e.value,
            TTFT_SHARE_OF_E2E,
            "ratio",
        ));
    }
    x.weight_ms = Some(p.value);
    fire_all(&mut x);
    let spans = c.server_spans(|pt| {
        let prefill = pt.prefill_time?.mean()? * 1e3;
        let ttft = pt.ttft.and_then(|w| w.mean()).map_or(0.0, |m| m * 1e3);
        Some((prefill >= PREFILL_MIN_MS.max(PREFILL_SHARE * ttft), prefill))
    });
    x.interval = longest(
        &spans,
        "prefill time >= 10 ms and >= half the TTFT",
        c.run_s,
    );
    x
}

/// Why a rule that compares with the client's TTFT could not: no request completed with a
/// first token.
fn no_client_ttft() -> String {
    "no client TTFT: no request completed with a first token".into()
}

fn network(c: &Ctx) -> Finding {
    let f = c.f;
    let mut x = Finding::new(Bottleneck::Network);
    let (Some(gap), Some(ttft)) = (f.ttft_gap_ms, f.client_ttft_ms) else {
        // Say which side is missing: a run where nothing completed has the server's
        // histogram but no client TTFT to compare with it.
        let server = f.server_missing.clone().or_else(|| match &f.ttft_withheld {
            _ if f.client_ttft_ms.is_none() => None,
            // The histogram is there, but its requests were not canaryd's (counts differ).
            Some(withheld) => Some(format!(
                "the server's TTFT was not compared with canaryd's ({withheld}) and the \
                 stream carried no per-request timings"
            )),
            None => Some(format!(
                "server_metrics ({}) exposes no TTFT histogram and the stream carried no \
                 per-request timings",
                f.engine.as_deref().unwrap_or("engine unknown")
            )),
        });
        let why = [f.client_ttft_ms.is_none().then(no_client_ttft), server];
        unknown(
            &mut x,
            why.into_iter().flatten().collect::<Vec<_>>().join("; "),
        );
        return x;
    };
    x.fallback = gap.fallback;
    // canaryd's read delay is in the gap only for first tokens timed at its read: a kernel
    // receive stamp ends the client's TTFT at the arrival (taking it off twice hid a slow
    // network).
    let unstamped = 1.0 - f.first_tokens_stamped;
    let read_delay = f.read_delay_ms.map_or(0.0, |r| r.value) * unstamped;
    let net = gap.value - read_delay;
    let kind = if unstamped == 0.0 && !gap.fallback && gap.kind != FigureKind::Bound {
        FigureKind::Estimate
    } else {
        // It still holds canaryd's read delay (the eBPF figure taken off is a lower bound
        // of it), or the server's queue (llama.cpp timings), or the gap itself is an upper
        // bound (first tokens stamped as kernel_bound: a later segment's arrival).
        FigureKind::Bound
    };
    x.evidence.push(
        Fig {
            value: net,
            kind,
            ..gap
        }
        .evidence("network_mean", "ms"),
    );
    x.evidence
        .push(gap.evidence("client_minus_server_ttft_mean", "ms"));
    if let Some(r) = f.read_delay_ms {
        x.evidence.push(r.evidence("read_delay_mean", "ms"));
    } else if unstamped == 0.0 {
        // Every first token stamped on arrival: no read delay in the gap to take off.
    } else if let Some(m) = &f.kernel_missing {
        // The gap still holds canaryd's own read delay: a coarser figure.
        x.fallback = true;
        x.missing
            .push(format!("{m} (the gap includes canaryd's own read delay)"));
    }
    x.evidence.push(ttft.evidence("client_ttft_mean", "ms"));
    let limit = NETWORK_MIN_MS.max(NETWORK_SHARE * ttft.value);
    x.thresholds.push(ge("network_mean", net, limit, "ms"));
    x.weight_ms = Some(net);
    fire_all(&mut x);
    let spans: Vec<Span> = c
        .server()
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0].t_s.max(0.0), w[1].t_s.min(c.run_s));
            if b <= a {
                return None;
            }
            let server = w[1].ttft?.mean()? * 1e3;
            let value = c.client_ttft_between(a, b)? - server - read_delay;
            Some(Span {
                start_s: a,
                end_s: b,
                held: value >= limit,
                value,
            })
        })
        .collect();
    x.interval = longest(&spans, "client TTFT - server TTFT >= its limit", c.run_s);
    x
}

fn compute_bound(c: &Ctx) -> Finding {
    let f = c.f;
    let mut x = Finding::new(Bottleneck::ComputeBound);
    let Some(util) = f.gpu_util_pct else {
        unknown(
            &mut x,
            f.gpu_missing
                .clone()
                .unwrap_or_else(|| "no GPU source".into()),
        );
        return x;
    };
    x.evidence.push(util.evidence("gpu_utilization_mean", "%"));
    x.thresholds
        .push(ge("gpu_utilization_mean", util.value, GPU_BUSY_PCT, "%"));
    if let Some(kv) = f.kv_mean {
        x.evidence.push(kv.evidence("kv_cache_usage_mean", "ratio"));
        x.thresholds
            .push(lt("kv_cache_usage_mean", kv.value, KV_LOW, "ratio"));
    }
    match (f.queue_depth_mean, f.server_queue_ms) {
        (Some(d), _) => {
            x.evidence.push(d.evidence("queue_depth_mean", "requests"));
            x.thresholds
                .push(lt("queue_depth_mean", d.value, QUEUE_DEPTH, "requests"));
        }
        (None, Some(q)) => {
            x.evidence.push(q.evidence("server_queue_time_mean", "ms"));
            x.thresholds
                .push(lt("server_queue_time_mean", q.value, QUEUE_MIN_MS, "ms"));
        }
        (None, None) => {
            let why = f.server_missing.clone().unwrap_or_else(|| {
                "server_metrics exposes neither a queue gauge nor queue times: cannot tell \
                 whether requests waited"
                    .into()
            });
            unknown(&mut x, why);
            return x;
        }
    }
    if let Some(per) = preemptions_per_request(f) {
        x.thresholds.push(lt(
            "preemptions_per_request",
            per,
            PREEMPTIONS_PER_REQUEST,
            "per request",
        ));
    }
    if let Some(d) = f.server_decode_ms {
        x.evidence.push(d.evidence("decode_time_mean", "ms"));
        x.weight_ms = Some(d.value);
        x.fallback = d.fallback;
    }
    fire_all(&mut x);
    let spans = spans_between(
        &c.input.telemetry.series.gpu,
        |p| p.t_s,
        c.run_s,
        |p| Some((p.util_pct >= GPU_BUSY_PCT, p.util_pct)),
    );
    x.interval = longest(&spans, "gpu utilization >= 90%", c.run_s);
    x
}
