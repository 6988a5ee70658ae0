//! `canaryd replay`: one replay of a trace against a server, from the command line.

use crate::cli::ranged;
use crate::config::duration;
use crate::execute::Observe;
use crate::judge::verdict::Criteria;
use anyhow::{bail, Context, Result};
use canary_core::Goodput;
use canary_replay::{
    ApiKeySource, Endpoint, FailedPolicy, HeaderError, LoadShape, MaxTokensField, Plan, PromptSpec,
    ResponseLimits, Selection, Setting, Shard, Target, TokenizerSpec, TraceFormat, TracePlan,
};
use clap::Args;
use http::header::{HeaderName, HeaderValue};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    #[arg(long, default_value_t = Plan::SPEEDUP, value_parser = positive_number)]
    pub speedup: f64,
    /// Start of the window, in trace time from its first request (e.g. `60s`).
    #[arg(long, value_parser = duration::parse)]
    pub start_offset: Option<Duration>,
    /// End of the window, in trace time from its first request.
    #[arg(long, value_parser = duration::parse)]
    pub end_offset: Option<Duration>,
    /// Replay at most this many requests (1 or more).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_requests: Option<usize>,
    /// At most this many requests in flight (1 or more); later ones wait and the wait is
    /// recorded.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub concurrency: Option<usize>,
    /// Requests sent before the measured phase (unique prompts, left out of statistics).
    #[arg(long, visible_alias = "warmup-request-count", default_value_t = Plan::WARMUP_REQUESTS,
          value_parser = ranged::warmup_requests)]
    pub warmup_requests: usize,
    /// Multiply input and output lengths (and the block size) by F, keeping block structure.
    #[arg(long, value_name = "F", value_parser = positive_number)]
    pub scale_lengths: Option<f64>,
    /// Cap input lengths; capped rows are counted.
    #[arg(long, value_parser = ranged::at_least_one)]
    pub max_input_tokens: Option<u32>,
    /// Cap output lengths; capped rows are counted.
    #[arg(long, value_parser = ranged::at_least_one)]
    pub max_output_tokens: Option<u32>,
    /// Start the schedule at this wall-clock instant (RFC 3339, e.g. `2026-11-24T12:00:00Z`)
    /// instead of as soon as the replay is ready: give every shard the same one. A replay
    /// that reaches it late is refused (see `--max-late-start`).
    #[arg(long, value_name = "RFC3339", value_parser = |s: &str| crate::instant::start_at(s, Duration::ZERO))]
    pub start_at: Option<canary_replay::StartAt>,
    /// Let a replay that reaches `--start-at` late by up to this much go ahead: it keeps the
    /// common start, sends what is already due at once, and records how late it was.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "start_at")]
    pub max_late_start: Option<Duration>,
    /// Replay only shard I of N (`0/4`): every session lands on exactly one shard, the same on
    /// every machine, so N processes together replay the trace once.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Run the plan N times, each a full run with its artifacts in OUTPUT_DIR/run-1 … run-N;
    /// OUTPUT_DIR/summary.json then gives each headline figure's mean over the runs with its
    /// 95% confidence interval (Student's t). The exit status is the worst run's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// Report the run in consecutive slices of this duration from its start (`10s`): requests,
    /// errors, latency percentiles and throughput per slice, in summary.json's `timeslices`,
    /// timeslices.csv and OTLP, so warm-up and drift show.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_slice_width)]
    pub slice_duration: Option<Duration>,
    #[command(flatten)]
    pub synthesis: crate::cli::synthesize::SynthesisArgs,
    #[command(flatten)]
    pub trace_limits: TraceLimits,
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
    #[arg(long, default_value_t = Plan::PROMPT_SEED)]
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
    /// Precision mode: run the async runtime's worker threads, which read the responses,
    /// real-time (`SCHED_FIFO` 1, below the release thread's 2) where permitted, so a first
    /// token is read as it arrives even when the server shares the cores. Costs CPU (about
    /// 2.8× on real-sized streams, 2.1× with one worker, CANARYD_REQUEST_WORKERS=1); needs
    /// CAP_SYS_NICE or an RLIMIT_RTPRIO of 2 (else it says why once and runs on ordinary
    /// workers). `CANARYD_NO_REALTIME=1` refuses it.
    #[arg(long)]
    pub realtime_workers: bool,
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
    /// Client certificate (PEM chain, the client's own first) presented to an https target
    /// that asks for one (mutual TLS), and to its https metrics endpoints; needs
    /// --client-key.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC,
    /// unencrypted); needs --client-cert. Its contents are never shown.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Per-request timeout (default 10m).
    #[arg(long, value_parser = duration::parse_positive)]
    pub request_timeout: Option<Duration>,
    /// Most bytes a response head (status line and headers) may take; past it the request is
    /// a `response_too_large` error. Default 64KiB.
    #[arg(long, value_name = "BYTES", value_parser = ranged::header_bytes)]
    pub max_header_bytes: Option<usize>,
    /// Most bytes one SSE event may take, its unfinished line included (a `data:` line that
    /// never ends); past it, `response_too_large`. Default 1MiB.
    #[arg(long, value_name = "BYTES", value_parser = ranged::event_bytes)]
    pub max_event_bytes: Option<usize>,
    /// Most bytes of a non-streaming response body (`--no-streaming`); past it,
    /// `response_too_large`. Default 16MiB.
    #[arg(long, value_name = "BYTES", value_parser = ranged::body_bytes)]
    pub max_body_bytes: Option<usize>,
    /// Most bytes every response in flight holds together (their unfinished events and
    /// bodies: the caps above are each one response's); past it the response that would grow
    /// is `response_too_large`. Default 1GiB.
    #[arg(long, value_name = "BYTES", value_parser = ranged::held_bytes)]
    pub max_held_bytes: Option<usize>,
    /// Token chunks read per request, as a multiple of its max_tokens (plus 64); past it the
    /// request is `response_too_long`. Default 8.
    #[arg(long, value_name = "F", value_parser = ranged::output_ratio)]
    pub max_output_ratio: Option<f64>,
    /// SLOs in aiperf's syntax, e.g. "time_to_first_token:400 inter_token_latency:40" (ms).
    // Named `--slo` in every command, as `sweep` names it, so clap's own errors
    // (`--min-good-fraction` without it) and canaryd's say `--slo`; `--goodput`, aiperf's
    // name, is kept as an alias.
    #[arg(
        long = "slo",
        visible_alias = "goodput",
        value_name = "SLOS",
        value_parser = crate::config::raw::slo_spec
    )]
    pub goodput: Option<Goodput>,
    /// Gate for CI, the daemon's `min_good_fraction`: exit with status 3 when fewer than this
    /// share (0 to 1) of the requests sent were good by `--slo`. Needs `--slo`.
    #[arg(long, value_name = "F", value_parser = fraction, requires = "goodput")]
    pub min_good_fraction: Option<f64>,
    /// Gate for CI, the daemon's `max_error_rate`: exit with status 3 when more than this share
    /// (0 to 1) of the requests sent failed.
    #[arg(long, value_name = "R", value_parser = fraction)]
    pub max_error_rate: Option<f64>,
    /// Directory for records.jsonl, summary.json and summary.csv. One that holds an earlier
    /// run's is refused, unless `--overwrite`.
    #[arg(long, short = 'o', default_value = "canaryd-out")]
    pub output_dir: PathBuf,
    /// Replace an earlier run's artifacts in the output directory.
    #[arg(long)]
    pub overwrite: bool,
    /// Write every inter-chunk gap into each record.
    #[arg(long)]
    pub record_chunks: bool,
    /// After Ctrl-C, how long in-flight requests may take to finish (default 30s).
    #[arg(long, value_parser = duration::parse)]
    pub grace_period: Option<Duration>,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    #[command(flatten)]
    pub export: crate::cli::otlp_flags::ExportArgs,
}

