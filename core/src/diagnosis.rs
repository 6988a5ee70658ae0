//! [`diagnose`]: which bottleneck dominated a run, read the way the vLLM bench guide reads a
//! benchmark, from the run's client figures and what the server, the GPUs, the kernel and
//! canaryd's own process saw. `summary.json`'s `diagnosis` section.
//!
//! The function is pure and deterministic: the same figures give the same answer. Each
//! class has one rule (its thresholds are the constants in `rules`), every rule is evaluated
//! (`fired`, `clear`, or `unknown` with the sources it lacked), and the dominant class is
//! chosen in a fixed way:
//!
//! 1. `target-errors` when it fired: a run whose requests fail is about the failures;
//! 2. else `client-bound` when it fired: canaryd's own delay inflates every other figure;
//! 3. else, of `kv-memory-bound`, `queueing`, `prefill-bound`, `network` and
//!    `compute-bound` that fired, the one accounting for the most milliseconds of the mean
//!    request (ties in that order);
//! 4. else `healthy` when the server's figures were there to judge by, `unknown` when not.
//!
//! Each result carries its evidence (figures with their kind and source), the thresholds
//! that fired, the interval of the run where its condition held, the other classes that
//! fired, and a confidence. The README lists every rule.

mod figures;
mod interval;
mod rules;
#[cfg(test)]
mod tests;
mod text;

use crate::summary::RunSummary;
use crate::telemetry::RunTelemetry;
use crate::timeline::ClientTimeline;
use figures::Figures;
use serde::{Deserialize, Serialize};

pub use rules::thresholds;

/// A bottleneck class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bottleneck {
    /// The target failed too many requests.
    TargetErrors,
    /// canaryd itself was slow to read what arrived, or short of CPU.
    ClientBound,
    /// KV-cache pressure: high usage, preemptions or swapping.
    KvMemoryBound,
    /// Requests waited in the server's queue for most of their TTFT.
    Queueing,
    /// The first token waited on prefill for most of the request.
    PrefillBound,
    /// Time between canaryd and the server that neither accounts for.
    Network,
    /// GPUs saturated, KV use low, nothing waiting: decode is compute-bound.
    ComputeBound,
    /// No rule fired.
    Healthy,
    /// The sources the rules need were unavailable.
    Unknown,
}

impl Bottleneck {
    /// Every class, in the order rules are listed.
    pub const ALL: [Bottleneck; 9] = [
        Bottleneck::TargetErrors,
        Bottleneck::ClientBound,
        Bottleneck::KvMemoryBound,
        Bottleneck::Queueing,
        Bottleneck::PrefillBound,
        Bottleneck::Network,
        Bottleneck::ComputeBound,
        Bottleneck::Healthy,
        Bottleneck::Unknown,
    ];

    /// Its name in `summary.json`, OTLP and the verdict (`kv-memory-bound`).
    pub fn as_str(self) -> &'static str {
        match self {
            Bottleneck::TargetErrors => "target-errors",
            Bottleneck::ClientBound => "client-bound",
            Bottleneck::KvMemoryBound => "kv-memory-bound",
            Bottleneck::Queueing => "queueing",
            Bottleneck::PrefillBound => "prefill-bound",
            Bottleneck::Network => "network",
            Bottleneck::ComputeBound => "compute-bound",
            Bottleneck::Healthy => "healthy",
            Bottleneck::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How sure the diagnosis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Several doubts (see [`diagnose`]'s rules).
    Low,
    /// One doubt.
    Medium,
    /// None.
    High,
}

impl Confidence {
    fn lower(self) -> Confidence {
        match self {
            Confidence::High => Confidence::Medium,
            _ => Confidence::Low,
        }
    }

    /// `high`, `medium` or `low`.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// Whether a figure was counted or timed per request, bounds the truth, or estimates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FigureKind {
    /// Counted or timed per request (a mean of exact values is exact).
    Exact,
    /// A bound on the truth.
    Bound,
    /// An estimate (sampled gauges, histogram buckets, sets that may differ).
    Estimate,
}

/// A figure a rule read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What it is (`server_queue_time_mean`).
    pub name: String,
    /// Its value.
    pub value: f64,
    /// Its unit (`ms`, `ratio`, `%`, `requests`).
    pub unit: String,
    /// Exact, bound or estimate.
    pub kind: FigureKind,
    /// Where it came from (`client`, `server_metrics`, `ebpf`, `nvml`, `client_cpu`).
    pub source: String,
}

/// A threshold a rule tested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    /// The figure tested.
    pub figure: String,
    /// `>=` or `<`.
    pub op: String,
    /// The limit, in the figure's unit.
    pub limit: f64,
    /// The figure's value.
    pub observed: f64,
    /// The unit of `observed` and `limit` (`ms`, `ratio`, `%`, `requests`), as the
    /// evidence's; empty in a summary written before thresholds carried one.
    #[serde(default)]
    pub unit: String,
    /// Whether the test passed.
    pub met: bool,
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = if self.op == ">=" { "≥" } else { "<" };
        let num = |v: f64| match self.unit.as_str() {
            "" => fmt_num(v),
            u => format!("{} {u}", fmt_num(v)),
        };
        write!(
            f,
            "{} {} {op} {}",
            self.figure,
            num(self.observed),
            num(self.limit)
        )
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Where in the run a class's condition held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Start of the longest stretch, seconds from the run's start.
    pub start_s: f64,
    /// Its end, at most the run's end: a scrape or a client time bucket past the run's last
    /// response does not stretch it.
    pub end_s: f64,
    /// Seconds the condition held in all.
    pub held_s: f64,
    /// `held_s` over the run's duration (first send to last end), at most 1.
    pub share_of_run: f64,
    /// The condition, in words (`kv_cache_usage >= 0.9 or preemptions`).
    pub condition: String,
    /// The figure's highest value in the stretch.
    pub peak: f64,
}

