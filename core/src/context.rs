//! [`RunContext`]: what a run ran on and against — canaryd's build, the host, the GPUs, the
//! server's engine and model, the request shape and load pattern — `summary.json`'s
//! `context` section. A latency figure without it is not reproducible (the vLLM bench
//! guide's words), and a regression that comes with a changed engine version or driver
//! comes with its likely cause ([`RunContext::changes_since`]).
//!
//! Every field is [`Known`]: a value, or `{"unavailable": "why"}`. Observers fill the parts
//! they can see and [`RunContext::merge`] keeps the first value found for each field.

mod diff;

pub use diff::{ContextBaseline, ContextChange, ContextComparison};

use serde::{Deserialize, Serialize};

/// A context figure: its value, or why it is not known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Known<T> {
    /// The value.
    Value(T),
    /// Why there is none.
    Unavailable {
        /// The reason, naming the source.
        unavailable: String,
    },
}

/// The reason a field nobody filled gives.
const NOT_COLLECTED: &str = "not collected by this run";

impl<T> Default for Known<T> {
    fn default() -> Self {
        Known::unavailable(NOT_COLLECTED)
    }
}

impl<T> Known<T> {
    /// Shorthand for [`Known::Unavailable`].
    pub fn unavailable(why: impl Into<String>) -> Known<T> {
        Known::Unavailable {
            unavailable: why.into(),
        }
    }

    /// `Some(value)` when known.
    pub fn value(&self) -> Option<&T> {
        match self {
            Known::Value(v) => Some(v),
            Known::Unavailable { .. } => None,
        }
    }

    /// A value from `Some`, else unavailable for `why`.
    pub fn from_option(v: Option<T>, why: impl Into<String>) -> Known<T> {
        match v {
            Some(v) => Known::Value(v),
            None => Known::unavailable(why),
        }
    }

    /// Keeps a value; takes `other`'s when this one is unavailable and `other` has one, or
    /// has a reason where this one only says nobody collected it.
    pub fn merge(&mut self, other: Known<T>) {
        let uncollected = |k: &Known<T>| matches!(k, Known::Unavailable { unavailable } if unavailable == NOT_COLLECTED);
        if self.value().is_none() && (other.value().is_some() || uncollected(self)) {
            *self = other;
        }
    }
}

/// canaryd itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CanarydContext {
    /// Its version.
    pub version: Known<String>,
    /// The git commit it was built from.
    pub git_sha: Known<String>,
    /// How the async runtime's worker threads, which read the responses, were scheduled.
    pub workers: Known<WorkersContext>,
}

/// How many worker threads read a run's responses, and how they were scheduled
/// (`--realtime-workers`): a run measured with real-time workers reads first tokens sooner, at
/// more CPU, and says so.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkersContext {
    /// Worker threads of the run's own runtime, which prepares its requests and reads their
    /// responses (exact, from the runtime; absent outside a run and in summaries from before
    /// runs had their own runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// Why that many: the planned load and the rule, or the override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_why: Option<String>,
    /// Real-time workers were asked for.
    pub realtime_requested: bool,
    /// `SCHED_FIFO` when at least one worker thread had it at the run's end, else
    /// `SCHED_OTHER`.
    pub scheduling: String,
    /// Their real-time priority, below the release thread's (absent when ordinary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Worker threads at `SCHED_FIFO` at the run's end (exact count).
    pub realtime_threads: u64,
    /// Why real-time workers were asked for and not had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime_unavailable: Option<String>,
}

/// The host canaryd ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostContext {
    /// Host name.
    pub name: Known<String>,
    /// CPU model.
    pub cpu_model: Known<String>,
    /// Logical CPUs online.
    pub cpu_cores: Known<u32>,
    /// CPUs canaryd may run on (its affinity).
    pub cpus_allowed: Known<u32>,
    /// Kernel release.
    pub kernel: Known<String>,
}

/// The GPUs the server ran on, as NVML or DCGM describe them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuContext {
    /// Product name (of the first GPU, with every other distinct one after it).
    pub model: Known<String>,
    /// GPUs seen.
    pub count: Known<u32>,
    /// Driver version.
    pub driver: Known<String>,
    /// The CUDA version the driver supports.
    pub cuda: Known<String>,
    /// Where these came from (`nvml`, `dcgm`).
    pub source: Known<String>,
}

/// The inference server, from what its engine exposes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerContext {
    /// The engine, detected from its `/metrics`.
    pub engine: Known<String>,
    /// The engine's version (vLLM `/version`, SGLang `/get_server_info`, TGI `/info`,
    /// llama.cpp `/props` `build_info`).
    pub version: Known<String>,
    /// The model served (`/v1/models`, else the engine's own info).
    pub model: Known<String>,
    /// The longest context the server accepts, tokens.
    pub max_model_len: Known<u64>,
}

/// Requested token lengths over a run's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthStats {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// Largest.
    pub max: f64,
}

