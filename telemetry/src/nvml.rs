//! NVML sampling through `nvml-wrapper`: one [`GpuSample`] per GPU every interval (default
//! 500 ms), into a bounded ring.
//!
//! Sampling cost, measured on an H200 (driver 580; bench/RESULTS.md, "NVML on a real GPU"): a
//! round over one GPU takes about 3 ms of wall time and of CPU, 2.4 ms of it the energy
//! counter's read, 1.4 ms more with `--server-pid`; the other queries take microseconds. So the
//! energy counter is read at most once every [`SLOW_PERIOD`] (a run's energy interpolates
//! between the counter's readings anyway): a process sampling at 10 ms then used 0.3 CPU-s in
//! 8 s, not 3. `--server-pid`'s per-process query is made on the same rounds: NVML returns
//! every sample of each process since the last query, so a slower query loses none (the
//! reading is their mean). NVIDIA and users report that polling NVML very often slows decode on the sampled
//! GPU; a launch-bound loop showed no effect beyond that machine's noise at 10 ms.
//!
//! Loading: `nvml-wrapper` `dlopen`s the library (the configured path, else
//! `libnvidia-ml.so.1`) and resolves every symbol it knows at once, keeping each lookup's result;
//! a symbol the library lacks fails only the call that needs it
//! (`NvmlError::FailedToLoadSymbol`), so an older driver loses single fields, not the sampler.
//! With no library at all, [`NvmlSampler::open`] fails with the reason and the caller goes on.
//! A run opens it through an [`NvmlOpener`], on a thread of its own with a bounded wait: a
//! wedged driver's `nvmlInit` never returns.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use canary_core::MonoTime;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;
use tokio_util::sync::CancellationToken;

use crate::gpu::GpuSample;
use crate::ring::Ring;
use crate::source::SourceState;
use canary_core::{GpuContext, GpuSource, Known};

mod opener;

pub use opener::{NvmlOpener, OpenedNvml, OPEN_TIMEOUT};

