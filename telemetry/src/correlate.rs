//! Pure functions joining telemetry to requests and runs by time: GPU utilization and power
//! during a request, the server's queue and KV usage when it was sent, a run's energy.
//!
//! Inputs are time-ordered slices (a ring's `snapshot`, `between` or `covering`); nothing
//! here locks or allocates more than a few small vectors.

use canary_core::{EnergyMethod, GpuSource, MonoTime, RunEnergy};

use crate::engine::{counter_delta, ServerSample};
use crate::gpu::GpuSample;

/// GPU activity over one request's `[sent, end]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct GpuWindow {
    /// Samples used: those inside the interval plus, per GPU, the last one before it (one
    /// source per GPU: NVML where it and DCGM both see the GPU).
    pub samples: usize,
    /// Mean GPU utilization over those samples, percent.
    pub util_avg_pct: Option<f64>,
    /// Highest GPU utilization, percent.
    pub util_max_pct: Option<f64>,
    /// Mean power per GPU sample, watts.
    pub power_avg_w: Option<f64>,
    /// Highest power of one GPU, watts.
    pub power_max_w: Option<f64>,
}

fn mean_max(values: impl Iterator<Item = f64>) -> (Option<f64>, Option<f64>) {
    let (mut n, mut sum, mut max) = (0usize, 0.0, f64::NEG_INFINITY);
    for v in values {
        n += 1;
        sum += v;
        max = max.max(v);
    }
    if n == 0 {
        (None, None)
    } else {
        (Some(sum / n as f64), Some(max))
    }
}

/// One GPU (or one MIG instance of it) as one source saw it: its samples in time order.
pub(crate) struct Series<'a> {
    pub source: GpuSource,
    pub gpu: u32,
    pub instance: Option<u32>,
    pub instance_profile: Option<&'a str>,
    pub uuid: Option<&'a str>,
    samples: Vec<&'a GpuSample>,
}

impl Series<'_> {
    /// Whether `self` (from DCGM) is a GPU that `nvml` already covers: the same UUID, or the
    /// same index when either side has no UUID (then they cannot be told apart). A MIG
    /// instance's series never is: NVML here reads whole devices, and the instance's own figures
    /// (its memory) are nowhere else; it carries none of the GPU-wide ones (power, energy), so
    /// keeping it counts nothing twice.
    fn duplicates(&self, nvml: &Series<'_>) -> bool {
        if self.instance.is_some() {
            return false;
        }
        match (self.uuid, nvml.uuid) {
            (Some(a), Some(b)) => a == b,
            _ => self.gpu == nvml.gpu,
        }
    }
}

/// Splits samples (any order, any mix of sources, e.g. an NVML ring's and a DCGM ring's
/// windows one after the other) into per-(source, GPU, MIG instance) series in time order,
/// each GPU before its instances, and keeps one source per physical GPU: where NVML and DCGM
/// both see a GPU, NVML's series (read directly, usually more often) is kept and DCGM's
/// dropped, so nothing is counted twice and energy counters are never differenced across
/// sources. DCGM GPUs NVML does not see (another host's, by UUID) are kept, and so are DCGM's
/// MIG instances (see `Series::duplicates`).
pub(crate) fn gpu_series(samples: &[GpuSample]) -> Vec<Series<'_>> {
    let mut all: Vec<Series<'_>> = Vec::new();
    for s in samples {
        match all
            .iter_mut()
            .find(|x| x.source == s.source && x.gpu == s.gpu && x.instance == s.gpu_instance)
        {
            Some(x) => {
                x.uuid = x.uuid.or(s.uuid.as_deref());
                x.instance_profile = x.instance_profile.or(s.gpu_instance_profile.as_deref());
                x.samples.push(s);
            }
            None => all.push(Series {
                source: s.source,
                gpu: s.gpu,
                instance: s.gpu_instance,
                instance_profile: s.gpu_instance_profile.as_deref(),
                uuid: s.uuid.as_deref(),
                samples: vec![s],
            }),
        }
    }
    for x in &mut all {
        // Stable: equal stamps keep their input order.
        x.samples.sort_by_key(|s| s.at);
    }
    let (nvml, dcgm): (Vec<_>, Vec<_>) = all.into_iter().partition(|x| x.source == GpuSource::Nvml);
    let mut kept: Vec<Series<'_>> = dcgm
        .into_iter()
        .filter(|d| !nvml.iter().any(|n| d.duplicates(n)))
        .collect();
    kept.extend(nvml);
    kept.sort_by_key(|x| (x.source == GpuSource::Dcgm, x.gpu, x.instance));
    kept
}

