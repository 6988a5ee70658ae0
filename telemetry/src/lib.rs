//! GPU and inference-server telemetry for canaryd, on the same clock as request records.
//!
//! Every sample is stamped with [`canary_core::MonoTime`] (CLOCK_MONOTONIC, ns), so the daemon
//! can join it to requests by time: GPU utilization and power during a request, the server's
//! queue depth and KV-cache usage when it was sent, the energy a run used.
//!
//! Sources, each optional and each able to say why it is off ([`SourceState`], also what
//! `canaryd doctor` prints):
//!
//! - the inference server's `/metrics` (`http://` or `https://`) — [`ServerMetricsScraper`]
//!   parses it with the tolerant [`prometheus`] parser, detects the [`Engine`] (vLLM V0/V1,
//!   SGLang, Dynamo, TGI, llama.cpp) and maps it onto canonical signals ([`ServerSample`]); [`RunServerSummary`] gives the
//!   server's own latency percentiles, token counts and cache behaviour over a run;
//! - NVML in-process — [`NvmlSampler`] through `nvml-wrapper`, one [`GpuSample`] per GPU;
//! - dcgm-exporter — [`DcgmScraper`] maps `DCGM_FI_*` onto the same [`GpuSample`] (one per
//!   GPU, and one per MIG instance of a GPU in MIG mode).
//!
//! Samples live in bounded, time-ordered [`Ring`]s; the `correlate` functions
//! ([`gpu_over_interval`], [`queue_depth_at`], [`energy_over_run`], …) are pure. They take GPU
//! samples of several sources in any order and use one source per GPU (NVML where NVML and
//! DCGM both see it). [`RunGpuSummary`] is a run's `gpu` section: utilization, power, energy,
//! memory, temperature, throttle reasons and the server process's utilization.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use canary_core::MonoTime;
//! use canary_telemetry::{
//!     gpu_over_interval, NvmlConfig, NvmlSampler, ServerMetricsConfig, ServerMetricsScraper,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! let shutdown = CancellationToken::new();
//! let scraper = ServerMetricsScraper::new(ServerMetricsConfig::new("http://127.0.0.1:8000/metrics"))?;
//! let server = scraper.handle();
//! tokio::spawn(scraper.run(shutdown.clone()));
//! let (nvml, nvml_state) = NvmlSampler::open_or_report(NvmlConfig::default());
//! println!("nvml: {nvml_state}");
//! let gpus = nvml.as_ref().map(|n| n.samples());
//! if let Some(n) = nvml {
//!     tokio::spawn(n.run(shutdown.clone()));
//! }
//!
//! let t0 = MonoTime::now();
//! // ... replay the run ...
//! let t1 = MonoTime::now();
//! let _ = server.scrape_now().await; // so the last requests are in the histograms
//! let summary = server.summary(t0, t1);
//! println!("{}", serde_json::to_string(&summary)?);
//! if let Some(ring) = gpus {
//!     let during = gpu_over_interval(&ring.covering(t0, t1), None, t0, t1);
//!     println!("GPU util avg {:?}%", during.util_avg_pct);
//! }
//! shutdown.cancel();
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod client_cpu;
/// The server's context length, one reader for the pre-flight and `summary.json`.
pub mod context_length;
mod correlate;
mod dcgm;
mod engine;
mod gpu;
mod gpu_summary;
mod growth;
mod http;
mod nvml;
mod observer;
/// The Prometheus / OpenMetrics text parser: [`prometheus::parse`] and its types.
pub mod prometheus;
mod ring;
mod scrape;
mod series;
mod server_info;
mod server_summary;
mod source;

pub use client_cpu::ClientCpuObserver;
pub use correlate::{
    energy_over_run, gpu_over_interval, gpu_samples_covering, kv_usage_at, queue_depth_at,
    running_at, server_at, GpuWindow,
};
pub use dcgm::{
    gpu_samples as dcgm_gpu_samples, gpu_samples_cut as dcgm_gpu_samples_cut, probe_dcgm,
    DcgmConfig, DcgmScraper, DEFAULT_DCGM_URL, MAX_GPUS as DCGM_MAX_GPUS,
    MAX_GPU_INSTANCES as DCGM_MAX_GPU_INSTANCES, MAX_LABELS as DCGM_MAX_LABELS,
    MAX_PAGE_BYTES as DCGM_MAX_PAGE_BYTES,
};
pub use engine::{
    counter_delta, BadHistogram, LeftOut, ModelChoice, OutOfRange, ServerRates, ServerSample,
};
pub use gpu::GpuSample;
pub use gpu_summary::{gpu_summary, throttle_reason_names};
pub use growth::{MAX_SERIES, MAX_SERIES_BUCKETS};
pub use http::{default_scrape_timeout, error_chain, OutageLog, ScrapeError, MAX_BODY_BYTES};
pub use nvml::{
    probe_nvml, LostGpus, NvmlConfig, NvmlError, NvmlOpener, NvmlSampler, OpenedNvml,
    OPEN_TIMEOUT as NVML_OPEN_TIMEOUT,
};
pub use observer::{Config, TelemetryObserver};
pub use prometheus::HistogramSnapshot;
pub use ring::{Ring, Stamped};
pub use scrape::{
    probe_server_metrics, ServerMetrics, ServerMetricsConfig, ServerMetricsScraper, SETTLE_STEP,
    SETTLE_TRIES,
};
pub use series::{gpu_series, server_series};
pub use server_summary::{latency_estimate, server_summary};
pub use source::SharedState;
// The run-level types this crate fills live in `canary_core`; re-exported for convenience.
pub use canary_core::{
    EnergyMethod, Engine, GaugeStats, GpuRunStats, GpuSource, LatencyEstimate, RunEnergy,
    RunGpuSummary, RunServerSummary, SourceState,
};
