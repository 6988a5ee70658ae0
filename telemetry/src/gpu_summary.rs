//! [`gpu_summary`]: what the GPUs did over one run, for `summary.json`'s `gpu` section —
//! utilization, power and energy, and the cheap run-level figures of the other sampled fields
//! (memory, temperature, clocks, memory utilization, clock throttle reasons, the server
//! process's utilization), overall and per GPU (and per MIG instance, whose own figures are
//! its memory).
//!
//! Clocks and memory utilization are the samples' readings (a clock at its sample's instant,
//! memory utilization over the driver's period before it), each sample counting once: their
//! means are estimates of the run's, their lowest and highest bounds on its extremes.

use canary_core::MonoTime;

use crate::correlate::{
    energy_over_run, gpu_energy, gpu_over_interval, gpu_series, series_covering, series_spanning,
};
use crate::gpu::GpuSample;
use canary_core::{GpuRunStats, GpuSource, RunGpuSummary};

/// NVML's clock event (throttle) reason bits, `nvmlClocksEventReason*`; DCGM's
/// `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` / `CLOCKS_EVENT_REASONS` use the same mask.
const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in an NVML throttle-reason mask; unknown bits as `0x…`.
pub fn throttle_reason_names(mask: u64) -> Vec<String> {
    let mut names: Vec<String> = THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect();
    let known = THROTTLE_REASONS.iter().fold(0, |m, (bit, _)| m | bit);
    if mask & !known != 0 {
        names.push(format!("{:#x}", mask & !known));
    }
    names
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, sum) = values.fold((0usize, 0.0), |(n, s), v| (n + 1, s + v));
    (n > 0).then(|| sum / n as f64)
}