/// One series' samples that describe `[t0, t1]`: the last before `t0`, then those inside.
pub(crate) fn series_covering<'a>(
    s: &Series<'a>,
    t0: MonoTime,
    t1: MonoTime,
) -> Vec<&'a GpuSample> {
    let split = s.samples.partition_point(|g| g.at < t0);
    s.samples[split.saturating_sub(1)..]
        .iter()
        .copied()
        .filter(|g| g.at <= t1)
        .collect()
}

/// One series' samples that span `[t0, t1]`: [`series_covering`]'s, plus the first after `t1`
/// when there is one (the energy counter is read between the samples either side of an edge).
pub(crate) fn series_spanning<'a>(
    s: &Series<'a>,
    t0: MonoTime,
    t1: MonoTime,
) -> Vec<&'a GpuSample> {
    let mut out = series_covering(s, t0, t1);
    out.extend(s.samples.iter().find(|g| g.at > t1));
    out
}

/// The samples that describe `[t0, t1]` for GPU `gpu` (all GPUs when `None`): per GPU the last
/// sample before `t0` (the reading in force when the interval began), then every sample with
/// `t0 <= at <= t1`; in time order. The input may mix sources and need not be sorted: where
/// NVML and DCGM both report a GPU (same UUID, or same index without UUIDs) only NVML's
/// samples are used.
pub fn gpu_samples_covering(
    samples: &[GpuSample],
    gpu: Option<u32>,
    t0: MonoTime,
    t1: MonoTime,
) -> Vec<&GpuSample> {
    let mut out: Vec<&GpuSample> = gpu_series(samples)
        .iter()
        .filter(|s| gpu.is_none_or(|g| s.gpu == g))
        .flat_map(|s| series_covering(s, t0, t1))
        .collect();
    out.sort_by_key(|s| s.at);
    out
}

/// GPU utilization and power over a request's `[sent, end]` (means over samples, which are
/// evenly spaced by the sampler).
pub fn gpu_over_interval(
    samples: &[GpuSample],
    gpu: Option<u32>,
    sent: MonoTime,
    end: MonoTime,
) -> GpuWindow {
    let used = gpu_samples_covering(samples, gpu, sent, end);
    let (util_avg_pct, util_max_pct) = mean_max(used.iter().filter_map(|s| s.util_gpu_pct));
    let (power_avg_w, power_max_w) = mean_max(used.iter().filter_map(|s| s.power_w));
    GpuWindow {
        samples: used.len(),
        util_avg_pct,
        util_max_pct,
        power_avg_w,
        power_max_w,
    }
}

/// The server sample in force at `t`: the last one taken at or before it.
pub fn server_at(samples: &[ServerSample], t: MonoTime) -> Option<&ServerSample> {
    let n = samples.partition_point(|s| s.at <= t);
    n.checked_sub(1).map(|i| &samples[i])
}

/// Requests waiting in the server's queue at `t`.
pub fn queue_depth_at(samples: &[ServerSample], t: MonoTime) -> Option<f64> {
    server_at(samples, t).and_then(|s| s.queue_depth)
}

/// Requests running on the server at `t`.
pub fn running_at(samples: &[ServerSample], t: MonoTime) -> Option<f64> {
    server_at(samples, t).and_then(|s| s.running_requests)
}

/// KV-cache usage (0..=1) at `t`.
pub fn kv_usage_at(samples: &[ServerSample], t: MonoTime) -> Option<f64> {
    server_at(samples, t).and_then(|s| s.kv_cache_usage)
}