/// Why NVML could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// Loading or initializing the library failed (no driver, no library, no permission).
    #[error("cannot initialize NVML from {lib}")]
    Init {
        /// The library path tried.
        lib: String,
        /// nvml-wrapper's error.
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    /// The library loaded but could not list GPUs.
    #[error("NVML loaded from {lib} but cannot count GPUs")]
    DeviceCount {
        /// The library path.
        lib: String,
        /// nvml-wrapper's error.
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    /// NVML works but sees no GPU.
    #[error("NVML loaded from {lib} but reports no GPU")]
    NoGpu {
        /// The library path.
        lib: String,
    },
}

/// Settings of an [`NvmlSampler`].
#[derive(Debug, Clone)]
pub struct NvmlConfig {
    /// Path of `libnvidia-ml.so`; `None` searches the default (`libnvidia-ml.so.1` via the
    /// dynamic loader).
    pub lib_path: Option<PathBuf>,
    /// Time between samples (default 500 ms).
    pub interval: Duration,
    /// Samples kept (one per GPU per interval; default 57600: 8 GPUs for an hour at 500 ms).
    pub capacity: usize,
    /// The inference server's pid, for per-process utilization (`None`: not collected).
    pub server_pid: Option<u32>,
}

impl Default for NvmlConfig {
    fn default() -> Self {
        NvmlConfig {
            lib_path: None,
            interval: Duration::from_millis(500),
            capacity: 57_600,
            server_pid: None,
        }
    }
}

/// Samples every GPU NVML sees.
pub struct NvmlSampler {
    nvml: Arc<Nvml>,
    count: u32,
    names: Vec<(Option<String>, Option<String>)>,
    last_seen: Vec<u64>,
    config: NvmlConfig,
    ring: Ring<GpuSample>,
    detail: String,
    context: GpuContext,
    lost: LostGpus,
    /// Which GPUs do not answer now: the log says when one stops and when it is back.
    down: Vec<bool>,
    /// Rounds taken, and every how many the slow reads are made (the energy counter, the
    /// server process's utilization).
    rounds: u64,
    slow_every: u64,
}

/// The slow reads (the energy counter, and with `--server-pid` the per-process utilization)
/// are made at least this often, and not more often than once per round nor than the
/// interval allows: every round at intervals of a second or more, every second round at the
/// default 500 ms, every tenth at 100 ms.
const SLOW_PERIOD: Duration = Duration::from_secs(1);

/// GPUs NVML counted that stopped answering at some point (`device_by_index` failing: a
/// GPU fallen off the bus, a driver reset), shared with whoever reports the run.
#[derive(Debug, Clone, Default)]
pub struct LostGpus(Arc<std::sync::Mutex<std::collections::BTreeSet<u32>>>);

impl LostGpus {
    /// The GPUs that stopped answering, by index (whether or not they came back).
    pub fn all(&self) -> Vec<u32> {
        self.lock().iter().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<u32>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for NvmlSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSampler")
            .field("detail", &self.detail)
            .finish_non_exhaustive()
    }
}

impl NvmlSampler {
    /// Loads NVML and lists the GPUs.
    pub fn open(config: NvmlConfig) -> Result<NvmlSampler, NvmlError> {
        let lib = lib_name(&config);
        let mut builder = Nvml::builder();
        if let Some(p) = &config.lib_path {
            builder.lib_path(p.as_os_str());
        }
        let nvml = builder.init().map_err(|source| NvmlError::Init {
            lib: lib.clone(),
            source,
        })?;
        let count = nvml
            .device_count()
            .map_err(|source| NvmlError::DeviceCount {
                lib: lib.clone(),
                source,
            })?;
        if count == 0 {
            return Err(NvmlError::NoGpu { lib });
        }
        let names: Vec<(Option<String>, Option<String>)> = (0..count)
            .map(|i| match nvml.device_by_index(i) {
                Ok(d) => (d.uuid().ok(), d.name().ok()),
                Err(_) => (None, None),
            })
            .collect();
        let driver = nvml.sys_driver_version().unwrap_or_else(|_| "?".into());
        let model = names[0].1.clone().unwrap_or_else(|| "unknown".into());
        let detail = format!("{count} GPU(s), {model}, driver {driver} ({lib})");
        let context = gpu_context(&nvml, count, &names);
        let config_interval = config.interval;
        Ok(NvmlSampler {
            nvml: Arc::new(nvml),
            count,
            names,
            last_seen: vec![0; count as usize],
            ring: Ring::new(config.capacity),
            config,
            detail,
            context,
            lost: LostGpus::default(),
            down: vec![false; count as usize],
            rounds: 0,
            slow_every: slow_every(config_interval),
        })
    }

    /// The GPUs that stopped answering (clones share the set).
    pub fn lost(&self) -> LostGpus {
        self.lost.clone()
    }

    /// The GPUs as NVML describes them, for `summary.json`'s `context.gpu`.
    pub fn context(&self) -> &GpuContext {
        &self.context
    }

    /// Opens NVML or says why not, logging an unavailable NVML once at `warn`. On the calling
    /// thread, which a wedged driver hangs: a run opens it through an [`NvmlOpener`].
    pub fn open_or_report(config: NvmlConfig) -> (Option<NvmlSampler>, SourceState) {
        match NvmlSampler::open(config) {
            Ok(s) => {
                let state = SourceState::available(s.detail.clone());
                (Some(s), state)
            }
            Err(e) => {
                let reason = crate::http::error_chain(&e);
                warn_unavailable(&reason);
                (None, SourceState::unavailable(reason))
            }
        }
    }

    /// What was found ("2 GPU(s), NVIDIA H100 …, driver …").
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The ring the samples go to (clones share it).
    pub fn samples(&self) -> Ring<GpuSample> {
        self.ring.clone()
    }

    /// Reads every GPU now, pushes the samples into the ring and returns them. Fields a GPU
    /// does not support stay `None`.
    pub fn sample_now(&mut self) -> Vec<GpuSample> {
        let mut out = Vec::with_capacity(self.count as usize);
        // The energy counter and `--server-pid`'s per-process query: the slow reads.
        let read_slow = self.rounds % self.slow_every == 0;
        self.rounds += 1;
        for i in 0..self.count {
            let d = match self.nvml.device_by_index(i) {
                Ok(d) => {
                    if std::mem::replace(&mut self.down[i as usize], false) {
                        tracing::info!(gpu = i, "NVML: the GPU answers again");
                    }
                    d
                }
                Err(e) => {
                    if !std::mem::replace(&mut self.down[i as usize], true) {
                        self.lost.lock().insert(i);
                        tracing::warn!(gpu = i, error = %e, "NVML: a GPU stopped answering; its samples stop until it does");
                    }
                    continue;
                }
            };
            let mut g = GpuSample::new(MonoTime::now(), GpuSource::Nvml, i);
            (g.uuid, g.model_name) = self.names[i as usize].clone();
            if let Ok(u) = d.utilization_rates() {
                g.util_gpu_pct = Some(u.gpu as f64);
                g.util_mem_pct = Some(u.memory as f64);
            }
            if let Ok(m) = d.memory_info() {
                g.mem_used_bytes = Some(m.used);
                g.mem_total_bytes = Some(m.total);
            }
            g.power_w = d.power_usage().ok().map(|mw| mw as f64 / 1000.0);
            if read_slow {
                g.energy_j = d
                    .total_energy_consumption()
                    .ok()
                    .map(|mj| mj as f64 / 1000.0);
            }
            g.temp_c = d.temperature(TemperatureSensor::Gpu).ok().map(f64::from);
            g.sm_clock_mhz = d.clock_info(Clock::SM).ok().map(f64::from);
            g.mem_clock_mhz = d.clock_info(Clock::Memory).ok().map(f64::from);
            g.throttle_reasons = d.current_throttle_reasons().ok().map(|r| r.bits());
            // PCIe throughput is not read: NVML counts it over a 20 ms window that each read
            // waits out, so the two reads made a round on an H200 take 53 ms instead of 3, and
            // 8 GPUs' rounds most of the 500 ms interval; no output carried the figures.
            if let (Some(pid), true) = (self.config.server_pid, read_slow) {
                let seen = &mut self.last_seen[i as usize];
                if let Ok(procs) = d.process_utilization_stats(*seen) {
                    *seen = procs.iter().map(|p| p.timestamp).max().unwrap_or(*seen);
                    // NVML returns every sample it took of each process since `seen` (one per
                    // driver period, each over an equal share of the time): their mean is the
                    // process's utilization since the last query, the span this reading
                    // stands for; the first alone was only the oldest period's.
                    let mine = || procs.iter().filter(|p| p.pid == pid);
                    g.process_sm_util_pct = mean(mine().map(|p| f64::from(p.sm_util)));
                    g.process_mem_util_pct = mean(mine().map(|p| f64::from(p.mem_util)));
                }
            }
            self.ring.push(g.clone());
            out.push(g);
        }
        out
    }

    /// Samples every interval until `shutdown`. NVML calls block, so each round runs on the
    /// blocking pool.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), NvmlError> {
        let mut ticker = tokio::time::interval(self.config.interval.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = ticker.tick() => {}
            }
            let round = tokio::task::spawn_blocking(move || {
                self.sample_now();
                self
            });
            match round.await {
                Ok(s) => self = s,
                Err(e) => {
                    tracing::warn!(error = %e, "NVML sampling task failed; NVML sampling stops");
                    return Ok(());
                }
            }
        }
    }
}

