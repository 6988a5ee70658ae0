//! The daemon's configuration file (TOML), in two layers: [`raw`] mirrors the file and is its
//! documentation; [`Config`] is validated, with durations, schedules, SLOs and paths as real
//! types and every default filled in.
//!
//! Errors name the file, the line, the key path and what was expected:
//! `canaryd.toml:14: workloads.chat.every: invalid duration "5 fortnights": unknown unit …`.
//! API keys are never read here: a target holds only *where* its key is (a variable name or a
//! file), and the key itself is read when a run starts, so it never reaches logs or `Debug`.

use crate::cadence::Cadence;
use crate::duration;
use canary_core::Goodput;
use canary_replay::HeaderError;
use canary_replay::{Endpoint, Plan, TraceFormat};
use http::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The path read when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/canaryd/canaryd.toml";

/// The value of a workload's `trace` that selects the trace bundled into the binary.
pub const BUNDLED_TRACE: &str = "bundled";

/// A configuration that does not load: where, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line of the offending key or value, when known.
    pub line: Option<usize>,
    /// Key path and what was expected.
    pub message: String,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where the history database lives (and artifacts, unless set elsewhere).
    pub state_dir: PathBuf,
    /// Run artifacts go under `<artifacts_dir>/<workload>/<run-id>/`.
    pub artifacts_dir: PathBuf,
    /// Keep at most this many runs per workload (history rows and artifacts).
    pub retention_runs: usize,
    /// Delete runs older than this.
    pub retention_age: Duration,
    /// The status endpoint's listen address.
    pub status_listen: SocketAddr,
    /// Telemetry joined to every run.
    pub telemetry: Telemetry,
    /// OTLP export (`[otlp]`); on when an endpoint comes from here or the environment.
    pub otlp: Otlp,
    /// How runs are compared with the rolling baseline.
    pub baseline: BaselineConfig,
    /// The servers, by name.
    pub targets: BTreeMap<String, Target>,
    /// What to replay and when, by name.
    pub workloads: Vec<Workload>,
}

/// Telemetry settings shared by every run.
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// Sample GPUs through NVML.
    pub nvml: bool,
    /// `libnvidia-ml.so` to load instead of the system's.
    pub nvml_lib: Option<PathBuf>,
    /// NVML sampling interval.
    pub gpu_interval: Duration,
    /// A dcgm-exporter endpoint.
    pub dcgm_url: Option<String>,
    /// Server `/metrics` and DCGM scrape interval.
    pub scrape_interval: Duration,
    /// Kernel socket timing (eBPF; needs CAP_BPF and CAP_PERFMON, else reported once).
    pub ebpf: bool,
}

/// OTLP export settings from `[otlp]`; each one set overrides the matching standard
/// `OTEL_*` variable of the daemon's environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Otlp {
    /// Base URL.
    pub endpoint: Option<String>,
    /// Full traces URL.
    pub traces_endpoint: Option<String>,
    /// Full metrics URL.
    pub metrics_endpoint: Option<String>,
    /// Full logs URL.
    pub logs_endpoint: Option<String>,
    /// Headers (lower-case names) and where their values are.
    pub headers: Vec<(String, OtlpHeader)>,
    /// Per-export timeout.
    pub timeout: Option<Duration>,
    /// Fraction of requests whose span is exported.
    pub sample_ratio: Option<f64>,
    /// Metrics push interval.
    pub metrics_interval: Option<Duration>,
    /// How long the final flush may take.
    pub flush_timeout: Duration,
    /// CA bundle for https endpoints.
    pub certificate: Option<PathBuf>,
}

impl Default for Otlp {
    fn default() -> Self {
        Otlp {
            endpoint: None,
            traces_endpoint: None,
            metrics_endpoint: None,
            logs_endpoint: None,
            headers: Vec::new(),
            timeout: None,
            sample_ratio: None,
            metrics_interval: None,
            flush_timeout: canary_exporters::Config::FLUSH_TIMEOUT,
            certificate: None,
        }
    }
}

