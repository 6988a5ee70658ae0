//! canary-core: the data model shared by every canaryd crate.
//!
//! * [`MonoTime`] — the single monotonic clock all measurements use.
//! * [`TraceRequest`] — one row of a production trace, format-independent.
//! * [`RequestRecord`] — what was measured for one request.
//! * [`Distribution`], [`Aggregator`], [`RunSummary`], [`ChunkGaps`] — bounded-memory
//!   statistics.
//! * [`Goodput`] — SLOs in aiperf's syntax.
//! * [`compare`] — is a shift between two latency distributions real (Mann-Whitney and MAD)?
//! * [`Observer`] — what watches a run from elsewhere; [`RunOutcome`] — what a run
//!   produced, with the observers' typed [`RunTelemetry`] (server, GPU, kernel, sources).
//! * [`series`] — the knee and the Pareto front of a sweep; [`RateSearch`] — the search
//!   for the highest rate meeting an SLO.
//! * [`diagnose`] — the run's dominant bottleneck, with its evidence ([`Diagnosis`]);
//!   [`RunContext`] — what the run ran on and against.
//! * [`Secrets`] — the scrub that keeps a request's secrets out of the text a server or a
//!   collector quotes back.
//!
//! This crate does no I/O.
//!
//! ```
//! use canary_core::{Aggregator, RequestRecord};
//! let mut agg = Aggregator::new("time_to_first_token:400".parse().unwrap());
//! agg.add(&RequestRecord { ttft_ms: Some(120.0), ..Default::default() }, &Default::default());
//! assert_eq!(agg.summary().goodput.unwrap().good_requests, 1);
//! ```
#![deny(missing_docs)]

mod by_url;
pub mod capacity;
mod clock;
pub mod compare;
mod confidence;
mod context;
mod diagnosis;
mod error_causes;
mod error_chain;
mod error_kinds;
mod gaps;
mod goodput;
mod hash;
mod interim;
mod observer;
mod outcome;
mod percent;
mod prefix;
mod printable;
mod rate_search;
pub mod rate_text;
mod record;
mod redact;
pub mod runs_without;
mod sampling;
mod secret_scrub;
pub mod series;
mod stats;
mod summary;
mod telemetry;
mod timeline;
mod timeslice;
mod trace;
mod trend;

pub use by_url::{ByUrl, UrlSummary};
pub use capacity::{BracketEnd, EndOnBounds};
pub use clock::{
    ClockReport, KernelSync, MonoTime, RealtimeMap, ReleaseReport, StartReport, WallAnchor,
};
pub use confidence::{t_cdf, t_quantile, MeanInterval, WelchTest};
pub use context::{
    CanarydContext, ContextBaseline, ContextChange, ContextComparison, Figure, GpuContext,
    HostContext, Known, LengthStats, LoadPattern, RunContext, ServerContext, WorkersContext,
    WorkloadContext,
};
pub use diagnosis::{
    diagnose, thresholds, Bottleneck, Confidence, Diagnosis, DiagnosisInput, Evidence, FigureKind,
    Finding, Interval, RuleState, Threshold,
};
pub use error_causes::{ErrorCause, ErrorCauses};
pub use error_chain::error_chain;
pub use error_kinds::{error_kinds_text, statuses_text, StatusCounts};
pub use gaps::ChunkGaps;
pub use goodput::{
    Doubt, Goodput, GoodputParseError, OutputTokens, Reading, Shortfall, Slo, SloMetric, Uncertain,
};
pub use hash::splitmix64;
pub use interim::{InterimCount, MAX_INTERIM};
pub use observer::{Observer, Observers, PhaseFuture, TelemetryFuture};
pub use outcome::{CapSource, InFlightCap, RunOutcome, SUMMARY_SCHEMA_VERSION};
pub use percent::{percent_decode, percent_decode_query};
pub use prefix::prefix_within;
pub use printable::printable;
pub use rate_search::{RateBracket, RateSearch};
pub use record::{
    completion_plausible, ErrorKind, KernelTiming, RequestError, RequestRecord, RequestTelemetry,
    RxSource, RxTiming, ServerTimings, Status, Usage, UserspaceTimes,
};
pub use redact::{redact_url, Redactions};
pub use sampling::trace_sampled;
pub use secret_scrub::{HoldsSecrets, Secrets, Words};
pub use stats::{
    Distribution, DistributionSnapshot, SnapshotError, Stats, PERCENTILE_PRECISION,
    PERCENTILE_PRECISION_SPACED,
};
pub use summary::{
    itl_is_bound, per_user_note, rate_unavailable, Aggregator, GoodputSummary, NoValue, RunSummary,
    RxBounds, RxSummary, SendSpans, ServerTimeRefused, TokenAgreement, MIN_RATE_SPAN_S,
};
pub use telemetry::{
    bounded_gpu, bounded_server, BucketQuantile, ClientCpu, ClientMinusServer, ClientTimes,
    Comparison, EnergyMethod, Engine, GapKind, GapRange, GaugeStats, GpuPoint, GpuRunStats,
    GpuSource, KernelProgramStats, KernelRunSummary, LatencyEstimate, RunEnergy, RunGpuSummary,
    RunSeries, RunServerSummary, RunTelemetry, ServerPoint, Source, SourceState, Window,
};
pub use timeline::{ClientBucket, ClientTimeline};
pub use timeslice::{SliceStats, Timeslice, TimesliceReport, Timeslices};
pub use trace::{
    HashIds, HashIdsIter, RowRef, RowsError, TracePrompt, TraceRequest, TraceRows, TraceRowsIter,
};
pub use trend::TtftTrend;
