//! canary-telemetry
#![deny(missing_docs)]

mod engine;
mod http;
pub mod prometheus;
mod ring;
mod scrape;
mod source;
mod summary;

pub use engine::{counter_delta, Engine, ServerRates, ServerSample};
pub use http::{error_chain, ScrapeError, MAX_BODY_BYTES};
pub use ring::{Ring, Stamped};
pub use scrape::{probe_server_metrics, ServerMetrics, ServerMetricsConfig, ServerMetricsScraper};
pub use source::{SharedState, SourceState};
pub use summary::{GaugeStats, LatencyEstimate, RunServerSummary};
