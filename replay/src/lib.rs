//! canary-replay: replays a production trace against an OpenAI-compatible server on the
//! trace's own schedule, and measures every request from the client side.
//!
//! The pieces, in the order a run uses them:
//!
//! * [`load`] / [`analyze`] — Mooncake, Bailian and BurstGPT traces, validated row by row.
//! * [`Plan`] — everything a run needs but its observers, every default in one place;
//!   built by each front end, checked up front, its errors naming the [`Setting`].
//! * [`Schedule`] — sessions and deadlines from trace time and a speedup.
//! * [`PromptBuilder`] — deterministic prompts of exact token length from hash ids.
//! * [`Target`] — the server and the shape of its requests.
//! * [`run()`] — prepares each request ahead, releases it at its deadline through a
//!   sub-millisecond dispatcher thread, streams the response over HTTP/1.1 and records it.
//! * [`ResultsWriter`] — `records.jsonl`, `summary.json`, `summary.csv`.
#![deny(missing_docs)]

mod arrival;
mod chunk;
mod connection;
mod dispatch;
mod exchange;
mod figures;
mod histograms;
mod host;
mod ids;
mod in_flight;
mod limits;
mod merge;
mod plan;
mod prompt;
mod request_body;
mod results;
mod run;
mod rx_stamp;
mod schedule;
mod secrets;
mod sse;
mod start;
mod synthetic;
mod target;
pub mod trace;
pub mod workers;
mod workload;

pub use arrival::{ArrivalPattern, Arrivals, Rng};
pub use canary_tls::{client_config, ClientIdentity, TlsError};
pub use chunk::{
    parse as parse_chunk, parse_serde as parse_chunk_serde, scan as scan_chunk, ChunkInfo,
};
pub use connection::ConnectError;
pub use dispatch::Dispatcher;
pub use exchange::interim;
pub use histograms::{Histograms, HistogramsError, MetricHistogram, HISTOGRAMS_FILE};
pub use host::{canaryd_context, host_context};
pub use ids::TraceContext;
pub use in_flight::{in_flight_cap, open_files_limits};
pub use limits::ResponseLimits;

/// The largest JSON artifact read whole (a summary is tens of KB, a histograms file hundreds):
/// past it, a file is not canaryd's, and reading it would cost its size several times over.
pub const MAX_ARTIFACT_BYTES: u64 = 64 << 20;
pub use canary_core::Secrets;
pub use merge::{
    merge, sending_note, Alignment, MergeError, Merged, MergedInfo, MergedInput, ShardClock,
};
pub use plan::{
    check_stddev, is_variable_name, key_path_shown, looks_like_a_key, ApiKeySource, ClosedLoopPlan,
    Extent, LoadError, LoadInfo, LoadShape, Loaded, Plan, PlanInfo, Prepared, PromptSpec, RatePlan,
    RunInfo, SelectionAsked, Setting, SettingError, SynthesisInfo, SyntheticInfo, Table,
    TargetInfo, TraceInfo, TracePlan, TraceSource, MAX_KEY_FILE_BYTES, MAX_REQUEST_COUNT,
    NAME_NOT_SHOWN, NOT_A_VARIABLE_NAME, REQUEST_RATES,
};
pub use prompt::{
    Prompt, PromptBody, PromptBuilder, PromptError, TokenCheck, Tokenizer, TokenizerSpec,
};
pub use results::{
    fold_records, read_records, summary_csv, write_summary, ArtifactError, FoldedRecords,
    RecordsRead, ResultsWriter, SummaryFile,
};
pub use run::{
    run, run_work, Balance, Cancellation, CapHook, ClosedLoopWork, Config, Pace, PlannedLoad,
    Progress, RateWork, ReplayError, StopReason, Work, MAX_WARMUP_REQUESTS,
};
pub use schedule::{Schedule, Session, Timing, TurnDue};
pub use sse::{EventTooLarge, SseEvent, SseParser};
pub use start::{Placed, StartAt, MAX_LEAD as MAX_START_LEAD};
pub use synthetic::{Length, SyntheticRequests};
pub use target::{
    header, reserved_header, uri_port, ApiKey, Endpoint, HeaderError, MaxTokensField, Target,
    UrlError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
};
pub use trace::{
    analyze, load, parse, synthesize, written_format, FailedPolicy, LoadOptions, LoadReport,
    Selection, SelectionReport, Shard, Synthesis, SynthesisError, SynthesisReport, Trace,
    TraceAnalysis, TraceError, TraceFormat,
};
pub use workload::workload_context;