/// The library `config` loads, as messages name it.
fn lib_name(config: &NvmlConfig) -> String {
    config
        .lib_path
        .as_ref()
        .map_or("libnvidia-ml.so.1 (default search)".to_owned(), |p| {
            p.display().to_string()
        })
}

/// The warning for an NVML that cannot be opened: what is lost, and how to fix or silence it.
fn warn_unavailable(reason: &str) {
    tracing::warn!(
        error = %reason,
        "NVML unavailable: GPU figures from NVML (utilization, memory, power, energy, clocks, \
         each request's GPU use) are missing; --nvml-lib / [telemetry] nvml_lib names the \
         library, --no-nvml / [telemetry] nvml = false silences this"
    );
}

/// Every how many rounds of `interval` the slow reads are made: as rarely as [`SLOW_PERIOD`]
/// allows, every round at the least.
fn slow_every(interval: Duration) -> u64 {
    let every = SLOW_PERIOD.as_nanos() / interval.as_nanos().max(1);
    u64::try_from(every).unwrap_or(u64::MAX).max(1)
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, sum) = values.fold((0usize, 0.0), |(n, s), v| (n + 1, s + v));
    (n > 0).then(|| sum / n as f64)
}

/// Model (the first GPU's, then each other distinct one), count, driver and CUDA version.
fn gpu_context(nvml: &Nvml, count: u32, names: &[(Option<String>, Option<String>)]) -> GpuContext {
    let mut models: Vec<&str> = Vec::new();
    for m in names.iter().filter_map(|(_, m)| m.as_deref()) {
        if !models.contains(&m) {
            models.push(m);
        }
    }
    let why = |what: &str, e: &dyn std::fmt::Display| format!("nvml: {what}: {e}");
    GpuContext {
        model: if models.is_empty() {
            Known::unavailable("nvml: no GPU reported its name")
        } else {
            Known::Value(models.join(", "))
        },
        count: Known::Value(count),
        driver: match nvml.sys_driver_version() {
            Ok(v) => Known::Value(v),
            Err(e) => Known::unavailable(why("driver version", &e)),
        },
        // NVML gives the CUDA version as 1000 × major + 10 × minor.
        cuda: match nvml.sys_cuda_driver_version() {
            Ok(v) => Known::Value(format!("{}.{}", v / 1000, (v % 1000) / 10)),
            Err(e) => Known::unavailable(why("CUDA driver version", &e)),
        },
        source: Known::Value("nvml".into()),
    }
}