/// What one trace row or line may hold, for `replay` and `analyze-trace` alike.
#[derive(Debug, Clone, Args)]
pub struct TraceLimits {
    /// Refuse trace rows, and scaled lengths, above N input or output tokens (default: 10M,
    /// the longest context any model is served with). A run refuses more than 100M, the
    /// longest announced (a prompt is sized by it); `analyze-trace` builds none, and takes any.
    #[arg(
        long,
        value_name = "N",
        default_value_t = canary_replay::trace::DEFAULT_LENGTH_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub length_limit: u32,
    /// Refuse a trace line (a CSV record) longer than N bytes (1 to 1 GiB): a file without
    /// line breaks (`/dev/zero`, a FIFO) stops there.
    #[arg(
        long,
        value_name = "N",
        default_value_t = canary_replay::trace::DEFAULT_MAX_LINE_BYTES,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_LINE_BYTES)
    )]
    pub max_line_bytes: usize,
}

impl TraceLimits {
    /// Loading a trace in `format` under these limits, for a command that reads no prompt
    /// (`analyze-trace`, `synthesize`): prompts are checked, not kept, so a trace of them is
    /// not held in memory (one of `messages` took 3.2 GB).
    pub fn load_options(
        &self,
        format: Option<canary_replay::TraceFormat>,
        skip_invalid: bool,
    ) -> canary_replay::LoadOptions {
        canary_replay::LoadOptions {
            format,
            skip_invalid,
            length_limit: self.length_limit,
            max_line_bytes: self.max_line_bytes,
            prompts: canary_replay::trace::Prompts::Skip,
            ..Default::default()
        }
    }
}

