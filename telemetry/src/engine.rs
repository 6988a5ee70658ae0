//! Which inference engine wrote a `/metrics` page, and the mapping of its metric names onto
//! canaryd's canonical server signals ([`ServerSample`]).
//!
//! Names were taken from the captures in `shared/fixtures` (vLLM V0, llama.cpp), from the
//! engines' documentation (SGLang production metrics, TGI metrics reference), from the engines'
//! sources (TensorRT-LLM's `tensorrt_llm/metrics/collector.py`, Dynamo's
//! `lib/runtime/src/metrics/prometheus_names.rs`, SGLang's `srt/metrics/collector.py`) and from
//! the canaryd issue (vLLM V1). Not confirmed against a live server here: the vLLM V1 names (no
//! complete V1 capture exists), the Dynamo frontend names (its source builds them from a prefix at
//! run time), the TensorRT-LLM names, `llamacpp:kv_cache_usage_ratio` (absent from the recent
//! llama.cpp capture; older builds had it), SGLang's `sglang:inter_token_latency_seconds`,
//! `sglang:cached_tokens_total` and `sglang:num_retracted_requests_total` (its preemptions, from
//! other projects' readers). An unknown engine still yields a sample whose canonical fields are
//! empty; it records how many metric families the page had, but not the page itself (samples
//! stay small whatever the engine).
//!
//! Only what a name truly measures is mapped: a gauge whose mean over a run is not the run's
//! figure (SGLang's last-batch `cache_hit_rate`, Dynamo's `queued_requests`, which counts every
//! request still awaiting its first token, prefill included) is left out rather than shown as one.

use std::sync::Arc;

use canary_core::{Engine, MonoTime};

use crate::growth::{
    merged_key, series_key, HistSeries, SeriesValues, MAX_SERIES, MAX_SERIES_BUCKETS,
};
use crate::prometheus::{Fault, HistogramSnapshot, Labels, Oversized, Scrape, MAX_BUCKETS};
use crate::ring::Stamped;

/// Detects the engine from the families present.
fn detect(scrape: &Scrape) -> Engine {
    let has_prefix = |p: &str| scrape.families.iter().any(|f| f.name.starts_with(p));
    let has = |n: &str| scrape.family(n).is_some();
    if has_prefix("dynamo_frontend_") {
        Engine::Dynamo
    } else if has_prefix("vllm:") {
        // Early V1 builds kept V0's `gpu_cache_usage_perc`, but only V1 counts prefix-cache
        // queries: a page with those counters is V1 (its hit rate exact, from them).
        let v1_counters = [
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ]
        .iter()
        .any(|n| scrape.samples(n).next().is_some());
        let v0 = [
            "vllm:gpu_cache_usage_perc",
            "vllm:num_requests_swapped",
            "vllm:gpu_prefix_cache_hit_rate",
        ]
        .iter()
        .any(|n| has(n));
        if v0 && !v1_counters {
            Engine::VllmV0
        } else {
            Engine::VllmV1
        }
    } else if has_prefix("sglang:") {
        Engine::Sglang
    } else if has_prefix("tgi_") {
        Engine::Tgi
    } else if has_prefix("llamacpp:") {
        Engine::LlamaCpp
    } else if has_prefix("trtllm_") {
        // `trtllm-serve`'s own page, or a Dynamo worker's (which passes these names through).
        Engine::TensorrtLlm
    } else {
        Engine::Unknown
    }
}

fn names(engine: Engine) -> &'static Names {
    match engine {
        Engine::VllmV1 => &VLLM_V1,
        Engine::VllmV0 => &VLLM_V0,
        Engine::Sglang => &SGLANG,
        Engine::Dynamo => &DYNAMO,
        Engine::Tgi => &TGI,
        Engine::LlamaCpp => &LLAMACPP,
        Engine::TensorrtLlm => &TRTLLM,
        Engine::Unknown => &UNKNOWN,
    }
}

/// Whether some engine's mapping reads samples named `name` (a name it lists, or one with a
/// histogram's or counter's suffix): a page's other samples can be dropped as it is parsed.
pub(crate) fn read_by_some_engine(name: &str) -> bool {
    static READ: std::sync::OnceLock<std::collections::HashSet<&'static str>> =
        std::sync::OnceLock::new();
    let read = READ.get_or_init(|| {
        [
            &VLLM_V1, &VLLM_V0, &SGLANG, &DYNAMO, &TGI, &LLAMACPP, &TRTLLM, &UNKNOWN,
        ]
        .iter()
        .flat_map(|n| n.all())
        .collect()
    });
    read.contains(name)
        || ["_bucket", "_sum", "_count", "_total", "_created"]
            .iter()
            .any(|s| name.strip_suffix(s).is_some_and(|base| read.contains(base)))
}