fn max_f(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

fn min_f(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
}

/// Summarizes a run `[t0, t1]` from GPU samples (any sources, any order: the rings' windows
/// one after the other will do); `output_tokens` gives the energy per token. `None` without
/// a sample.
pub fn gpu_summary(
    samples: &[GpuSample],
    t0: MonoTime,
    t1: MonoTime,
    output_tokens: u64,
) -> Option<RunGpuSummary> {
    let series = gpu_series(samples);
    if series.is_empty() {
        return None;
    }
    let window = gpu_over_interval(samples, None, t0, t1);
    let energy = energy_over_run(samples, t0, t1);
    let mut per_gpu = Vec::with_capacity(series.len());
    let mut used: Vec<&GpuSample> = Vec::new();
    for s in &series {
        let mine = series_covering(s, t0, t1);
        let mask = mine
            .iter()
            .filter_map(|g| g.throttle_reasons)
            .reduce(|a, b| a | b);
        per_gpu.push(GpuRunStats {
            source: s.source,
            gpu: s.gpu,
            gpu_instance: s.instance,
            gpu_instance_profile: s.instance_profile.map(str::to_owned),
            uuid: s.uuid.map(str::to_owned),
            model_name: mine.iter().find_map(|g| g.model_name.clone()),
            samples: mine.len(),
            util_avg_pct: mean(mine.iter().filter_map(|g| g.util_gpu_pct)),
            power_avg_w: mean(mine.iter().filter_map(|g| g.power_w)),
            energy_j: gpu_energy(&series_spanning(s, t0, t1), t0, t1).map(|(j, _)| j),
            mem_used_max_bytes: mine.iter().filter_map(|g| g.mem_used_bytes).max(),
            mem_total_bytes: mine.iter().filter_map(|g| g.mem_total_bytes).max(),
            temp_max_c: max_f(mine.iter().filter_map(|g| g.temp_c)),
            throttle_reasons: mask.map(throttle_reason_names).unwrap_or_default(),
            process_sm_util_avg_pct: mean(mine.iter().filter_map(|g| g.process_sm_util_pct)),
            sm_clock_min_mhz: min_f(mine.iter().filter_map(|g| g.sm_clock_mhz)),
            sm_clock_avg_mhz: mean(mine.iter().filter_map(|g| g.sm_clock_mhz)),
            mem_clock_avg_mhz: mean(mine.iter().filter_map(|g| g.mem_clock_mhz)),
            util_mem_avg_pct: mean(mine.iter().filter_map(|g| g.util_mem_pct)),
            util_mem_max_pct: max_f(mine.iter().filter_map(|g| g.util_mem_pct)),
        });
        used.extend(mine);
    }
    let mut sources: Vec<GpuSource> = series.iter().map(|s| s.source).collect();
    sources.dedup();
    let mask = used
        .iter()
        .filter_map(|g| g.throttle_reasons)
        .reduce(|a, b| a | b);
    let mem_pct = used.iter().filter_map(|g| {
        let total = g.mem_total_bytes.filter(|t| *t > 0)?;
        Some(g.mem_used_bytes? as f64 / total as f64 * 100.0)
    });
    Some(RunGpuSummary {
        util_avg_pct: window.util_avg_pct,
        util_max_pct: window.util_max_pct,
        power_avg_w: window.power_avg_w,
        power_max_w: window.power_max_w,
        energy_per_output_token_j: energy.as_ref().and_then(|e| e.per_token(output_tokens)),
        energy,
        // A GPU in MIG mode once: its instances' series are parts of it (DCGM's mapping makes a
        // whole-GPU sample for every GPU it gives instances of).
        gpus: series.iter().filter(|s| s.instance.is_none()).count(),
        sources,
        mem_used_max_bytes: used.iter().filter_map(|g| g.mem_used_bytes).max(),
        mem_used_max_pct: max_f(mem_pct),
        temp_max_c: max_f(used.iter().filter_map(|g| g.temp_c)),
        throttle_reasons: mask.map(throttle_reason_names),
        process_sm_util_avg_pct: mean(used.iter().filter_map(|g| g.process_sm_util_pct)),
        process_sm_util_max_pct: max_f(used.iter().filter_map(|g| g.process_sm_util_pct)),
        process_mem_util_avg_pct: mean(used.iter().filter_map(|g| g.process_mem_util_pct)),
        sm_clock_min_mhz: min_f(used.iter().filter_map(|g| g.sm_clock_mhz)),
        sm_clock_avg_mhz: mean(used.iter().filter_map(|g| g.sm_clock_mhz)),
        mem_clock_avg_mhz: mean(used.iter().filter_map(|g| g.mem_clock_mhz)),
        util_mem_avg_pct: mean(used.iter().filter_map(|g| g.util_mem_pct)),
        util_mem_max_pct: max_f(used.iter().filter_map(|g| g.util_mem_pct)),
        per_gpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn g(t_s: u64, gpu: u32, temp: f64, used_gib: u64, throttle: Option<u64>) -> GpuSample {
        let mut s = GpuSample::new(MonoTime(t_s * S), GpuSource::Nvml, gpu);
        s.util_gpu_pct = Some(50.0);
        s.power_w = Some(100.0);
        s.temp_c = Some(temp);
        s.mem_used_bytes = Some(used_gib << 30);
        s.mem_total_bytes = Some(80 << 30);
        s.throttle_reasons = throttle;
        s
    }

    #[test]
    fn throttle_masks_are_named() {
        assert_eq!(
            throttle_reason_names(0x4 | 0x40 | 0x1000),
            ["sw_power_cap", "hw_thermal_slowdown", "0x1000"]
        );
        assert!(throttle_reason_names(0).is_empty());
    }

    #[test]
    fn run_maxima_and_reasons_over_gpus() {
        let samples = vec![
            g(0, 0, 50.0, 10, Some(0)),
            g(0, 1, 55.0, 20, Some(0x1)),
            g(1, 0, 71.0, 40, Some(0x4)),
            g(1, 1, 60.0, 30, Some(0)),
            // After the run: not counted.
            g(5, 0, 99.0, 79, Some(0x40)),
        ];
        let s = gpu_summary(&samples, MonoTime(S / 2), MonoTime(2 * S), 100).unwrap();
        assert_eq!((s.gpus, s.sources.as_slice()), (2, &[GpuSource::Nvml][..]));
        assert_eq!(s.temp_max_c, Some(71.0));
        assert_eq!(s.mem_used_max_bytes, Some(40 << 30));
        assert_eq!(s.mem_used_max_pct, Some(50.0));
        assert_eq!(
            s.throttle_reasons.as_deref(),
            Some(&["gpu_idle".to_owned(), "sw_power_cap".to_owned()][..])
        );
        assert_eq!(s.per_gpu[0].throttle_reasons, ["sw_power_cap"]);
        assert_eq!(s.per_gpu[1].temp_max_c, Some(60.0));
        // Power integrated (no counter): 100 W for 1.5 s on each GPU.
        assert_eq!(s.energy.unwrap().joules, 300.0);
        assert_eq!(s.energy_per_output_token_j, Some(3.0));
        assert_eq!(s.process_sm_util_avg_pct, None, "no --server-pid");
        // A source that reports no throttle reasons says null, not "none seen".
        let bare: Vec<GpuSample> = samples
            .into_iter()
            .map(|mut g| {
                g.throttle_reasons = None;
                g
            })
            .collect();
        let s = gpu_summary(&bare, MonoTime(0), MonoTime(2 * S), 0).unwrap();
        assert_eq!(s.throttle_reasons, None);
        assert_eq!(s.energy_per_output_token_j, None);
        assert!(gpu_summary(&[], MonoTime(0), MonoTime(S), 1).is_none());
    }

    #[test]
    fn clocks_and_memory_utilization_over_the_run_and_per_gpu() {
        let c = |t, gpu, sm: f64, busy: f64| {
            let mut s = g(t, gpu, 60.0, 10, Some(0));
            (s.sm_clock_mhz, s.mem_clock_mhz, s.util_mem_pct) =
                (Some(sm), Some(2619.0), Some(busy));
            s
        };
        let samples = vec![
            c(0, 0, 1980.0, 30.0),
            c(0, 1, 1980.0, 40.0),
            // GPU 0 pulled down to 1200 MHz for one sample.
            c(1, 0, 1200.0, 50.0),
            c(1, 1, 1980.0, 40.0),
            c(2, 0, 1980.0, 10.0),
            c(2, 1, 1980.0, 40.0),
            // After the run: not counted.
            c(5, 0, 300.0, 100.0),
        ];
        let s = gpu_summary(&samples, MonoTime(0), MonoTime(2 * S), 0).unwrap();
        assert_eq!(s.sm_clock_min_mhz, Some(1200.0));
        assert_eq!(s.sm_clock_avg_mhz, Some(1850.0));
        assert_eq!(s.mem_clock_avg_mhz, Some(2619.0));
        assert_eq!(s.util_mem_avg_pct, Some(35.0));
        assert_eq!(s.util_mem_max_pct, Some(50.0));
        let per: Vec<_> = s
            .per_gpu
            .iter()
            .map(|p| {
                (
                    p.sm_clock_min_mhz,
                    p.sm_clock_avg_mhz,
                    p.util_mem_avg_pct,
                    p.util_mem_max_pct,
                )
            })
            .collect();
        assert_eq!(
            per,
            [
                (Some(1200.0), Some(1720.0), Some(30.0), Some(50.0)),
                (Some(1980.0), Some(1980.0), Some(40.0), Some(40.0)),
            ]
        );
        // A source without clocks says null, not 0.
        let s = gpu_summary(&[g(0, 0, 60.0, 10, None)], MonoTime(0), MonoTime(S), 0).unwrap();
        assert_eq!(
            (s.sm_clock_min_mhz, s.mem_clock_avg_mhz, s.util_mem_max_pct),
            (None, None, None)
        );
        assert_eq!(s.per_gpu[0].sm_clock_avg_mhz, None);
    }

    #[test]
    fn a_mig_instance_is_kept_beside_nvml_and_counts_no_energy() {
        let uuid = |mut s: GpuSample| {
            s.uuid = Some("GPU-a".to_owned());
            s
        };
        let nvml = |t, e: f64| {
            let mut s = uuid(g(t, 0, 60.0, 30, None));
            s.energy_j = Some(e);
            s
        };
        // DCGM's view of the same card in MIG mode: the whole GPU (power, counter; no memory)
        // and its one instance (its own memory, nothing GPU-wide).
        let dcgm_whole = |t, e: f64| {
            let mut s = uuid(g(t, 0, 61.0, 0, None));
            (s.source, s.energy_j, s.mem_used_bytes, s.mem_total_bytes) =
                (GpuSource::Dcgm, Some(e), None, None);
            s.util_gpu_pct = None;
            s
        };
        let dcgm_instance = |t| {
            let mut s = uuid(GpuSample::new(MonoTime(t * S), GpuSource::Dcgm, 0));
            s.gpu_instance = Some(3);
            s.gpu_instance_profile = Some("3g.40gb".to_owned());
            (s.mem_used_bytes, s.mem_total_bytes) = (Some(20 << 30), Some(40 << 30));
            s
        };
        let samples = vec![
            nvml(0, 1000.0),
            nvml(1, 1100.0),
            nvml(2, 1200.0),
            dcgm_whole(0, 7000.0),
            dcgm_instance(0),
            dcgm_whole(2, 9000.0),
            dcgm_instance(2),
        ];
        let s = gpu_summary(&samples, MonoTime(0), MonoTime(2 * S), 0).unwrap();
        assert_eq!(s.gpus, 1, "one card");
        // NVML's counter only: DCGM's whole GPU is the same card, its instance has no counter.
        let e = s.energy.unwrap();
        assert_eq!((e.joules, e.gpus), (200.0, 1));
        let per: Vec<_> = s
            .per_gpu
            .iter()
            .map(|p| (p.source, p.gpu_instance, p.gpu_instance_profile.as_deref()))
            .collect();
        assert_eq!(
            per,
            [
                (GpuSource::Nvml, None, None),
                (GpuSource::Dcgm, Some(3), Some("3g.40gb")),
            ]
        );
        assert_eq!(s.sources, [GpuSource::Nvml, GpuSource::Dcgm]);
        let instance = &s.per_gpu[1];
        assert_eq!((instance.power_avg_w, instance.energy_j), (None, None));
        assert_eq!(instance.mem_used_max_bytes, Some(20 << 30));
        // Half the instance's memory: above NVML's 30 of 80 GiB of the whole card.
        assert_eq!(s.mem_used_max_pct, Some(50.0));
    }
}
