//! The config file as written: every key optional where a default exists. Doc comments
//! here are the user documentation of each key; [`super::Config`] is the validated form.
//! Field types check what they can while parsing (durations, cron, SLOs, fractions), so an
//! error points at the offending value's line.

use super::*;

mod value;

pub use value::*;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// History database and default artifacts location (default: `$STATE_DIRECTORY`, else
    /// `/var/lib/canaryd`).
    pub state_dir: Option<PathBuf>,
    /// Precision mode (default false): the async runtime's worker threads, which read the
    /// responses, run real-time (`SCHED_FIFO` 1, below the release thread's 2) where
    /// permitted, so first tokens are read as they arrive on a host whose cores the server
    /// shares, for about 2.8× the CPU on real-sized streams. Needs CAP_SYS_NICE or
    /// `LimitRTPRIO=2`; without them it is reported once and the workers stay ordinary. A
    /// reload (SIGHUP) applies a change.
    pub realtime_workers: Option<bool>,
    /// `[status]`.
    #[serde(default)]
    pub status: Status,
    /// `[export]`.
    #[serde(default)]
    pub export: Export,
    /// `[telemetry]`.
    #[serde(default)]
    pub telemetry: Telemetry,
    /// `[otlp]`: OTLP/HTTP export of every run (spans, metrics, a run event).
    pub otlp: Option<toml::Spanned<Otlp>>,
    /// `[baseline]`.
    #[serde(default)]
    pub baseline: Baseline,
    /// `[targets.NAME]`.
    #[serde(default)]
    pub targets: BTreeMap<String, toml::Spanned<Target>>,
    /// `[workloads.NAME]`.
    #[serde(default)]
    pub workloads: Option<toml::Spanned<BTreeMap<String, toml::Spanned<Workload>>>>,
}

/// `[status]`: the HTTP status endpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// Listen address (default `127.0.0.1:9464`).
    pub listen: Option<SocketAddr>,
}

/// `[export]`: artifacts and retention (OTLP settings join here).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Export {
    /// Default `<state_dir>/artifacts`.
    pub artifacts_dir: Option<PathBuf>,
    /// Runs kept per workload (default 500); at least `baseline.min_runs`, or the baseline
    /// could never form.
    pub retention_runs: Option<toml::Spanned<usize>>,
    /// Runs older than this are deleted (default `30d`; at least `1h`).
    pub retention_age: Option<toml::Spanned<HumanDuration>>,
}

/// `[otlp]`. Every key overrides the matching standard `OTEL_*` variable of the daemon's
/// environment; export is on when an endpoint comes from either.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Otlp {
    /// Base URL (`/v1/traces`, `/v1/metrics`, `/v1/logs` are appended);
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: Option<toml::Spanned<String>>,
    /// Full traces URL, used as is.
    pub traces_endpoint: Option<toml::Spanned<String>>,
    /// Full metrics URL, used as is (VictoriaMetrics: `…/opentelemetry/v1/metrics`).
    pub metrics_endpoint: Option<toml::Spanned<String>>,
    /// Full logs URL, used as is.
    pub logs_endpoint: Option<toml::Spanned<String>>,
    /// Headers sent with every export: a plain string, or `{ env = "VAR" }` /
    /// `{ file = "PATH" }` (read when the daemon starts, never logged), with an optional
    /// `prefix` (`"Bearer "`).
    #[serde(default)]
    pub headers: BTreeMap<String, toml::Spanned<HeaderValue>>,
    /// Per-export timeout (default `OTEL_EXPORTER_OTLP_TIMEOUT`, else `10s`).
    pub timeout: Option<toml::Spanned<Period>>,
    /// Fraction of requests whose span is exported (default 1).
    pub sample_ratio: Option<Fraction>,
    /// How often metrics are pushed (default `OTEL_METRIC_EXPORT_INTERVAL`, else `10s`).
    pub metrics_interval: Option<toml::Spanned<Period>>,
    /// How long the final flush may take when the daemon stops (default `10s`).
    pub flush_timeout: Option<toml::Spanned<Period>>,
    /// PEM CA bundle for `https` endpoints, besides the system store
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`); checked when the file is read.
    pub certificate: Option<toml::Spanned<PathBuf>>,
    /// Client certificate (PEM chain) for endpoints that ask for one
    /// (`OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`); with `client_key`.
    pub client_certificate: Option<toml::Spanned<PathBuf>>,
    /// Its private key (PEM; `OTEL_EXPORTER_OTLP_CLIENT_KEY`); with `client_certificate`.
    pub client_key: Option<toml::Spanned<PathBuf>>,
}

/// An `[otlp.headers]` value: a string, or a table saying where the value is.
#[derive(Debug)]
pub enum HeaderValue {
    /// The value itself (fine for non-secrets; secrets belong in `env` or `file`).
    Plain(String),
    /// Where the value is.
    From(HeaderSource),
}

impl<'de> Deserialize<'de> for HeaderValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // Never quote the value: it may be a secret.
        match toml::Value::deserialize(d)? {
            toml::Value::String(s) => Ok(HeaderValue::Plain(s)),
            v @ toml::Value::Table(_) => v
                .try_into::<HeaderSource>()
                .map(HeaderValue::From)
                .map_err(|e| D::Error::custom(e.message().trim().to_string())),
            _ => Err(D::Error::custom(
                "expected a string, { env = \"VAR\" } or { file = \"PATH\" }",
            )),
        }
    }
}

/// `{ env = "VAR" }` or `{ file = "PATH" }`, with an optional `prefix`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderSource {
    /// Environment variable holding the value.
    pub env: Option<String>,
    /// File holding the value (trailing newline dropped).
    pub file: Option<PathBuf>,
    /// Put before the value read (`"Bearer "`).
    pub prefix: Option<String>,
}

/// `[telemetry]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    /// Default true; a host without NVML reports it once and goes on.
    pub nvml: Option<bool>,
    /// `libnvidia-ml.so` path.
    pub nvml_lib: Option<PathBuf>,
    /// Default `500ms`.
    pub gpu_interval: Option<PositivePeriod>,
    /// dcgm-exporter URL (`http://host:port/metrics`).
    pub dcgm_url: Option<toml::Spanned<String>>,
    /// Default `1s`.
    pub scrape_interval: Option<PositivePeriod>,
    /// Kernel socket timing; default true (without privileges it is reported once, then off).
    pub ebpf: Option<bool>,
}