/// Says whether NVML can be loaded here (for `canaryd doctor`), and what one sampling round
/// over every GPU costs (with the energy counter's read, without `--server-pid`'s query): the
/// wall time of up to 5 rounds, read as a run reads them, so `--gpu-interval` can be chosen
/// knowing it. Rounds stop after 2 s, inside doctor's bound on the whole probe.
pub fn probe_nvml(lib_path: Option<PathBuf>) -> SourceState {
    let mut s = match NvmlSampler::open(NvmlConfig {
        lib_path,
        capacity: 1,
        // Every round reads every field, the energy counter too: the round a run pays most.
        interval: SLOW_PERIOD,
        ..NvmlConfig::default()
    }) {
        Ok(s) => s,
        Err(e) => return SourceState::unavailable(crate::http::error_chain(&e)),
    };
    let began = std::time::Instant::now();
    let mut took: Vec<Duration> = Vec::with_capacity(PROBE_ROUNDS);
    while took.len() < PROBE_ROUNDS && began.elapsed() < PROBE_TIMING_LIMIT {
        let start = std::time::Instant::now();
        s.sample_now();
        took.push(start.elapsed());
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    SourceState::available(format!(
        "{}; one sampling round {:.2} ms with the energy counter (median of {}, {:.2}–{:.2} ms, wall time)",
        s.detail,
        ms(took[took.len() / 2]),
        took.len(),
        ms(took[0]),
        ms(took[took.len() - 1]),
    ))
}

/// Sampling rounds `canaryd doctor` times, at most.
const PROBE_ROUNDS: usize = 5;

/// How long `canaryd doctor` goes on timing rounds (the first is always timed): doctor gives
/// the whole probe 5 s, and a library that loads but samples slowly is still available.
const PROBE_TIMING_LIMIT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 16, item 6: the warning for a missing library said its cause twice
    // (nvml-wrapper's message repeats its source's).
    #[test]
    fn a_missing_library_names_its_cause_once() {
        let lib = "/nonexistent/libnvidia-ml.so";
        let Err(e) = NvmlSampler::open(NvmlConfig {
            lib_path: Some(PathBuf::from(lib)),
            ..NvmlConfig::default()
        }) else {
            panic!("no library at {lib}");
        };
        let reason = crate::http::error_chain(&e);
        assert!(
            reason.starts_with("cannot initialize NVML from"),
            "{reason}"
        );
        assert_eq!(
            reason.matches("No such file or directory").count(),
            1,
            "{reason}"
        );
    }
}