/// Where a token total comes from.
enum Tokens {
    /// A counter.
    Counter(&'static str),
    /// The `_sum` of a per-request histogram (TGI, Dynamo).
    HistogramSum(&'static str),
    /// Not exposed.
    None,
}

/// Where prefix-cache hits and queries come from.
enum Prefix {
    /// `(hits, queries)` counters, first pair present wins (vLLM V1).
    HitsQueries(&'static [(&'static str, &'static str)]),
    /// `(cached, uncached)` prompt-token counters: queries = cached + uncached (llama.cpp).
    CachedUncached(&'static str, &'static str),
    /// `(cached, all)` prompt-token counters: the cached ones among all (SGLang, TensorRT-LLM).
    CachedOfTotal(&'static str, &'static str),
    /// Not exposed as counters.
    None,
}

/// One engine's names; in each list the first name present wins.
struct Names {
    queue: &'static [&'static str],
    running: &'static [&'static str],
    kv: &'static [&'static str],
    hit_rate_gauge: &'static [&'static str],
    prefix: Prefix,
    prompt: Tokens,
    generation: Tokens,
    ttft: &'static [&'static str],
    itl: &'static [&'static str],
    e2e: &'static [&'static str],
    queue_time: &'static [&'static str],
    /// Counters of requests the engine preempted (KV pressure).
    preemptions: &'static [&'static str],
    /// Gauge of requests swapped out to CPU memory.
    swapped: &'static [&'static str],
    prefill_time: &'static [&'static str],
    decode_time: &'static [&'static str],
}

impl Names {
    /// Every name this mapping reads.
    fn all(&self) -> impl Iterator<Item = &'static str> + '_ {
        let tokens = |t: &Tokens| match t {
            Tokens::Counter(n) | Tokens::HistogramSum(n) => Some(*n),
            Tokens::None => None,
        };
        let prefix: Vec<&'static str> = match &self.prefix {
            Prefix::HitsQueries(pairs) => pairs.iter().flat_map(|(h, q)| [*h, *q]).collect(),
            Prefix::CachedUncached(c, u) | Prefix::CachedOfTotal(c, u) => vec![*c, *u],
            Prefix::None => Vec::new(),
        };
        [
            self.queue,
            self.running,
            self.kv,
            self.hit_rate_gauge,
            self.ttft,
            self.itl,
            self.e2e,
            self.queue_time,
            self.preemptions,
            self.swapped,
            self.prefill_time,
            self.decode_time,
        ]
        .into_iter()
        .flatten()
        .copied()
        .chain(tokens(&self.prompt))
        .chain(tokens(&self.generation))
        .chain(prefix)
    }
}

// The names vLLM's V0 and V1 engines share.
const VLLM_QUEUE: &[&str] = &["vllm:num_requests_waiting"];
const VLLM_RUNNING: &[&str] = &["vllm:num_requests_running"];
const VLLM_KV: &[&str] = &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"];
const VLLM_TTFT: &[&str] = &["vllm:time_to_first_token_seconds"];
const VLLM_ITL: &[&str] = &[
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
];
const VLLM_E2E: &[&str] = &["vllm:e2e_request_latency_seconds"];
const VLLM_QUEUE_TIME: &[&str] = &["vllm:request_queue_time_seconds"];
const VLLM_PREEMPTIONS: &[&str] = &["vllm:num_preemptions_total"];
const VLLM_SWAPPED: &[&str] = &["vllm:num_requests_swapped"];
const VLLM_PREFILL_TIME: &[&str] = &["vllm:request_prefill_time_seconds"];
const VLLM_DECODE_TIME: &[&str] = &["vllm:request_decode_time_seconds"];

