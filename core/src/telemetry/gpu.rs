//! [`RunGpuSummary`]: what the GPUs did over one run, for `summary.json`'s `gpu` section —
//! utilization, power and energy, and the cheap run-level figures of the other sampled fields
//! (memory, temperature, clock throttle reasons, the server process's utilization), overall
//! and per GPU. The telemetry crate computes it from NVML and DCGM samples.

use serde::Serialize;

/// Where a GPU sample came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuSource {
    /// NVML, in this process.
    Nvml,
    /// dcgm-exporter's `/metrics`.
    Dcgm,
}

/// How a run's energy was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergyMethod {
    /// From the GPUs' cumulative energy counters.
    Counter,
    /// By integrating power over time (no counter available).
    PowerIntegral,
    /// Counters for some GPUs, power for others.
    Mixed,
}

/// Energy used by the GPUs during a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunEnergy {
    /// Joules, all GPUs together.
    pub joules: f64,
    /// How it was obtained.
    pub method: EnergyMethod,
    /// GPUs that contributed.
    pub gpus: usize,
}

impl RunEnergy {
    /// Joules per output token; `None` for zero tokens.
    pub fn per_token(&self, output_tokens: u64) -> Option<f64> {
        (output_tokens > 0).then(|| self.joules / output_tokens as f64)
    }
}

/// One GPU, or one MIG instance of a GPU, over a run.
///
/// A GPU in MIG mode (seen through dcgm-exporter) has an entry of its own for its GPU-wide
/// figures (power, energy, temperature, clocks, throttle reasons) and one per GPU instance for
/// that instance's own (its memory, its utilization where the exporter gives one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuRunStats {
    /// The source its figures come from.
    pub source: GpuSource,
    /// Its index in that source (an instance's is its GPU's).
    pub gpu: u32,
    /// The MIG GPU instance (DCGM's `GPU_I_ID`) these figures are of; `None` for a whole GPU.
    pub gpu_instance: Option<u32>,
    /// The instance's MIG profile (`GPU_I_PROFILE`, e.g. `2g.20gb`).
    pub gpu_instance_profile: Option<String>,
    /// `GPU-…` UUID (an instance's is its GPU's).
    pub uuid: Option<String>,
    /// Product name.
    pub model_name: Option<String>,
    /// Samples used (the one in force at the start, then those in the run).
    pub samples: usize,
    /// Mean GPU utilization, percent.
    pub util_avg_pct: Option<f64>,
    /// Mean power, watts.
    pub power_avg_w: Option<f64>,
    /// Energy over the run, joules.
    pub energy_j: Option<f64>,
    /// Most framebuffer memory in use, bytes (an instance's: its own memory).
    pub mem_used_max_bytes: Option<u64>,
    /// Framebuffer memory in total, bytes (an instance's: the memory its profile has).
    pub mem_total_bytes: Option<u64>,
    /// Highest temperature, °C.
    pub temp_max_c: Option<f64>,
    /// Every throttle reason seen (the OR of the masks), by name.
    pub throttle_reasons: Vec<String>,
    /// Mean SM utilization of the server process (`--server-pid`), percent.
    pub process_sm_util_avg_pct: Option<f64>,
    /// Lowest SM clock read, MHz: an upper bound on the run's lowest (each sample is the
    /// clock at its instant; it may have dipped lower between samples). Far below
    /// [`GpuRunStats::sm_clock_avg_mhz`], the clock was pulled down: see `throttle_reasons`.
    pub sm_clock_min_mhz: Option<f64>,
    /// Mean of the SM clock's readings, MHz: an estimate of its mean over the run.
    pub sm_clock_avg_mhz: Option<f64>,
    /// Mean of the memory clock's readings, MHz: an estimate.
    pub mem_clock_avg_mhz: Option<f64>,
    /// Mean memory utilization (NVML's percent of time device memory was read or written over
    /// the driver's last sample period; DCGM's `DCGM_FI_DEV_MEM_COPY_UTIL`), percent: an
    /// estimate over the run.
    pub util_mem_avg_pct: Option<f64>,
    /// Highest memory utilization read, percent: a lower bound on the run's highest.
    pub util_mem_max_pct: Option<f64>,
}

/// The GPUs over a run: `summary.json`'s `gpu` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunGpuSummary {
    /// Mean GPU utilization over all GPUs' samples, percent.
    pub util_avg_pct: Option<f64>,
    /// Highest utilization of one GPU, percent.
    pub util_max_pct: Option<f64>,
    /// Mean power per GPU sample, watts.
    pub power_avg_w: Option<f64>,
    /// Highest power of one GPU, watts.
    pub power_max_w: Option<f64>,
    /// Energy of all GPUs, and how it was obtained.
    pub energy: Option<RunEnergy>,
    /// Joules per output token of the run.
    pub energy_per_output_token_j: Option<f64>,
    /// GPUs summarized (each once: NVML's figures where NVML and DCGM both see it; a GPU in
    /// MIG mode once, however many instances it has).
    pub gpus: usize,
    /// The sources the figures come from.
    pub sources: Vec<GpuSource>,
    /// Most framebuffer memory one GPU (or one MIG instance) had in use, bytes.
    pub mem_used_max_bytes: Option<u64>,
    /// The same as a share of that GPU's (or instance's) memory, percent (the highest over
    /// GPUs and instances).
    pub mem_used_max_pct: Option<f64>,
    /// Highest temperature of one GPU, °C.
    pub temp_max_c: Option<f64>,
    /// Every clock throttle reason any GPU reported during the run, by name (NVML's
    /// `nvmlClocksEventReason*`; `gpu_idle` means the GPU had nothing to do); empty when none
    /// was, `null` when no source reports them.
    pub throttle_reasons: Option<Vec<String>>,
    /// Mean SM utilization of the server process over its GPUs' samples, percent; only with
    /// `--server-pid` (NVML).
    pub process_sm_util_avg_pct: Option<f64>,
    /// Highest SM utilization of the server process on one GPU, percent.
    pub process_sm_util_max_pct: Option<f64>,
    /// Mean memory utilization of the server process, percent.
    pub process_mem_util_avg_pct: Option<f64>,
    /// Lowest SM clock of one GPU over its samples, MHz: an upper bound on the lowest (each
    /// sample is the clock at its instant). Far below `sm_clock_avg_mhz`, some GPU's clock was
    /// pulled down: `throttle_reasons` says why.
    pub sm_clock_min_mhz: Option<f64>,
    /// Mean SM clock over all GPUs' samples, MHz: an estimate (readings at sample instants).
    pub sm_clock_avg_mhz: Option<f64>,
    /// Mean memory clock over all GPUs' samples, MHz: an estimate.
    pub mem_clock_avg_mhz: Option<f64>,
    /// Mean memory utilization over all GPUs' samples (percent of time device memory was read
    /// or written, over the driver's sample period before each read), percent: an estimate.
    pub util_mem_avg_pct: Option<f64>,
    /// Highest memory utilization of one GPU read, percent: a lower bound on the highest.
    pub util_mem_max_pct: Option<f64>,
    /// Each GPU, in source then index order, a GPU in MIG mode followed by its instances.
    pub per_gpu: Vec<GpuRunStats>,
}
