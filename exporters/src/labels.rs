//! What every span and data point of one canary run carries: the workload, the target and
//! the GenAI operation.

use canary_core::Goodput;
use opentelemetry::KeyValue;

/// Attribute names used beyond the GenAI semantic conventions.
pub mod attr {
    /// The canary workload (one trace, one target, one schedule).
    pub const WORKLOAD: &str = "canary.workload";
    /// `ok` or `error`.
    pub const REQUEST_STATUS: &str = "canary.request.status";
    /// A part of TTFT as the kernel saw it (`request_write`, `server_wait`,
    /// `client_overhead`, `remainder`).
    pub const TTFT_PART: &str = "canary.ttft.part";
    /// Which per-request statistic of chunk delay (`p50`, `p99`).
    pub const CHUNK_DELAY_STAT: &str = "canary.chunk_delay.stat";
    /// A run's verdict (`pass`, `fail`, …, or `unjudged`).
    pub const VERDICT: &str = "canary.run.verdict";
    /// Why a run failed or errored (`; `-separated), on the run event.
    pub const VERDICT_REASONS: &str = "canary.run.verdict.reasons";
    /// A run against its rolling baseline: `regressed`, `improved`, `steady`, `insufficient`.
    pub const TREND: &str = "canary.run.trend";
    /// The direction a run's trend of `insufficient` was seen to move against a reference
    /// of one or two runs, not confirmed (`regressed`, `improved`): as the log's
    /// `insufficient (unconfirmed: regressed; …)`.
    pub const TREND_UNCONFIRMED: &str = "canary.run.trend.unconfirmed";
    /// A telemetry source (`dcgm`, `ebpf`, `nvml`, `server_metrics`).
    pub const TELEMETRY_SOURCE: &str = "canary.telemetry.source";
    /// A telemetry source's state over a run: `available`, `unavailable`, `disabled`,
    /// `pending`.
    pub const TELEMETRY_STATE: &str = "canary.telemetry.state";
    /// Which of the server's latencies a `canary.run.server.latency` point is:
    /// `inter_token_latency`, `request_latency`, `queue_time`, `prefill_time`,
    /// `decode_time`.
    pub const SERVER_PHASE: &str = "canary.server.phase";
    /// What one observation of the server's ITL is: `token_gap` (vLLM, SGLang) or
    /// `request_mean` (TGI, TensorRT-LLM: one mean per request).
    pub const SERVER_ITL_OBSERVATION: &str = "canary.server.itl_observation";
    /// Which figure of a capacity search a `canary.capacity.rate` point is: `passed` (the
    /// highest rate that met the SLOs: the capacity is at least this), `failed` (the lowest
    /// rate above it that missed them: the capacity is below this), `baseline` (the
    /// baseline's capacity).
    pub const CAPACITY_BOUND: &str = "canary.capacity.bound";
    /// Which figure of a sweep a `canary.sweep.knee` point is: `knee` (the run's knee, its
    /// completed requests/s) or `baseline` (the baseline's knee).
    pub const SWEEP_FIGURE: &str = "canary.sweep.figure";
    /// The metric an SLO threshold is for (`time_to_first_token`, aiperf's names).
    pub const SLO_METRIC: &str = "canary.slo.metric";
    /// The run's dominant bottleneck (`queueing`, `kv-memory-bound`, … the diagnosis class).
    pub const BOTTLENECK: &str = "canary.run.bottleneck";
    /// How sure the diagnosis is: `high`, `medium`, `low`.
    pub const BOTTLENECK_CONFIDENCE: &str = "canary.run.bottleneck.confidence";
    /// Why, in one line: the thresholds that fired and where in the run.
    pub const BOTTLENECK_WHY: &str = "canary.run.bottleneck.why";
    /// Who measured a run-level figure: `client` (canaryd) or `server` (its `/metrics`).
    pub const MEASURED_BY: &str = "canary.measured_by";
    /// Which statistic a run-level gauge holds: `mean`, `p50`, `p90`, `p99`; the GPU's
    /// sampled figures also `min`, `max`.
    pub const STATISTIC: &str = "canary.statistic";
    /// What kind of figure a latency point is, by the run's rule for bounds (`RxBounds`):
    /// `exact` (every time the kernel's receive stamp), `upper_bound` (TTFT, e2e: some were
    /// a later segment's stamp or canaryd's read), `bound` (ITL: exact in neither direction),
    /// `estimate` (a server percentile, interpolated within its bucket). The GPU's sampled
    /// figures: `estimate` (a mean of readings), `upper_bound` (the lowest clock read),
    /// `lower_bound` (the highest utilization read).
    pub const VALUE_KIND: &str = "canary.value_kind";
    /// `traces`, `metrics` or `logs`.
    pub const SIGNAL: &str = "canary.signal";

