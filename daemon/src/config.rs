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
use canary_replay::{Endpoint, TraceFormat};
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
    /// Kernel socket timing (eBPF). Accepted now; used once the eBPF crate lands.
    pub ebpf: bool,
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

/// Where a target's API key comes from (the key itself is read at run time).
#[derive(Debug, Clone, PartialEq)]
pub enum ApiKeySource {
    /// An environment variable's name.
    Env(String),
    /// A file holding the key.
    File(PathBuf),
}

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
    /// Extra headers.
    pub headers: Vec<(String, String)>,
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
}

/// The file as written: every key optional where a default exists.
pub mod raw {
    use super::*;

    /// The whole file.
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct File {
        /// History database and default artifacts location (default: `$STATE_DIRECTORY`, else
        /// `/var/lib/canaryd`).
        pub state_dir: Option<PathBuf>,
        /// `[status]`.
        #[serde(default)]
        pub status: Status,
        /// `[export]`.
        #[serde(default)]
        pub export: Export,
        /// `[telemetry]`.
        #[serde(default)]
        pub telemetry: Telemetry,
        /// `[baseline]`.
        #[serde(default)]
        pub baseline: Baseline,
        /// `[targets.NAME]`.
        #[serde(default)]
        pub targets: BTreeMap<String, Target>,
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
        /// Runs kept per workload (default 500).
        pub retention_runs: Option<usize>,
        /// Runs older than this are deleted (default `30d`).
        pub retention_age: Option<HumanDuration>,
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
        pub gpu_interval: Option<HumanDuration>,
        /// dcgm-exporter URL.
        pub dcgm_url: Option<String>,
        /// Default `1s`.
        pub scrape_interval: Option<HumanDuration>,
        /// Default false.
        pub ebpf: Option<bool>,
    }

    /// `[baseline]`.
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Baseline {
        /// Default 20.
        pub runs: Option<usize>,
        /// Default 3.
        pub min_runs: Option<usize>,
        /// Default 0.001.
        pub alpha: Option<f64>,
        /// Default 3.
        pub k_mad: Option<f64>,
        /// Default 0.05.
        pub min_shift: Option<f64>,
        /// Default 1.
        pub min_shift_ms: Option<f64>,
    }

    /// `[targets.NAME]`.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Target {
        /// Base URL, `http://host:port` or `https://…`.
        pub url: String,
        /// Model name sent.
        pub model: String,
        /// `chat` (default) or `completions`.
        pub endpoint: Option<EndpointName>,
        /// Environment variable holding the API key.
        pub api_key_env: Option<String>,
        /// File holding the API key.
        pub api_key_file: Option<PathBuf>,
        /// Extra headers.
        #[serde(default)]
        pub headers: BTreeMap<String, String>,
        /// Server `/metrics` (default: on the target's host and port; `""` turns it off).
        pub metrics_url: Option<String>,
        /// The server's PID.
        pub server_pid: Option<u32>,
        /// Default `10m`.
        pub request_timeout: Option<HumanDuration>,
        /// PEM bundle for https.
        pub ca_bundle: Option<PathBuf>,
        /// Default false.
        pub allow_concurrent_runs: Option<bool>,
    }

    /// `[workloads.NAME]`.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Workload {
        /// A `[targets]` name.
        pub target: toml::Spanned<String>,
        /// Trace file, or `"bundled"`.
        pub trace: String,
        /// `mooncake`, `bailian` or `burstgpt` (default: detected).
        pub format: Option<FormatName>,
        /// Window start.
        pub start_offset: Option<HumanDuration>,
        /// Window end.
        pub end_offset: Option<HumanDuration>,
        /// Request cap.
        pub max_requests: Option<usize>,
        /// Default 1.
        pub speedup: Option<Positive>,
        /// Length scaling.
        pub scale_lengths: Option<Positive>,
        /// Concurrency ceiling.
        pub concurrency: Option<usize>,
        /// Default 0.
        pub warmup_requests: Option<usize>,
        /// `"15m"`: a run every period.
        pub every: Option<HumanDuration>,
        /// A cron expression (5 or 6 fields, UTC).
        pub cron: Option<CronExpr>,
        /// A random delay up to this much before each run.
        pub jitter: Option<HumanDuration>,
        /// aiperf goodput syntax.
        pub slos: Option<SloSpec>,
        /// Default 0.95.
        pub min_good_fraction: Option<Fraction>,
        /// Default 0.05.
        pub max_error_rate: Option<Fraction>,
        /// Default `30s`.
        pub grace_period: Option<HumanDuration>,
        /// `tokenizer.json`.
        pub tokenizer: Option<PathBuf>,
        /// Default 0.
        pub prompt_seed: Option<u64>,
    }

    /// A duration such as `"90s"` or `"15m"`.
    #[derive(Debug, Clone, Copy)]
    pub struct HumanDuration(pub Duration);

    impl<'de> Deserialize<'de> for HumanDuration {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let s = String::deserialize(d).map_err(|_| {
                serde::de::Error::custom("expected a duration string such as \"90s\" or \"15m\"")
            })?;
            duration::parse(&s)
                .map(HumanDuration)
                .map_err(serde::de::Error::custom)
        }
    }

    /// A cron expression, checked.
    #[derive(Debug, Clone)]
    pub struct CronExpr(pub String);

    impl<'de> Deserialize<'de> for CronExpr {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let s = String::deserialize(d)?;
            Cadence::cron(&s, None).map_err(serde::de::Error::custom)?;
            Ok(CronExpr(s))
        }
    }

    /// SLOs in aiperf's syntax, checked.
    #[derive(Debug, Clone)]
    pub struct SloSpec(pub Goodput);

    impl<'de> Deserialize<'de> for SloSpec {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let s = String::deserialize(d)?;
            s.parse::<Goodput>()
                .map(SloSpec)
                .map_err(serde::de::Error::custom)
        }
    }

    /// A number in [0, 1].
    #[derive(Debug, Clone, Copy)]
    pub struct Fraction(pub f64);

    impl<'de> Deserialize<'de> for Fraction {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let v = f64::deserialize(d)?;
            if (0.0..=1.0).contains(&v) {
                Ok(Fraction(v))
            } else {
                Err(serde::de::Error::custom(format!(
                    "expected a fraction between 0 and 1, found {v}"
                )))
            }
        }
    }

    /// A positive finite number (integers accepted).
    #[derive(Debug, Clone, Copy)]
    pub struct Positive(pub f64);

    impl<'de> Deserialize<'de> for Positive {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let v = f64::deserialize(d)?;
            if v > 0.0 && v.is_finite() {
                Ok(Positive(v))
            } else {
                Err(serde::de::Error::custom(format!(
                    "expected a positive number, found {v}"
                )))
            }
        }
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
}