/// `[baseline]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// Default 20.
    pub runs: Option<toml::Spanned<usize>>,
    /// Default 3; at most `runs`.
    pub min_runs: Option<toml::Spanned<usize>>,
    /// Default 0.001; strictly between 0 and 1.
    pub alpha: Option<Probability>,
    /// Default 3; zero or more.
    pub k_mad: Option<NonNegative>,
    /// Default 0.05; zero or more.
    pub min_shift: Option<NonNegative>,
    /// Default 1; zero or more.
    pub min_shift_ms: Option<NonNegative>,
}

/// `[targets.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Base URL, `http://host:port` or `https://…` (no `user:password@`: it is not sent), or
    /// a list of them: replicas of one service, requests spread by `url_strategy`.
    pub url: toml::Spanned<Urls>,
    /// `round-robin` (default) or `least-in-flight`, with several URLs.
    pub url_strategy: Option<toml::Spanned<String>>,
    /// Model name sent (not empty, no control character).
    pub model: toml::Spanned<String>,
    /// `chat` (default) or `completions`.
    pub endpoint: Option<EndpointName>,
    /// Environment variable holding the API key. Without this or `api_key_file` no key is
    /// sent (`OPENAI_API_KEY` is not read unless named here).
    pub api_key_env: Option<toml::Spanned<String>>,
    /// File holding the API key.
    pub api_key_file: Option<toml::Spanned<PathBuf>>,
    /// Extra headers; values are never shown in errors or logs.
    #[serde(default)]
    pub headers: BTreeMap<String, toml::Spanned<HeaderText>>,
    /// Server `/metrics`, an `http://` or `https://` URL (default: on the target's host and port; `""`
    /// turns it off).
    pub metrics_url: Option<toml::Spanned<String>>,
    /// The server's PID.
    pub server_pid: Option<u32>,
    /// Default `10m`; at most a year.
    pub request_timeout: Option<PositivePeriod>,
    /// PEM bundle for https (checked when the file is read).
    pub ca_bundle: Option<toml::Spanned<PathBuf>>,
    /// Client certificate (PEM chain) for servers that ask for one; with `client_key`.
    pub client_cert: Option<toml::Spanned<PathBuf>>,
    /// Its private key (PEM); with `client_cert`.
    pub client_key: Option<toml::Spanned<PathBuf>>,
    /// Default false.
    pub allow_concurrent_runs: Option<bool>,
    /// Most bytes of a response head (status line and headers): `"64KiB"` (default) or a
    /// number of bytes. Past a cap the request is a `response_too_large` error.
    pub max_header_bytes: Option<ByteSize>,
    /// Most bytes of one SSE event, its unfinished line included (default `"1MiB"`).
    pub max_event_bytes: Option<ByteSize>,
    /// Most bytes of a non-streaming response body (default `"16MiB"`).
    pub max_body_bytes: Option<ByteSize>,
    /// Most bytes every response in flight holds together (default `"1GiB"`).
    pub max_held_bytes: Option<ByteSize>,
    /// Token chunks read per request, as a multiple of its `max_tokens` (plus 64), before it
    /// is a `response_too_long` error (default 8).
    pub max_output_ratio: Option<AtLeastOneF64>,
    /// Time responses by the kernel's receive timestamps (default true); false times them
    /// by canaryd's own reads.
    pub kernel_timestamps: Option<bool>,
}

