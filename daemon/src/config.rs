//! The daemon's configuration file (TOML), in two layers: [`raw`] mirrors the file and is its
//! documentation; [`Config`] is validated, with durations, schedules, SLOs and paths as real
//! types and every default filled in.
//!
//! Errors name the file, the line, the key path and what was expected:
//! `canaryd.toml:14: workloads.chat.every: invalid duration "5 fortnights": unknown unit …`.
//! API keys are never read here: a target holds only *where* its key is (a variable name or a
//! file), and the key itself is read when a run starts, so it never reaches logs or `Debug`.

use cadence::Cadence;
use canary_core::Goodput;
use canary_replay::{Endpoint, TraceFormat};
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

/// The largest config file read: a large fleet's is tens of KB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A configuration that does not load: where, and what is wrong; with every other error
/// found in the same pass (a file with three mistakes says all three at once).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line of the offending key or value, when known.
    pub line: Option<usize>,
    /// Key path and what was expected.
    pub message: String,
    /// The other errors of the same file, after this one in file order.
    pub more: Vec<ConfigError>,
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
    /// Run the runtime's worker threads real-time (`realtime_workers`).
    pub realtime_workers: bool,
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
    /// What the file sets that is legal but does nothing or surprises, found at load:
    /// `file:line: key: why`, among [`Config::warnings`].
    pub load_warnings: Vec<String>,
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
    /// Base URL (the first of several).
    pub url: String,
    /// More URLs of the same service (`url = [..]`): the same settings, requests spread by
    /// `url_strategy`. `/metrics` is scraped from `url` only.
    pub replica_urls: Vec<String>,
    /// How requests are spread over several URLs.
    pub url_strategy: canary_replay::Balance,
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
    /// The client certificate and key presented to a server asking for one (mutual TLS).
    pub client_identity: Option<canary_replay::ClientIdentity>,
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
    /// The trace; `None` for a synthetic load ([`Workload::synthetic`]).
    pub trace: Option<TraceSource>,
    /// The 1-based line of its `trace` key, for errors found loading the trace.
    pub trace_line: Option<usize>,
    /// The 1-based line of its `every` key (else of its table, for `cron`), for what is found
    /// about its schedule once the trace is loaded ([`run_length`]).
    pub schedule_line: Option<usize>,
    /// The 1-based line of its sweep's list of points, when it is a sweep.
    pub sweep_line: Option<usize>,
    /// Synthetic requests at a rate or from a closed loop of users, when there is no trace.
    pub synthetic: Option<shape::Synthetic>,
    /// Requests cancelled on purpose.
    pub cancellation: Option<canary_replay::Cancellation>,
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
    /// What a tick does when the previous run is still going.
    pub on_overrun: cadence::OnOverrun,
    /// SLOs (aiperf goodput syntax).
    pub slos: Goodput,
    /// With SLOs: the run fails below this good-request fraction.
    pub min_good_fraction: f64,
    /// The run fails above this error rate.
    pub max_error_rate: f64,
    /// After a stop, in-flight requests get this long.
    pub grace_period: Duration,
    /// `run_deadline`, when given; else each run's is derived ([`crate::run_deadline`]).
    pub run_deadline: Option<Duration>,
    /// Each run reported in slices of this duration (`timeslices`), when set.
    pub slice_duration: Option<Duration>,
    /// `tokenizer.json` of the target model.
    pub tokenizer: Option<PathBuf>,
    /// Prompt seed.
    pub prompt_seed: u64,
    /// The wall-clock instant each run's schedule starts at, and the lateness allowed.
    pub start_at: Option<canary_replay::StartAt>,
    /// `kind = "capacity"`: each run is a capacity search from `request_rate`.
    pub capacity: Option<CapacitySearch>,
    /// `synthesis_*`: the trace transformed as `canaryd synthesize` would, before selection.
    pub synthesis: Option<canary_replay::trace::Synthesis>,
    /// `kind = "sweep"`: each run is a sweep of one axis.
    pub sweep: Option<SweepSpec>,
}