impl Config {
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
            (Some(_), Some(_)) => {
                return Err(err(
                    None,
                    format!("targets.{name}: set api_key_env or api_key_file, not both"),
                ))
            }
            (Some(v), None) => Some(ApiKeySource::Env(v)),
            (None, Some(f)) => Some(ApiKeySource::File(rel(f))),
            (None, None) => None,
        };
        let endpoint = match t.endpoint {
            Some(raw::EndpointName::Completions) => Endpoint::Completions,
            _ => Endpoint::Chat,
        };
        // Checked here so a bad URL is a config error, not a failed run every 15 minutes.
        let probe = canary_replay::Target::new(&t.url, endpoint, &t.model)
            .map_err(|e| err(None, format!("targets.{name}.url: {e}")))?;
        let metrics_url = match t.metrics_url {
            Some(u) if u.is_empty() => None,
            Some(u) => Some(u),
            None => Some(format!(
                "{}://{}/metrics",
                if probe.tls { "https" } else { "http" },
                probe.authority()
            )),
        };
        targets.insert(
            name.clone(),
            Target {
                name,
                url: t.url,
                model: t.model,
                endpoint,
                api_key,
                headers: t.headers.into_iter().collect(),
                metrics_url,
                server_pid: t.server_pid,
                request_timeout: t.request_timeout.map_or(Duration::from_secs(600), |d| d.0),
                ca_bundle: t.ca_bundle.map(rel),
                allow_concurrent_runs: t.allow_concurrent_runs.unwrap_or(false),
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
        let jitter = w.jitter.map(|j| j.0);
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
        workloads.push(Workload {
            name,
            target: w.target.into_inner(),
            trace,
            start_offset: w.start_offset.map(|d| d.0),
            end_offset: w.end_offset.map(|d| d.0),
            max_requests: w.max_requests,
            speedup: w.speedup.map_or(1.0, |s| s.0),
            scale_lengths: w.scale_lengths.map(|s| s.0),
            concurrency: w.concurrency,
            warmup_requests: w.warmup_requests.unwrap_or(0),
            cadence,
            slos: w.slos.map(|s| s.0).unwrap_or_default(),
            min_good_fraction: w.min_good_fraction.map_or(0.95, |f| f.0),
            max_error_rate: w.max_error_rate.map_or(0.05, |f| f.0),
            grace_period: w.grace_period.map_or(Duration::from_secs(30), |d| d.0),
            tokenizer: w.tokenizer.map(rel),
            prompt_seed: w.prompt_seed.unwrap_or(0),
        });
    }
    if workloads.is_empty() {
        return Err(err(
            workloads_at,
            "workloads: none defined; expected at least one [workloads.NAME] table".into(),
        ));
    }
    let b = raw.baseline;
    let baseline = BaselineConfig {
        runs: b.runs.unwrap_or(20).max(1),
        min_runs: b.min_runs.unwrap_or(3).max(1),
        alpha: b.alpha.unwrap_or(0.001),
        k_mad: b.k_mad.unwrap_or(3.0),
        min_shift: b.min_shift.unwrap_or(0.05),
        min_shift_ms: b.min_shift_ms.unwrap_or(1.0),
    };
    if baseline.min_runs > baseline.runs {
        return Err(err(
            None,
            format!(
                "baseline.min_runs ({}) must not exceed baseline.runs ({})",
                baseline.min_runs, baseline.runs
            ),
        ));
    }
    let t = raw.telemetry;
    Ok(Config {
        artifacts_dir: raw
            .export
            .artifacts_dir
            .map(rel)
            .unwrap_or_else(|| state_dir.join("artifacts")),
        state_dir,
        retention_runs: raw.export.retention_runs.unwrap_or(500).max(1),
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
            gpu_interval: t.gpu_interval.map_or(Duration::from_millis(500), |d| d.0),
            dcgm_url: t.dcgm_url,
            scrape_interval: t.scrape_interval.map_or(Duration::from_secs(1), |d| d.0),
            ebpf: t.ebpf.unwrap_or(false),
        },
        baseline,
        targets,
        workloads,
    })
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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("canaryd.toml"), Path::new("/etc/canaryd"))
    }

    const GOOD: &str = r#"