/// Energy of one GPU over `[t0, t1]` from its samples (time-ordered, one GPU); `true` when
/// read from the energy counter. The counter is read as a straight line between samples, so an
/// interval that straddles `t0` or `t1` counts only its part inside the run; before the first
/// sample and after the last (the last usually falls up to one sampling interval before the
/// run's end) the nearest interval's rate is carried, for at most that interval's length (a
/// longer gap is missing samples, which say nothing).
///
/// A reading equal to the one before it is the exporter's stale value, not a new one:
/// dcgm-exporter refreshes its fields every 30 s by default, so a scrape each second reads the
/// same counter thirty times, and a straight line drawn through those would put the whole
/// interval's energy into the second before each refresh (a 16 s run read 0 J at 70 W). Only
/// the first reading of each value counts, as the time canaryd first saw it; a counter that
/// never moved over the run says nothing, and power is integrated instead.
pub(crate) fn gpu_energy(s: &[&GpuSample], t0: MonoTime, t1: MonoTime) -> Option<(f64, bool)> {
    let mut counters: Vec<(MonoTime, f64)> = s
        .iter()
        .filter_map(|g| g.energy_j.map(|e| (g.at, e)))
        .collect();
    counters.dedup_by(|later, earlier| later.1 == earlier.1);
    if counters.len() >= 2 {
        return Some((counter_energy(&counters, t0, t1), true));
    }
    // Hold each power reading until the next one (or t1), clipped to [t0, t1].
    let powers: Vec<(MonoTime, f64)> = s
        .iter()
        .filter_map(|g| g.power_w.map(|p| (g.at, p)))
        .collect();
    if powers.is_empty() {
        return None;
    }
    // A reading holds for at most twice the usual gap between readings: past that samples
    // are missing (an exporter's outage), and holding on would invent the energy of a time
    // nobody measured.
    let mut gaps: Vec<u64> = powers
        .windows(2)
        .map(|w| w[1].0.as_nanos().saturating_sub(w[0].0.as_nanos()))
        .filter(|&g| g > 0)
        .collect();
    gaps.sort_unstable();
    let hold = gaps.get(gaps.len() / 2).map(|&g| g.saturating_mul(2));
    let mut j = 0.0;
    for (i, &(at, p)) in powers.iter().enumerate() {
        let from = at.max(t0);
        let mut to = powers.get(i + 1).map_or(t1, |n| n.0).min(t1);
        if let Some(hold) = hold {
            to = to.min(MonoTime(at.as_nanos().saturating_add(hold)));
        }
        j += p * to.since(from).as_secs_f64();
    }
    Some((j, false))
}

/// The counter's growth over `[t0, t1]` (see [`gpu_energy`]) from readings in time order.
fn counter_energy(counters: &[(MonoTime, f64)], t0: MonoTime, t1: MonoTime) -> f64 {
    let ns = |a: MonoTime, b: MonoTime| b.as_nanos().saturating_sub(a.as_nanos()) as f64;
    // The part of `[a, b]` inside the run, in ns.
    let inside = |a: MonoTime, b: MonoTime| ns(a.max(t0), b.min(t1));
    let mut joules = 0.0;
    for w in counters.windows(2) {
        let ((a, ea), (b, eb)) = (w[0], w[1]);
        let delta = counter_delta(ea, eb);
        joules += if b > a {
            delta * inside(a, b) / ns(a, b)
        } else if (t0..=t1).contains(&a) {
            delta // two readings at one instant: the growth is the run's
        } else {
            0.0
        };
    }
    // Carry the first and last intervals' rates to the run's edges, one interval at most.
    let (Some(head), Some(tail)) = (counters.first_chunk::<2>(), counters.last_chunk::<2>()) else {
        return joules;
    };
    for (&[(a, ea), (b, eb)], edge_from, edge_to) in
        [(head, t0, head[0].0.min(t1)), (tail, tail[1].0.max(t0), t1)]
    {
        let span = ns(a, b);
        let gap = ns(edge_from, edge_to);
        if span > 0.0 && gap > 0.0 {
            joules += counter_delta(ea, eb) / span * gap.min(span);
        }
    }
    joules
}