impl LengthStats {
    /// The statistics of `values`; `None` when empty.
    pub fn of(values: &mut [f64]) -> Option<LengthStats> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        Some(LengthStats {
            mean: values.iter().sum::<f64>() / n as f64,
            p50: values[n / 2],
            max: values[n - 1],
        })
    }
}

/// How load was offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadPattern {
    /// `trace`: a trace on its own schedule; `rate`: synthetic requests arriving at a rate;
    /// `closed_loop`: synthetic requests from users who each wait for their last answer.
    pub kind: String,
    /// Trace time divided by this; unavailable for synthetic loads, which have no trace
    /// clock (their deadlines are run time).
    pub speedup: Known<f64>,
    /// Requests in flight at most (`None`: no limit but the open-file ceiling).
    pub concurrency: Option<usize>,
    /// Requests scheduled: exact for a trace and a count; for a rate bounded by time, an
    /// estimate; for a closed loop bounded by time, unavailable (the server's pace).
    pub requests: Known<Figure<u64>>,
    /// Sessions (first turns are open-loop; later turns wait for the previous one); a
    /// synthetic request is a session of its own.
    pub sessions: Known<Figure<u64>>,
    /// Seconds from the run's start to its last send as planned, server time not counted:
    /// with turns sent a Mooncake `delay` after their previous turn ends, a lower bound.
    pub span_s: Known<Figure<f64>>,
    /// One over the mean gap between sends: `(requests - 1)` over the time from the first
    /// send to the last (analyze-trace's mean rate; a rate run's rate). With delay turns, an
    /// upper bound; unavailable with fewer than 2 requests or all due at once.
    #[serde(deserialize_with = "known_or_null")]
    pub offered_rate_per_s: Known<Figure<f64>>,
}

/// A figure that is exact, a bound or an estimate. An exact one is written as its plain
/// value; the others as an object that says which, and why: `{"at_least": 12.5, "why": …}`,
/// `{"at_most": …}`, `{"estimate": …}` (the kinds of [`crate::FigureKind`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Figure<T> {
    /// Counted, or known by construction.
    Exact(T),
    /// The truth is at least this.
    AtLeast {
        /// The bound.
        at_least: T,
        /// Why it is only a bound.
        why: String,
    },
    /// The truth is at most this.
    AtMost {
        /// The bound.
        at_most: T,
        /// Why it is only a bound.
        why: String,
    },
    /// An estimate.
    Estimate {
        /// The estimate.
        estimate: T,
        /// How it was made.
        why: String,
    },
}

impl<T> Figure<T> {
    /// The number, whatever kind it is.
    pub fn value(&self) -> &T {
        match self {
            Figure::Exact(v)
            | Figure::AtLeast { at_least: v, .. }
            | Figure::AtMost { at_most: v, .. }
            | Figure::Estimate { estimate: v, .. } => v,
        }
    }

    /// Exact, bound or estimate.
    pub fn kind(&self) -> crate::FigureKind {
        match self {
            Figure::Exact(_) => crate::FigureKind::Exact,
            Figure::AtLeast { .. } | Figure::AtMost { .. } => crate::FigureKind::Bound,
            Figure::Estimate { .. } => crate::FigureKind::Estimate,
        }
    }
}

impl<T: Default> Default for Figure<T> {
    fn default() -> Self {
        Figure::Exact(T::default())
    }
}

/// A [`Known`] field that summaries from before it was one wrote as `null` when unknown.
fn known_or_null<'de, D, T>(d: D) -> Result<Known<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Known<T>>::deserialize(d)?
        .unwrap_or_else(|| Known::unavailable("not recorded (an older summary)")))
}

/// The request shape and the load pattern of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadContext {
    /// The API called (`chat`, `text_completion`).
    pub endpoint: Known<String>,
    /// Streamed responses (SSE) or one body.
    pub streaming: Known<bool>,
    /// Prompt lengths asked, tokens.
    pub input_tokens: Known<LengthStats>,
    /// Output lengths asked, tokens.
    pub output_tokens: Known<LengthStats>,
    /// How the requests were offered.
    pub load: Known<LoadPattern>,
}

/// A run's full context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunContext {
    /// canaryd.
    pub canaryd: CanarydContext,
    /// The client host.
    pub host: HostContext,
    /// The GPUs.
    pub gpu: GpuContext,
    /// The server.
    pub server: ServerContext,
    /// What was sent, and how.
    pub workload: WorkloadContext,
}