/// The most `--max-line-bytes` takes: a line is held whole in memory, so a file without line
/// breaks costs up to this much (any u64 was taken, and `/dev/zero` then filled memory).
pub const MAX_LINE_BYTES: u64 = 1 << 30;

impl ShapeArgs {
    /// The runtime workers' scheduling, from `--realtime-workers`.
    pub fn workers(&self) -> canary_replay::workers::RealtimeWorkers {
        canary_replay::workers::RealtimeWorkers::new(self.realtime_workers)
    }

    /// The bars `--min-good-fraction` and `--max-error-rate` set; without them, only a run in
    /// which nothing completed fails.
    pub fn criteria(&self) -> Criteria {
        Criteria {
            max_error_rate: self.max_error_rate.unwrap_or(Criteria::NONE.max_error_rate),
            min_good_fraction: self
                .min_good_fraction
                .unwrap_or(Criteria::NONE.min_good_fraction),
        }
    }

    /// `--runs`, when given.
    pub(crate) fn repeats(&self) -> Option<crate::cli::repeats::Repeats> {
        self.runs.map(|runs| crate::cli::repeats::Repeats {
            runs,
            same_prompts: self.prompt_salt.is_some(),
        })
    }

    /// The response caps these flags set; the rest keep the library's defaults.
    pub fn limits(&self) -> ResponseLimits {
        let d = ResponseLimits::default();
        ResponseLimits {
            header_bytes: self.max_header_bytes.unwrap_or(d.header_bytes),
            event_bytes: self.max_event_bytes.unwrap_or(d.event_bytes),
            body_bytes: self.max_body_bytes.unwrap_or(d.body_bytes),
            output_ratio: self.max_output_ratio.unwrap_or(d.output_ratio),
            held_bytes: self.max_held_bytes.unwrap_or(d.held_bytes),
        }
    }

