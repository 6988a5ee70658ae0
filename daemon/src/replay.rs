//! `canaryd replay`: one replay of a trace against a server, from the command line.

use crate::duration;
use crate::report;
use anyhow::{bail, Context, Result};
use canary_core::Goodput;
use canary_replay::trace::{Number, MAX_SPAN};
use canary_replay::{
    ApiKey, Endpoint, FailedPolicy, LoadOptions, MaxTokensField, PromptBuilder, ResponseLimits,
    Schedule, Selection, Shard, Target, Tokenizer, TokenizerSpec, Trace, TraceFormat,
};
use clap::Args;
use http::header::{HeaderName, HeaderValue};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Flags of `canaryd replay` (spelled as aiperf spells them where the concept is the same).
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// Trace file (Mooncake JSONL, Bailian JSONL or BurstGPT CSV).
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_name = "mooncake|bailian|burstgpt")]
    pub format: Option<TraceFormat>,
    /// Server base URL (`http://host:port`, `https://…`).
    #[arg(long, short = 'u')]
    pub url: String,
    /// Model name sent in each request.
    #[arg(long, short = 'm')]
    pub model: String,
    /// API to call.
    #[arg(long, default_value = "chat", value_name = "chat|completions")]
    pub endpoint_type: Endpoint,
    #[command(flatten)]
    pub shape: ShapeArgs,
}

/// Everything about a replay except the trace and the target, shared with `canaryd demo`.
#[derive(Debug, Clone, Args)]
pub struct ShapeArgs {
    /// Replay this many times faster than the trace's own clock (a schedule that would take
    /// more than 365 days is refused).
    #[arg(long, default_value_t = 1.0, value_parser = positive_number)]
    pub speedup: f64,
    /// Start of the window, in trace time from its first request (e.g. `60s`).
    #[arg(long, value_parser = duration::parse)]
    pub start_offset: Option<Duration>,
    /// End of the window, in trace time from its first request.
    #[arg(long, value_parser = duration::parse)]
    pub end_offset: Option<Duration>,
    /// Replay at most this many requests.
    #[arg(long)]
    pub max_requests: Option<usize>,
    /// At most this many requests in flight (1 or more); later ones wait and the wait is
    /// recorded.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub concurrency: Option<usize>,
    /// Requests sent before the measured phase (unique prompts, left out of statistics).
    #[arg(long, default_value_t = 0)]
    pub warmup_requests: usize,
    /// Multiply input and output lengths (and the block size) by F, keeping block structure.
    #[arg(long, value_name = "F", value_parser = positive_number)]
    pub scale_lengths: Option<f64>,
    /// Cap input lengths; capped rows are counted.
    #[arg(long)]
    pub max_input_tokens: Option<u32>,
    /// Cap output lengths; capped rows are counted.
    #[arg(long)]
    pub max_output_tokens: Option<u32>,
    /// Replay only shard I of N (`0/4`): every session lands on exactly one shard, the same on
    /// every machine, so N processes together replay the trace once.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Refuse trace rows, and scaled lengths, above N input or output tokens (default: 10M,
    /// the longest context any model is served with).
    #[arg(
        long,
        value_name = "N",
        default_value_t = canary_replay::trace::DEFAULT_LENGTH_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub length_limit: u32,
    /// Refuse a trace line (a CSV record) longer than N bytes: a file without line breaks
    /// (`/dev/zero`, a FIFO) stops there.
    #[arg(
        long,
        value_name = "N",
        default_value_t = canary_replay::trace::DEFAULT_MAX_LINE_BYTES,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub max_line_bytes: usize,
    /// Turn bad trace rows into counted warnings instead of errors.
    #[arg(long)]
    pub skip_invalid: bool,
    /// BurstGPT rows with 0 response tokens (failures in the original service).
    #[arg(long, default_value = "skip", value_name = "skip|send")]
    pub burstgpt_failed: FailedPolicy,
    /// `tokenizer.json` of the target model; default: built-in o200k_base (approximate for
    /// other models).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// Changes which text each hash id maps to (same seed, same prompts).
    #[arg(long, default_value_t = 0)]
    pub prompt_seed: u64,
    /// The salt of the text that is unique per request (rows without hash ids, and tokens
    /// past the last one). Default: fresh each run; give a run's `prompt_salt` (from its
    /// `summary.json`) to send its exact prompts again.
    #[arg(long, value_name = "N")]
    pub prompt_salt: Option<u64>,
    /// Compare the server's usage counts with the requested lengths in the summary.
    #[arg(long)]
    pub use_server_token_count: bool,
    /// Read one JSON body instead of an SSE stream.
    #[arg(long)]
    pub no_streaming: bool,
    /// Time responses by canaryd's own reads instead of the kernel's receive timestamps.
    #[arg(long)]
    pub no_kernel_timestamps: bool,
    /// Which output-length field(s) to send.
    #[arg(
        long,
        default_value = "both",
        value_name = "both|max_tokens|max_completion_tokens|none"
    )]
    pub max_tokens_field: MaxTokensField,
    /// JSON object merged into every request body, e.g. '{"ignore_eos":true}'.
    #[arg(long, value_name = "JSON")]
    pub extra_inputs: Option<String>,
    /// Extra request header `Name: value` (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Environment variable holding the API key (default: OPENAI_API_KEY when set; the
    /// daemon has no default and sends a key only to targets that name its source).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// File holding the API key.
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Extra CA certificates (PEM) to trust for https targets; `SSL_CERT_FILE` also works.
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,
    /// Per-request timeout.
    #[arg(long, default_value = "10m", value_parser = duration::parse_positive)]
    pub request_timeout: Duration,
    /// Most bytes a response head (status line and headers) may take; past it the request is
    /// a `response_too_large` error. Default 64KiB.
    #[arg(long, value_name = "BYTES", value_parser = crate::size::parse)]
    pub max_header_bytes: Option<usize>,
    /// Most bytes one SSE event may take, its unfinished line included (a `data:` line that
    /// never ends); past it, `response_too_large`. Default 1MiB.
    #[arg(long, value_name = "BYTES", value_parser = crate::size::parse)]
    pub max_event_bytes: Option<usize>,
    /// Most bytes of a non-streaming response body (`--no-streaming`); past it,
    /// `response_too_large`. Default 16MiB.
    #[arg(long, value_name = "BYTES", value_parser = crate::size::parse)]
    pub max_body_bytes: Option<usize>,
    /// Token chunks read per request, as a multiple of its max_tokens (plus 64); past it the
    /// request is `response_too_long`. Default 8.
    #[arg(long, value_name = "F")]
    pub max_output_ratio: Option<f64>,
    /// SLOs in aiperf's syntax, e.g. "time_to_first_token:400 inter_token_latency:40" (ms).
    #[arg(long)]
    pub goodput: Option<Goodput>,
    /// Directory for records.jsonl, summary.json and summary.csv.
    #[arg(long, short = 'o', default_value = "canaryd-out")]
    pub output_dir: PathBuf,
    /// Write every inter-chunk gap into each record.
    #[arg(long)]
    pub record_chunks: bool,
    /// After Ctrl-C, how long in-flight requests may take to finish.
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    pub grace_period: Duration,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    #[command(flatten)]
    pub export: crate::otlp::ExportArgs,
}

