//! What every span and data point of one canary run carries: the workload, the target and
//! the GenAI operation.

use canary_core::Goodput;
use canary_replay::Target;
use opentelemetry::KeyValue;

/// Attribute names used beyond the GenAI semantic conventions.
pub mod attr {
    /// The canary workload (one trace, one target, one schedule).
    pub const WORKLOAD: &str = "canary.workload";
    /// `ok` or `error`.
    pub const REQUEST_STATUS: &str = "canary.request.status";
    /// A part of TTFT as the kernel saw it (`connect`, `request_write`, `server_wait`,
    /// `client_overhead`, `remainder`).
    pub const TTFT_PART: &str = "canary.ttft.part";
    /// A run's verdict (`pass`, `fail`, …, or `unjudged`).
    pub const VERDICT: &str = "canary.run.verdict";
    /// Who measured a run-level figure: `client` (canaryd) or `server` (its `/metrics`).
    pub const MEASURED_BY: &str = "canary.measured_by";
    /// Which statistic a run-level gauge holds: `mean`, `p50`, `p90`, `p99`.
    pub const STATISTIC: &str = "canary.statistic";
    /// `traces`, `metrics` or `logs`.
    pub const SIGNAL: &str = "canary.signal";
}

/// The labels of one run.
#[derive(Debug, Clone)]
pub struct RunLabels {
    /// `canary.workload`.
    pub workload: String,
    /// `gen_ai.operation.name` (`chat`, `text_completion`).
    pub operation: String,
    /// `gen_ai.request.model`.
    pub model: String,
    /// `gen_ai.provider.name`; an OpenAI-compatible API unless told otherwise.
    pub provider: String,
    /// `server.address`.
    pub server_address: String,
    /// `server.port`.
    pub server_port: u16,
    /// The run's id, on the run's log event.
    pub run_id: Option<String>,
    /// SLOs deciding which requests count as good (none: every completed request is good).
    pub goodput: Goodput,
}

impl RunLabels {
    /// Labels for a run against `target`.
    pub fn for_target(target: &Target, workload: &str) -> RunLabels {
        RunLabels {
            workload: workload.to_string(),
            operation: target.endpoint.operation().to_string(),
            model: target.model.clone(),
            provider: "openai".into(),
            server_address: target.host.clone(),
            server_port: target.port,
            run_id: None,
            goodput: Goodput::default(),
        }
    }

    /// The attributes every data point of this run carries.
    pub fn attributes(&self) -> Vec<KeyValue> {
        vec![
            KeyValue::new(attr::WORKLOAD, self.workload.clone()),
            KeyValue::new("gen_ai.operation.name", self.operation.clone()),
            KeyValue::new("gen_ai.provider.name", self.provider.clone()),
            KeyValue::new("gen_ai.request.model", self.model.clone()),
            KeyValue::new("server.address", self.server_address.clone()),
            KeyValue::new("server.port", self.server_port as i64),
        ]
    }
}