/// Where an OTLP header's value is. Values may be secrets: `Debug` never shows them, and
/// those from a variable or file are read only when the exporter starts.
#[derive(Clone, PartialEq)]
pub enum OtlpHeader {
    /// Written in the file.
    Plain(String),
    /// In an environment variable, with a prefix (`"Bearer "`).
    Env(String, String),
    /// In a file (trailing newline dropped), with a prefix.
    File(PathBuf, String),
}

impl std::fmt::Debug for OtlpHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OtlpHeader::Plain(_) => f.write_str("Plain(<redacted>)"),
            OtlpHeader::Env(v, _) => write!(f, "Env({v:?})"),
            OtlpHeader::File(p, _) => write!(f, "File({p:?})"),
        }
    }
}

impl Otlp {
    /// What `check-config` says about export: endpoints without user info or query, and
    /// header names (never values). `None` when the file sets no endpoint.
    pub fn describe(&self) -> Option<String> {
        let urls: Vec<String> = [
            ("", &self.endpoint),
            ("traces ", &self.traces_endpoint),
            ("metrics ", &self.metrics_endpoint),
            ("logs ", &self.logs_endpoint),
        ]
        .into_iter()
        .filter_map(|(what, u)| u.as_deref().map(|u| format!("{what}{}", redact_url(u))))
        .collect();
        if urls.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        Some(format!(
            "OTLP export to {}{}",
            urls.join(", "),
            match names.is_empty() {
                true => String::new(),
                false => format!(" with headers {}", names.join(", ")),
            }
        ))
    }

    /// The exporter's settings: the standard `OTEL_*` variables, overridden by `[otlp]`.
    /// Header values are read here; an error names the key, never a value.
    pub fn exporter_config(&self) -> Result<canary_exporters::Config, String> {
        let mut c = canary_exporters::Config::from_env()
            .map_err(|e| format!("OTLP settings from the environment: {e}"))?;
        let set = |dst: &mut Option<String>, src: &Option<String>| {
            if src.is_some() {
                dst.clone_from(src);
            }
        };
        set(&mut c.endpoint, &self.endpoint);
        set(&mut c.traces_endpoint, &self.traces_endpoint);
        set(&mut c.metrics_endpoint, &self.metrics_endpoint);
        set(&mut c.logs_endpoint, &self.logs_endpoint);
        for (name, h) in &self.headers {
            let value = match h {
                OtlpHeader::Plain(v) => v.clone(),
                OtlpHeader::Env(var, prefix) => match std::env::var(var) {
                    Ok(v) if !v.trim().is_empty() => format!("{prefix}{}", v.trim()),
                    _ => return Err(format!("otlp.headers.{name}: {var} is not set")),
                },
                OtlpHeader::File(path, prefix) => match std::fs::read_to_string(path) {
                    Ok(v) if !v.trim().is_empty() => format!("{prefix}{}", v.trim()),
                    Ok(_) => {
                        return Err(format!("otlp.headers.{name}: {} is empty", path.display()))
                    }
                    Err(e) => {
                        return Err(format!(
                            "otlp.headers.{name}: reading {}: {e}",
                            path.display()
                        ))
                    }
                },
            };
            c.headers.retain(|(k, _)| k != name);
            c.headers.push((name.clone(), value));
        }
        if let Some(t) = self.timeout {
            c.timeout = t;
        }
        if let Some(r) = self.sample_ratio {
            c.sample_ratio = r;
        }
        if self.certificate.is_some() {
            c.certificate.clone_from(&self.certificate);
        }
        if let Some(i) = self.metrics_interval {
            c.metrics_interval = i;
        }
        Ok(c)
    }
}

/// Rolling-baseline settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineConfig {
    /// The baseline is built from the last this-many passing runs.
    pub runs: usize,
    /// No comparison before this many passing runs exist.
    pub min_runs: usize,
    /// Significance level of the Mann-Whitney U test.
    pub alpha: f64,
    /// A shift counts only beyond k × MAD of the baseline runs' medians.
    pub k_mad: f64,
    /// … and beyond this fraction of the baseline median (guards a near-zero MAD).
    pub min_shift: f64,
    /// … and beyond this many milliseconds: shifts smaller than this never matter for an
    /// inference server, however consistent (scheduling noise on a busy client host).
    pub min_shift_ms: f64,
}