/// A target's `url`: one string, or a non-empty array of them.
#[derive(Debug)]
pub struct Urls(pub Vec<String>);

impl<'de> Deserialize<'de> for Urls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Urls;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a URL string, or an array of URL strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Urls, E> {
                Ok(Urls(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Urls, A::Error> {
                let mut urls = Vec::new();
                while let Some(u) = seq.next_element::<String>()? {
                    urls.push(u);
                }
                match urls.is_empty() {
                    true => Err(serde::de::Error::custom("expected at least one URL")),
                    false => Ok(Urls(urls)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `[workloads.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// `replay` (default): one run of the load each time; `capacity`: a search for the
    /// highest `request_rate` that meets `slos` (see [`crate::config::CapacitySearch`]);
    /// `sweep`: a series of runs and its knee (see [`crate::config::SweepSpec`]).
    pub kind: Option<toml::Spanned<WorkloadKind>>,
    /// A `[targets]` name.
    pub target: toml::Spanned<String>,
    /// Trace file, or `"bundled"`; absent: synthetic requests (the keys below).
    pub trace: Option<toml::Spanned<String>>,
    /// `mooncake`, `bailian` or `burstgpt` (default: detected).
    pub format: Option<FormatName>,
    /// Window start.
    pub start_offset: Option<HumanDuration>,
    /// Window end.
    pub end_offset: Option<HumanDuration>,
    /// Request cap (1 or more: 0 would select nothing, an error at every run).
    pub max_requests: Option<AtLeastOne>,
    /// Default 1. A schedule that would take more than 365 days to replay is refused (by
    /// `check-config` too, which loads the trace).
    pub speedup: Option<Positive>,
    /// Length scaling; at most `length_limit` (every row has a token or more).
    pub scale_lengths: Option<toml::Spanned<Positive>>,
    /// Trace rows, and scaled lengths, above this many input or output tokens are refused
    /// (default 10000000, the longest context any model is served with; at most 100000000).
    pub length_limit: Option<LengthLimit>,
    /// A trace line (CSV record) longer than this many bytes is refused (default 16 MiB).
    pub max_line_bytes: Option<MaxLineBytes>,
    /// Concurrency ceiling, 1 or more.
    pub concurrency: Option<toml::Spanned<AtLeastOne>>,
    /// Default 0; at most 10000.
    pub warmup_requests: Option<WarmupRequests>,
    /// `"15m"`: a run every period (1 s to a year).
    pub every: Option<toml::Spanned<Period>>,
    /// A cron expression (5 or 6 fields, UTC) that fires at least once from now on.
    pub cron: Option<CronExpr>,
    /// A random delay up to this much before each run; shorter than `every`, or than the
    /// shortest gap between the cron expression's next 200 firings.
    pub jitter: Option<toml::Spanned<Period>>,
    /// `skip` (default) or `start_when_free`: what a tick does when the previous run is still
    /// going (see [`crate::config::cadence::OnOverrun`]); not with `start_at`.
    pub on_overrun: Option<toml::Spanned<crate::config::cadence::OnOverrun>>,
    /// aiperf goodput syntax.
    pub slos: Option<SloSpec>,
    /// Default 0.95; only with `slos`, which judge each request.
    pub min_good_fraction: Option<toml::Spanned<Fraction>>,
    /// Default 0.05.
    pub max_error_rate: Option<Fraction>,
    /// Default `30s`; at most a year.
    pub grace_period: Option<Period>,
    /// The longest one run (each point of a sweep, each probe of a capacity search) may take
    /// before it is stopped with an `error: run deadline … passed` verdict; default derived
    /// from the schedule and the planned length (`crate::run_deadline`).
    pub run_deadline: Option<toml::Spanned<PositivePeriod>>,
    /// Report each run in consecutive slices of this duration (`"10s"`): summary.json's
    /// `timeslices`, `timeslices.csv` and OTLP `canary.slice.*`, so warm-up and drift show.
    pub slice_duration: Option<SliceWidth>,
    /// `tokenizer.json`.
    pub tokenizer: Option<toml::Spanned<PathBuf>>,
    /// Default 0.
    pub prompt_seed: Option<u64>,
    // Synthetic load (no `trace`), as `canaryd profile`'s flags: see `config::shape`.
    /// Mean input length, tokens (default 550).
    pub isl: Option<toml::Spanned<u32>>,
    /// Its standard deviation (default 0).
    pub isl_stddev: Option<toml::Spanned<f64>>,
    /// Mean output length, tokens (default 150).
    pub osl: Option<toml::Spanned<u32>>,
    /// Its standard deviation (default 0).
    pub osl_stddev: Option<toml::Spanned<f64>>,
    /// Tokens of a prefix every request shares.
    pub shared_system_prompt_length: Option<toml::Spanned<u32>>,
    /// Requests to send (default 10 without `benchmark_duration`).
    pub request_count: Option<toml::Spanned<u64>>,
    /// How long to send.
    pub benchmark_duration: Option<toml::Spanned<HumanDuration>>,
    /// Open loop at this many requests per second; without it, a closed loop of
    /// `concurrency` users.
    pub request_rate: Option<toml::Spanned<f64>>,
    /// `constant`, `poisson` (default) or `gamma`.
    pub arrival_pattern: Option<toml::Spanned<String>>,
    /// Gamma's shape.
    pub arrival_smoothness: Option<toml::Spanned<f64>>,
    /// Seeds lengths, arrivals and which requests are cancelled (default 0).
    pub random_seed: Option<u64>,
    /// Percentage of requests cancelled on purpose (trace or synthetic).
    pub request_cancellation_rate: Option<toml::Spanned<f64>>,
    /// Time from sending a cancelled request to closing it (default 0).
    pub request_cancellation_delay: Option<toml::Spanned<HumanDuration>>,
    /// RFC 3339 instant each run's schedule starts at (shared by the shards of a sharded
    /// replay); a run that begins after it is refused, unless `max_late_start` allows it.
    pub start_at: Option<toml::Spanned<String>>,
    /// With `start_at`: how late a run may begin and still go ahead (default 0).
    pub max_late_start: Option<toml::Spanned<Period>>,
    // Trace synthesis on the fly, as `canaryd replay --synthesis-*` (aiperf's spellings): see
    // `config::validate::synthesis`. `random_seed` picks the prefix copies.
    /// Trace-time divisor applied to the trace (on top of `speedup`).
    pub synthesis_speedup_ratio: Option<toml::Spanned<f64>>,
    /// Shared-prefix length multiplier.
    pub synthesis_prefix_len_multiplier: Option<toml::Spanned<f64>>,
    /// Copies of every prefix tree.
    pub synthesis_prefix_root_multiplier: Option<toml::Spanned<u32>>,
    /// Unique-prompt length multiplier.
    pub synthesis_prompt_len_multiplier: Option<toml::Spanned<f64>>,
    /// Input length cap, tokens.
    pub synthesis_max_isl: Option<toml::Spanned<u32>>,
    /// Output length cap, tokens.
    pub synthesis_max_osl: Option<toml::Spanned<u32>>,
    // `kind = "capacity"` only.
    /// Most probes (runs) one search makes (default 6).
    pub max_probes: Option<toml::Spanned<AtLeastOne>>,
    /// The search stops when its bracket is narrower than this share of its passing end
    /// (default 0.1).
    pub search_precision: Option<toml::Spanned<Positive>>,
    /// The lowest rate a search tries, requests/s (default 0.1).
    pub min_rate: Option<toml::Spanned<Positive>>,
    /// A run fails when its capacity is below the baseline's lower end by more than this
    /// share (default 0.1).
    pub capacity_tolerance: Option<toml::Spanned<Fraction>>,
    // `kind = "sweep"` only: `canaryd sweep`'s flags (one list of the three).
    /// The points: closed loops of these many users (or, with `request_rate` or a trace,
    /// in-flight ceilings), as `canaryd sweep --concurrency`.
    pub sweep_concurrency: Option<toml::Spanned<Vec<AtLeastOne>>>,
    /// The points: open-loop request rates, requests/s (`--request-rate`).
    pub sweep_request_rate: Option<toml::Spanned<Vec<Positive>>>,
    /// The points: a trace's speedups (`--speedup`).
    pub sweep_speedup: Option<toml::Spanned<Vec<Positive>>>,
    /// Pause between points (`--cooldown`, default 0s).
    pub cooldown: Option<toml::Spanned<Period>>,
    /// GPUs serving the target, for tokens/s per GPU when neither NVML nor DCGM sees them.
    pub gpus: Option<toml::Spanned<AtLeastOne>>,
    /// A run fails when its knee is below the baseline's lower end by more than this share
    /// (default 0.1).
    pub knee_tolerance: Option<toml::Spanned<Fraction>>,
}

/// A workload's `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// One run of the load.
    Replay,
    /// A capacity search.
    Capacity,
    /// A sweep: its knee (and capacity at the SLO) against the baseline.
    Sweep,
}

/// `chat` or `completions`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointName {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
}

/// A trace format name.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FormatName {
    /// Mooncake JSONL.
    Mooncake,
    /// Bailian JSONL.
    Bailian,
    /// BurstGPT CSV.
    Burstgpt,
}
