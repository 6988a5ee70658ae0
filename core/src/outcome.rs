//! [`RunOutcome`]: what one run produced — the client-side statistics, the telemetry the
//! observers added, and how the run went (stopped early, requests never sent, the in-flight
//! ceiling, canaryd's own bottleneck). It is `summary.json` without its `run` block.

use crate::clock::ClockReport;
use crate::context::ContextComparison;
use crate::diagnosis::Diagnosis;
use crate::summary::RunSummary;
use crate::telemetry::RunTelemetry;
use serde::Serialize;

/// The version of `summary.json`'s schema (`core/summary.schema.json`), written as its
/// `schema_version`. Raised when a key changes meaning or goes away; added keys keep it.
///
/// 3: `error_rate` and `goodput.good_request_fraction` are null when no request was judged
/// (every one cancelled on purpose or failed by canaryd itself), where 2 wrote 0; `unsent`,
/// null when nobody can know it, became nullable under 2 without a raise.
pub const SUMMARY_SCHEMA_VERSION: u32 = 3;

/// What a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutcome {
    /// True when the run was stopped before its end: by a stop signal, or by its own limits
    /// (`cut` then says which). Not written as such: `summary.json`'s `interrupted` is
    /// [`RunOutcome::signalled`].
    #[serde(skip)]
    pub interrupted: bool,
    /// `summary.json`'s `interrupted`: a stop signal cut the run short. False when its own
    /// limits stopped it (`cut`): no signal came.
    #[serde(rename = "interrupted")]
    pub signalled: bool,
    /// Why the run's own limits stopped it (a run deadline passed, a target answered
    /// nothing; the daemon's `run_deadline` and unresponsive cut-off), its figures those
    /// measured until then; absent when they did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// Scheduled requests never sent because the run stopped; `None` (`null`) when nobody
    /// can know, and `unsent_unknown` says why (a closed loop bounded by time, stopped before
    /// its end: what its users would have sent in the time left was the server's pace).
    pub unsent: Option<u64>,
    /// `unsent` is an estimate: a rate run stopped with more arrivals left in its duration
    /// than a stop counts one by one (ten million), the rest taken as the rate times the time
    /// left. Absent when `unsent` is counted (exact) or unknown.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unsent_estimated: bool,
    /// Why `unsent` is unknown, with what is known of it (bounds); absent when it is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsent_unknown: Option<String>,
    /// The salt of the run's per-request prompt text (give it again to repeat the prompts).
    pub prompt_salt: u64,
    /// Wall-clock start (Unix ns) of the measured phase, for labelling.
    pub started_unix_ns: u64,
    /// The same start on CLOCK_MONOTONIC: record times are milliseconds after it, so other
    /// observers on this host (the simulator's ground truth, eBPF) can be compared directly.
    pub t0_monotonic_ns: u64,
    /// How the run tied wall-clock time to its monotonic clock, and how far this host's wall
    /// clock can be trusted (the kernel's view); the common start, when given.
    pub clock: ClockReport,
    /// The run's in-flight ceiling and what set it.
    pub in_flight_cap: InFlightCap,
    /// Set when canaryd itself was the bottleneck: requests it could not send for lack of
    /// its own resources (`client_resources`), which are not counted against the target.
    pub client_bottleneck: Option<String>,
    /// The run's dominant bottleneck and why ([`crate::diagnose`]).
    pub diagnosis: Diagnosis,
    /// What changed in the run's context since its baseline run's; absent when it was not
    /// compared with one (the daemon compares each run with its newest baseline run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_changes: Option<ContextComparison>,
    /// What the observers saw (server-side figures, GPUs, kernel, source states, context).
    #[serde(flatten)]
    pub telemetry: RunTelemetry,
    /// The statistics.
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Why some artifacts could not be written (a full disk): the figures here are still
    /// whole, and the front end shows them before it fails.
    #[serde(skip)]
    pub artifacts_error: Option<String>,
}

/// The in-flight ceiling of a run, as `summary.json` states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InFlightCap {
    /// Requests in flight at most; `None`: no ceiling.
    pub limit: Option<usize>,
    /// What set it.
    pub source: CapSource,
    /// The process's soft open-file limit, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_files_limit: Option<u64>,
    /// Files open when the run started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_files_at_start: Option<u64>,
    /// Files left for everything but requests (telemetry, artifacts, eBPF, a retried
    /// request's second connection).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headroom: Option<u64>,
    /// Measured requests that waited past their deadline for a free place under the ceiling
    /// (exact): the ceiling held the load back. A session's turn held for its previous turn
    /// is not counted (that wait is the trace's).
    pub waited: u64,
}

/// What set a run's in-flight ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapSource {
    /// The concurrency setting.
    Concurrency,
    /// The process's open-file limit (`RLIMIT_NOFILE`).
    OpenFiles,
    /// Nothing: no ceiling.
    None,
}

impl CapSource {
    /// The name `summary.json` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            CapSource::Concurrency => "concurrency",
            CapSource::OpenFiles => "open_files",
            CapSource::None => "none",
        }
    }
}