/// vLLM V1: its prefix cache counted (hits and queries, exact over a run); no hit-rate gauge.
static VLLM_V1: Names = Names {
    hit_rate_gauge: &[],
    prefix: Prefix::HitsQueries(&[
        (
            "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_queries_total",
        ),
        (
            "vllm:gpu_prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
    ]),
    queue: VLLM_QUEUE,
    running: VLLM_RUNNING,
    kv: VLLM_KV,
    prompt: Tokens::Counter("vllm:prompt_tokens_total"),
    generation: Tokens::Counter("vllm:generation_tokens_total"),
    ttft: VLLM_TTFT,
    itl: VLLM_ITL,
    e2e: VLLM_E2E,
    queue_time: VLLM_QUEUE_TIME,
    preemptions: VLLM_PREEMPTIONS,
    swapped: VLLM_SWAPPED,
    prefill_time: VLLM_PREFILL_TIME,
    decode_time: VLLM_DECODE_TIME,
};

/// vLLM V0: its prefix cache only as a gauge (a hit rate since the server started, not the run's).
static VLLM_V0: Names = Names {
    queue: VLLM_QUEUE,
    running: VLLM_RUNNING,
    kv: VLLM_KV,
    hit_rate_gauge: &["vllm:gpu_prefix_cache_hit_rate"],
    prefix: Prefix::None,
    prompt: Tokens::Counter("vllm:prompt_tokens_total"),
    generation: Tokens::Counter("vllm:generation_tokens_total"),
    ttft: VLLM_TTFT,
    itl: VLLM_ITL,
    e2e: VLLM_E2E,
    queue_time: VLLM_QUEUE_TIME,
    preemptions: VLLM_PREEMPTIONS,
    swapped: VLLM_SWAPPED,
    prefill_time: VLLM_PREFILL_TIME,
    decode_time: VLLM_DECODE_TIME,
};

static SGLANG: Names = Names {
    queue: &["sglang:num_queue_reqs"],
    running: &["sglang:num_running_reqs"],
    kv: &["sglang:token_usage"],
    // Not `sglang:cache_hit_rate`: SGLang sets it to the last prefill batch's rate and to 0 at
    // every decode log (scheduler_metrics_mixin.py), so its mean over scrapes is no hit rate.
    // Its counters, added per finished request (collector.py `observe_one_finished_request`),
    // give the run's: cached prompt tokens (one series per `cache_source` in newer builds) among
    // all prompt tokens.
    hit_rate_gauge: &[],
    prefix: Prefix::CachedOfTotal("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
    prompt: Tokens::Counter("sglang:prompt_tokens_total"),
    generation: Tokens::Counter("sglang:generation_tokens_total"),
    ttft: &["sglang:time_to_first_token_seconds"],
    // Per token gap. Not `sglang:time_per_output_token_seconds`: older builds observe at every
    // chunk the request's running mean since its first token, neither a gap nor one per request.
    itl: &["sglang:inter_token_latency_seconds"],
    e2e: &["sglang:e2e_request_latency_seconds"],
    queue_time: &["sglang:queue_time_seconds"],
    preemptions: &["sglang:num_retracted_requests_total"],
    swapped: &[],
    prefill_time: &[],
    decode_time: &[],
};

static DYNAMO: Names = Names {
    // Not `dynamo_frontend_queued_requests`: it counts every request awaiting its first response
    // (prometheus_names.rs), prefill included, so it is no queue; the KV router's scheduler queue
    // is one (present only where that router queues).
    queue: &["dynamo_frontend_router_queue_pending_requests"],
    // In-flight counts every request from arrival to the end of its response, waiting and
    // prefilling ones included: an upper bound of those running (`Engine::running_is_in_flight`).
    running: &["dynamo_frontend_inflight_requests"],
    kv: &[],
    hit_rate_gauge: &[],
    prefix: Prefix::None,
    prompt: Tokens::HistogramSum("dynamo_frontend_input_sequence_tokens"),
    generation: Tokens::HistogramSum("dynamo_frontend_output_sequence_tokens"),
    ttft: &["dynamo_frontend_time_to_first_token_seconds"],
    itl: &["dynamo_frontend_inter_token_latency_seconds"],
    e2e: &["dynamo_frontend_request_duration_seconds"],
    queue_time: &[],
    preemptions: &[],
    swapped: &[],
    prefill_time: &[],
    decode_time: &[],
};

static TGI: Names = Names {
    queue: &["tgi_queue_size"],
    running: &["tgi_batch_current_size"],
    kv: &[],
    hit_rate_gauge: &[],
    prefix: Prefix::None,
    prompt: Tokens::HistogramSum("tgi_request_input_length"),
    generation: Tokens::HistogramSum("tgi_request_generated_tokens"),
    // TGI has no time-to-first-token histogram.
    ttft: &[],
    // A histogram of each request's mean time per token, not of every gap
    // (`Engine::itl_is_request_mean`).
    itl: &["tgi_request_mean_time_per_token_duration"],
    e2e: &["tgi_request_duration"],
    queue_time: &["tgi_request_queue_duration"],
    preemptions: &[],
    swapped: &[],
    prefill_time: &[],
    decode_time: &[],
};

static LLAMACPP: Names = Names {
    queue: &["llamacpp:requests_deferred"],
    running: &["llamacpp:requests_processing"],
    kv: &["llamacpp:kv_cache_usage_ratio"],
    hit_rate_gauge: &[],
    // prompt_tokens_total excludes cached tokens ("excluding cached tokens" in its HELP).
    prefix: Prefix::CachedUncached(
        "llamacpp:prompt_tokens_cached_total",
        "llamacpp:prompt_tokens_total",
    ),
    prompt: Tokens::Counter("llamacpp:prompt_tokens_total"),
    generation: Tokens::Counter("llamacpp:tokens_predicted_total"),
    ttft: &[],
    itl: &[],
    e2e: &[],
    queue_time: &[],
    preemptions: &[],
    swapped: &[],
    prefill_time: &[],
    decode_time: &[],
};

/// TensorRT-LLM's `trtllm-serve` (`tensorrt_llm/metrics/collector.py`, `MetricsCollector` with
/// `metric_prefix = "trtllm_"`; labels `model_name`, `engine_type`); a Dynamo worker passes the
/// same names through. Latencies are in seconds; `kv_cache_utilization` is used / max blocks
/// (0..=1). Per-request figures are observed when a request finishes.
static TRTLLM: Names = Names {
    queue: &["trtllm_num_requests_waiting"],
    running: &["trtllm_num_requests_running"],
    kv: &["trtllm_kv_cache_utilization"],
    // Not `trtllm_kv_cache_hit_rate`: the executor's own block-reuse rate, not the run's; the
    // prompt-token counters below are.
    hit_rate_gauge: &[],
    prefix: Prefix::CachedOfTotal(
        "trtllm_prompt_cached_tokens_total",
        "trtllm_prompt_tokens_total",
    ),
    prompt: Tokens::Counter("trtllm_prompt_tokens_total"),
    generation: Tokens::Counter("trtllm_generation_tokens_total"),
    ttft: &["trtllm_time_to_first_token_seconds"],
    // One observation per request (its TPOT), not per gap (`Engine::itl_is_request_mean`).
    itl: &["trtllm_time_per_output_token_seconds"],
    e2e: &["trtllm_e2e_request_latency_seconds"],
    queue_time: &["trtllm_request_queue_time_seconds"],
    preemptions: &[],
    swapped: &[],
    prefill_time: &["trtllm_request_prefill_time_seconds"],
    decode_time: &["trtllm_request_decode_time_seconds"],
};

static UNKNOWN: Names = Names {
    queue: &[],
    running: &[],
    kv: &[],
    hit_rate_gauge: &[],
    prefix: Prefix::None,
    prompt: Tokens::None,
    generation: Tokens::None,
    ttft: &[],
    itl: &[],
    e2e: &[],
    queue_time: &[],
    preemptions: &[],
    swapped: &[],
    prefill_time: &[],
    decode_time: &[],
};

#[cfg(test)]
mod tables {
    use super::*;

    const ENGINES: [Engine; 8] = [
        Engine::VllmV1,
        Engine::VllmV0,
        Engine::Sglang,
        Engine::Dynamo,
        Engine::Tgi,
        Engine::LlamaCpp,
        Engine::TensorrtLlm,
        Engine::Unknown,
    ];

    // summary.json says what a hit rate is from the engine alone (`Engine::hit_rate_from_counters`):
    // each table must read it from counters or from a gauge, never both.
    #[test]
    fn a_hit_rate_comes_from_counters_or_a_gauge_as_the_engine_says() {
        for e in ENGINES {
            let n = names(e);
            let counters = !matches!(n.prefix, Prefix::None);
            assert_eq!(counters, e.hit_rate_from_counters(), "{e:?}");
            assert!(!counters || n.hit_rate_gauge.is_empty(), "{e:?} reads both");
        }
    }
}

/// One scrape of the server's `/metrics`, mapped onto canonical signals. Gauges are summed
/// over label sets (several models or data-parallel engines add up); histograms are merged.
#[derive(Debug, Clone, Default)]
pub struct ServerSample {
    /// When the scrape's response head arrived (the server wrote its values just before).
    pub at: MonoTime,
    /// The engine detected.
    pub engine: Option<Engine>,
    /// Requests waiting in the server's queue.
    pub queue_depth: Option<f64>,
    /// Requests being processed: in the running batch, or for Dynamo's frontend every request
    /// in flight, waiting ones included (`Engine::running_is_in_flight`).
    pub running_requests: Option<f64>,
    /// KV-cache usage, 0..=1: the mean over label sets (data-parallel ranks), the pool's
    /// share in use.
    pub kv_cache_usage: Option<f64>,
    /// KV-cache usage of the fullest label set (rank), 0..=1: a rank at 0.95 beside one at
    /// 0.05 is full, though the mean reads 0.5.
    pub kv_cache_usage_max: Option<f64>,
    /// The engine's own prefix-cache hit-rate gauge, 0..=1 (vLLM V0); `None` when the
    /// engine reports "no data" (-1).
    pub prefix_cache_hit_rate_gauge: Option<f64>,
    /// Cumulative prefix-cache hits (tokens or blocks, as the engine counts them).
    pub prefix_cache_hits: Option<f64>,
    /// Cumulative prefix-cache lookups, in the same unit as the hits.
    pub prefix_cache_queries: Option<f64>,
    /// Cumulative prompt (prefill) tokens.
    pub prompt_tokens_total: Option<f64>,
    /// Cumulative generated tokens.
    pub generation_tokens_total: Option<f64>,
    /// Server-side time to first token, seconds.
    pub ttft: Option<HistogramSnapshot>,
    /// Server-side inter-token latency, seconds.
    pub itl: Option<HistogramSnapshot>,
    /// Server-side end-to-end request latency, seconds.
    pub e2e: Option<HistogramSnapshot>,
    /// Server-side time in queue, seconds.
    pub queue_time: Option<HistogramSnapshot>,
    /// Server-side prefill time (admitted → first token), seconds.
    pub prefill_time: Option<HistogramSnapshot>,
    /// Server-side decode time (first → last token), seconds.
    pub decode_time: Option<HistogramSnapshot>,
    /// Cumulative requests the engine preempted (vLLM) or retracted (SGLang).
    pub preemptions_total: Option<f64>,
    /// Requests swapped out to CPU memory (vLLM V0).
    pub requests_swapped: Option<f64>,
    /// Lines of the page the parser skipped.
    pub skipped_lines: usize,
    /// Histograms the page had but too large to use, with why (`prometheus::Oversized`).
    pub oversized_histograms: Vec<String>,
    /// Counters and histograms with more series (label sets) than `growth::MAX_SERIES` (or
    /// histograms with more buckets over them than `growth::MAX_SERIES_BUCKETS`): kept merged
    /// only, their growth judged on the sum.
    pub merged_only: Vec<String>,
    /// Metric families on the page (what an unknown engine exposed, in one number).
    pub families: usize,
    /// Which model's series were read when the page had several ([`ModelChoice`]); `None`
    /// when it had one model (or no model label), or no model was asked for.
    pub model: Option<ModelChoice>,
    /// Values on the page left out as out of range (the first few), e.g. a KV-cache usage
    /// of 87.5 (a percent, not a share) or a queue depth of -5.
    pub left_out: Vec<LeftOut>,
    /// Histogram series (label sets) left out because their numbers contradict themselves
    /// (the first few), e.g. a negative `_sum` or bucket counts that fall as the bound rises.
    pub bad_histograms: Vec<BadHistogram>,
    /// The cumulative signals per series (label set), for growth judged per series
    /// (`growth::Walk`); the sums above are what a single reading shows.
    pub series: SeriesValues,
    /// The whole parsed page, only when asked for (`keep_raw`): a ring of thousands of full
    /// pages would cost hundreds of MiB, so it is never kept by default, not even for an
    /// unknown engine.
    pub raw: Option<Arc<Scrape>>,
}

impl Stamped for ServerSample {
    fn at(&self) -> MonoTime {
        self.at
    }
}

/// Why a value on a page was left out of a [`ServerSample`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutOfRange {
    /// `+Inf` or `-Inf` where a finite number belongs.
    Infinite,
    /// A share (KV-cache usage, hit rate) outside 0..=1: a percent, or garbage.
    ShareOutside01,
    /// A negative count (queue depth, running requests, a counter).
    NegativeCount,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OutOfRange::Infinite => "not finite",
            OutOfRange::ShareOutside01 => "a share outside 0..1 (a percent?)",
            OutOfRange::NegativeCount => "a negative count",
        })
    }
}