impl ShapeArgs {
    /// The response caps these flags set; the rest keep the library's defaults.
    pub fn limits(&self) -> ResponseLimits {
        let d = ResponseLimits::default();
        ResponseLimits {
            header_bytes: self.max_header_bytes.unwrap_or(d.header_bytes),
            event_bytes: self.max_event_bytes.unwrap_or(d.event_bytes),
            body_bytes: self.max_body_bytes.unwrap_or(d.body_bytes),
            output_ratio: self.max_output_ratio.unwrap_or(d.output_ratio),
        }
    }
}

/// Telemetry sources joined to the run.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// The server's Prometheus endpoint (default: `/metrics` on the target's host and port).
    #[arg(long, value_name = "URL")]
    pub server_metrics_url: Option<String>,
    /// Do not scrape the server's `/metrics`.
    #[arg(long)]
    pub no_server_metrics: bool,
    /// How often to scrape the server's `/metrics`.
    #[arg(long, default_value = "1s", value_parser = duration::parse_positive)]
    pub server_metrics_interval: Duration,
    /// Do not sample GPUs through NVML.
    #[arg(long)]
    pub no_nvml: bool,
    /// `libnvidia-ml.so` to load instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub nvml_lib: Option<PathBuf>,
    /// How often to sample NVML. Sampling much faster than ~100 ms has a cost on decode.
    #[arg(long, default_value = "500ms", value_parser = duration::parse_positive)]
    pub gpu_interval: Duration,
    /// A dcgm-exporter endpoint to scrape, e.g. http://127.0.0.1:9400/metrics.
    #[arg(long, value_name = "URL")]
    pub dcgm_url: Option<String>,
    /// The inference server's PID, for its per-process GPU utilization.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Do not time sockets in the kernel (eBPF).
    #[arg(long)]
    pub no_ebpf: bool,
}