/// Energy used by the GPUs over a run `[t0, t1]`: per GPU the energy-counter growth over the
/// run, read between samples as a straight line (resets handled; see `gpu_energy`), or, without a counter,
/// power integrated over time. `None` without data. Samples may mix sources, in any order;
/// each GPU is counted once, from one source (see [`gpu_samples_covering`]).
pub fn energy_over_run(samples: &[GpuSample], t0: MonoTime, t1: MonoTime) -> Option<RunEnergy> {
    let (mut joules, mut by_counter, mut by_power) = (0.0, 0usize, 0usize);
    for series in gpu_series(samples) {
        match gpu_energy(&series_spanning(&series, t0, t1), t0, t1) {
            Some((j, true)) => {
                joules += j;
                by_counter += 1;
            }
            Some((j, false)) => {
                joules += j;
                by_power += 1;
            }
            None => {}
        }
    }
    let method = match (by_counter, by_power) {
        (0, 0) => return None,
        (_, 0) => EnergyMethod::Counter,
        (0, _) => EnergyMethod::PowerIntegral,
        _ => EnergyMethod::Mixed,
    };
    Some(RunEnergy {
        joules,
        method,
        gpus: by_counter + by_power,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn g(t_s: u64, gpu: u32, util: f64, power: f64, energy: Option<f64>) -> GpuSample {
        let mut s = GpuSample::new(MonoTime(t_s * S), GpuSource::Nvml, gpu);
        s.util_gpu_pct = Some(util);
        s.power_w = Some(power);
        s.energy_j = energy;
        s
    }

    #[test]
    fn interval_includes_the_sample_in_force_at_start() {
        let samples = vec![
            g(1, 0, 10.0, 100.0, None),
            g(2, 0, 20.0, 200.0, None),
            g(3, 0, 90.0, 300.0, None),
            g(4, 0, 50.0, 250.0, None),
            g(9, 0, 0.0, 50.0, None),
        ];
        let w = gpu_over_interval(&samples, Some(0), MonoTime(2 * S + 1), MonoTime(4 * S));
        assert_eq!(w.samples, 3);
        assert_eq!(w.util_avg_pct, Some(160.0 / 3.0));
        assert_eq!(w.util_max_pct, Some(90.0));
        assert_eq!(w.power_avg_w, Some(250.0));
        assert_eq!(w.power_max_w, Some(300.0));
        let none = gpu_over_interval(&samples, Some(1), MonoTime(0), MonoTime(10 * S));
        assert_eq!((none.samples, none.util_avg_pct), (0, None));
    }

    #[test]
    fn energy_from_counters_with_reset_or_from_power() {
        let samples = vec![
            g(0, 0, 0.0, 100.0, Some(1000.0)),
            g(0, 1, 0.0, 100.0, None),
            g(1, 0, 0.0, 100.0, Some(1100.0)),
            g(1, 1, 0.0, 200.0, None),
            g(2, 0, 0.0, 100.0, Some(50.0)), // driver reloaded: counter restarted
            g(2, 1, 0.0, 300.0, None),
        ];
        let e = energy_over_run(&samples, MonoTime(0), MonoTime(3 * S)).unwrap();
        // GPU 0: 100 + 50 J by counter, the last second's 50 J/s carried to the run's end at
        // 3 s; GPU 1: 100 + 200 + 300 J by power over 3 s.
        assert_eq!(e.joules, 800.0);
        assert_eq!((e.method, e.gpus), (EnergyMethod::Mixed, 2));
        assert_eq!(e.per_token(160), Some(5.0));
        assert_eq!(e.per_token(0), None);
        assert!(energy_over_run(&[], MonoTime(0), MonoTime(S)).is_none());
    }

    #[test]
    fn a_power_reading_is_not_held_through_an_outage() {
        let power = |points: &[(u64, f64)], t1: u64| {
            let samples: Vec<GpuSample> =
                points.iter().map(|&(t, p)| g(t, 0, 0.0, p, None)).collect();
            energy_over_run(&samples, MonoTime(0), MonoTime(t1 * S))
                .unwrap()
                .joules
        };
        // Readings every second, then none for 57 s: the 100 W at 3 s holds 2 s, not 57.
        let outage = [(0, 100.0), (1, 100.0), (2, 100.0), (3, 100.0), (60, 100.0)];
        assert_eq!(power(&outage, 61), 100.0 * (3.0 + 2.0 + 1.0));
        // Nor past the run's last reading for long.
        assert_eq!(power(&outage[..4], 60), 100.0 * (3.0 + 2.0));
    }

    #[test]
    fn energy_counter_is_read_between_samples_at_the_run_edges() {
        let counter = |points: &[(u64, f64)], t0: u64, t1: u64| {
            let samples: Vec<GpuSample> = points
                .iter()
                .map(|&(t, e)| g(t, 0, 0.0, 0.0, Some(e)))
                .collect();
            energy_over_run(&samples, MonoTime(t0 * S), MonoTime(t1 * S))
                .unwrap()
                .joules
        };
        let every_10s = [(0, 0.0), (10, 1000.0), (20, 3000.0)];
        // Half of 0..10 s's 1000 J, all of 10..20 s's 2000 J, and 200 J/s for the 5 s after
        // the last sample.
        assert_eq!(counter(&every_10s, 5, 25), 500.0 + 2000.0 + 1000.0);
        assert_eq!(counter(&every_10s, 5, 15), 500.0 + 1000.0);
        assert_eq!(counter(&every_10s, 12, 13), 200.0);
        // No sample before the run: the first interval's rate carried back to its start.
        assert_eq!(counter(&every_10s[1..], 0, 20), 2000.0 + 2000.0);
        // At most one interval's length either side: a longer gap is samples missing.
        assert_eq!(counter(&[(0, 0.0), (1, 100.0)], 0, 10), 200.0);
        assert_eq!(counter(&[(9, 0.0), (10, 100.0)], 0, 10), 200.0);
        // Two readings at one instant inside the run count whole; outside, not at all.
        assert_eq!(counter(&[(1, 0.0), (1, 5.0), (2, 5.0)], 0, 2), 5.0);
        assert_eq!(counter(&[(1, 0.0), (1, 5.0), (2, 5.0)], 2, 2), 0.0);
    }

    #[test]
    fn a_counter_the_exporter_did_not_refresh_is_read_at_its_changes_or_not_at_all() {
        // 70 W steady, scraped each second; the exporter refreshes its counter (and power)
        // every `every` seconds, so each scrape between refreshes repeats the last value.
        let stale = |every: u64, run_s: u64| {
            let samples: Vec<GpuSample> = (0..=run_s)
                .map(|t| {
                    let refreshed = t / every * every;
                    g(t, 0, 0.0, 70.0, Some(1.0e6 + 70.0 * refreshed as f64))
                })
                .collect();
            energy_over_run(&samples, MonoTime(0), MonoTime(run_s * S)).unwrap()
        };
        // Fresh each second: the counter, exact.
        let e = stale(1, 16);
        assert_eq!((e.joules, e.method), (70.0 * 16.0, EnergyMethod::Counter));
        // Refreshed every 5 s over 16 s: read at 0, 5, 10 and 15 s, the last rate carried
        // to the end: all 1120 J, not the 1050 J that moved between the first and last scrape.
        let e = stale(5, 16);
        assert_eq!((e.joules, e.method), (70.0 * 16.0, EnergyMethod::Counter));
        // Every 30 s (dcgm-exporter's default) over 16 s: the counter never moved. Not 0 J:
        // power integrated instead, and said so.
        let e = stale(30, 16);
        assert_eq!(
            (e.joules, e.method),
            (70.0 * 16.0, EnergyMethod::PowerIntegral)
        );
    }

    #[test]
    fn nvml_and_dcgm_of_the_same_gpus_count_once_from_nvml() {
        let with = |mut s: GpuSample, source: GpuSource, uuid: &str| {
            s.source = source;
            s.uuid = Some(uuid.to_owned());
            s
        };
        let nvml = |t, gpu, e| {
            with(
                g(t, gpu, 50.0, 200.0, Some(e)),
                GpuSource::Nvml,
                ["GPU-a", "GPU-b"][gpu as usize],
            )
        };
        // DCGM reads the same two GPUs (by UUID) less often; its counters lag NVML's, so mixing
        // them would look like resets (or huge jumps), and its GPU 2 is another device.
        let dcgm = |t, gpu, e| {
            with(
                g(t, gpu, 0.0, 10.0, Some(e)),
                GpuSource::Dcgm,
                ["GPU-a", "GPU-b", "GPU-z"][gpu as usize],
            )
        };
        // As the daemon gathers them: NVML's window, then DCGM's (not in time order overall).
        let samples = vec![
            nvml(0, 0, 5000.0),
            nvml(0, 1, 9000.0),
            nvml(1, 0, 5200.0),
            nvml(1, 1, 9100.0),
            nvml(2, 0, 5400.0),
            nvml(2, 1, 9200.0),
            dcgm(0, 0, 4000.0),
            dcgm(0, 1, 1.0e6),
            dcgm(0, 2, 70.0),
            dcgm(2, 0, 4100.0),
            dcgm(2, 1, 1.0e6 + 1.0),
            dcgm(2, 2, 100.0),
        ];
        let e = energy_over_run(&samples, MonoTime(0), MonoTime(2 * S)).unwrap();
        // GPU-a 400 J and GPU-b 200 J from NVML, GPU-z 30 J from DCGM.
        assert_eq!(
            (e.joules, e.gpus, e.method),
            (630.0, 3, EnergyMethod::Counter)
        );
        let w = gpu_over_interval(&samples, None, MonoTime(S), MonoTime(2 * S));
        // NVML's 2 GPUs at t=0 (in force) and t=1..2, DCGM's GPU-z at t=0 and t=2.
        assert_eq!(w.samples, 8);
        assert_eq!(w.util_avg_pct, Some(300.0 / 8.0));
        let only_gpu0 = gpu_samples_covering(&samples, Some(0), MonoTime(S), MonoTime(2 * S));
        assert!(only_gpu0.iter().all(|s| s.source == GpuSource::Nvml));
        assert!(only_gpu0.windows(2).all(|w| w[0].at <= w[1].at));
        // Without UUIDs the index decides: DCGM's GPU 0 and 1 are dropped, GPU 2 kept.
        let bare: Vec<GpuSample> = samples
            .iter()
            .cloned()
            .map(|mut s| {
                s.uuid = None;
                s
            })
            .collect();
        let e = energy_over_run(&bare, MonoTime(0), MonoTime(2 * S)).unwrap();
        assert_eq!((e.joules, e.gpus), (630.0, 3));
        // DCGM alone is used as it is.
        let e = energy_over_run(&samples[6..], MonoTime(0), MonoTime(2 * S)).unwrap();
        assert_eq!((e.joules, e.gpus), (100.0 + 1.0 + 30.0, 3));
    }

    #[test]
    fn server_state_at_time() {
        let mk = |t: u64, q: f64| ServerSample {
            at: MonoTime(t),
            queue_depth: Some(q),
            running_requests: Some(q + 1.0),
            kv_cache_usage: Some(q / 10.0),
            ..ServerSample::default()
        };
        let s = vec![mk(10, 1.0), mk(20, 2.0), mk(30, 3.0)];
        assert_eq!(queue_depth_at(&s, MonoTime(5)), None);
        assert_eq!(queue_depth_at(&s, MonoTime(20)), Some(2.0));
        assert_eq!(running_at(&s, MonoTime(29)), Some(3.0));
        assert_eq!(kv_usage_at(&s, MonoTime(99)), Some(0.3));
    }
}