/// A rule's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleState {
    /// Its condition held.
    Fired,
    /// It was evaluated and did not.
    Clear,
    /// The sources it needs were unavailable.
    Unknown,
}

/// One rule's evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The class it tests for.
    pub class: Bottleneck,
    /// What it found.
    pub state: RuleState,
    /// Milliseconds of the mean request the class accounts for, when it has such a figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_ms: Option<f64>,
    /// The figures it read.
    pub evidence: Vec<Evidence>,
    /// The thresholds it tested.
    pub thresholds: Vec<Threshold>,
    /// Sources it lacked (why `unknown`), or could not use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Where its condition held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// True when it read a fallback figure (coarser than the one it prefers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
}

impl Finding {
    fn new(class: Bottleneck) -> Finding {
        Finding {
            class,
            state: RuleState::Clear,
            weight_ms: None,
            evidence: Vec::new(),
            thresholds: Vec::new(),
            missing: Vec::new(),
            interval: None,
            fallback: false,
        }
    }

    fn fired(&self) -> bool {
        self.state == RuleState::Fired
    }

    /// The largest `observed / limit` over the `>=` thresholds met: how far past its line.
    fn margin(&self) -> f64 {
        self.thresholds
            .iter()
            .filter(|t| t.met && t.op == ">=" && t.limit > 0.0)
            .map(|t| t.observed / t.limit)
            .fold(0.0, f64::max)
    }
}

/// A run's diagnosis: `summary.json`'s `diagnosis` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The dominant bottleneck.
    pub class: Bottleneck,
    /// How sure.
    pub confidence: Confidence,
    /// Why, in one line: the thresholds that fired and where.
    pub why: String,
    /// The dominant class's figures.
    pub evidence: Vec<Evidence>,
    /// Its thresholds that fired.
    pub thresholds: Vec<Threshold>,
    /// Where in the run its condition held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// Other classes whose rules fired.
    pub also: Vec<Bottleneck>,
    /// Sources that were unavailable, and what that left unjudged.
    pub missing: Vec<String>,
    /// Every rule's evaluation.
    pub findings: Vec<Finding>,
}

impl Diagnosis {
    /// One line for logs and verdicts: `queueing (high): …`.
    pub fn headline(&self) -> String {
        format!(
            "{} ({} confidence): {}",
            self.class,
            self.confidence.as_str(),
            self.why
        )
    }
}

/// What the diagnosis reads.
#[derive(Debug, Clone, Copy)]
pub struct DiagnosisInput<'a> {
    /// The client's statistics.
    pub summary: &'a RunSummary,
    /// What the observers saw, with their time series.
    pub telemetry: &'a RunTelemetry,
    /// The client's figures over time, when kept.
    pub timeline: Option<&'a ClientTimeline>,
}