/// Where a target's API key comes from (the key itself is read when a run starts); a config
/// names an [`ApiKeySource::Env`] or an [`ApiKeySource::File`].
pub use canary_replay::ApiKeySource;

/// A server canaryd probes.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Its name in the file.
    pub name: String,
    /// Base URL.
    pub url: String,
    /// Model sent in each request.
    pub model: String,
    /// Chat or completions.
    pub endpoint: Endpoint,
    /// Where the API key is.
    pub api_key: Option<ApiKeySource>,
    /// Extra headers, checked at load. Values are marked sensitive: `Debug` shows
    /// `Sensitive`, never the value (it may be a key).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The server's Prometheus endpoint; `None` turns scraping off.
    pub metrics_url: Option<String>,
    /// The server's PID, for per-process GPU figures.
    pub server_pid: Option<u32>,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Extra CA certificates for https.
    pub ca_bundle: Option<PathBuf>,
    /// Let two workloads run against this target at the same time.
    pub allow_concurrent_runs: bool,
    /// How much of one response is held at most.
    pub limits: canary_replay::ResponseLimits,
    /// Time responses by the kernel's receive timestamps.
    pub kernel_timestamps: bool,
}

/// Which trace a workload replays.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceSource {
    /// The Mooncake slice bundled into the binary.
    Bundled,
    /// A file, with its format when not detected.
    File(PathBuf, Option<TraceFormat>),
}

/// One scheduled replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Its name (also its artifacts folder).
    pub name: String,
    /// The target's name.
    pub target: String,
    /// The trace.
    pub trace: TraceSource,
    /// Window start in trace time.
    pub start_offset: Option<Duration>,
    /// Window end in trace time.
    pub end_offset: Option<Duration>,
    /// At most this many requests.
    pub max_requests: Option<usize>,
    /// Trace-time divisor.
    pub speedup: f64,
    /// Length scaling.
    pub scale_lengths: Option<f64>,
    /// Trace rows (and scaled lengths) above this many input or output tokens are refused.
    pub length_limit: u32,
    /// A trace line (CSV record) longer than this many bytes is refused.
    pub max_line_bytes: usize,
    /// Concurrency ceiling.
    pub concurrency: Option<usize>,
    /// Warm-up requests before the measured phase.
    pub warmup_requests: usize,
    /// When it runs.
    pub cadence: Cadence,
    /// SLOs (aiperf goodput syntax).
    pub slos: Goodput,
    /// With SLOs: the run fails below this good-request fraction.
    pub min_good_fraction: f64,
    /// The run fails above this error rate.
    pub max_error_rate: f64,
    /// After a stop, in-flight requests get this long.
    pub grace_period: Duration,
    /// `tokenizer.json` of the target model.
    pub tokenizer: Option<PathBuf>,
    /// Prompt seed.
    pub prompt_seed: u64,
    /// The wall-clock instant each run's schedule starts at, and the lateness allowed.
    pub start_at: Option<canary_replay::StartAt>,
}

mod plan;
pub mod raw;

pub use plan::WorkloadPlan;