impl TelemetryArgs {
    /// The telemetry settings for a run against `target`.
    pub fn config(&self, target: &Target) -> crate::observe::TelemetryConfig {
        let derived = format!(
            "{}://{}/metrics",
            if target.tls { "https" } else { "http" },
            target.authority()
        );
        crate::observe::TelemetryConfig {
            server_metrics_url: (!self.no_server_metrics)
                .then(|| self.server_metrics_url.clone().unwrap_or(derived)),
            server_metrics_interval: self.server_metrics_interval,
            nvml: !self.no_nvml,
            nvml_lib: self.nvml_lib.clone(),
            nvml_interval: self.gpu_interval,
            dcgm_url: self.dcgm_url.clone(),
            dcgm_interval: self.server_metrics_interval,
            server_pid: self.server_pid,
            ca_bundle: target.ca_bundle.clone(),
            ebpf: !self.no_ebpf,
            ..Default::default()
        }
    }
}

/// A trace loaded, windowed and scaled, with what that did.
pub struct LoadedTrace {
    /// The requests.
    pub trace: Trace,
    /// Load and selection reports, for `summary.json`.
    pub report: serde_json::Value,
}

/// `--speedup` and `--scale-lengths`: a finite number above zero.
pub(crate) fn positive_number(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("expected a positive number, found {s:?}")),
    }
}

/// How `shape` says to read a trace.
pub fn load_options(shape: &ShapeArgs, format: Option<TraceFormat>) -> LoadOptions {
    LoadOptions {
        format,
        skip_invalid: shape.skip_invalid,
        burstgpt_failed: shape.burstgpt_failed,
        length_limit: shape.length_limit,
        max_line_bytes: shape.max_line_bytes,
        stop: None,
    }
}

/// Loads and selects a trace from a file; `None` when `shutdown` fired first.
pub async fn load_trace(
    path: &Path,
    shape: &ShapeArgs,
    format: Option<TraceFormat>,
    shutdown: &CancellationToken,
) -> Result<Option<LoadedTrace>> {
    match load_until(path, load_options(shape, format), shutdown).await? {
        Some(trace) => select(trace, shape).map(Some),
        None => Ok(None),
    }
}

