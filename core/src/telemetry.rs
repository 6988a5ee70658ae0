//! What the other sources saw during a run, typed: the server's own figures from its
//! `/metrics`, the GPUs', the kernel's socket timing, and the state of each source.
//!
//! Observers fill a [`RunTelemetry`] when a run ends ([`crate::Observer::finish`]); the run
//! carries it in [`crate::RunOutcome`], and it is serialized only where it leaves the process
//! (`summary.json`, the status API, OTLP). Its keys in `summary.json` are `server`, `gpu`,
//! `kernel`, `client_cpu`, `context` and `telemetry_sources`, each absent when no observer
//! filled it. The time series ([`RunSeries`]) stay in the process.

mod client;
mod comparison;
mod gpu;
mod kernel;
mod series;
mod server;

pub use client::ClientCpu;
pub use comparison::{ClientMinusServer, ClientTimes, Comparison, GapKind, GapRange};
pub use gpu::{EnergyMethod, GpuRunStats, GpuSource, RunEnergy, RunGpuSummary};
pub use kernel::{KernelProgramStats, KernelRunSummary};
pub use series::{bounded_gpu, bounded_server, GpuPoint, RunSeries, ServerPoint, Window};
pub use server::{BucketQuantile, Engine, GaugeStats, LatencyEstimate, RunServerSummary};

use crate::context::RunContext;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A run's telemetry sections.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunTelemetry {
    /// What the GPUs did (`gpu`): absent without a GPU sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<RunGpuSummary>,
    /// Kernel socket timing (`kernel`): absent when eBPF did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelRunSummary>,
    /// What the server's `/metrics` said (`server`): absent when it was not scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<RunServerSummary>,
    /// canaryd's own process (`client_cpu`): absent where it cannot be measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu: Option<ClientCpu>,
    /// What the run ran on and against (`context`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<RunContext>,
    /// The server's and the GPUs' time series, for the diagnosis (not serialized).
    #[serde(skip)]
    pub series: RunSeries,
    /// Each source's state (`telemetry_sources`): absent when no telemetry was attached.
    #[serde(
        rename = "telemetry_sources",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub sources: BTreeMap<Source, SourceState>,
}

impl RunTelemetry {
    /// Adds what another observer contributed: a section already filled stays, source
    /// states are added.
    pub fn merge(&mut self, other: RunTelemetry) {
        self.gpu = self.gpu.take().or(other.gpu);
        self.kernel = self.kernel.take().or(other.kernel);
        self.server = self.server.take().or(other.server);
        self.client_cpu = self.client_cpu.take().or(other.client_cpu);
        self.context = match (self.context.take(), other.context) {
            (Some(mut a), Some(b)) => {
                a.merge(b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
        if self.series.server.is_empty() {
            self.series.server = other.series.server;
        }
        if self.series.gpu.is_empty() {
            self.series.gpu = other.series.gpu;
        }
        self.sources.extend(other.sources);
    }

    /// The state of `source`, when some observer reported it.
    pub fn source(&self, source: Source) -> Option<&SourceState> {
        self.sources.get(&source)
    }
}

/// A telemetry source. Declared in the order `summary.json` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// dcgm-exporter's `/metrics`.
    Dcgm,
    /// Kernel socket timing (eBPF).
    Ebpf,
    /// NVML, in this process.
    Nvml,
    /// The inference server's own `/metrics`.
    ServerMetrics,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 4] = [
        Source::Dcgm,
        Source::Ebpf,
        Source::Nvml,
        Source::ServerMetrics,
    ];

    /// The name `summary.json` and the status API use.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Dcgm => "dcgm",
            Source::Ebpf => "ebpf",
            Source::Nvml => "nvml",
            Source::ServerMetrics => "server_metrics",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a telemetry source works on this host, and why not: the one answer shared by the
/// samplers (which report it once and carry on) and `canaryd doctor` (which prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SourceState {
    /// Not tried yet (a scraper before its first attempt).
    Pending,
    /// Working; `detail` says what was found ("2 GPUs: NVIDIA H100 …", "engine vllm").
    Available {
        /// What was found.
        detail: String,
    },
    /// Not working; `reason` says why (no library, connection refused, …). Samplers keep
    /// retrying where retrying can help.
    Unavailable {
        /// Why, in words, with the endpoint or path.
        reason: String,
    },
    /// Turned off in the configuration.
    Disabled,
}

impl SourceState {
    /// Shorthand for [`SourceState::Available`].
    pub fn available(detail: impl Into<String>) -> SourceState {
        SourceState::Available {
            detail: detail.into(),
        }
    }

    /// Shorthand for [`SourceState::Unavailable`].
    pub fn unavailable(reason: impl Into<String>) -> SourceState {
        SourceState::Unavailable {
            reason: reason.into(),
        }
    }

    /// True for [`SourceState::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, SourceState::Available { .. })
    }

    /// The state's name, as serialized: `pending`, `available`, `unavailable`, `disabled`.
    pub fn name(&self) -> &'static str {
        match self {
            SourceState::Pending => "pending",
            SourceState::Available { .. } => "available",
            SourceState::Unavailable { .. } => "unavailable",
            SourceState::Disabled => "disabled",
        }
    }

    /// The same state with its text passed through `f` (to redact URLs, say).
    pub fn map_text(self, f: impl Fn(&str) -> String) -> SourceState {
        match self {
            SourceState::Available { detail } => SourceState::available(f(&detail)),
            SourceState::Unavailable { reason } => SourceState::unavailable(f(&reason)),
            other => other,
        }
    }
}

impl fmt::Display for SourceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceState::Pending => f.write_str("not tried yet"),
            SourceState::Available { detail } => write!(f, "available: {detail}"),
            SourceState::Unavailable { reason } => write!(f, "unavailable: {reason}"),
            SourceState::Disabled => f.write_str("disabled"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_serialize_under_their_summary_keys_in_order() {
        let mut t = RunTelemetry::default();
        assert_eq!(serde_json::to_string(&t).unwrap(), "{}");
        for s in Source::ALL.into_iter().rev() {
            t.sources.insert(s, SourceState::Disabled);
        }
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(
            json,
            r#"{"telemetry_sources":{"dcgm":{"state":"disabled"},"ebpf":{"state":"disabled"},"nvml":{"state":"disabled"},"server_metrics":{"state":"disabled"}}}"#
        );
        for s in Source::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn merging_keeps_filled_sections_and_adds_states() {
        let mut a = RunTelemetry::default();
        a.sources.insert(Source::Nvml, SourceState::Disabled);
        let mut b = RunTelemetry {
            server: Some(RunServerSummary::default()),
            ..Default::default()
        };
        b.sources
            .insert(Source::Ebpf, SourceState::unavailable("no BTF"));
        a.merge(b);
        assert!(a.server.is_some());
        assert_eq!(a.sources.len(), 2);
        assert_eq!(a.source(Source::Ebpf).unwrap().name(), "unavailable");
    }

    #[test]
    fn states_read_back_as_written() {
        let s = SourceState::unavailable("no libnvidia-ml.so");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<SourceState>(&json).unwrap(), s);
    }
}