impl Config {
    /// What is valid but will not work on this host yet (trace files or key files missing,
    /// key variables unset), or works less well than the file suggests (a retention that
    /// caps the baseline).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.retention_runs < self.baseline.runs {
            out.push(format!(
                "export.retention_runs ({}) is below baseline.runs ({}): baselines hold at most {} runs",
                self.retention_runs, self.baseline.runs, self.retention_runs
            ));
        }
        for w in &self.workloads {
            if let TraceSource::File(path, _) = &w.trace {
                if !path.exists() {
                    out.push(format!(
                        "workloads.{}.trace: {} does not exist (its runs will be errors until it does)",
                        w.name,
                        path.display()
                    ));
                }
            }
        }
        for t in self.targets.values() {
            match &t.api_key {
                Some(ApiKeySource::Env(var)) if std::env::var_os(var).is_none() => out.push(
                    format!("targets.{}.api_key_env: {var} is not set here", t.name),
                ),
                Some(ApiKeySource::File(path)) if !path.exists() => out.push(format!(
                    "targets.{}.api_key_file: {} does not exist",
                    t.name,
                    path.display()
                )),
                _ => {}
            }
        }
        for (name, h) in &self.otlp.headers {
            match h {
                OtlpHeader::Env(var, _) if std::env::var_os(var).is_none() => out.push(format!(
                    "otlp.headers.{name}: {var} is not set here (OTLP export stays off unless it is set when canaryd starts)"
                )),
                OtlpHeader::File(path, _) if !path.exists() => out.push(format!(
                    "otlp.headers.{name}: {} does not exist (OTLP export stays off unless it exists when canaryd starts)",
                    path.display()
                )),
                _ => {}
            }
        }
        out
    }

    /// Reads and validates `path`. Relative paths inside the file are taken from its folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            line: None,
            message: format!("cannot read: {e}"),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, path, base)
    }

    /// Validates `text` (read from `file`, for messages); relative paths are joined to `base`.
    pub fn parse(text: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
        let raw: raw::File = toml::from_str(text).map_err(|e| {
            let span = e.span();
            let path = span
                .clone()
                .map(|s| key_path(text, s))
                .filter(|p| !p.is_empty());
            ConfigError {
                file: file.to_path_buf(),
                line: span.map(|s| line_of(text, s.start)),
                message: match path {
                    Some(p) => format!("{p}: {}", e.message().trim()),
                    None => e.message().trim().to_string(),
                },
            }
        })?;
        validate(raw, text, file, base)
    }
}

