//! [`Setting`]: the settings of a plan by the library's own names, so an error says which one
//! is wrong and each front end says it in its own words: `--concurrency` on the command line,
//! `workloads.chat.concurrency` in the daemon's config file.

use std::fmt;

/// A setting of a [`Plan`](crate::Plan), named as the library knows it. Its
/// [`name`](Setting::name) is the daemon's config key; the command line's flag is mostly the
/// same name in kebab case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Setting {
    /// The trace-time divisor.
    Speedup,
    /// The in-flight ceiling.
    Concurrency,
    /// The longest input or output a row may ask for, in tokens.
    LengthLimit,
    /// The length scale factor.
    ScaleLengths,
    /// The per-request timeout.
    RequestTimeout,
    /// The connect timeout.
    ConnectTimeout,
    /// The response-head cap.
    MaxHeaderBytes,
    /// The SSE event cap.
    MaxEventBytes,
    /// The cap on bytes every response in flight holds together.
    MaxHeldBytes,
    /// The non-streaming body cap.
    MaxBodyBytes,
    /// The token-chunk cap, as a multiple of `max_tokens`.
    MaxOutputRatio,
    /// Extra request headers.
    Headers,
    /// The PEM bundle of extra trust anchors (the target's and its `https` metrics').
    CaBundle,
    /// The client certificate (PEM chain) presented to servers asking for one.
    ClientCert,
    /// Its private key (PEM).
    ClientKey,
    /// Fields merged into every request body.
    ExtraInputs,
    /// The file holding the API key.
    ApiKeyFile,
    /// The variable holding the API key.
    ApiKeyEnv,
    /// Requests per second of an open-loop rate.
    RequestRate,
    /// The gamma shape of arrival gaps.
    ArrivalSmoothness,
    /// Mean synthetic input length.
    Isl,
    /// Its standard deviation.
    IslStddev,
    /// Mean synthetic output length.
    Osl,
    /// Its standard deviation.
    OslStddev,
    /// Tokens of the prefix every synthetic request shares.
    SharedPrefix,
    /// Synthetic requests to send.
    RequestCount,
    /// Requests sent before the measured phase.
    WarmupRequests,
    /// The most requests of a trace's window to replay.
    MaxRequests,
    /// How long to send synthetic requests.
    BenchmarkDuration,
    /// Percentage of requests cancelled on purpose.
    RequestCancellationRate,
    /// Time from sending a cancelled request to closing it.
    RequestCancellationDelay,
    /// The wall-clock instant the schedule starts at (shared by shards).
    StartAt,
    /// How late a run may begin after that instant.
    MaxLateStart,
    /// The duration of the run's timeslices.
    SliceDuration,
    /// The SLOs goodput is judged against.
    Goodput,
    // Trace synthesis on the fly (aiperf's `--synthesis-*`).
    /// Trace-time divisor applied by synthesis (on top of `speedup`).
    SynthesisSpeedupRatio,
    /// Shared-prefix length multiplier.
    SynthesisPrefixLenMultiplier,
    /// Prefix-root multiplier.
    SynthesisPrefixRootMultiplier,
    /// Unique-prompt length multiplier.
    SynthesisPromptLenMultiplier,
    /// Input length cap of synthesis.
    SynthesisMaxIsl,
    /// Output length cap of synthesis.
    SynthesisMaxOsl,
}

/// Which part of a daemon config a setting sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `[workloads.NAME]`: what to replay and how.
    Workload,
    /// `[targets.NAME]`: the server.
    Target,
}