/// Loads a trace on a thread of its own, so that `shutdown` ends the wait at once: a FIFO
/// that never ends, or one that sends nothing, cannot hold a stop (the stop flag ends the
/// thread at its next read). `None` when `shutdown` fired first.
pub async fn load_until(
    path: &Path,
    mut opts: LoadOptions,
    shutdown: &CancellationToken,
) -> Result<Option<Trace>> {
    let stop = Arc::new(AtomicBool::new(false));
    opts.stop = Some(stop.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let file = path.to_path_buf();
    std::thread::Builder::new()
        .name("trace-load".into())
        .spawn(move || {
            let _ = tx.send(canary_replay::load(&file, &opts));
        })
        .context("starting the trace loader")?;
    tokio::select! {
        loaded = rx => Ok(Some(loaded.context("the trace loader failed")??)),
        _ = shutdown.cancelled() => {
            stop.store(true, Ordering::Relaxed);
            tracing::warn!("stopped while loading {}", path.display());
            Ok(None)
        }
    }
}

/// Refuses a schedule that would take more than [`MAX_SPAN`] to replay (a speedup of 1e-12);
/// `setting` names where the speedup came from (`--speedup`, `workloads.NAME.speedup`).
pub fn check_duration(schedule: &Schedule, setting: &str) -> Result<()> {
    let takes = schedule.min_duration();
    if takes <= MAX_SPAN {
        return Ok(());
    }
    let days = |d: Duration| Number((d.as_secs_f64() / 86_400.0).round());
    bail!(
        "{setting} {}: replaying the selected requests would take at least {} days, more than \
         the {} days allowed",
        Number(schedule.timing().speedup()),
        days(takes),
        days(MAX_SPAN)
    )
}

/// Applies the window and length transforms to a loaded trace.
pub fn select(trace: Trace, shape: &ShapeArgs) -> Result<LoadedTrace> {
    let sel = Selection {
        start_offset: shape.start_offset,
        end_offset: shape.end_offset,
        max_requests: shape.max_requests,
        scale_lengths: shape.scale_lengths,
        max_input_tokens: shape.max_input_tokens,
        max_output_tokens: shape.max_output_tokens,
        shard: shape.shard,
        length_limit: shape.length_limit,
    };
    let load_report = serde_json::to_value(&trace.report)?;
    for w in &trace.report.warnings {
        tracing::warn!("{w}");
    }
    let (trace, sel_report) = trace.select(&sel)?;
    let report = serde_json::json!({
        "path": trace.path,
        "format": trace.format.to_string(),
        "load": load_report,
        "selection": sel_report,
    });
    Ok(LoadedTrace { trace, report })
}

/// Builds the target from flags, with the API key of `--api-key-file`, `--api-key-env`, or
/// else `OPENAI_API_KEY` when it is set.
pub fn target(url: &str, endpoint: Endpoint, model: &str, shape: &ShapeArgs) -> Result<Target> {
    let mut t = target_without_key(url, endpoint, model, shape)?;
    t.api_key = api_key(shape, Some("OPENAI_API_KEY"))?;
    Ok(t)
}

/// Builds the target from flags, sending no API key (the caller sets one). Errors never
/// quote a header value or the URL's user info or query: any of them may be a secret.
pub fn target_without_key(
    url: &str,
    endpoint: Endpoint,
    model: &str,
    shape: &ShapeArgs,
) -> Result<Target> {
    if !(shape.speedup > 0.0 && shape.speedup.is_finite()) {
        bail!("--speedup must be a positive number, got {}", shape.speedup);
    }
    let mut t = Target::new(url, endpoint, model).map_err(|e| {
        anyhow::anyhow!(
            "target URL {}: {}",
            crate::config::redact_url(url),
            e.reason
        )
    })?;
    // User info is never sent: dropping it without a word would leave requests
    // unauthenticated, and the password in shell history.
    crate::config::refuse_user_info(url, "--api-key-env, --api-key-file or -H")
        .map_err(|m| anyhow::anyhow!("--url: {m}"))?;
    t.streaming = !shape.no_streaming;
    t.kernel_timestamps = !shape.no_kernel_timestamps;
    t.limits = shape.limits();
    t.limits
        .validate()
        .map_err(|(key, reason)| anyhow::anyhow!("--{}: {reason}", key.replace('_', "-")))?;
    t.max_tokens_field = shape.max_tokens_field;
    t.timeout = shape.request_timeout;
    t.ca_bundle = shape.ca_bundle.clone();
    if let Some(json) = &shape.extra_inputs {
        let v: serde_json::Value =
            serde_json::from_str(json).context("--extra-inputs is not valid JSON")?;
        let serde_json::Value::Object(map) = v else {
            bail!("--extra-inputs must be a JSON object, got {json}");
        };
        t.extra_inputs = map;
    }
    for (i, h) in shape.headers.iter().enumerate() {
        t.headers.push(
            parse_header(h)
                .map_err(|e| anyhow::anyhow!("--header #{} (value not shown): {e}", i + 1))?,
        );
    }
    Ok(t)
}

/// `Name: value` of `-H`. Messages never include the value, nor a name that failed to
/// parse (`-H "Bearer sk-…"` has no valid name, and is all secret).
fn parse_header(h: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = h
        .split_once(':')
        .ok_or("expected \"Name: value\", found no ':'")?;
    let name = HeaderName::try_from(name.trim()).map_err(|_| {
        "invalid name: expected letters, digits and !#$%&'*+-.^_`|~ before the ':'".to_string()
    })?;
    if let Some(why) = canary_replay::reserved_header(name.as_str()) {
        return Err(format!("{name} is set by canaryd: {why}"));
    }
    let mut value = HeaderValue::try_from(value.trim())
        .map_err(|_| format!("{name}: invalid value (visible ASCII, spaces and tabs only)"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// The API key named by `--api-key-file` or `--api-key-env`; without either, the variable
/// `default_env` when it is set and `default_env` is given.
pub fn api_key(shape: &ShapeArgs, default_env: Option<&str>) -> Result<Option<ApiKey>> {
    api_key_from(
        shape.api_key_file.as_deref(),
        shape.api_key_env.as_deref(),
        default_env,
    )
}

/// The key from `file`, else from the variable `env`, else from `default_env` if set; an
/// error names the source, never the key.
pub fn api_key_from(
    file: Option<&Path>,
    env: Option<&str>,
    default_env: Option<&str>,
) -> Result<Option<ApiKey>> {
    let key = if let Some(path) = file {
        let key = std::fs::read_to_string(path)
            .with_context(|| format!("reading --api-key-file {}", path.display()))?;
        if key.trim().is_empty() {
            bail!("--api-key-file {} is empty", path.display());
        }
        Some((
            ApiKey::new(&key),
            format!("--api-key-file {}", path.display()),
        ))
    } else {
        match env {
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.trim().is_empty() => {
                    Some((ApiKey::new(&k), format!("--api-key-env {var}")))
                }
                _ => bail!("--api-key-env {var}: the variable is not set or empty"),
            },
            None => default_env.and_then(|var| {
                let k = std::env::var(var).ok().filter(|k| !k.trim().is_empty())?;
                Some((ApiKey::new(&k), var.to_string()))
            }),
        }
    };
    match key {
        Some((key, _)) if key.authorization().is_some() => Ok(Some(key)),
        Some((_, source)) => {
            bail!("{source}: the key holds characters an HTTP header cannot carry")
        }
        None => Ok(None),
    }
}

/// Loads the tokenizer and builds the prompt synthesizer.
pub fn prompts(shape: &ShapeArgs) -> Result<Arc<PromptBuilder>> {
    let spec = match &shape.tokenizer {
        Some(p) => TokenizerSpec::HuggingFace(p.clone()),
        None => TokenizerSpec::BuiltinO200k,
    };
    let tokenizer = Tokenizer::load(&spec)?;
    if tokenizer.is_builtin() {
        tracing::info!(
            "prompt lengths are exact for {}; for other models they are approximate (pass --tokenizer)",
            tokenizer.name()
        );
    }
    Ok(Arc::new(PromptBuilder::new(tokenizer, shape.prompt_seed)?))
}

/// Runs one replay end to end and prints the summary. Returns the process exit code.
pub async fn replay(
    loaded: LoadedTrace,
    target: Target,
    shape: &ShapeArgs,
    prompts: Arc<PromptBuilder>,
    shutdown: CancellationToken,
) -> Result<canary_replay::RunOutcome> {
    let requests = loaded.trace.requests;
    if requests.is_empty() {
        bail!("the selected window of the trace holds no request");
    }
    let schedule = Schedule::new(requests, shape.speedup);
    check_duration(&schedule, "--speedup")?;
    let mut config = canary_replay::Config::new(target);
    config.speedup = shape.speedup;
    config.length_limit = shape.length_limit;
    // Bad OTLP settings stop the run before anything is sent.
    let exporter = shape.export.start()?;
    config.concurrency = shape.concurrency;
    config.warmup_requests = shape.warmup_requests;
    config.grace_period = shape.grace_period;
    config.goodput = shape.goodput.clone().unwrap_or_default();
    config.output_dir = Some(shape.output_dir.clone());
    config.record_chunks = shape.record_chunks;
    if let Some(salt) = shape.prompt_salt {
        config.prompt_salt = salt;
    }
    let info = serde_json::json!({
        "canaryd_version": env!("CARGO_PKG_VERSION"),
        "run_id": config.run_id,
        "target": {
            "url": config.target.url(),
            "model": config.target.model,
            "endpoint": config.target.endpoint.operation(),
            "streaming": config.target.streaming,
        },
        "trace": loaded.report,
        "speedup": shape.speedup,
        "concurrency": shape.concurrency,
        "warmup_requests": shape.warmup_requests,
        "tokenizer": prompts.tokenizer().name(),
        "tokenizer_exact_for_target": !prompts.tokenizer().is_builtin(),
        "prompt_seed": shape.prompt_seed,
        "goodput": config.goodput.to_string(),
    });
    tracing::info!(
        requests = schedule.len(),
        span_s = format!("{:.1}", schedule.span().as_secs_f64()),
        url = %config.target.url(),
        "replaying {} at {}x",
        loaded.trace.path.display(),
        shape.speedup
    );
    let workload = shape.export.workload.clone().unwrap_or_else(|| {
        let stem = loaded.trace.path.file_stem();
        stem.map_or("replay".into(), |s| s.to_string_lossy().into_owned())
    });
    let mut labels = canary_exporters::RunLabels::for_target(&config.target, &workload);
    labels.goodput = config.goodput.clone();
    labels.run_id = Some(config.run_id.to_string());
    if let Some(e) = &exporter {
        config.trace_sample_ratio = e.sample_ratio();
        config.observer = Some(Arc::new(e.run_observer(labels.clone())));
    }
    let progress = Arc::new(canary_replay::Progress::default());
    let display = report::ProgressDisplay::start(progress.clone());
    let telemetry = shape.telemetry.config(&config.target);
    let outcome = crate::observe::observed_run(
        config, schedule, prompts, info, &telemetry, shutdown, progress,
    )
    .await;
    display.finish();
    let outcome = outcome?;
    if let Some(e) = exporter {
        crate::otlp::finish(e, labels, &outcome, shape.export.otlp_flush_timeout).await;
    }
    if shape.json {
        outln!("{}", serde_json::to_string_pretty(&outcome)?)?;
    } else {
        report::print_table(&outcome, shape.use_server_token_count)?;
        outln!("artifacts: {}", shape.output_dir.display())?;
    }
    Ok(outcome)
}
