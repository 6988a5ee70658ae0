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

mod clock;
pub mod compare;
mod gaps;
mod goodput;
mod hash;
mod observer;
mod outcome;
mod record;
mod redact;
mod sampling;
mod stats;
mod summary;
mod telemetry;
mod trace;

pub use clock::{ClockReport, KernelSync, MonoTime, RealtimeMap, StartReport, WallAnchor};
pub use gaps::ChunkGaps;
pub use goodput::{Goodput, GoodputParseError, Slo, SloMetric};
pub use hash::splitmix64;
pub use observer::{Observer, Observers, TelemetryFuture};
pub use outcome::{CapSource, InFlightCap, RunOutcome, SUMMARY_SCHEMA_VERSION};
pub use record::{
    ErrorKind, KernelTiming, RequestError, RequestRecord, RequestTelemetry, RxSource, RxTiming,
    ServerTimings, Status, Usage, UserspaceTimes,
};
pub use redact::{redact_url, Redactions};
pub use sampling::trace_sampled;
pub use stats::{Distribution, Stats};
pub use summary::{Aggregator, GoodputSummary, RunSummary, RxSummary, TokenAgreement};
pub use telemetry::{
    ClientMinusServer, EnergyMethod, Engine, GaugeStats, GpuRunStats, GpuSource,
    KernelProgramStats, KernelRunSummary, LatencyEstimate, RunEnergy, RunGpuSummary,
    RunServerSummary, RunTelemetry, Source, SourceState,
};
pub use trace::{TracePrompt, TraceRequest};
