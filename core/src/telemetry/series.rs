//! [`RunSeries`]: the run's server scrapes and GPU samples as bounded time series, so the
//! diagnosis can say *where* in a run a condition held (a 20 s burst of KV-cache saturation
//! is not averaged away by a run-level mean). Observers build it when a run ends, from their
//! rings; it stays in the process (it is not written to `summary.json`).

/// Observations of a server histogram between two scrapes: `sum / count` is their mean.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    /// Observations.
    pub count: f64,
    /// Their sum (seconds for latencies).
    pub sum: f64,
}

impl Window {
    /// The mean of the observations; `None` without one.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    fn add(&mut self, other: Window) {
        self.count += other.count;
        self.sum += other.sum;
    }
}

/// One server scrape, and what changed since the previous one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerPoint {
    /// Seconds from the run's start to the scrape (negative before it).
    pub t_s: f64,
    /// Requests waiting.
    pub queue_depth: Option<f64>,
    /// Requests running.
    pub running: Option<f64>,
    /// KV-cache usage, 0..=1, of the fullest label set (data-parallel rank).
    pub kv_usage: Option<f64>,
    /// Preemptions since the previous scrape.
    pub preemptions: Option<f64>,
    /// Time to first token of the requests that got one since the previous scrape, seconds.
    pub ttft: Option<Window>,
    /// Queue time of the requests admitted since the previous scrape, seconds.
    pub queue_time: Option<Window>,
    /// Prefill time of the requests that finished prefill since the previous scrape, seconds.
    pub prefill_time: Option<Window>,
}

/// The GPUs at one sampling time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuPoint {
    /// Seconds from the run's start.
    pub t_s: f64,
    /// Mean utilization over the GPUs read at that time, percent.
    pub util_pct: f64,
    /// GPUs read.
    pub gpus: usize,
}

/// A run's time series, each at most [`RunSeries::MAX_POINTS`] long.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSeries {
    /// Server scrapes in time order.
    pub server: Vec<ServerPoint>,
    /// GPU samples in time order.
    pub gpu: Vec<GpuPoint>,
}

impl RunSeries {
    /// The most points a series keeps: a 2-hour run scraped every second is merged 12 to 1.
    pub const MAX_POINTS: usize = 600;

    /// True when neither series has a point.
    pub fn is_empty(&self) -> bool {
        self.server.is_empty() && self.gpu.is_empty()
    }
}

fn group_size(n: usize) -> usize {
    n.div_ceil(RunSeries::MAX_POINTS).max(1)
}

fn mean_of(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let (mut n, mut sum) = (0usize, 0.0);
    for v in values.flatten() {
        n += 1;
        sum += v;
    }
    (n > 0).then(|| sum / n as f64)
}

fn sum_of(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values
        .flatten()
        .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
}

fn windows(values: impl Iterator<Item = Option<Window>>) -> Option<Window> {
    values.flatten().fold(None, |acc, w| {
        let mut acc: Window = acc.unwrap_or_default();
        acc.add(w);
        Some(acc)
    })
}

/// Merges consecutive server points into groups so at most [`RunSeries::MAX_POINTS`] remain:
/// gauges are averaged (a group says what held over its span), counts and histogram windows
/// added, and each group is stamped at its last scrape.
pub fn bounded_server(points: Vec<ServerPoint>) -> Vec<ServerPoint> {
    let k = group_size(points.len());
    if k == 1 {
        return points;
    }
    points
        .chunks(k)
        .map(|g| ServerPoint {
            t_s: g[g.len() - 1].t_s,
            queue_depth: mean_of(g.iter().map(|p| p.queue_depth)),
            running: mean_of(g.iter().map(|p| p.running)),
            kv_usage: mean_of(g.iter().map(|p| p.kv_usage)),
            preemptions: sum_of(g.iter().map(|p| p.preemptions)),
            ttft: windows(g.iter().map(|p| p.ttft)),
            queue_time: windows(g.iter().map(|p| p.queue_time)),
            prefill_time: windows(g.iter().map(|p| p.prefill_time)),
        })
        .collect()
}

/// The same for GPU points: utilization averaged over each group.
pub fn bounded_gpu(points: Vec<GpuPoint>) -> Vec<GpuPoint> {
    let k = group_size(points.len());
    if k == 1 {
        return points;
    }
    points
        .chunks(k)
        .map(|g| GpuPoint {
            t_s: g[g.len() - 1].t_s,
            util_pct: g.iter().map(|p| p.util_pct).sum::<f64>() / g.len() as f64,
            gpus: g.iter().map(|p| p.gpus).max().unwrap_or(0),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_series_are_merged_keeping_totals_and_bursts() {
        // Two hours at 1 s: KV saturated from 3000 s to 3020 s, one preemption a second
        // there, ten requests' TTFT each second.
        let points: Vec<ServerPoint> = (0..7200)
            .map(|t| {
                let burst = (3000..3020).contains(&t);
                ServerPoint {
                    t_s: t as f64,
                    kv_usage: Some(if burst { 0.98 } else { 0.2 }),
                    preemptions: Some(if burst { 1.0 } else { 0.0 }),
                    ttft: Some(Window {
                        count: 10.0,
                        sum: 1.0,
                    }),
                    ..Default::default()
                }
            })
            .collect();
        let merged = bounded_server(points);
        assert_eq!(merged.len(), 600);
        assert_eq!(merged[0].t_s, 11.0);
        let preemptions: f64 = merged.iter().filter_map(|p| p.preemptions).sum();
        assert_eq!(preemptions, 20.0);
        let ttft: f64 = merged.iter().filter_map(|p| p.ttft).map(|w| w.count).sum();
        assert_eq!(ttft, 72_000.0);
        // 3000..3012 is one whole group: the burst still shows at 0.98 there.
        let g = merged.iter().find(|p| p.t_s == 3011.0).unwrap();
        assert!((g.kv_usage.unwrap() - 0.98).abs() < 1e-12, "{g:?}");
        // Short series are kept as they are.
        let gpu: Vec<GpuPoint> = (0..10)
            .map(|t| GpuPoint {
                t_s: t as f64,
                util_pct: 50.0,
                gpus: 2,
            })
            .collect();
        assert_eq!(bounded_gpu(gpu.clone()), gpu);
    }
}