    /// Sets `plan`'s trace selection, pacing, prompts, limits, SLOs and artifacts from these
    /// flags (the target and its key are the caller's).
    pub(crate) fn apply(&self, plan: &mut Plan) {
        if let Some(trace) = plan.trace_mut() {
            trace.speedup = self.speedup;
            trace.read.skip_invalid = self.skip_invalid;
            trace.read.burstgpt_failed = self.burstgpt_failed;
            trace.read.max_line_bytes = self.trace_limits.max_line_bytes;
            trace.selection = Selection {
                start_offset: self.start_offset,
                end_offset: self.end_offset,
                max_requests: self.max_requests,
                scale_lengths: self.scale_lengths,
                max_input_tokens: self.max_input_tokens,
                max_output_tokens: self.max_output_tokens,
                shard: self.shard,
                ..trace.selection.clone()
            };
            trace.synthesis = self.synthesis.synthesis(None);
        }
        plan.set_length_limit(self.trace_limits.length_limit);
        plan.prompts = PromptSpec {
            tokenizer: match &self.tokenizer {
                Some(p) => TokenizerSpec::HuggingFace(p.clone()),
                None => TokenizerSpec::BuiltinO200k,
            },
            seed: self.prompt_seed,
        };
        let r = &mut plan.replay;
        r.concurrency = self.concurrency;
        r.warmup_requests = self.warmup_requests;
        if let Some(g) = self.grace_period {
            r.grace_period = g;
        }
        r.goodput = self.goodput.clone().unwrap_or_default();
        r.output_dir = Some(self.output_dir.clone());
        r.record_chunks = self.record_chunks;
        r.slice_duration = self.slice_duration;
        if let Some(salt) = self.prompt_salt {
            r.prompt_salt = salt;
        }
        r.start_at = self.start_at.clone().map(|mut s| {
            s.max_late = self.max_late_start.unwrap_or_default();
            s
        });
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
    /// How often to scrape the server's `/metrics` and DCGM (default 1s).
    #[arg(long, value_parser = duration::parse_positive)]
    pub server_metrics_interval: Option<Duration>,
    /// Do not sample GPUs through NVML.
    #[arg(long)]
    pub no_nvml: bool,
    /// `libnvidia-ml.so` to load instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub nvml_lib: Option<PathBuf>,
    /// How often to sample NVML (default 500ms). A round costs about 3 ms of CPU per GPU, and
    /// sampling much faster than ~100 ms is reported to cost decode throughput.
    #[arg(long, value_parser = duration::parse_positive)]
    pub gpu_interval: Option<Duration>,
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
    /// The telemetry these flags join to a run against `target`.
    pub fn observe(&self, target: &Target) -> Observe {
        let d = canary_telemetry::Config::default();
        let scrape = self
            .server_metrics_interval
            .unwrap_or(d.server_metrics_interval);
        Observe {
            telemetry: canary_telemetry::Config {
                server_metrics_url: (!self.no_server_metrics).then(|| {
                    self.server_metrics_url
                        .clone()
                        .unwrap_or_else(|| target.metrics_url())
                }),
                server_metrics_interval: scrape,
                server_metrics_model: Some(target.model.clone()),
                nvml: !self.no_nvml,
                nvml_lib: self.nvml_lib.clone(),
                nvml_interval: self.gpu_interval.unwrap_or(d.nvml_interval),
                dcgm_url: self.dcgm_url.clone(),
                dcgm_interval: scrape,
                server_pid: self.server_pid,
                ca_bundle: target.ca_bundle.clone(),
                client_identity: target.client_identity.clone(),
                ..d
            },
            ebpf: !self.no_ebpf,
            ebpf_known_unavailable: None,
            ebpf_warned: Default::default(),
        }
    }
}

/// `--min-good-fraction` and `--max-error-rate`: a number from 0 to 1.
fn fraction(s: &str) -> Result<f64, String> {
    in_range(s, "a number from 0 to 1", |x| (0.0..=1.0).contains(&x))
}

/// `--speedup` and `--scale-lengths`: a finite number above zero.
pub(crate) fn positive_number(s: &str) -> Result<f64, String> {
    in_range(s, "a positive number", |x| x > 0.0 && x.is_finite())
}

/// `s` as a number that passes `ok` (`what` it must be). A number out of range is said as a
/// number (`found 0`, as `--request-rate 0` says), text that is none quoted (`found "fast"`).
fn in_range(s: &str, what: &str, ok: impl Fn(f64) -> bool) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if ok(x) => Ok(x),
        Ok(x) => Err(format!(
            "expected {what}, found {}",
            canary_core::rate_text::number(x)
        )),
        Err(_) => Err(format!("expected {what}, found {s:?}")),
    }
}

/// How `canaryd replay` spells a setting: its flag.
pub fn flag(setting: Setting) -> String {
    match setting {
        Setting::Headers => "--header".into(),
        Setting::Goodput => "--slo".into(),
        s => format!("--{}", s.name().replace('_', "-")),
    }
}

/// The plan of `canaryd replay`: the trace file, the target from the flags with the API key
/// of `--api-key-file`, `--api-key-env`, or else `OPENAI_API_KEY` when it is set, and the
/// rest of the flags over the library's defaults.
impl TryFrom<&ReplayArgs> for Plan {
    type Error = anyhow::Error;

    fn try_from(args: &ReplayArgs) -> Result<Plan> {
        let shape = &args.shape;
        let target = target(&args.url, args.endpoint_type, &args.model, shape)?;
        let trace = TracePlan::file(&args.trace).with_format(args.format);
        let workload = shape.export.workload.clone().unwrap_or_else(|| {
            let stem = args.trace.file_stem();
            stem.map_or("replay".into(), |s| s.to_string_lossy().into_owned())
        });
        let mut plan = Plan::new(workload, LoadShape::Trace(trace), target);
        shape.apply(&mut plan);
        plan.api_key = Some(api_key_source(
            shape.api_key_file.as_deref(),
            shape.api_key_env.as_deref(),
        ));
        Ok(plan)
    }
}

/// Where `--api-key-file` or `--api-key-env` say the key is; without either,
/// `OPENAI_API_KEY` when it is set.
pub fn api_key_source(file: Option<&Path>, env: Option<&str>) -> ApiKeySource {
    match (file, env) {
        (Some(path), _) => ApiKeySource::File(path.to_path_buf()),
        (None, Some(var)) => ApiKeySource::Env(var.to_string()),
        (None, None) => ApiKeySource::EnvIfSet("OPENAI_API_KEY".into()),
    }
}