/// A value left out of a sample: the metric, the value and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeftOut {
    /// The metric name as mapped (`vllm:kv_cache_usage_perc`).
    pub name: &'static str,
    /// The value on the page.
    pub value: f64,
    /// Why it was left out.
    pub why: OutOfRange,
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {} ({})", self.name, self.value, self.why)
    }
}

/// A histogram series (one label set) left out of a sample: its numbers contradict
/// themselves ([`Fault`]), so no figure is made from it.
#[derive(Debug, Clone, PartialEq)]
pub struct BadHistogram {
    /// The histogram as mapped (`vllm:time_to_first_token_seconds`).
    pub name: &'static str,
    /// Its label set as the page wrote it (`{model_name="m"}`), escaped and cut to
    /// `LABELS_SHOWN` bytes: the server's text.
    pub labels: String,
    /// What is wrong with it.
    pub fault: Fault,
}

/// The most of a label set a [`BadHistogram`] quotes (bytes).
const LABELS_SHOWN: usize = 120;

impl BadHistogram {
    fn new(name: &'static str, labels: &Labels, fault: Fault) -> BadHistogram {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        let text = format!("{{{}}}", pairs.join(","));
        let mut labels = canary_core::prefix_within(&text, LABELS_SHOWN).to_owned();
        if labels.len() < text.len() {
            labels.push('…');
        }
        BadHistogram {
            name,
            labels: canary_core::printable(&labels).into_owned(),
            fault,
        }
    }
}

