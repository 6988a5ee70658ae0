//! vLLM V1-shaped Prometheus metrics.
//!
//! Names, types and histogram buckets follow vLLM V1 (`vllm/v1/metrics/loggers.py`): TTFT buckets
//! 1 ms..2560 s, inter-token latency 10 ms..80 s, request latency (e2e, queue) 0.3 s..7680 s.
//! Labels: `model_name` and `engine="0"`.
//!
//! Counting points: prompt and generation tokens, finished requests and the request histograms
//! are counted when a request finishes (with the numbers in its truth record, so they always
//! agree with the ground truth); prefix-cache queries and hits (in tokens, like vLLM) when the
//! engine admits a request; preemptions when they happen; gauges are published by the engine
//! after every step.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A fixed-bucket cumulative-on-render histogram.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

#[derive(Debug)]
struct Histograms {
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prefill: Histogram,
    decode: Histogram,
    inference: Histogram,
}

/// Why a request that reached the engine finished (vLLM's `FinishReason`; the sim never stops
/// early, so never `stop`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum FinishReason {
    /// All `max_tokens` generated.
    #[default]
    Length,
    /// The client left (or a reset cut it) before the engine finished.
    Abort,
}

/// Timings of one finished request, in seconds, for the histograms.
#[derive(Debug, Default)]
pub(crate) struct RequestTimings {
    pub ttft: Option<f64>,
    pub itl: Vec<f64>,
    pub e2e: Option<f64>,
    /// Arrival to first admission.
    pub queue: Option<f64>,
    /// First admission to the first token's step end.
    pub prefill: Option<f64>,
    /// First token's step end to the last token's.
    pub decode: Option<f64>,
    /// First admission to the last token's step end.
    pub inference: Option<f64>,
    pub finished: FinishReason,
}

/// All the sim's metrics. Shared by the engine and the connection tasks.
#[derive(Debug)]
pub(crate) struct Metrics {
    model: String,
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    /// KV usage in parts per billion of the budget (an atomic f64 stand-in).
    pub kv_usage_ppb: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub prefix_queries: AtomicU64,
    pub prefix_hits: AtomicU64,
    pub preemptions: AtomicU64,
    /// Time the engine fell behind its virtual clock by more than it catches up, and dropped.
    pub lag_dropped_ns: AtomicU64,
    /// Step time past the engine's 100 s cap on one step, cut instead of slept.
    pub step_clamped_ns: AtomicU64,
    finished_length: AtomicU64,
    finished_abort: AtomicU64,
    hist: Mutex<Histograms>,
}

impl Metrics {
    pub fn new(model: &str) -> Metrics {
        Metrics {
            model: model.to_owned(),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            kv_usage_ppb: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            prefix_queries: AtomicU64::new(0),
            prefix_hits: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
            lag_dropped_ns: AtomicU64::new(0),
            step_clamped_ns: AtomicU64::new(0),
            finished_length: AtomicU64::new(0),
            finished_abort: AtomicU64::new(0),
            hist: Mutex::new(Histograms {
                ttft: Histogram::new(TTFT_BUCKETS),
                itl: Histogram::new(ITL_BUCKETS),
                e2e: Histogram::new(REQUEST_LATENCY_BUCKETS),
                queue: Histogram::new(REQUEST_LATENCY_BUCKETS),
                prefill: Histogram::new(REQUEST_LATENCY_BUCKETS),
                decode: Histogram::new(REQUEST_LATENCY_BUCKETS),
                inference: Histogram::new(REQUEST_LATENCY_BUCKETS),
            }),
        }
    }