/// A `kind = "sweep"` workload's series: each run is a run of the workload's load per
/// value of one axis (as `canaryd sweep`), in the order given, `cooldown` apart; its knee
/// (and, over request rates with SLOs, its capacity at the SLO) is compared with the last
/// passing runs' (`crate::judge::knee`).
#[derive(Debug, Clone, PartialEq)]
pub struct SweepSpec {
    /// What varies.
    pub axis: crate::cli::sweep::point::Axis,
    /// Its values, in run order.
    pub values: Vec<f64>,
    /// Pause between points.
    pub cooldown: Duration,
    /// GPUs serving the target, when not measured.
    pub gpus: Option<u64>,
    /// Fail when the knee lies below the baseline's lower end by more than this share of it.
    pub tolerance: f64,
}

/// A `kind = "capacity"` workload's search: each run probes open-loop rates (each probe a
/// full run of the workload's synthetic load, `benchmark_duration` or `request_count` long,
/// judged by its `slos`, `min_good_fraction` and `max_error_rate`), bracketing then
/// bisecting, and its answer is compared with the capacity of the last passing runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacitySearch {
    /// Most probes per run.
    pub max_probes: usize,
    /// Stop when the bracket is narrower than this share of its passing end.
    pub precision: f64,
    /// The lowest rate tried.
    pub min_rate: f64,
    /// Fail when the capacity's bracket lies below the baseline's lower end by more than
    /// this share of it.
    pub tolerance: f64,
}

pub mod cadence;
pub(crate) mod duration;
mod otlp;
mod plan;
pub mod raw;
mod recover;
pub mod run_length;
pub(crate) mod shape;
pub(crate) mod size;
mod state_dir;
mod validate;
pub(crate) use validate::state_directory_given;

pub use otlp::{Otlp, OtlpHeader};
pub use plan::WorkloadPlan;
pub use shape::Synthetic;

impl Config {
    /// What is valid but will not work on this host yet (trace files or key files missing,
    /// key variables unset), or works less well than the file suggests (a retention that
    /// caps the baseline).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.load_warnings.clone();
        if let Ok(Some(w)) = state_dir::check(&self.state_dir) {
            out.push(w);
        }
        out.extend(validate::baseline_warning(&self.baseline));
        if self.retention_runs < self.baseline.runs {
            out.push(format!(
                "export.retention_runs ({}) is below baseline.runs ({}): baselines hold at most {} runs",
                self.retention_runs, self.baseline.runs, self.retention_runs
            ));
        }
        for w in &self.workloads {
            if let Some(TraceSource::File(path, _)) = &w.trace {
                if !path.exists() {
                    out.push(format!(
                        "workloads.{}.trace: {} does not exist (its runs will be errors until it does)",
                        w.name,
                        path.display()
                    ));
                }
            }
        }
        for w in &self.workloads {
            let stop = w.grace_period.saturating_add(self.otlp.flush_timeout);
            if stop > STOP_WITHIN {
                out.push(format!(
                    "workloads.{}.grace_period: {} plus otlp.flush_timeout {} is {}, over {}: \
                     a stop may then outlast the shipped systemd unit's TimeoutStopSec=90s (or \
                     a Kubernetes terminationGracePeriodSeconds of 90), and the run killed \
                     mid-stop loses its summary (recovered at the next start as `no verdict.json`); \
                     shorten them, or raise those limits past the sum",
                    w.name,
                    seconds(w.grace_period),
                    seconds(self.otlp.flush_timeout),
                    seconds(stop),
                    seconds(STOP_WITHIN),
                ));
            }
        }
        for t in self.targets.values() {
            match &t.api_key {
                Some(ApiKeySource::Env(var)) if std::env::var_os(var).is_none() => {
                    out.push(format!(
                        "targets.{}.api_key_env: {} is not set here",
                        t.name,
                        variable(var)
                    ))
                }
                Some(ApiKeySource::File(path)) if !path.exists() => out.push(format!(
                    "targets.{}.api_key_file: {}",
                    t.name,
                    missing_secret_file(path)
                )),
                _ => {}
            }
        }
        for (name, h) in &self.otlp.headers {
            match h {
                OtlpHeader::Env(var, _) if std::env::var_os(var).is_none() => out.push(format!(
                    "otlp.headers.{name}: {} is not set here (OTLP export stays off unless it is set when canaryd starts)",
                    variable(var)
                )),
                OtlpHeader::File(path, _) if !path.exists() => out.push(format!(
                    "otlp.headers.{name}: {} (OTLP export stays off unless it exists when canaryd starts)",
                    missing_secret_file(path)
                )),
                _ => {}
            }
        }
        out
    }

    /// Reads and validates `path`. Relative paths inside the file are taken from its folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let unreadable = |e: &dyn std::fmt::Display| ConfigError {
            file: path.to_path_buf(),
            line: None,
            message: format!("cannot read: {e}"),
            more: Vec::new(),
        };
        // Bounded, and a regular file only: `/dev/zero` filled memory, a FIFO hung.
        let bytes =
            canary_files::read_small_file(path, MAX_CONFIG_BYTES).map_err(|e| unreadable(&e))?;
        let text =
            String::from_utf8(bytes).map_err(|e| not_utf8(path, e.as_bytes(), e.utf8_error()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let c = Config::parse(&text, path, base)?;
        // Here, not in `parse`: it looks at the file system (and a test's text is no file).
        if let Err(why) = state_dir::check(&c.state_dir) {
            return Err(ConfigError {
                file: path.to_path_buf(),
                line: key_line(&text, "state_dir"),
                message: format!("state_dir: {} {why}", c.state_dir.display()),
                more: Vec::new(),
            });
        }
        Ok(c)
    }

    /// Validates `text` (read from `file`, for messages); relative paths are joined to `base`.
    /// Every error of the file is reported at once: a key or value that does not parse in
    /// one workload or target does not hide the others' (see `recover`).
    pub fn parse(text: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
        let src = validate::Source { text, file, base };
        match toml::from_str::<raw::File>(text) {
            Ok(raw) => validate::validate(raw, &src, &recover::Dropped::default()),
            Err(e) => Err(recover::every_error(e, &src)),
        }
    }
}