impl std::fmt::Display for BadHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}: {}", self.name, self.labels, self.fault)
    }
}

/// [`LeftOut`]s kept in one sample; more are not kept (one is enough to say what is wrong).
const MAX_LEFT_OUT: usize = 8;

/// What a signal's values may be.
#[derive(Clone, Copy)]
enum Range {
    /// A count: finite, at least 0.
    Count,
    /// A share: within 0..=1; -1 is "no data" and left out silently.
    Share,
}

/// The samples of `name` whose values are in `range`; NaN ("no data") is left out silently,
/// anything else out of range is recorded in `out`.
fn valid<'a>(
    s: &'a Scrape,
    name: &'static str,
    range: Range,
    out: &'a mut Vec<LeftOut>,
) -> impl Iterator<Item = &'a crate::prometheus::Sample> + 'a {
    s.samples(name)
        .filter(move |x| in_range(name, x.value, range, out))
}

/// Whether `v`, a value of `name`, is in `range`; NaN ("no data") is not, silently, and
/// anything else out of range is recorded in `out`.
fn in_range(name: &'static str, v: f64, range: Range, out: &mut Vec<LeftOut>) -> bool {
    let why = if v.is_nan() || (matches!(range, Range::Share) && v == -1.0) {
        return false;
    } else if v.is_infinite() {
        OutOfRange::Infinite
    } else if matches!(range, Range::Share) && !(0.0..=1.0).contains(&v) {
        OutOfRange::ShareOutside01
    } else if v < 0.0 {
        OutOfRange::NegativeCount
    } else {
        return true;
    };
    if out.len() < MAX_LEFT_OUT {
        out.push(LeftOut {
            name,
            value: v,
            why,
        });
    }
    false
}

