//! A run's server scrapes and GPU samples as `canary_core`'s bounded [`RunSeries`], for the
//! diagnosis to find where in the run a condition held.

use crate::engine::ServerSample;
use crate::gpu::GpuSample;
use crate::growth::{Hist, Walk};
use crate::prometheus::HistogramSnapshot;
use canary_core::{bounded_gpu, bounded_server, GpuPoint, MonoTime, ServerPoint, Window};

fn seconds(at: MonoTime, t0: MonoTime) -> f64 {
    at.signed_nanos_since(t0) as f64 / 1e9
}

fn window(d: Option<&HistogramSnapshot>) -> Option<Window> {
    let d = d?;
    Some(Window {
        count: d.total(),
        sum: d.sum?,
    })
}

/// The server's scrapes of a run (time-ordered, bounding scrapes included) as points: gauges
/// as read, counters and histograms as what changed since the previous scrape, judged per
/// series (`growth`). When a series went backwards more than once (the URL reaches several
/// server processes), counter fields are left out of every point.
pub fn server_series(samples: &[ServerSample], t0: MonoTime) -> Vec<ServerPoint> {
    let mut walk = Walk::default();
    let mut points: Vec<ServerPoint> = samples
        .iter()
        .map(|s| {
            let step = walk.step(s);
            ServerPoint {
                t_s: seconds(s.at, t0),
                queue_depth: s.queue_depth,
                running: s.running_requests,
                // The fullest rank's: a full rank is KV pressure, whatever the others hold.
                kv_usage: s.kv_cache_usage_max.or(s.kv_cache_usage),
                preemptions: step.preemptions,
                ttft: window(step.hist(Hist::Ttft)),
                queue_time: window(step.hist(Hist::QueueTime)),
                prefill_time: window(step.hist(Hist::PrefillTime)),
            }
        })
        .collect();
    if walk.flipping().is_some() {
        for p in &mut points {
            (p.preemptions, p.ttft, p.queue_time, p.prefill_time) = (None, None, None, None);
        }
    }
    bounded_server(points)
}

/// GPU samples of a run (any order, any source) as one point per sampling time: the mean
/// utilization of the GPUs read then. Samples within `round` of each other belong to one
/// sampling round (every GPU is read in turn).
pub fn gpu_series(
    samples: &[GpuSample],
    t0: MonoTime,
    round: std::time::Duration,
) -> Vec<GpuPoint> {
    let mut s: Vec<(&GpuSample, f64)> = samples
        .iter()
        .filter_map(|g| Some((g, g.util_gpu_pct?)))
        .collect();
    s.sort_by_key(|(g, _)| g.at);
    let mut points: Vec<GpuPoint> = Vec::new();
    let mut start: Option<MonoTime> = None;
    for (g, util) in s {
        let same = start.is_some_and(|a| g.at.since(a) < round);
        match (same, points.last_mut()) {
            (true, Some(p)) => {
                p.util_pct = (p.util_pct * p.gpus as f64 + util) / (p.gpus + 1) as f64;
                p.gpus += 1;
                p.t_s = seconds(g.at, t0);
            }
            _ => {
                start = Some(g.at);
                points.push(GpuPoint {
                    t_s: seconds(g.at, t0),
                    util_pct: util,
                    gpus: 1,
                });
            }
        }
    }
    bounded_gpu(points)
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::GpuSource;
    use std::time::Duration;

    #[test]
    fn gpu_rounds_average_their_gpus() {
        let s = |ms: u64, gpu: u32, util: f64| {
            let mut g = GpuSample::new(MonoTime(ms * 1_000_000), GpuSource::Nvml, gpu);
            g.util_gpu_pct = Some(util);
            g
        };
        let samples = [
            s(1000, 0, 90.0),
            s(1001, 1, 100.0),
            s(1500, 0, 10.0),
            s(1501, 1, 30.0),
        ];
        let pts = gpu_series(
            &samples,
            MonoTime(1_000_000_000),
            Duration::from_millis(250),
        );
        assert_eq!(pts.len(), 2);
        assert_eq!((pts[0].util_pct, pts[0].gpus), (95.0, 2));
        assert_eq!(pts[1].util_pct, 20.0);
        assert!((pts[1].t_s - 0.501).abs() < 1e-9);
    }
}