fn validate(raw: raw::File, text: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
    let err = |at: Option<usize>, message: String| ConfigError {
        file: file.to_path_buf(),
        line: at.map(|a| line_of(text, a)),
        message,
    };
    let rel = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let state_dir = match raw.state_dir {
        Some(p) => rel(p),
        None => std::env::var_os("STATE_DIRECTORY")
            // systemd may pass several, separated by ':'; the first is ours.
            .and_then(|v| {
                v.to_str()
                    .and_then(|s| s.split(':').next())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from("/var/lib/canaryd")),
    };
    let mut targets = BTreeMap::new();
    for (name, t) in raw.targets {
        let api_key = match (t.api_key_env, t.api_key_file) {
            (Some(_), Some(f)) => {
                return Err(err(
                    Some(f.span().start),
                    format!("targets.{name}: set api_key_env or api_key_file, not both"),
                ))
            }
            (Some(v), None) if v.get_ref().trim().is_empty() => {
                return Err(err(
                    Some(v.span().start),
                    format!("targets.{name}.api_key_env: expected a variable name"),
                ))
            }
            (Some(v), None) => Some(ApiKeySource::Env(v.into_inner())),
            (None, Some(f)) => Some(ApiKeySource::File(rel(f.into_inner()))),
            (None, None) => None,
        };
        let endpoint = match t.endpoint {
            Some(raw::EndpointName::Completions) => Endpoint::Completions,
            _ => Endpoint::Chat,
        };
        // Checked here so a bad URL is a config error, not a failed run every 15 minutes.
        // The URL is shown without user info or query: either may hold a secret.
        let url_at = Some(t.url.span().start);
        let url = t.url.into_inner();
        let probe = canary_replay::Target::new(&url, endpoint, &t.model).map_err(|e| {
            err(
                url_at,
                format!(
                    "targets.{name}.url: {} (got {})",
                    e.reason,
                    redact_url(&url)
                ),
            )
        })?;
        no_user_info(&url).map_err(|m| err(url_at, format!("targets.{name}.url: {m}")))?;
        let metrics_url = match t.metrics_url {
            Some(u) if u.get_ref().is_empty() => None,
            Some(u) => {
                let at = Some(u.span().start);
                let u = u.into_inner();
                scrape_url(&u).map_err(|m| err(at, format!("targets.{name}.metrics_url: {m}")))?;
                Some(u)
            }
            None => Some(probe.metrics_url()),
        };
        let mut headers = Vec::new();
        for (key, value) in t.headers {
            let at = Some(value.span().start);
            // Errors name the header, never its value: it may be a key.
            let header = canary_replay::header(&key, value.get_ref()).map_err(|e| {
                let why = match e {
                    HeaderError::InvalidName => {
                        return err(
                            at,
                            format!("targets.{name}.headers.{key:?}: not a valid HTTP header name"),
                        )
                    }
                    HeaderError::Reserved { why, .. } => format!("set by canaryd itself: {why}"),
                    HeaderError::InvalidValue { .. } => "the value is not a valid HTTP header \
                         value (visible ASCII, spaces and tabs only; not shown here)"
                        .to_string(),
                };
                err(at, format!("targets.{name}.headers.{key}: {why}"))
            })?;
            headers.push(header);
        }
        let d = canary_replay::ResponseLimits::default();
        let limits = canary_replay::ResponseLimits {
            header_bytes: t.max_header_bytes.map_or(d.header_bytes, |b| b.0),
            event_bytes: t.max_event_bytes.map_or(d.event_bytes, |b| b.0),
            body_bytes: t.max_body_bytes.map_or(d.body_bytes, |b| b.0),
            output_ratio: t.max_output_ratio.map_or(d.output_ratio, |r| r.0),
        };
        limits.validate().map_err(|e| {
            let key = e.setting.name();
            err(url_at, format!("targets.{name}.{key}: {}", e.reason))
        })?;
        targets.insert(
            name.clone(),
            Target {
                name,
                url,
                model: t.model,
                endpoint,
                api_key,
                headers,
                metrics_url,
                server_pid: t.server_pid,
                request_timeout: t
                    .request_timeout
                    .map_or(canary_replay::DEFAULT_REQUEST_TIMEOUT, |d| d.0),
                ca_bundle: t.ca_bundle.map(rel),
                allow_concurrent_runs: t.allow_concurrent_runs.unwrap_or(false),
                limits,
                kernel_timestamps: t.kernel_timestamps.unwrap_or(true),
            },
        );
    }
    let (workloads_at, raw_workloads) = match raw.workloads {
        Some(w) => (Some(w.span().start), w.into_inner()),
        None => (None, BTreeMap::new()),
    };
    let mut workloads = Vec::new();
    for (name, w) in raw_workloads {
        let at = Some(w.span().start);
        let w = w.into_inner();
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(err(
                at,
                format!("workloads.{name:?}: a name must be usable as a folder name"),
            ));
        }
        if !targets.contains_key(w.target.get_ref()) {
            let known: Vec<&str> = targets.keys().map(String::as_str).collect();
            return Err(err(
                Some(w.target.span().start),
                format!(
                    "workloads.{name}.target: no target {:?}; expected one of [{}]",
                    w.target.get_ref(),
                    known.join(", ")
                ),
            ));
        }
        let jitter_at = w.jitter.as_ref().map(|j| j.span().start);
        let jitter = w.jitter.map(|j| j.into_inner().0);
        let cadence = match (w.every, w.cron) {
            (Some(every), None) if every.0.is_zero() => {
                return Err(err(at, format!("workloads.{name}.every: must be above zero")))
            }
            (Some(every), None) => Cadence::Every {
                period: every.0,
                jitter,
            },
            (None, Some(c)) => Cadence::cron(&c.0, jitter).expect("checked when parsed"),
            (Some(_), Some(_)) => {
                return Err(err(
                    at,
                    format!("workloads.{name}: set either every or cron, not both"),
                ))
            }
            (None, None) => {
                return Err(err(
                    at,
                    format!("workloads.{name}: missing schedule; expected every = \"15m\" or cron = \"0 */15 * * * *\""),
                ))
            }
        };
        // A jitter as long as the gap between runs pushes a run past the next one's due
        // time: the schedule would no longer be the one written.
        if let (Some(j), Some(gap)) = (jitter, cadence.shortest_gap()) {
            if j >= gap {
                let what = match &cadence {
                    Cadence::Every { .. } => "every",
                    Cadence::Cron { .. } => "the shortest gap between the cron expression's runs",
                };
                return Err(err(
                    jitter_at,
                    format!(
                        "workloads.{name}.jitter: {j:?} is not shorter than {what} ({gap:?}); \
                         a run would start after the next one is due"
                    ),
                ));
            }
        }
        let trace = if w.trace == BUNDLED_TRACE {
            TraceSource::Bundled
        } else {
            let format = w.format.map(|f| match f {
                raw::FormatName::Mooncake => TraceFormat::Mooncake,
                raw::FormatName::Bailian => TraceFormat::Bailian,
                raw::FormatName::Burstgpt => TraceFormat::BurstGpt,
            });
            TraceSource::File(rel(PathBuf::from(&w.trace)), format)
        };
        let length_limit = w
            .length_limit
            .map_or(canary_replay::trace::DEFAULT_LENGTH_LIMIT, |l| l.0);
        let scale_lengths = w.scale_lengths.map(|f| (f.span().start, f.into_inner().0));
        if let Some((f_at, f)) = scale_lengths.filter(|&(_, f)| f > f64::from(length_limit)) {
            // Every row holds at least one token: all of them would end over the limit.
            return Err(err(
                Some(f_at),
                format!(
                    "workloads.{name}.scale_lengths: {} takes every length over the length \
                     limit of {length_limit} tokens (length_limit)",
                    canary_replay::trace::Number(f)
                ),
            ));
        }
        let max_late_at = w.max_late_start.as_ref().map(|m| m.span().start);
        let max_late = w.max_late_start.map(|m| m.into_inner().0);
        let start_at = match (w.start_at, max_late) {
            (Some(s), max_late) => {
                let s_at = s.span().start;
                let start = crate::instant::start_at(s.get_ref(), max_late.unwrap_or_default())
                    .map_err(|e| err(Some(s_at), format!("workloads.{name}.start_at: {e}")))?;
                Some(start)
            }
            (None, Some(_)) => {
                return Err(err(
                    max_late_at,
                    format!("workloads.{name}.max_late_start: only meaningful with start_at"),
                ))
            }
            (None, None) => None,
        };
        workloads.push(Workload {
            name,
            start_at,
            target: w.target.into_inner(),
            trace,
            start_offset: w.start_offset.map(|d| d.0),
            end_offset: w.end_offset.map(|d| d.0),
            max_requests: w.max_requests,
            speedup: w.speedup.map_or(Plan::SPEEDUP, |s| s.0),
            scale_lengths: scale_lengths.map(|(_, f)| f),
            length_limit,
            max_line_bytes: w
                .max_line_bytes
                .map_or(canary_replay::trace::DEFAULT_MAX_LINE_BYTES, |b| b.0),
            concurrency: w.concurrency.map(|c| c.0),
            warmup_requests: w.warmup_requests.unwrap_or(Plan::WARMUP_REQUESTS),
            cadence,
            slos: w.slos.map(|s| s.0).unwrap_or_default(),
            min_good_fraction: w.min_good_fraction.map_or(0.95, |f| f.0),
            max_error_rate: w.max_error_rate.map_or(0.05, |f| f.0),
            grace_period: w.grace_period.map_or(Plan::GRACE_PERIOD, |d| d.0),
            tokenizer: w.tokenizer.map(rel),
            prompt_seed: w.prompt_seed.unwrap_or(Plan::PROMPT_SEED),
        });
    }
    if workloads.is_empty() {
        return Err(err(
            workloads_at,
            "workloads: none defined; expected at least one [workloads.NAME] table".into(),
        ));
    }
    let b = raw.baseline;
    // The line of min_runs when set, else of runs: one of them is in the file.
    let min_runs_at = b
        .min_runs
        .as_ref()
        .or(b.runs.as_ref())
        .map(|v| v.span().start);
    let baseline = BaselineConfig {
        runs: b.runs.map_or(20, |v| v.into_inner()).max(1),
        min_runs: b.min_runs.map_or(3, |v| v.into_inner()).max(1),
        alpha: b.alpha.map_or(0.001, |v| v.0),
        k_mad: b.k_mad.map_or(3.0, |v| v.0),
        min_shift: b.min_shift.map_or(0.05, |v| v.0),
        min_shift_ms: b.min_shift_ms.map_or(1.0, |v| v.0),
    };
    if baseline.min_runs > baseline.runs {
        return Err(err(
            min_runs_at,
            format!(
                "baseline.min_runs ({}) must not exceed baseline.runs ({})",
                baseline.min_runs, baseline.runs
            ),
        ));
    }
    let retention_runs = match raw.export.retention_runs {
        None => 500,
        // Retention counts every run, the baseline only passing ones: with fewer kept than
        // min_runs, no run would ever be compared.
        Some(r) if *r.get_ref() < baseline.min_runs => {
            return Err(err(
                Some(r.span().start),
                format!(
                    "export.retention_runs: {} keeps fewer runs than baseline.min_runs ({}) \
                     needs, so no run would ever be compared with a baseline; expected {} or more",
                    r.get_ref(),
                    baseline.min_runs,
                    baseline.min_runs
                ),
            ))
        }
        Some(r) => r.into_inner(),
    };
    let otlp = match raw.otlp {
        None => Otlp::default(),
        Some(o) => otlp(o.span().start, o.into_inner(), &err, &rel)?,
    };
    let t = raw.telemetry;
    let dcgm_url = match t.dcgm_url {
        Some(u) if u.get_ref().is_empty() => None,
        Some(u) => {
            let at = Some(u.span().start);
            let u = u.into_inner();
            scrape_url(&u).map_err(|m| err(at, format!("telemetry.dcgm_url: {m}")))?;
            Some(u)
        }
        None => None,
    };
    Ok(Config {
        artifacts_dir: raw
            .export
            .artifacts_dir
            .map(rel)
            .unwrap_or_else(|| state_dir.join("artifacts")),
        state_dir,
        retention_runs,
        retention_age: raw
            .export
            .retention_age
            .map_or(Duration::from_secs(30 * 86400), |d| d.0),
        status_listen: raw
            .status
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9464))),
        telemetry: Telemetry {
            nvml: t.nvml.unwrap_or(true),
            nvml_lib: t.nvml_lib.map(rel),
            gpu_interval: t
                .gpu_interval
                .map_or(canary_telemetry::Config::NVML_INTERVAL, |d| d.0),
            dcgm_url,
            scrape_interval: t
                .scrape_interval
                .map_or(canary_telemetry::Config::SCRAPE_INTERVAL, |d| d.0),
            ebpf: t.ebpf.unwrap_or(true),
        },
        otlp,
        baseline,
        targets,
        workloads,
    })
}

