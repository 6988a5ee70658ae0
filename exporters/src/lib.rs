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
//! # fn demo(target: &canary_replay::Target, mut config: canary_replay::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use canary_exporters::{Config, OtlpExporter, RunLabels};
//! let exporter = OtlpExporter::start(Config::from_env()?)?;
//! let labels = RunLabels::for_target(target, "chat-mooncake");
//! config.observer = Some(std::sync::Arc::new(exporter.run_observer(labels.clone())));
//! config.trace_sample_ratio = exporter.sample_ratio(); // traceparent's sampled flag
//! // … canary_replay::run(config, …) → outcome; then:
//! // exporter.export_run(&labels, &outcome, Some("pass"));
//! let report = exporter.shutdown(std::time::Duration::from_secs(5));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod config;
mod counting;
mod exporter;
mod health;
mod labels;
mod metrics;
mod observer;
mod spans;

pub use config::{parse_headers, ratio, redact_url, Config, ConfigError, Signal};
pub use exporter::{ExportError, ExportReport, OtlpExporter, RunJudgement};
pub use labels::{attr, RunLabels};
pub use observer::RunObserver;
