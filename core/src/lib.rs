//! canary-core: the data model shared by every canaryd crate.
//!
//! * [`MonoTime`] — the single monotonic clock all measurements use.
//! * [`TraceRequest`] — one row of a production trace, format-independent.
//! * [`RequestRecord`] — what was measured for one request.
//! * [`Distribution`], [`Aggregator`], [`RunSummary`], [`ChunkGaps`] — bounded-memory
//!   statistics.
//! * [`Goodput`] — SLOs in aiperf's syntax.
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
mod gaps;
mod goodput;
mod hash;
mod record;
mod stats;
mod summary;
mod trace;

pub use clock::{MonoTime, RealtimeMap, WallAnchor};
pub use gaps::ChunkGaps;
pub use goodput::{Goodput, GoodputParseError, Slo, SloMetric};
pub use hash::splitmix64;
pub use record::{
    ErrorKind, KernelTiming, RequestError, RequestRecord, RequestTelemetry, RxSource, RxTiming,
    ServerTimings, Status, Usage, UserspaceTimes,
};
pub use stats::{Distribution, Stats};
pub use summary::{Aggregator, GoodputSummary, RunSummary, RxSummary, TokenAgreement};
pub use trace::{TracePrompt, TraceRequest};