/// The first of `names` that has samples on the page.
fn first_present(s: &Scrape, names: &[&'static str]) -> Option<&'static str> {
    names
        .iter()
        .copied()
        .find(|n| s.samples(n).next().is_some())
}

/// The first of `names` on the page, as a count summed over its label sets (queues of several
/// models or data-parallel engines add up).
fn first_sum(s: &Scrape, names: &[&'static str], out: &mut Vec<LeftOut>) -> Option<f64> {
    let n = first_present(s, names)?;
    let values: Vec<f64> = valid(s, n, Range::Count, out).map(|x| x.value).collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The first of `names` on the page, as a 0–1 share: the mean over its label sets (one per
/// engine or data-parallel rank; their sum of 0.5 + 0.5 read as a full cache), leaving out
/// "no data" (-1, NaN) and values outside 0..=1.
fn first_mean(s: &Scrape, names: &[&'static str], out: &mut Vec<LeftOut>) -> Option<f64> {
    first_share(s, names, out).map(|(mean, _)| mean)
}

/// [`first_mean`] and the largest of the label sets' values: one rank can be full while
/// the mean over ranks is not.
fn first_share(s: &Scrape, names: &[&'static str], out: &mut Vec<LeftOut>) -> Option<(f64, f64)> {
    let n = first_present(s, names)?;
    let (sum, max, count) = valid(s, n, Range::Share, out)
        .fold((0.0, f64::NEG_INFINITY, 0u32), |(sum, max, count), x| {
            (sum + x.value, max.max(x.value), count + 1)
        });
    (count > 0).then(|| (sum / f64::from(count), max))
}

/// Where [`first_hist`] says what it passed over.
struct HistNotes<'a> {
    oversized: &'a mut Vec<String>,
    merged_only: &'a mut Vec<String>,
    bad: &'a mut Vec<BadHistogram>,
}

/// The first of `names` on the page as a histogram merged over its label sets, with its
/// series; one too large to use is named in `oversized` and passed over. A label set whose
/// numbers contradict themselves is left out (named in `bad`): merged in, a negative `_sum`
/// or a `+Inf` bucket below a lower one made a negative mean or a wrong percentile.
fn first_hist(
    s: &Scrape,
    names: &[&'static str],
    notes: &mut HistNotes,
) -> (Option<HistogramSnapshot>, HistSeries) {
    let HistNotes {
        oversized,
        merged_only,
        bad,
    } = notes;
    for &n in names {
        let mut list = match s.histograms(n) {
            Ok(list) if list.is_empty() => continue,
            Ok(list) => list,
            Err(why) => {
                oversized.push(format!("{n} ({why})"));
                continue;
            }
        };
        list.retain(|(labels, h)| match h.fault() {
            None => true,
            Some(fault) => {
                if bad.len() < MAX_LEFT_OUT {
                    bad.push(BadHistogram::new(n, labels, fault));
                }
                false
            }
        });
        if list.is_empty() {
            // The first name present is the signal; another name is not put in its place.
            return (None, HistSeries::default());
        }
        let merged = list[1..]
            .iter()
            .fold(list[0].1.clone(), |m, (_, h)| m.merge(h));
        if merged.buckets.len() > MAX_BUCKETS {
            oversized.push(format!("{n} ({})", Oversized::Buckets));
            continue;
        }
        let buckets: usize = list.iter().map(|(_, h)| h.buckets.len()).sum();
        if list.len() > MAX_SERIES || buckets > MAX_SERIES_BUCKETS {
            // Kept as one series: the merged snapshot, under a key no label set has.
            merged_only.push(format!("{n} ({} label sets)", list.len()));
            let keys = vec![merged_key(n)];
            return (
                Some(merged),
                HistSeries {
                    keys,
                    parts: Vec::new(),
                },
            );
        }
        let keys = list.iter().map(|(l, _)| series_key(n, l)).collect();
        let parts = match list.len() {
            1 => Vec::new(),
            _ => list.into_iter().map(|(_, h)| h).collect(),
        };
        return (Some(merged), HistSeries { keys, parts });
    }
    (None, HistSeries::default())
}

/// A counter's value per series, out-of-range values left out; past `MAX_SERIES` series,
/// their sum as one series (named in `merged_only`).
fn counter_series(
    s: &Scrape,
    name: &'static str,
    out: &mut Vec<LeftOut>,
    merged_only: &mut Vec<String>,
) -> Vec<(u64, f64)> {
    let series = valid(s, name, Range::Count, out)
        .map(|x| (series_key(&x.name, &x.labels), x.value))
        .collect();
    cap_series(name, series, merged_only)
}

/// `series` of the signal `name`, or past `MAX_SERIES` their sum as one series under a key no
/// label set has (named in `merged_only`).
fn cap_series(
    name: &str,
    series: Vec<(u64, f64)>,
    merged_only: &mut Vec<String>,
) -> Vec<(u64, f64)> {
    if series.len() <= MAX_SERIES {
        return series;
    }
    merged_only.push(format!("{name} ({} label sets)", series.len()));
    vec![(merged_key(name), series.iter().map(|x| x.1).sum())]
}

/// The sum of a counter's series; `None` without one.
fn total(series: &[(u64, f64)]) -> Option<f64> {
    (!series.is_empty()).then(|| series.iter().map(|x| x.1).sum())
}

/// A token total and its series.
fn tokens(
    s: &Scrape,
    t: &Tokens,
    out: &mut Vec<LeftOut>,
    merged_only: &mut Vec<String>,
) -> (Option<f64>, Vec<(u64, f64)>) {
    match t {
        Tokens::Counter(n) => {
            let series = counter_series(s, n, out, merged_only);
            (total(&series), series)
        }
        Tokens::HistogramSum(n) => {
            let list = s.histograms(n).unwrap_or_default();
            let series: Vec<(u64, f64)> = list
                .iter()
                // A sum of lengths is a count: one that is not finite, or negative, would
                // poison the token totals and their growth (as a counter's would).
                .filter_map(|(l, h)| {
                    let sum = h.sum.filter(|&v| in_range(n, v, Range::Count, out))?;
                    Some((series_key(n, l), sum))
                })
                .collect();
            let series = cap_series(n, series, merged_only);
            (total(&series), series)
        }
        Tokens::None => (None, Vec::new()),
    }
}

impl ServerSample {
    /// Requests the server has counted as finished (its e2e histogram's count, else its
    /// TTFT histogram's): what a settled scrape waits to stop changing.
    pub fn requests_counted(&self) -> Option<f64> {
        self.e2e.as_ref().or(self.ttft.as_ref()).map(|h| h.total())
    }

    /// Maps a parsed page taken at `at`. `keep_raw` keeps the whole page in the sample.
    pub fn from_scrape(scrape: Scrape, at: MonoTime, keep_raw: bool) -> ServerSample {
        ServerSample::from_scrape_for(scrape, at, keep_raw, None)
    }

    /// [`ServerSample::from_scrape`], reading only the series of `model` when the page has
    /// series of several models and `model` is one of them ([`ModelChoice`]). `keep_raw`
    /// keeps the whole page, every model's series.
    pub fn from_scrape_for(
        mut scrape: Scrape,
        at: MonoTime,
        keep_raw: bool,
        model: Option<&str>,
    ) -> ServerSample {
        let engine = detect(&scrape);
        // The page as served, when it is to be kept and another model's series are dropped.
        let mut whole = None;
        let choice = match model {
            Some(m) if keep_raw => {
                let mut read = scrape.clone();
                let choice = select_model(&mut read, engine, m);
                whole = Some(std::mem::replace(&mut scrape, read));
                choice
            }
            Some(m) => select_model(&mut scrape, engine, m),
            None => None,
        };
        let n = names(engine);
        let s = &scrape;
        let mut series = SeriesValues::default();
        let mut left_out = Vec::new();
        let out = &mut left_out;
        let mut merged_only = Vec::new();
        let merged = &mut merged_only;
        let present = |n: &str| s.samples(n).next().is_some();
        let (hits, queries) = match &n.prefix {
            Prefix::HitsQueries(pairs) => {
                if let Some((h, q)) = pairs.iter().find(|(h, q)| present(h) && present(q)) {
                    series.prefix_hits = counter_series(s, h, out, merged);
                    series.prefix_queries = counter_series(s, q, out, merged);
                }
                (total(&series.prefix_hits), total(&series.prefix_queries))
            }
            Prefix::CachedUncached(c, u) if present(c) && present(u) => {
                series.prefix_hits = counter_series(s, c, out, merged);
                let uncached = counter_series(s, u, out, merged);
                series.prefix_queries = series.prefix_hits.clone();
                series.prefix_queries.extend(uncached);
                (total(&series.prefix_hits), total(&series.prefix_queries))
            }
            Prefix::CachedOfTotal(c, t) if present(c) && present(t) => {
                series.prefix_hits = counter_series(s, c, out, merged);
                series.prefix_queries = counter_series(s, t, out, merged);
                (total(&series.prefix_hits), total(&series.prefix_queries))
            }
            Prefix::CachedUncached(..) | Prefix::CachedOfTotal(..) | Prefix::None => (None, None),
        };
        let (prompt_tokens_total, prompt_series) = tokens(s, &n.prompt, out, merged);
        let (prompt_tokens_total, prompt_series) =
            prompt_with_cached(n, &series, prompt_tokens_total, prompt_series);
        let (generation_tokens_total, generation_series) = tokens(s, &n.generation, out, merged);
        series.prompt_tokens = prompt_series;
        series.generation_tokens = generation_series;
        series.preemptions = first_present(s, n.preemptions)
            .map_or_else(Vec::new, |p| counter_series(s, p, out, merged));
        let preemptions_total = total(&series.preemptions);
        let queue_depth = first_sum(s, n.queue, out);
        let running_requests = first_sum(s, n.running, out);
        let requests_swapped = first_sum(s, n.swapped, out);
        let kv = first_share(s, n.kv, out);
        let (kv_cache_usage, kv_cache_usage_max) = (kv.map(|k| k.0), kv.map(|k| k.1));
        let prefix_cache_hit_rate_gauge = first_mean(s, n.hit_rate_gauge, out);
        let mut oversized = Vec::new();
        let mut bad_histograms = Vec::new();
        let mut hist_notes = HistNotes {
            oversized: &mut oversized,
            merged_only: merged,
            bad: &mut bad_histograms,
        };
        let mut hists: [Option<HistogramSnapshot>; 6] = Default::default();
        let lists = [
            n.ttft,
            n.itl,
            n.e2e,
            n.queue_time,
            n.prefill_time,
            n.decode_time,
        ];
        for (i, names) in lists.into_iter().enumerate() {
            let (h, keys) = first_hist(s, names, &mut hist_notes);
            hists[i] = h;
            series.hists[i] = keys;
        }
        let [ttft, itl, e2e, queue_time, prefill_time, decode_time] = hists;
        let mut sample = ServerSample {
            at,
            engine: Some(engine),
            queue_depth,
            running_requests,
            kv_cache_usage,
            kv_cache_usage_max,
            prefix_cache_hit_rate_gauge,
            prefix_cache_hits: hits,
            prefix_cache_queries: queries,
            prompt_tokens_total,
            generation_tokens_total,
            ttft,
            itl,
            e2e,
            queue_time,
            prefill_time,
            decode_time,
            preemptions_total,
            requests_swapped,
            skipped_lines: scrape.skipped_lines,
            oversized_histograms: oversized,
            merged_only,
            families: scrape.families.len(),
            model: choice,
            series,
            left_out,
            bad_histograms,
            raw: None,
        };
        if keep_raw {
            sample.raw = Some(Arc::new(whole.unwrap_or(scrape)));
        }
        sample
    }
}

/// How much a counter grew from `earlier` to `later`; a decrease means the server restarted
/// (the counter reset), so the growth counts from zero.
pub fn counter_delta(earlier: f64, later: f64) -> f64 {
    if later >= earlier {
        later - earlier
    } else {
        later
    }
}

/// Rates between two consecutive samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ServerRates {
    /// Prompt tokens per second.
    pub prompt_tokens_per_s: Option<f64>,
    /// Generated tokens per second.
    pub generation_tokens_per_s: Option<f64>,
    /// Prefix-cache hits / lookups between the two samples (from counters), or the engine's
    /// own gauge at the later sample.
    pub prefix_cache_hit_rate: Option<f64>,
}

impl ServerRates {
    /// Rates from `earlier` to `later`, judged per series (a series that went down restarted
    /// and counts from zero; see `growth`).
    pub fn between(earlier: &ServerSample, later: &ServerSample) -> ServerRates {
        let secs = later.at.since(earlier.at).as_secs_f64();
        let mut walk = crate::growth::Walk::default();
        walk.step(earlier);
        let step = walk.step(later);
        let rate = |d: Option<f64>| d.filter(|_| secs > 0.0).map(|d| d / secs);
        let hit_rate = match (step.prefix_hits, step.prefix_queries) {
            (Some(h), Some(q)) => (q > 0.0).then(|| (h / q).clamp(0.0, 1.0)),
            _ => later.prefix_cache_hit_rate_gauge,
        };
        ServerRates {
            prompt_tokens_per_s: rate(step.prompt_tokens),
            generation_tokens_per_s: rate(step.generation_tokens),
            prefix_cache_hit_rate: hit_rate,
        }
    }
}

/// The label naming the model on an engine's page: vLLM's, SGLang's and TensorRT-LLM's
/// `model_name` (the captures; SGLang's production-metrics docs; TensorRT-LLM's metrics
/// collector), the Dynamo frontend's `model` (Dynamo's metrics guide). TGI and llama.cpp
/// serve one model and label none.
fn model_label(engine: Engine) -> Option<&'static str> {
    match engine {
        Engine::VllmV1 | Engine::VllmV0 | Engine::Sglang | Engine::TensorrtLlm => {
            Some("model_name")
        }
        Engine::Dynamo => Some("model"),
        Engine::Tgi | Engine::LlamaCpp | Engine::Unknown => None,
    }
}

/// The most model names a [`ModelChoice`] quotes, and the most bytes of each.
const MODELS_SHOWN: usize = 4;
const MODEL_NAME_SHOWN: usize = 120;

/// Which series of a page with several models' series were read, against the run's model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    /// Only the series whose model label is the run's model (and those with no model label,
    /// the engine's own) were read: the other models' queues, caches and latencies are not
    /// canaryd's requests'.
    Only {
        /// The engine's model label (`model_name`).
        label: &'static str,
        /// The run's model.
        model: String,
        /// Models on the page.
        models: usize,
    },
    /// None of the page's models is the run's: every model's series were read (summed,
    /// merged), other models' traffic included.
    NoneMatched {
        /// The engine's model label.
        label: &'static str,
        /// The run's model.
        model: String,
        /// Models on the page.
        models: usize,
        /// The first few of them, in order.
        names: Vec<String>,
    },
}

/// `name` quoted, escaped and cut to [`MODEL_NAME_SHOWN`] bytes (the server's text).
fn quoted(name: &str) -> String {
    let cut = canary_core::prefix_within(name, MODEL_NAME_SHOWN);
    let more = if cut.len() < name.len() { "…" } else { "" };
    format!("{cut:?}{more}")
}

impl std::fmt::Display for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelChoice::Only {
                label,
                model,
                models,
            } => write!(
                f,
                "read only the series of {label}={} (the run's model; the page has series \
                 of {models} models)",
                quoted(model)
            ),
            ModelChoice::NoneMatched {
                label,
                model,
                models,
                names,
            } => {
                let shown: Vec<String> = names.iter().map(|n| quoted(n)).collect();
                let more = if *models > names.len() { ", …" } else { "" };
                write!(
                    f,
                    "no series of {label}={} (the run's model) among the page's {models} \
                     models ({}{more}): every model's series read, other models' traffic \
                     included",
                    quoted(model),
                    shown.join(", ")
                )
            }
        }
    }
}

/// Keeps, of the signals engines read, only the series of `model` when the page has series
/// of several models and `model` is one of them; says what it did. A page of one model is
/// read whole, whatever its name (a served-model alias is still the model asked for).
fn select_model(scrape: &mut Scrape, engine: Engine, model: &str) -> Option<ModelChoice> {
    let label = model_label(engine)?;
    let read = |f: &crate::prometheus::Family| read_by_some_engine(&f.name);
    let models: std::collections::BTreeSet<&str> = scrape
        .families
        .iter()
        .filter(|f| read(f))
        .flat_map(|f| f.samples.iter().filter_map(|x| x.labels.get(label)))
        .collect();
    if models.len() < 2 {
        return None;
    }
    if !models.contains(model) {
        return Some(ModelChoice::NoneMatched {
            label,
            model: model.to_owned(),
            models: models.len(),
            names: models
                .iter()
                .take(MODELS_SHOWN)
                .map(|m| m.to_string())
                .collect(),
        });
    }
    let count = models.len();
    for f in scrape.families.iter_mut().filter(|f| read(f)) {
        f.samples
            .retain(|x| x.labels.get(label).is_none_or(|m| m == model));
    }
    Some(ModelChoice::Only {
        label,
        model: model.to_owned(),
        models: count,
    })
}

/// The prompt tokens of an engine whose prompt counter leaves cached tokens out (llama.cpp's
/// `prompt_tokens_total`, "excluding cached tokens"): with its cached counter beside it,
/// cached + uncached, every prompt token, as vLLM, SGLang, TGI and Dynamo count them; else
/// `total` and `series` as read.
fn prompt_with_cached(
    n: &Names,
    prefix: &SeriesValues,
    total_read: Option<f64>,
    series: Vec<(u64, f64)>,
) -> (Option<f64>, Vec<(u64, f64)>) {
    match (&n.prefix, &n.prompt) {
        (Prefix::CachedUncached(_, uncached), Tokens::Counter(prompt))
            if uncached == prompt && !prefix.prefix_hits.is_empty() =>
        {
            // The queries' series are the cached counter's and the uncached one's.
            (total(&prefix.prefix_queries), prefix.prefix_queries.clone())
        }
        _ => (total_read, series),
    }
}