    /// Counts a finished request that reached the engine.
    pub fn finish(&self, prompt_tokens: u32, completion_tokens: u32, t: &RequestTimings) {
        self.prompt_tokens.fetch_add(prompt_tokens as u64, Relaxed);
        self.generation_tokens
            .fetch_add(completion_tokens as u64, Relaxed);
        match t.finished {
            FinishReason::Length => &self.finished_length,
            FinishReason::Abort => &self.finished_abort,
        }
        .fetch_add(1, Relaxed);
        let mut guard = self.hist.lock().expect("metrics lock");
        let h = &mut *guard;
        if let Some(v) = t.ttft {
            h.ttft.observe(v);
        }
        for &v in &t.itl {
            h.itl.observe(v);
        }
        if let Some(v) = t.e2e {
            h.e2e.observe(v);
        }
        let phases = [
            (&mut h.queue, t.queue),
            (&mut h.prefill, t.prefill),
            (&mut h.decode, t.decode),
            (&mut h.inference, t.inference),
        ];
        for (hist, v) in phases {
            if let Some(v) = v {
                hist.observe(v);
            }
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let labels = format!("model_name=\"{}\",engine=\"0\"", escape(&self.model));
        let mut out = String::with_capacity(8192);
        let mut scalar = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        };
        let n = |a: &AtomicU64| a.load(Relaxed).to_string();
        scalar(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            n(&self.running),
        );
        scalar(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            n(&self.waiting),
        );
        scalar(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            format!("{}", self.kv_usage_ppb.load(Relaxed) as f64 / 1e9),
        );
        scalar(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            n(&self.preemptions),
        );
        scalar(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            n(&self.prompt_tokens),
        );
        scalar(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            n(&self.generation_tokens),
        );
        scalar(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            n(&self.prefix_queries),
        );
        scalar(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            n(&self.prefix_hits),
        );
        // The sim's own: not vLLM's, so that a reader knows when the host starved the engine.
        scalar(
            "canary_sim_engine_lag_dropped_seconds_total",
            "counter",
            "Time the simulated engine fell more than 5 ms behind its virtual clock (busy host) and dropped instead of catching up.",
            format!("{:?}", self.lag_dropped_ns.load(Relaxed) as f64 / 1e9),
        );
        scalar(
            "canary_sim_engine_step_clamped_seconds_total",
            "counter",
            "Time the profile gave engine steps past the 100 s cap on one step, cut instead of simulated.",
            format!("{:?}", self.step_clamped_ns.load(Relaxed) as f64 / 1e9),
        );
        let name = "vllm:request_success_total";
        let _ = writeln!(
            out,
            "# HELP {name} Count of successfully processed requests."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for (reason, count) in [
            ("stop", 0),
            ("length", self.finished_length.load(Relaxed)),
            ("abort", self.finished_abort.load(Relaxed)),
        ] {
            let _ = writeln!(
                out,
                "{name}{{{labels},finished_reason=\"{reason}\"}} {count}"
            );
        }
        let h = self.hist.lock().expect("metrics lock");
        let hists = [
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &h.ttft,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &h.itl,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                &h.e2e,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                &h.queue,
            ),
            (
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                &h.prefill,
            ),
            (
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                &h.decode,
            ),
            (
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
                &h.inference,
            ),
        ];
        for (name, help, hist) in hists {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} histogram");
            let mut cum = 0;
            for (b, c) in hist.bounds.iter().zip(&hist.counts) {
                cum += c;
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b:?}\"}} {cum}");
            }
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", hist.count);
            let _ = writeln!(out, "{name}_sum{{{labels}}} {:?}", hist.sum);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", hist.count);
        }
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets() {
        let mut h = Histogram::new(TTFT_BUCKETS);
        h.observe(0.001);
        h.observe(0.003);
        h.observe(10_000.0);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.count, 3);
        assert!((h.sum - 10_000.004).abs() < 1e-9);
    }

    #[test]
    fn text_shape() {
        let m = Metrics::new("m\"x");
        m.finish(
            10,
            3,
            &RequestTimings {
                ttft: Some(0.02),
                itl: vec![0.01, 0.02],
                e2e: Some(0.1),
                queue: Some(0.0),
                ..Default::default()
            },
        );
        let text = m.render();
        let labels = r#"{model_name="m\"x",engine="0"}"#;
        assert!(text.contains(&format!("vllm:prompt_tokens_total{labels} 10\n")));
        assert!(text.contains(&format!("vllm:generation_tokens_total{labels} 3\n")));
        assert!(text.contains("# TYPE vllm:num_requests_running gauge\n"));
        assert!(text.contains("# TYPE vllm:prefix_cache_hits_total counter\n"));
        assert!(text.contains("# TYPE vllm:inter_token_latency_seconds histogram\n"));
        assert!(text.contains(
            r#"vllm:time_to_first_token_seconds_bucket{model_name="m\"x",engine="0",le="0.02"} 1"#
        ));
        assert!(text.contains(
            r#"vllm:inter_token_latency_seconds_bucket{model_name="m\"x",engine="0",le="+Inf"} 2"#
        ));
        assert!(text.contains(&format!(
            "vllm:inter_token_latency_seconds_count{labels} 2\n"
        )));
        // Every sample line belongs to a family announced by # TYPE before it.
        let mut typed = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.push(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with('#') {
                let name = line.split('{').next().unwrap();
                assert!(typed.iter().any(|t| name.starts_with(t.as_str())), "{line}");
            }
        }
        assert_eq!(typed.len(), 18);
        assert!(text.contains(
            "vllm:request_success_total{model_name=\"m\\\"x\",engine=\"0\",finished_reason=\"length\"} 1\n"
        ));
    }
}