state_dir = "/tmp/canaryd-state"

[targets.local]
url = "http://127.0.0.1:8000"
model = "m"
api_key_env = "MY_KEY"

[workloads.chat]
target = "local"
trace = "traces/m.jsonl"
every = "15m"
jitter = "30s"
slos = "time_to_first_token:400"

[workloads.nightly]
target = "local"
trace = "bundled"
cron = "0 3 * * *"
"#;

    #[test]
    fn a_good_file_gets_its_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.status_listen.to_string(), "127.0.0.1:9464");
        assert_eq!(c.artifacts_dir, Path::new("/tmp/canaryd-state/artifacts"));
        let t = &c.targets["local"];
        assert_eq!(
            t.metrics_url.as_deref(),
            Some("http://127.0.0.1:8000/metrics")
        );
        assert_eq!(t.api_key, Some(ApiKeySource::Env("MY_KEY".into())));
        let chat = &c.workloads[0];
        assert_eq!(
            chat.trace,
            TraceSource::File("/etc/canaryd/traces/m.jsonl".into(), None)
        );
        assert_eq!(
            chat.cadence,
            Cadence::Every {
                period: Duration::from_secs(900),
                jitter: Some(Duration::from_secs(30))
            }
        );
        assert_eq!(chat.slos.slos.len(), 1);
        assert_eq!(c.workloads[1].trace, TraceSource::Bundled);
        assert!(matches!(c.workloads[1].cadence, Cadence::Cron { .. }));
    }

    #[test]
    fn a_bad_duration_names_line_key_path_and_expectation() {
        let text = GOOD.replace("every = \"15m\"", "every = \"5 fortnights\"");
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.starts_with("canaryd.toml:12: workloads.chat.every: "),
            "{e}"
        );
        assert!(e.contains("fortnights"), "{e}");
        let text = GOOD.replace("every = \"15m\"", "every = 15");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("workloads.chat.every"), "{e}");
        assert!(e.contains("expected a duration string"), "{e}");
    }

    #[test]
    fn unknown_keys_and_missing_targets_are_named() {
        let text = GOOD.replace("jitter = \"30s\"", "jiter = \"30s\"");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains(":13:"), "{e}");
        assert!(e.contains("workloads.chat.jiter"), "{e}");
        assert!(e.contains("jitter"), "the expected keys are listed: {e}");

        let text = GOOD.replace(
            "target = \"local\"\ntrace = \"bundled\"",
            "target = \"far\"\ntrace = \"bundled\"",
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("workloads.nightly.target: no target \"far\""),
            "{e}"
        );
        assert!(e.contains(":17:"), "{e}");
    }

    #[test]
    fn schedules_slos_and_fractions_are_checked() {
        let e = parse(&GOOD.replace("0 3 * * *", "61 * * * *"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("workloads.nightly.cron"), "{e}");
        let e = parse(&GOOD.replace("time_to_first_token:400", "ttft:400"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("workloads.chat.slos") && e.contains("ttft"),
            "{e}"
        );
        let e = parse(&GOOD.replace("cron = \"0 3 * * *\"", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("workloads.nightly: missing schedule"), "{e}");
        let text = format!("{GOOD}min_good_fraction = 1.5\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("workloads.nightly.min_good_fraction") && e.contains("between 0 and 1"),
            "{e}"
        );
    }

    #[test]
    fn api_keys_are_never_read_at_load_and_both_sources_conflict() {
        let text = GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            "api_key_env = \"MY_KEY\"\napi_key_file = \"/k\"",
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("not both"), "{e}");
        // Debug shows where a key is, never a key.
        let c = parse(GOOD).unwrap();
        assert!(format!("{c:?}").contains("Env(\"MY_KEY\")"));
    }

    #[test]
    fn no_workload_is_an_error() {
        let e = parse("[targets.a]\nurl = \"http://x:1\"\nmodel = \"m\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("workloads: none defined"), "{e}");
    }
}
