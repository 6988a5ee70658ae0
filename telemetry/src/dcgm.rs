//! dcgm-exporter: its `DCGM_FI_*` metrics mapped onto [`GpuSample`] (one per GPU and one per
//! MIG instance; `page.rs`), and a scraper that keeps them in a bounded ring (default endpoint
//! `http://127.0.0.1:9400/metrics`).
//!
//! Units follow dcgm-exporter's `default-counters.csv`: framebuffer in MiB, power in W, energy
//! in mJ, clocks in MHz, `DCGM_FI_PROF_PCIE_*_BYTES` as bytes per second.

mod page;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::gpu::GpuSample;
use crate::http::{self, Endpoint, OutageLog, ScrapeError};
use crate::prometheus;
use crate::ring::Ring;
use crate::source::{SharedState, SourceState};

#[cfg(test)]
pub(crate) use page::MAX_GPU_INSTANCE_ID;
pub use page::{gpu_samples, gpu_samples_cut, MAX_GPUS, MAX_GPU_INSTANCES, MAX_LABELS};

/// dcgm-exporter's default address.
pub const DEFAULT_DCGM_URL: &str = "http://127.0.0.1:9400/metrics";

/// Settings of a [`DcgmScraper`].
#[derive(Debug, Clone)]
pub struct DcgmConfig {
    /// dcgm-exporter's URL (default [`DEFAULT_DCGM_URL`]; `https://` works too).
    pub url: String,
    /// TLS client settings for an `https://` URL; `None` trusts the system's roots.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Time between scrapes (default 1 s; dcgm-exporter itself collects every 30 s unless
    /// started with `-c`).
    pub interval: Duration,
    /// Give up on one scrape after this long; `None` (the default) derives it from `interval`
    /// with [`default_scrape_timeout`](crate::default_scrape_timeout) (900 ms at 1 s).
    pub timeout: Option<Duration>,
    /// Samples kept (one per GPU and one per MIG instance per scrape; default 28800: 8 GPUs
    /// for an hour at 1 s, a quarter of that when each is split into 3 instances).
    pub capacity: usize,
    /// Shared with earlier scrapers of the same endpoint so an outage is warned about once.
    pub outage: OutageLog,
}

impl Default for DcgmConfig {
    fn default() -> Self {
        DcgmConfig {
            url: DEFAULT_DCGM_URL.to_owned(),
            tls: None,
            interval: Duration::from_secs(1),
            timeout: None,
            capacity: 28_800,
            outage: OutageLog::default(),
        }
    }
}

/// Scrapes dcgm-exporter until shut down, keeping [`GpuSample`]s in a ring.
#[derive(Debug)]
pub struct DcgmScraper {
    endpoint: Endpoint,
    interval: Duration,
    timeout: Duration,
    ring: Ring<GpuSample>,
    state: SharedState,
}

impl DcgmScraper {
    /// Validates the URL; nothing is contacted yet.
    pub fn new(config: DcgmConfig) -> Result<DcgmScraper, ScrapeError> {
        Ok(DcgmScraper {
            endpoint: Endpoint::parse(&config.url, config.tls.clone())?
                .with_outage(config.outage.clone()),
            interval: config.interval,
            timeout: config
                .timeout
                .unwrap_or_else(|| http::default_scrape_timeout(config.interval)),
            ring: Ring::new(config.capacity),
            state: SharedState::default(),
        })
    }

    /// The ring the samples go to (clones share it).
    pub fn samples(&self) -> Ring<GpuSample> {
        self.ring.clone()
    }

    /// The source's state, shared with the running scraper.
    pub fn state(&self) -> SharedState {
        self.state.clone()
    }

    /// Scrapes every interval until `shutdown`; an unreachable exporter is logged once and
    /// retried quietly. Never fails the caller.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ScrapeError> {
        let ring = &self.ring;
        let mut known = KnownGpus::default();
        http::poll(
            "dcgm-exporter",
            &self.endpoint,
            self.interval,
            self.timeout,
            &self.state,
            shutdown,
            |text, at| {
                let (mut gpus, cut) = gpu_samples_cut(&prometheus::parse(&text), at);
                if cut {
                    known.warn(&self.endpoint.url);
                }
                let dropped = known.keep(&mut gpus, &self.endpoint.url);
                let counted = count(&gpus, cut || dropped);
                gpus.into_iter().for_each(|g| ring.push(g));
                format!("{}: {counted}", self.endpoint.url)
            },
        )
        .await;
        Ok(())
    }
}

/// "8 GPU(s)", or "8 GPU(s), 3 MIG instance(s)"; `cut`: more were left out past the caps.
fn count(gpus: &[GpuSample], cut: bool) -> String {
    let instances = gpus.iter().filter(|g| g.gpu_instance.is_some()).count();
    let whole = gpus.len() - instances;
    let counted = match instances {
        0 => format!("{whole} GPU(s)"),
        n => format!("{whole} GPU(s), {n} MIG instance(s)"),
    };
    if cut {
        format!(
            "{counted} (more left out: at most {MAX_GPUS} GPUs and {MAX_GPU_INSTANCES} MIG \
             instances are kept; energy and figures are of those kept)"
        )
    } else {
        counted
    }
}

/// The GPU ids (and MIG instance ids) a scraper has kept: [`MAX_GPUS`] GPUs and
/// [`MAX_GPU_INSTANCES`] instances over its lifetime, not per page. An exporter whose ids
/// changed every scrape filled the ring with thousands of series, and each request's join
/// walks them all.
#[derive(Default)]
struct KnownGpus {
    /// `(gpu, instance)`; `None` for the GPU itself.
    ids: Vec<(u32, Option<u32>)>,
    instances: usize,
    warned: bool,
}