/// Diagnoses a run; see the module docs for the order of the rules.
pub fn diagnose(input: &DiagnosisInput) -> Diagnosis {
    let f = Figures::of(input.summary, input.telemetry);
    let findings = rules::evaluate(&f, input);
    let by = |c: Bottleneck| findings.iter().find(|x| x.class == c).expect("every rule");
    let overriding = [Bottleneck::TargetErrors, Bottleneck::ClientBound]
        .into_iter()
        .find(|c| by(*c).fired());
    let latency = [
        Bottleneck::KvMemoryBound,
        Bottleneck::Queueing,
        Bottleneck::PrefillBound,
        Bottleneck::Network,
        Bottleneck::ComputeBound,
    ];
    let mut fired: Vec<&Finding> = latency
        .iter()
        .map(|c| by(*c))
        .filter(|x| x.fired())
        .collect();
    // Stable: equal weights keep the listed order.
    fired.sort_by(|a, b| {
        let w = |x: &Finding| x.weight_ms.unwrap_or(0.0);
        w(b).total_cmp(&w(a))
    });
    let missing: Vec<String> = findings
        .iter()
        .filter(|x| x.state == RuleState::Unknown)
        .map(|x| format!("{}: {}", x.class, x.missing.join("; ")))
        .collect();
    let dominant = overriding.map(by).or_else(|| fired.first().copied());
    let (class, confidence, chosen) = match dominant {
        Some(d) => {
            let runner_up = match overriding {
                Some(_) => None,
                None => fired.get(1).and_then(|r| r.weight_ms),
            };
            (d.class, confidence(d, runner_up, &f), Some(d))
        }
        None => {
            // Healthy needs the server's own figures: without them no rule that reads the
            // server could clear it.
            let server_rules = [Bottleneck::Queueing, Bottleneck::Network];
            if server_rules
                .iter()
                .all(|c| by(*c).state == RuleState::Unknown)
            {
                (Bottleneck::Unknown, Confidence::Low, None)
            } else if missing.is_empty() {
                (Bottleneck::Healthy, Confidence::High, None)
            } else {
                (Bottleneck::Healthy, Confidence::Medium, None)
            }
        }
    };
    let also = findings
        .iter()
        .filter(|x| x.fired() && x.class != class)
        .map(|x| x.class)
        .collect();
    let (evidence, thresholds, interval) = match chosen {
        Some(d) => (
            d.evidence.clone(),
            d.thresholds.iter().filter(|t| t.met).cloned().collect(),
            d.interval.clone(),
        ),
        None => (Vec::new(), Vec::new(), None),
    };
    // The target's failures with their statuses (`http_status 429 ×4, 503 ×3`), as the
    // table's error line has them.
    let statuses = (class == Bottleneck::TargetErrors)
        .then(|| {
            let s = input.summary;
            let http = s.errors_by_kind.get("http_status").copied().unwrap_or(0);
            crate::statuses_text(&s.errors_by_http_status, http)
        })
        .flatten()
        .map(|st| format!("http_status {st}"));
    let doubt = chosen.and_then(|d| other_traffic(d, &f));
    let detail = match (statuses, doubt) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    let why = why(class, &thresholds, detail, interval.as_ref(), &missing);
    Diagnosis {
        class,
        confidence,
        why,
        evidence,
        thresholds,
        interval,
        also,
        missing,
        findings,
    }
}

/// Why a finding that read the server's figures may be about other clients' requests: the
/// server counted more requests over the window than canaryd sent there (the client vs
/// server comparison was withheld), so its queue, cache and latencies are not canaryd's alone.
fn other_traffic(d: &Finding, f: &Figures) -> Option<String> {
    let (server, client, own) = f.other_requests?;
    let own = match own {
        0 => String::new(),
        n => format!(" and did not complete {n}"),
    };
    d.evidence
        .iter()
        .any(|e| e.source.contains("server_metrics"))
        .then(|| {
            format!(
                "the server counted {server} requests in the window, canaryd completed \
                 {client}{own}: its figures include other requests than canaryd's"
            )
        })
}

/// High, lowered one step for each doubt: the deciding figure is under twice its limit; it
/// is a fallback figure; another latency class accounts for at least half as much time; it
/// is the server's figure, over other requests than canaryd's too.
fn confidence(d: &Finding, runner_up_ms: Option<f64>, f: &Figures) -> Confidence {
    let mut c = Confidence::High;
    if other_traffic(d, f).is_some() {
        c = c.lower();
    }
    if d.margin() < 2.0 {
        c = c.lower();
    }
    if d.fallback {
        c = c.lower();
    }
    if let (Some(r), Some(w)) = (runner_up_ms, d.weight_ms) {
        if r >= 0.5 * w {
            c = c.lower();
        }
    }
    c
}

fn why(
    class: Bottleneck,
    thresholds: &[Threshold],
    detail: Option<String>,
    interval: Option<&Interval>,
    missing: &[String],
) -> String {
    match class {
        Bottleneck::Healthy if missing.is_empty() => "no rule fired".into(),
        Bottleneck::Healthy => format!("no rule fired; not judged: {}", missing.join(" | ")),
        Bottleneck::Unknown => format!(
            "no rule fired and the server's figures were unavailable: {}",
            missing.join(" | ")
        ),
        _ => {
            let mut s: Vec<String> = thresholds.iter().map(|t| t.to_string()).collect();
            s.extend(detail);
            if let Some(i) = interval {
                // Milliseconds show in a run under a second (0.0–0.0 s said nothing).
                let p = if i.end_s < 1.0 { 3 } else { 1 };
                s.push(format!(
                    "held {:.p$}–{:.p$} s ({:.0}% of the run)",
                    i.start_s,
                    i.end_s,
                    i.share_of_run * 100.0
                ));
            }
            s.join("; ")
        }
    }
}