impl RunContext {
    /// Adds what another observer found: fields already known stay.
    pub fn merge(&mut self, o: RunContext) {
        let c = &mut self.canaryd;
        c.version.merge(o.canaryd.version);
        c.git_sha.merge(o.canaryd.git_sha);
        c.workers.merge(o.canaryd.workers);
        let h = &mut self.host;
        h.name.merge(o.host.name);
        h.cpu_model.merge(o.host.cpu_model);
        h.cpu_cores.merge(o.host.cpu_cores);
        h.cpus_allowed.merge(o.host.cpus_allowed);
        h.kernel.merge(o.host.kernel);
        let g = &mut self.gpu;
        g.model.merge(o.gpu.model);
        g.count.merge(o.gpu.count);
        g.driver.merge(o.gpu.driver);
        g.cuda.merge(o.gpu.cuda);
        g.source.merge(o.gpu.source);
        let s = &mut self.server;
        s.engine.merge(o.server.engine);
        s.version.merge(o.server.version);
        s.model.merge(o.server.model);
        s.max_model_len.merge(o.server.max_model_len);
        let w = &mut self.workload;
        w.endpoint.merge(o.workload.endpoint);
        w.streaming.merge(o.workload.streaming);
        w.input_tokens.merge(o.workload.input_tokens);
        w.output_tokens.merge(o.workload.output_tokens);
        w.load.merge(o.workload.load);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_fields_serialize_as_values_or_reasons_and_read_back() {
        let mut c = RunContext::default();
        c.server.version = Known::Value("0.10.1".into());
        c.server.max_model_len = Known::Value(8192);
        c.gpu.driver = Known::unavailable("nvml: unavailable: no libnvidia-ml.so");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["server"]["version"], "0.10.1");
        assert_eq!(json["server"]["max_model_len"], 8192);
        assert_eq!(
            json["gpu"]["driver"]["unavailable"],
            "nvml: unavailable: no libnvidia-ml.so"
        );
        assert_eq!(
            json["host"]["kernel"]["unavailable"],
            "not collected by this run"
        );
        let back: RunContext = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
        // A summary.json older than the context reads as all unavailable.
        let old: RunContext = serde_json::from_str("{}").unwrap();
        assert_eq!(old, RunContext::default());
    }

    #[test]
    fn merging_keeps_the_first_value_and_fills_the_rest() {
        let mut a = RunContext::default();
        a.server.engine = Known::Value("vllm_v1".into());
        a.gpu.count = Known::unavailable("no GPU source");
        let mut b = RunContext::default();
        b.server.engine = Known::Value("sglang".into());
        b.gpu.count = Known::Value(8);
        a.merge(b);
        assert_eq!(a.server.engine.value().unwrap(), "vllm_v1");
        assert_eq!(a.gpu.count.value(), Some(&8));
        // A reason replaces "not collected", never a value or another reason.
        let mut c = RunContext::default();
        c.canaryd.git_sha = Known::unavailable("built without CANARYD_GIT_SHA");
        a.merge(c.clone());
        assert_eq!(a.canaryd.git_sha, c.canaryd.git_sha);
        c.canaryd.git_sha = Known::unavailable("another reason");
        a.merge(c);
        assert_eq!(
            a.canaryd.git_sha,
            Known::unavailable("built without CANARYD_GIT_SHA")
        );
    }

    // Exact figures stay plain numbers; the others say what they are; a summary written
    // before the figures said so reads back (its unknown rate was `null`).
    #[test]
    fn load_figures_say_what_they_are_and_older_summaries_read_back() {
        let load = LoadPattern {
            kind: "trace".into(),
            speedup: Known::Value(2.0),
            concurrency: None,
            requests: Known::Value(Figure::Exact(3)),
            sessions: Known::Value(Figure::Exact(1)),
            span_s: Known::Value(Figure::AtLeast {
                at_least: 4.0,
                why: "delays".into(),
            }),
            offered_rate_per_s: Known::Value(Figure::AtMost {
                at_most: 0.75,
                why: "delays".into(),
            }),
        };
        let json = serde_json::to_value(&load).unwrap();
        assert_eq!(
            (&json["requests"], &json["speedup"]),
            (&3.into(), &2.0.into())
        );
        assert_eq!(json["span_s"]["at_least"], 4.0);
        assert_eq!(json["offered_rate_per_s"]["at_most"], 0.75);
        assert_eq!(serde_json::from_value::<LoadPattern>(json).unwrap(), load);
        let kind = load.span_s.value().map(Figure::kind);
        assert_eq!(kind, Some(crate::FigureKind::Bound));
        let old = serde_json::json!({
            "kind": "trace", "speedup": 1.0, "concurrency": null, "requests": 1,
            "sessions": 1, "span_s": 0.0, "offered_rate_per_s": null
        });
        let back: LoadPattern = serde_json::from_value(old).unwrap();
        assert_eq!(back.span_s, Known::Value(Figure::Exact(0.0)));
        assert_eq!(back.requests, Known::Value(Figure::Exact(1)));
        assert!(back.offered_rate_per_s.value().is_none());
    }

    #[test]
    fn length_statistics() {
        let s = LengthStats::of(&mut [3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.mean, s.p50, s.max), (4.0, 3.0, 10.0));
        assert!(LengthStats::of(&mut []).is_none());
    }
}