impl KnownGpus {
    /// Says once that GPUs or instances past the caps were left out.
    fn warn(&mut self, url: &str) {
        if !std::mem::replace(&mut self.warned, true) {
            tracing::warn!(
                %url,
                "dcgm-exporter: more than {MAX_GPUS} GPU ids or {MAX_GPU_INSTANCES} MIG \
                 instances seen since the start; the later ones are left out (said once)"
            );
        }
    }

    /// Leaves out the samples of GPUs past the first [`MAX_GPUS`] ids seen, and of instances
    /// past the first [`MAX_GPU_INSTANCES`] or of a GPU left out (warned once); true when it
    /// left some out. A page lists each GPU before its instances.
    fn keep(&mut self, gpus: &mut Vec<GpuSample>, url: &str) -> bool {
        let before = gpus.len();
        gpus.retain(|g| {
            let key = (g.gpu, g.gpu_instance);
            if self.ids.contains(&key) {
                return true;
            }
            let room = match g.gpu_instance {
                None => self.ids.len() - self.instances < MAX_GPUS,
                Some(_) => self.instances < MAX_GPU_INSTANCES && self.ids.contains(&(g.gpu, None)),
            };
            if room {
                self.ids.push(key);
                self.instances += usize::from(g.gpu_instance.is_some());
                return true;
            }
            self.warn(url);
            false
        });
        gpus.len() < before
    }
}

/// Tries one scrape of dcgm-exporter (for `canaryd doctor`; `https://` against the system's
/// roots).
pub async fn probe_dcgm(url: &str, timeout: Duration) -> SourceState {
    let result = match Endpoint::parse(url, None) {
        Ok(e) => e.get(timeout).await,
        Err(e) => Err(e),
    };
    match result {
        Ok((text, at)) => match gpu_samples_cut(&prometheus::parse(&text), at) {
            (gpus, _) if gpus.is_empty() => {
                SourceState::unavailable(format!("{url}: answered, but no DCGM_FI_* GPU metrics"))
            }
            (gpus, cut) => SourceState::available(format!(
                "{url}: {}, {}",
                count(&gpus, cut),
                gpus[0].model_name.as_deref().unwrap_or("unknown model")
            )),
        },
        Err(e) => SourceState::unavailable(http::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::{GpuSource, MonoTime};

    #[test]
    fn a_count_says_when_gpus_were_left_out() {
        let gpus = vec![GpuSample::new(MonoTime(0), GpuSource::Dcgm, 0)];
        assert_eq!(count(&gpus, false), "1 GPU(s)");
        let cut = count(&gpus, true);
        assert!(
            cut.starts_with("1 GPU(s) (more left out: at most 64 GPUs"),
            "{cut}"
        );
        // The scraper's own cap over its lifetime says so too.
        let mut known = KnownGpus::default();
        let mut page: Vec<GpuSample> = (0..70)
            .map(|i| GpuSample::new(MonoTime(0), GpuSource::Dcgm, i))
            .collect();
        assert!(known.keep(&mut page, "u"));
        assert!(!known.keep(&mut page, "u"));
    }

    #[test]
    fn a_scraper_keeps_at_most_max_gpus_ids_over_its_lifetime() {
        let mut known = KnownGpus::default();
        let page = |ids: std::ops::Range<u32>| -> Vec<GpuSample> {
            ids.map(|i| GpuSample::new(MonoTime(0), GpuSource::Dcgm, i))
                .collect()
        };
        // Each page within the per-page cap, new ids every time.
        let mut first = page(0..40);
        known.keep(&mut first, "u");
        assert_eq!(first.len(), 40);
        let mut second = page(40..80);
        known.keep(&mut second, "u");
        assert_eq!(second.len(), MAX_GPUS - 40, "only room for 24 more ids");
        // The ids kept go on being kept.
        let mut third = page(0..80);
        known.keep(&mut third, "u");
        assert_eq!(third.len(), MAX_GPUS);
        assert!(third.iter().all(|g| g.gpu < MAX_GPUS as u32));
    }

    #[test]
    fn a_scraper_keeps_at_most_max_gpu_instances_over_its_lifetime() {
        let mut known = KnownGpus::default();
        let page = |gpu: u32, ids: std::ops::Range<u32>| -> Vec<GpuSample> {
            let whole = GpuSample::new(MonoTime(0), GpuSource::Dcgm, gpu);
            let instances = ids.map(|i| {
                let mut g = whole.clone();
                g.gpu_instance = Some(i);
                g
            });
            std::iter::once(whole.clone()).chain(instances).collect()
        };
        // New instance ids every scrape: the GPU is kept, its instances until the cap.
        let mut first = page(0, 0..100);
        known.keep(&mut first, "u");
        assert_eq!(first.len(), 1 + 100);
        let mut second = page(0, 100..200);
        known.keep(&mut second, "u");
        assert_eq!(second.len(), 1 + MAX_GPU_INSTANCES - 100);
        let mut third = page(0, 0..200);
        known.keep(&mut third, "u");
        assert_eq!(
            third.len(),
            1 + MAX_GPU_INSTANCES,
            "the ids kept go on being kept"
        );
        // An instance of a GPU left out goes with it; one of a GPU kept stays.
        let mut known = KnownGpus::default();
        let mut gpus = (0..80).flat_map(|gpu| page(gpu, 0..0)).collect();
        known.keep(&mut gpus, "u");
        assert_eq!(gpus.len(), MAX_GPUS);
        let mut late = page(79, 0..1);
        known.keep(&mut late, "u");
        assert!(late.is_empty(), "{late:?}");
        let mut kept = page(0, 0..1);
        known.keep(&mut kept, "u");
        assert_eq!(kept.len(), 2);
    }
}