/// `url` for messages: no user info, query or fragment (any of them may hold a secret).
pub use canary_core::redact_url;

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

/// A secret's variable, for a message: its name, unless it looks like a key itself (a key
/// pasted where its variable's name was due), which is not shown.
pub(crate) fn variable(name: &str) -> String {
    match canary_replay::looks_like_a_key(name) {
        false => name.to_string(),
        true => format!("the variable {}", canary_replay::NAME_NOT_SHOWN),
    }
}

/// A secret's file that does not exist, for a warning: its path, unless its name looks like a
/// key itself (a key pasted where its file's path was due), which is not shown.
fn missing_secret_file(path: &std::path::Path) -> String {
    match canary_replay::key_path_shown(path) {
        Some(shown) => format!("{shown} does not exist"),
        None => format!("the file does not exist {}", canary_replay::NAME_NOT_SHOWN),
    }
}

/// How long a stop (a workload's grace period, then the OTLP flush) may take and still end
/// before systemd's `TimeoutStopSec=90s` in the shipped unit (and a Kubernetes pod's
/// `terminationGracePeriodSeconds: 90`) kills the daemon, leaving 10 s for the rest.
const STOP_WITHIN: Duration = Duration::from_secs(80);

/// `d` in seconds for a message: `95 s`, `80.5 s`.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    match s.fract() == 0.0 {
        true => format!("{s:.0} s"),
        false => format!("{s:.1} s"),
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

/// The 1-based line where the top-level `key` is set, if it is.
fn key_line(text: &str, key: &str) -> Option<usize> {
    let at = text.lines().position(|l| {
        l.trim_start()
            .strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    })?;
    Some(at + 1)
}

/// A config that is not UTF-8, named by the line and column (in characters) of its first
/// invalid byte, as its other errors are, not by a byte index.
fn not_utf8(file: &Path, bytes: &[u8], e: std::str::Utf8Error) -> ConfigError {
    let valid = &bytes[..e.valid_up_to()];
    let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    // The bytes before it are valid UTF-8: counted as characters.
    let column = String::from_utf8_lossy(&valid[line_start..])
        .chars()
        .count()
        + 1;
    ConfigError {
        file: file.to_path_buf(),
        line: Some(valid.iter().filter(|&&b| b == b'\n').count() + 1),
        message: format!("not UTF-8: an invalid byte at column {column} (save the file as UTF-8)"),
        more: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
