//! [`GpuSample`]: one reading of one GPU, the same type whether it came from NVML or from
//! dcgm-exporter, so correlation code does not care which source a host has.

use canary_core::{GpuSource, MonoTime};

use crate::ring::Stamped;

/// One reading of one GPU. Fields a source cannot provide (or a GPU does not support) are
/// `None`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuSample {
    /// When it was read (CLOCK_MONOTONIC, ns).
    #[serde(serialize_with = "ser_mono")]
    pub at: MonoTime,
    /// Which source.
    pub source: GpuSource,
    /// GPU index (NVML index, DCGM `gpu` label); a MIG instance's is its GPU's.
    pub gpu: u32,
    /// The MIG GPU instance this sample is of (DCGM's `GPU_I_ID`); `None` for a whole GPU. On a
    /// GPU in MIG mode dcgm-exporter writes one line per instance, each with the GPU's index and
    /// UUID, so the instance id is what keeps them apart.
    pub gpu_instance: Option<u32>,
    /// The instance's MIG profile (`GPU_I_PROFILE`, e.g. `2g.20gb`).
    pub gpu_instance_profile: Option<String>,
    /// `GPU-…` UUID (a MIG instance's is its GPU's).
    pub uuid: Option<String>,
    /// Product name ("NVIDIA H100 80GB HBM3").
    pub model_name: Option<String>,
    /// Percent of time a kernel was running over the driver's last sample period.
    pub util_gpu_pct: Option<f64>,
    /// Percent of time device memory was being read or written.
    pub util_mem_pct: Option<f64>,
    /// Framebuffer memory in use, bytes.
    pub mem_used_bytes: Option<u64>,
    /// Framebuffer memory in total, bytes.
    pub mem_total_bytes: Option<u64>,
    /// Power draw, watts.
    pub power_w: Option<f64>,
    /// Energy since the driver loaded (NVML) or since boot (DCGM), joules; cumulative.
    pub energy_j: Option<f64>,
    /// GPU temperature, °C.
    pub temp_c: Option<f64>,
    /// SM clock, MHz, at the sample's instant.
    pub sm_clock_mhz: Option<f64>,
    /// Memory clock, MHz, at the sample's instant.
    pub mem_clock_mhz: Option<f64>,
    /// Clock throttle / clock event reasons, NVML's bitmask (`nvmlClocksThrottleReason*`).
    pub throttle_reasons: Option<u64>,
    /// PCIe transmit rate, bytes/s (DCGM only: NVML's is not read, see `nvml.rs`).
    pub pcie_tx_bytes_per_s: Option<f64>,
    /// PCIe receive rate, bytes/s (DCGM only).
    pub pcie_rx_bytes_per_s: Option<f64>,
    /// Ratio of time the graphics/compute engine was active (DCGM profiling), 0..=1.
    pub gr_engine_active: Option<f64>,
    /// SM utilization of the watched server process, percent (NVML per-process stats): the
    /// mean of NVML's samples of the process since the previous query. Queried at most once a
    /// second (on the energy counter's rounds); `None` on the rounds between.
    pub process_sm_util_pct: Option<f64>,
    /// Memory utilization of the watched server process, percent (the same mean).
    pub process_mem_util_pct: Option<f64>,
    /// Other labels kept from the source (Kubernetes `pod`, `namespace`, `container`,
    /// `Hostname`, driver version …).
    pub labels: Vec<(String, String)>,
}

fn ser_mono<S: serde::Serializer>(t: &MonoTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(t.as_nanos())
}

impl GpuSample {
    /// An empty sample of GPU `gpu` at `at`.
    pub fn new(at: MonoTime, source: GpuSource, gpu: u32) -> GpuSample {
        GpuSample {
            at,
            source,
            gpu,
            gpu_instance: None,
            gpu_instance_profile: None,
            uuid: None,
            model_name: None,
            util_gpu_pct: None,
            util_mem_pct: None,
            mem_used_bytes: None,
            mem_total_bytes: None,
            power_w: None,
            energy_j: None,
            temp_c: None,
            sm_clock_mhz: None,
            mem_clock_mhz: None,
            throttle_reasons: None,
            pcie_tx_bytes_per_s: None,
            pcie_rx_bytes_per_s: None,
            gr_engine_active: None,
            process_sm_util_pct: None,
            process_mem_util_pct: None,
            labels: Vec::new(),
        }
    }

    /// The value of a kept label.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Stamped for GpuSample {
    fn at(&self) -> MonoTime {
        self.at
    }

    /// One series per GPU (or MIG instance) and source: NVML's GPU 0 and DCGM's GPU 0 are kept
    /// apart even when they are the same device, and so are GPU 0's instances. The source is
    /// bit 63, the instance id plus one bits 32–62 (0 for a whole GPU; DCGM's mapping keeps only
    /// ids below 2^31 - 1, so keys never collide), the index bits 0–31.
    fn series(&self) -> u64 {
        let source: u64 = match self.source {
            GpuSource::Nvml => 0,
            GpuSource::Dcgm => 1,
        };
        let instance = self
            .gpu_instance
            .map_or(0, |i| (u64::from(i) + 1) & 0x7fff_ffff);
        (source << 63) | (instance << 32) | u64::from(self.gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mig_instance_is_a_series_of_its_own() {
        let g = |source, gpu, instance| {
            let mut s = GpuSample::new(MonoTime(0), source, gpu);
            s.gpu_instance = instance;
            s.series()
        };
        let keys = [
            g(GpuSource::Nvml, 0, None),
            g(GpuSource::Dcgm, 0, None),
            g(GpuSource::Dcgm, 0, Some(0)),
            g(GpuSource::Dcgm, 0, Some(3)),
            g(GpuSource::Dcgm, 3, None),
            g(
                GpuSource::Dcgm,
                u32::MAX,
                Some(crate::dcgm::MAX_GPU_INSTANCE_ID),
            ),
            g(
                GpuSource::Nvml,
                u32::MAX,
                Some(crate::dcgm::MAX_GPU_INSTANCE_ID),
            ),
        ];
        for (i, a) in keys.iter().enumerate() {
            assert!(keys[i + 1..].iter().all(|b| a != b), "{i}: {keys:x?}");
        }
    }
}