    // The semantic conventions' own names, taken from the crate so a typo cannot slip in.
    // The GenAI ones are marked deprecated there only because they moved to the GenAI
    // conventions repository; the names are unchanged.
    use opentelemetry_semantic_conventions::attribute as sc;
    pub use opentelemetry_semantic_conventions::attribute::{
        ERROR_TYPE, HTTP_RESPONSE_STATUS_CODE, SERVER_ADDRESS, SERVER_PORT,
    };
    pub use opentelemetry_semantic_conventions::resource::{HOST_NAME, SERVICE_VERSION};
    /// `gen_ai.operation.name`.
    #[allow(deprecated)]
    pub const GEN_AI_OPERATION_NAME: &str = sc::GEN_AI_OPERATION_NAME;
    /// `gen_ai.provider.name`.
    #[allow(deprecated)]
    pub const GEN_AI_PROVIDER_NAME: &str = sc::GEN_AI_PROVIDER_NAME;
    /// `gen_ai.request.max_tokens`.
    #[allow(deprecated)]
    pub const GEN_AI_REQUEST_MAX_TOKENS: &str = sc::GEN_AI_REQUEST_MAX_TOKENS;
    /// `gen_ai.request.model`.
    #[allow(deprecated)]
    pub const GEN_AI_REQUEST_MODEL: &str = sc::GEN_AI_REQUEST_MODEL;
    /// `gen_ai.token.type`.
    #[allow(deprecated)]
    pub const GEN_AI_TOKEN_TYPE: &str = sc::GEN_AI_TOKEN_TYPE;
    /// `gen_ai.usage.input_tokens`.
    #[allow(deprecated)]
    pub const GEN_AI_USAGE_INPUT_TOKENS: &str = sc::GEN_AI_USAGE_INPUT_TOKENS;
    /// `gen_ai.usage.output_tokens`.
    #[allow(deprecated)]
    pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = sc::GEN_AI_USAGE_OUTPUT_TOKENS;
}

/// GenAI metric names (semantic conventions).
pub(crate) mod metric {
    use opentelemetry_semantic_conventions::metric as sc;
    #[allow(deprecated)]
    pub const GEN_AI_CLIENT_OPERATION_DURATION: &str = sc::GEN_AI_CLIENT_OPERATION_DURATION;
    #[allow(deprecated)]
    pub const GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK: &str =
        sc::GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK;
    #[allow(deprecated)]
    pub const GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK: &str =
        sc::GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK;
    #[allow(deprecated)]
    pub const GEN_AI_CLIENT_TOKEN_USAGE: &str = sc::GEN_AI_CLIENT_TOKEN_USAGE;
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
    /// Labels of a run of `workload` calling `operation` (`chat`, `text_completion`) of
    /// `model` on `server_address:server_port`, an OpenAI-compatible API; no run id or SLOs
    /// yet.
    pub fn new(
        workload: &str,
        operation: &str,
        model: &str,
        server_address: &str,
        server_port: u16,
    ) -> RunLabels {
        RunLabels {
            workload: workload.to_string(),
            operation: operation.to_string(),
            model: model.to_string(),
            provider: "openai".into(),
            server_address: server_address.to_string(),
            server_port,
            run_id: None,
            goodput: Goodput::default(),
        }
    }

    /// The attributes every data point of this run carries.
    pub fn attributes(&self) -> Vec<KeyValue> {
        vec![
            KeyValue::new(attr::WORKLOAD, self.workload.clone()),
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, self.operation.clone()),
            KeyValue::new(attr::GEN_AI_PROVIDER_NAME, self.provider.clone()),
            KeyValue::new(attr::GEN_AI_REQUEST_MODEL, self.model.clone()),
            KeyValue::new(attr::SERVER_ADDRESS, self.server_address.clone()),
            KeyValue::new(attr::SERVER_PORT, self.server_port as i64),
        ]
    }
}