impl Setting {
    /// The library's name for it (the daemon's config key).
    pub fn name(self) -> &'static str {
        match self {
            Setting::Speedup => "speedup",
            Setting::Concurrency => "concurrency",
            Setting::LengthLimit => "length_limit",
            Setting::ScaleLengths => "scale_lengths",
            Setting::RequestTimeout => "request_timeout",
            Setting::ConnectTimeout => "connect_timeout",
            Setting::MaxHeaderBytes => "max_header_bytes",
            Setting::MaxEventBytes => "max_event_bytes",
            Setting::MaxHeldBytes => "max_held_bytes",
            Setting::MaxBodyBytes => "max_body_bytes",
            Setting::MaxOutputRatio => "max_output_ratio",
            Setting::Headers => "headers",
            Setting::CaBundle => "ca_bundle",
            Setting::ClientCert => "client_cert",
            Setting::ClientKey => "client_key",
            Setting::ExtraInputs => "extra_inputs",
            Setting::ApiKeyFile => "api_key_file",
            Setting::ApiKeyEnv => "api_key_env",
            Setting::RequestRate => "request_rate",
            Setting::ArrivalSmoothness => "arrival_smoothness",
            Setting::Isl => "isl",
            Setting::IslStddev => "isl_stddev",
            Setting::Osl => "osl",
            Setting::OslStddev => "osl_stddev",
            Setting::SharedPrefix => "shared_system_prompt_length",
            Setting::RequestCount => "request_count",
            Setting::WarmupRequests => "warmup_requests",
            Setting::MaxRequests => "max_requests",
            Setting::BenchmarkDuration => "benchmark_duration",
            Setting::RequestCancellationRate => "request_cancellation_rate",
            Setting::RequestCancellationDelay => "request_cancellation_delay",
            Setting::StartAt => "start_at",
            Setting::MaxLateStart => "max_late_start",
            Setting::SliceDuration => "slice_duration",
            Setting::Goodput => "slos",
            Setting::SynthesisSpeedupRatio => "synthesis_speedup_ratio",
            Setting::SynthesisPrefixLenMultiplier => "synthesis_prefix_len_multiplier",
            Setting::SynthesisPrefixRootMultiplier => "synthesis_prefix_root_multiplier",
            Setting::SynthesisPromptLenMultiplier => "synthesis_prompt_len_multiplier",
            Setting::SynthesisMaxIsl => "synthesis_max_isl",
            Setting::SynthesisMaxOsl => "synthesis_max_osl",
        }
    }

    /// Where the daemon's config keeps it.
    pub fn table(self) -> Table {
        match self {
            Setting::Speedup
            | Setting::Concurrency
            | Setting::LengthLimit
            | Setting::ScaleLengths
            | Setting::RequestRate
            | Setting::ArrivalSmoothness
            | Setting::Isl
            | Setting::IslStddev
            | Setting::Osl
            | Setting::OslStddev
            | Setting::SharedPrefix
            | Setting::RequestCount
            | Setting::WarmupRequests
            | Setting::MaxRequests
            | Setting::BenchmarkDuration
            | Setting::RequestCancellationRate
            | Setting::RequestCancellationDelay
            | Setting::StartAt
            | Setting::MaxLateStart
            | Setting::SliceDuration
            | Setting::Goodput
            | Setting::SynthesisSpeedupRatio
            | Setting::SynthesisPrefixLenMultiplier
            | Setting::SynthesisPrefixRootMultiplier
            | Setting::SynthesisPromptLenMultiplier
            | Setting::SynthesisMaxIsl
            | Setting::SynthesisMaxOsl => Table::Workload,
            _ => Table::Target,
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A setting that cannot be used: which, the value when it may be shown (never a secret),
/// and why. [`SettingError::spelled`] puts it in a front end's words.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.spelled(setting.name()))]
pub struct SettingError {
    /// The setting.
    pub setting: Setting,
    /// Its value, shown after its name (`1e-12`, a key file's path); never a key or header.
    pub value: Option<String>,
    /// What is wrong.
    pub reason: String,
    /// The cause, when an I/O error was it (a key file that cannot be read).
    #[source]
    pub source: Option<std::io::Error>,
}

impl SettingError {
    /// `setting` is wrong because of `reason`.
    pub fn new(setting: Setting, reason: impl Into<String>) -> SettingError {
        SettingError {
            setting,
            value: None,
            reason: reason.into(),
            source: None,
        }
    }

    /// The same error, showing `value` after the setting's name.
    pub fn with_value(mut self, value: impl fmt::Display) -> SettingError {
        self.value = Some(value.to_string());
        self
    }

    /// The message with the setting called `name`: `"{name} {value}: {reason}"` (the cause,
    /// if any, is the error's source).
    pub fn spelled(&self, name: &str) -> String {
        match &self.value {
            Some(v) => format!("{name} {v}: {}", self.reason),
            None => format!("{name}: {}", self.reason),
        }
    }
}
