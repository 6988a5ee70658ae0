//! canary-exporters: canaryd's measurements as OpenTelemetry, over OTLP/HTTP protobuf.
//!
//! * one CLIENT span per request, named `{operation} {model}`, with the trace and span ids
//!   the request carried in `traceparent`, so the server's spans join it;
//! * GenAI semantic-convention histograms (`gen_ai.client.operation.duration`,
//!   `…time_to_first_chunk`, `…time_per_output_chunk`, `gen_ai.client.token.usage`) and
//!   `canary.*` metrics for the rest (TTFO, ITL, schedule lag, errors, goodput, telemetry,
//!   the kernel's TTFT parts, run verdicts);
//! * one `canary.run` log event per run.
//!
//! Every pipeline runs on its own thread behind a bounded queue: a collector that is down,
//! slow or refusing never slows a replay; losses are counted, reported once, and exported
//! as `canary.exporter.dropped` when the backend is back.
//!
//! ```no_run
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use canary_exporters::{Config, OtlpExporter, RunLabels};
//! let exporter = OtlpExporter::start(Config::from_env()?)?;
//! let labels = RunLabels::new("chat-mooncake", "chat", "llama-3-8b", "10.0.0.7", 8000);
//! let observer = exporter.run_observer(labels.clone()); // a `canary_core::Observer`
//! let sample_ratio = exporter.sample_ratio(); // the traceparent's sampled flag follows it
//! // … run the replay with `observer` and `sample_ratio` → outcome; then:
//! // exporter.export_run(&labels, &outcome, Some("pass"));
//! let report = exporter.shutdown(std::time::Duration::from_secs(5));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod config;
mod counting;
mod exemplars;
mod exporter;
mod health;
mod labels;
mod metrics;
mod observer;
mod spans;
mod transport;

pub use config::{
    parse_headers, ratio, redact_url, valid_header_value, Config, ConfigError, Signal, TlsSources,
    CERTIFICATE, CLIENT_CERTIFICATE, CLIENT_KEY,
};
pub use exporter::{ExportError, ExportReport, OtlpExporter, RunJudgement};
pub use labels::{attr, RunLabels};
pub use observer::RunObserver;