/// The identity `--client-cert` and `--client-key` name (clap requires both or neither).
pub fn client_identity(
    cert: Option<&PathBuf>,
    key: Option<&PathBuf>,
) -> Option<canary_replay::ClientIdentity> {
    Some(canary_replay::ClientIdentity {
        cert: cert?.clone(),
        key: key?.clone(),
    })
}

/// The target the flags describe, without its API key. Errors never quote a header value or
/// the URL's user info or query: any of them may be a secret.
pub fn target(url: &str, endpoint: Endpoint, model: &str, shape: &ShapeArgs) -> Result<Target> {
    let mut t = Target::new(url, endpoint, model).map_err(|e| {
        anyhow::anyhow!("target URL {}: {}", canary_core::redact_url(url), e.reason)
    })?;
    // User info is never sent: dropping it without a word would leave requests
    // unauthenticated, and the password in shell history.
    crate::config::refuse_user_info(url, "--api-key-env, --api-key-file or -H")
        .map_err(|m| anyhow::anyhow!("--url: {m}"))?;
    t.streaming = !shape.no_streaming;
    t.kernel_timestamps = !shape.no_kernel_timestamps;
    t.limits = shape.limits();
    t.max_tokens_field = shape.max_tokens_field;
    if let Some(timeout) = shape.request_timeout {
        t.timeout = timeout;
    }
    t.ca_bundle = shape.ca_bundle.clone();
    t.client_identity = client_identity(shape.client_cert.as_ref(), shape.client_key.as_ref());
    if let Some(json) = &shape.extra_inputs {
        let v: serde_json::Value =
            serde_json::from_str(json).context("--extra-inputs is not valid JSON")?;
        let serde_json::Value::Object(map) = v else {
            // Not echoed: extra inputs may carry a credential (`{"api_key": …}`).
            let kind = match v {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            };
            bail!("--extra-inputs must be a JSON object, got {kind} (not shown)");
        };
        t.extra_inputs = map;
    }
    for (i, h) in shape.headers.iter().enumerate() {
        let (name, value) = parse_header(h)
            .map_err(|e| anyhow::anyhow!("--header #{} (value not shown): {e}", i + 1))?;
        if name == http::header::AUTHORIZATION
            && (shape.api_key_env.is_some() || shape.api_key_file.is_some())
        {
            // It would replace the key's `Authorization: Bearer …`, the key never sent.
            bail!(
                "--header #{} sets Authorization, which the key of --api-key-env or \
                 --api-key-file is sent as: give one of them, not both",
                i + 1
            );
        }
        t.headers.push((name, value));
    }
    Ok(t)
}

/// `Name: value` of `-H`. Messages never include the value, nor a name that failed to
/// parse (`-H "Bearer sk-…"` has no valid name, and is all secret).
pub(crate) fn parse_header(h: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = h
        .split_once(':')
        .ok_or("expected \"Name: value\", found no ':'")?;
    canary_replay::header(name.trim(), value.trim()).map_err(|e| match e {
        HeaderError::InvalidName => {
            "invalid name: expected letters, digits and !#$%&'*+-.^_`|~ before the ':'".into()
        }
        HeaderError::Reserved { name, why } => format!("{name} is set by canaryd: {why}"),
        HeaderError::InvalidValue { name } => {
            format!("{name}: invalid value (visible ASCII, spaces and tabs only)")
        }
    })
}

#[cfg(test)]
mod tests {
    // README audit 13: `--speedup 0` said `found "0"` where `--request-rate 0` says `found 0`.
    #[test]
    fn a_number_out_of_range_is_said_as_a_number_and_text_quoted() {
        assert_eq!(
            super::positive_number("0").unwrap_err(),
            "expected a positive number, found 0"
        );
        assert_eq!(
            super::positive_number(" 1e400").unwrap_err(),
            "expected a positive number, found inf"
        );
        assert_eq!(
            super::positive_number("fast").unwrap_err(),
            "expected a positive number, found \"fast\""
        );
        assert_eq!(
            super::fraction("1.5").unwrap_err(),
            "expected a number from 0 to 1, found 1.5"
        );
        assert_eq!(super::positive_number("2.5"), Ok(2.5));
    }
}