/// Validates `[otlp]`: endpoints are `http://` URLs, header names are valid and each value
/// comes from exactly one place, durations are above zero.
fn otlp(
    table_at: usize,
    o: raw::Otlp,
    err: &dyn Fn(Option<usize>, String) -> ConfigError,
    rel: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Otlp, ConfigError> {
    let url = |key: &str, v: Option<toml::Spanned<String>>| -> Result<_, ConfigError> {
        let Some(v) = v else { return Ok(None) };
        let probe = canary_exporters::Config {
            traces_endpoint: Some(v.get_ref().clone()),
            ..Default::default()
        };
        match probe.signal_url(canary_exporters::Signal::Traces) {
            Ok(_) => Ok(Some(v.into_inner())),
            Err(canary_exporters::ConfigError::Endpoint { reason, shown, .. }) => Err(err(
                Some(v.span().start),
                format!("otlp.{key}: {reason} (got {shown})"),
            )),
            Err(e) => Err(err(Some(v.span().start), format!("otlp.{key}: {e}"))),
        }
    };
    let positive = |key: &str, d: Option<raw::Period>| match d {
        Some(d) if d.0.is_zero() => Err(err(
            Some(table_at),
            format!("otlp.{key}: must be above zero"),
        )),
        d => Ok(d.map(|d| d.0)),
    };
    let mut headers = Vec::new();
    for (name, v) in o.headers {
        let at = Some(v.span().start);
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid {
            return Err(err(
                at,
                format!("otlp.headers.{name:?}: not a valid HTTP header name"),
            ));
        }
        let value = match v.into_inner() {
            raw::HeaderValue::Plain(s) => OtlpHeader::Plain(s),
            raw::HeaderValue::From(src) => {
                let prefix = src.prefix.unwrap_or_default();
                match (src.env, src.file) {
                    (Some(var), None) => OtlpHeader::Env(var, prefix),
                    (None, Some(f)) => OtlpHeader::File(rel(f), prefix),
                    _ => {
                        return Err(err(
                            at,
                            format!("otlp.headers.{name}: expected exactly one of env = \"VAR\" or file = \"PATH\""),
                        ))
                    }
                }
            }
        };
        headers.push((name.to_ascii_lowercase(), value));
    }
    Ok(Otlp {
        endpoint: url("endpoint", o.endpoint)?,
        traces_endpoint: url("traces_endpoint", o.traces_endpoint)?,
        metrics_endpoint: url("metrics_endpoint", o.metrics_endpoint)?,
        logs_endpoint: url("logs_endpoint", o.logs_endpoint)?,
        headers,
        timeout: positive("timeout", o.timeout)?,
        sample_ratio: o.sample_ratio.map(|r| r.0),
        metrics_interval: positive("metrics_interval", o.metrics_interval)?,
        flush_timeout: o
            .flush_timeout
            .map_or(canary_exporters::Config::FLUSH_TIMEOUT, |d| d.0),
        certificate: o.certificate.map(rel),
    })
}

/// `url` for messages: no user info, query or fragment (any of them may hold a secret).
pub use canary_core::redact_url;

/// Refuses `user:password@` in a URL: neither the replay nor the scrapers send it, so it
/// would only be a secret sitting in the config, quoted by whatever shows the URL.
fn no_user_info(url: &str) -> Result<(), String> {
    refuse_user_info(url, "api_key_env, api_key_file or headers")
}

/// Refuses `user:password@` in `url`, saying to put credentials in `instead` (the settings
/// of the front end that reads it). The URL is shown without its user info.
pub fn refuse_user_info(url: &str, instead: &str) -> Result<(), String> {
    // Any `@`: a password may hold `/`, `?` or `#`, so where the authority ends is not known
    // until the user info is gone.
    match url.contains('@') {
        true => Err(format!(
            "user info (user:password@) is not sent; remove it and put credentials in \
             {instead} (got {})",
            redact_url(url)
        )),
        false => Ok(()),
    }
}

/// Checks a Prometheus endpoint the scrapers can use: `http(s)://host[:port][/path]`. Shown
/// redacted on error.
fn scrape_url(url: &str) -> Result<(), String> {
    let shown = || redact_url(url);
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(format!(
            "expected an http:// or https:// URL (got {})",
            shown()
        ));
    };
    no_user_info(url)?;
    let uri: Result<http::Uri, _> = url.parse();
    match uri {
        Ok(u) if u.host().is_some_and(|h| !h.is_empty()) => canary_replay::uri_port(&u, 80)
            .map(|_| ())
            .map_err(|m| format!("{m} (got {})", shown())),
        _ if rest.is_empty() || rest.starts_with('/') => Err(format!("no host (got {})", shown())),
        _ => Err(format!("not a valid URL (got {})", shown())),
    }
}

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The dotted key path whose key or value covers `span` (`workloads.chat.every`), found by
/// searching the document's spans depth-first. (A table's own span is only its header, so
/// every branch is searched, not just the one whose span covers.)
fn key_path(text: &str, span: std::ops::Range<usize>) -> String {
    use toml::de::{DeTable, DeValue};
    type Range = std::ops::Range<usize>;
    fn covers(outer: &Range, inner: &Range) -> bool {
        outer.start <= inner.start && inner.end <= outer.end
    }
    fn children<'a, 'i>(
        v: &'a DeValue<'i>,
    ) -> Vec<(String, &'a toml::Spanned<DeValue<'i>>, Option<Range>)> {
        match v {
            DeValue::Table(t) => t
                .iter()
                .map(|(k, v)| (k.get_ref().to_string(), v, Some(k.span())))
                .collect(),
            DeValue::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("[{i}]"), v, None))
                .collect(),
            _ => Vec::new(),
        }
    }
    fn find(v: &DeValue<'_>, span: &Range) -> Option<Vec<String>> {
        for (name, child, key_span) in children(v) {
            if key_span.is_some_and(|k| covers(&k, span)) {
                return Some(vec![name]);
            }
            if let Some(mut rest) = find(child.get_ref(), span) {
                rest.insert(0, name);
                return Some(rest);
            }
            if covers(&child.span(), span) {
                return Some(vec![name]);
            }
        }
        None
    }
    let Ok(doc) = DeTable::parse(text) else {
        return String::new();
    };
    find(&DeValue::Table(doc.into_inner()), &span)
        .unwrap_or_default()
        .join(".")
        .replace(".[", "[")
}

#[cfg(test)]
mod tests;
