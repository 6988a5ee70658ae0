//! dcgm-exporter: its `DCGM_FI_*` metrics mapped onto [`GpuSample`], and a scraper that keeps
//! them in a bounded ring (default endpoint `http://127.0.0.1:9400/metrics`).
//!
//! Units follow dcgm-exporter's `default-counters.csv`: framebuffer in MiB, power in W, energy
//! in mJ, clocks in MHz, `DCGM_FI_PROF_PCIE_*_BYTES` as bytes per second.

use std::time::Duration;

use canary_core::MonoTime;
use tokio_util::sync::CancellationToken;

use crate::gpu::GpuSample;
use crate::http::{self, Endpoint, OutageLog, ScrapeError};
use crate::prometheus::{self, Scrape};
use crate::ring::Ring;
use crate::source::{SharedState, SourceState};
use canary_core::GpuSource;

/// A label's name or value as a sample keeps it: at most `max` bytes, printable (a GPU's
/// model name is printed by `doctor` and kept in the run's context).
fn cut(s: &str, max: usize) -> String {
    canary_core::printable(canary_core::prefix_within(s, max)).into_owned()
}

/// dcgm-exporter's default address.
pub const DEFAULT_DCGM_URL: &str = "http://127.0.0.1:9400/metrics";

/// Labels that identify the GPU (used for fields, not copied into [`GpuSample::labels`]).
const IDENTITY_LABELS: &[&str] = &["gpu", "UUID", "modelName", "device", "pci_bus_id"];

const MIB: f64 = 1024.0 * 1024.0;

/// GPUs one page may describe; later ones are left out. Nodes have 8, or a few more.
pub const MAX_GPUS: usize = 64;

/// Labels kept per GPU beyond its identity, and the bytes kept of each name and value:
/// every scrape's sample owns a copy, and the ring keeps thousands (a page whose label held
/// 30 MiB grew the daemon by that much every second).
pub const MAX_LABELS: usize = 12;
const MAX_LABEL_NAME: usize = 64;
const MAX_LABEL_VALUE: usize = 128;

/// Maps one dcgm-exporter page onto one [`GpuSample`] per GPU (by the `gpu` label), in GPU
/// order. Metrics without a `gpu` label (or with a non-numeric one) are ignored; so are GPUs
/// past [`MAX_GPUS`], and labels past [`MAX_LABELS`] (names and values are cut short).
pub fn gpu_samples(scrape: &Scrape, at: MonoTime) -> Vec<GpuSample> {
    let mut out: Vec<GpuSample> = Vec::new();
    let mut fb_free: Vec<(u32, f64)> = Vec::new();
    let mut fb_reserved: Vec<(u32, f64)> = Vec::new();
    for fam in scrape
        .families
        .iter()
        .filter(|f| f.name.starts_with("DCGM_"))
    {
        for s in fam.samples.iter().filter(|s| s.value.is_finite()) {
            let Some(gpu) = s.labels.get("gpu").and_then(|g| g.parse::<u32>().ok()) else {
                continue;
            };
            let i = match out.iter().position(|g| g.gpu == gpu) {
                Some(i) => i,
                None if out.len() == MAX_GPUS => continue,
                None => {
                    let mut g = GpuSample::new(at, GpuSource::Dcgm, gpu);
                    let value = |k: &str| s.labels.get(k).map(|v| cut(v, MAX_LABEL_VALUE));
                    g.uuid = value("UUID");
                    g.model_name = value("modelName");
                    g.labels = s
                        .labels
                        .iter()
                        .filter(|(k, _)| !IDENTITY_LABELS.contains(k) && !k.starts_with("err_"))
                        .take(MAX_LABELS)
                        .map(|(k, v)| (cut(k, MAX_LABEL_NAME), cut(v, MAX_LABEL_VALUE)))
                        .collect();
                    out.push(g);
                    out.len() - 1
                }
            };
            let g = &mut out[i];
            let v = s.value;
            match fam.name.as_str() {
                "DCGM_FI_DEV_GPU_UTIL" => g.util_gpu_pct = Some(v),
                "DCGM_FI_DEV_MEM_COPY_UTIL" => g.util_mem_pct = Some(v),
                "DCGM_FI_DEV_FB_USED" => g.mem_used_bytes = Some((v * MIB) as u64),
                "DCGM_FI_DEV_FB_TOTAL" => g.mem_total_bytes = Some((v * MIB) as u64),
                "DCGM_FI_DEV_FB_FREE" => fb_free.push((gpu, v)),
                "DCGM_FI_DEV_FB_RESERVED" => fb_reserved.push((gpu, v)),
                "DCGM_FI_DEV_POWER_USAGE" => g.power_w = Some(v),
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => g.energy_j = Some(v / 1000.0),
                "DCGM_FI_DEV_GPU_TEMP" => g.temp_c = Some(v),
                "DCGM_FI_DEV_SM_CLOCK" => g.sm_clock_mhz = Some(v),
                "DCGM_FI_DEV_MEM_CLOCK" => g.mem_clock_mhz = Some(v),
                "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" | "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" => {
                    g.throttle_reasons = Some(v as u64)
                }
                "DCGM_FI_PROF_PCIE_TX_BYTES" => g.pcie_tx_bytes_per_s = Some(v),
                "DCGM_FI_PROF_PCIE_RX_BYTES" => g.pcie_rx_bytes_per_s = Some(v),
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => g.gr_engine_active = Some(v),
                _ => {}
            }
        }
    }
    // No FB_TOTAL in the default field set: total = used + free + reserved.
    for g in &mut out {
        if g.mem_total_bytes.is_none() {
            let find = |v: &[(u32, f64)]| v.iter().find(|(i, _)| *i == g.gpu).map(|x| x.1);
            if let (Some(used), Some(free)) = (g.mem_used_bytes, find(&fb_free)) {
                let reserved = find(&fb_reserved).unwrap_or(0.0);
                // `as` saturates; so does the sum, whatever a page claims.
                g.mem_total_bytes = Some(used.saturating_add(((free + reserved) * MIB) as u64));
            }
        }
    }
    out.sort_by_key(|g| g.gpu);
    out
}

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
    /// Samples kept (one per GPU per scrape; default 28800: 8 GPUs for an hour at 1 s).
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
                let mut gpus = gpu_samples(&prometheus::parse(&text), at);
                known.keep(&mut gpus, &self.endpoint.url);
                let n = gpus.len();
                gpus.into_iter().for_each(|g| ring.push(g));
                format!("{}: {n} GPU(s)", self.endpoint.url)
            },
        )
        .await;
        Ok(())
    }
}

/// The GPU ids a scraper has kept: [`MAX_GPUS`] over its lifetime, not per page. An exporter
/// whose ids changed every scrape filled the ring with thousands of series, and each
/// request's join walks them all.
#[derive(Default)]
struct KnownGpus {
    ids: Vec<u32>,
    warned: bool,
}

impl KnownGpus {
    /// Leaves out the samples of GPUs past the first [`MAX_GPUS`] ids seen (warned once).
    fn keep(&mut self, gpus: &mut Vec<GpuSample>, url: &str) {
        gpus.retain(|g| {
            if self.ids.contains(&g.gpu) {
                return true;
            }
            if self.ids.len() < MAX_GPUS {
                self.ids.push(g.gpu);
                return true;
            }
            if !std::mem::replace(&mut self.warned, true) {
                tracing::warn!(
                    %url,
                    "dcgm-exporter: more than {MAX_GPUS} GPU ids seen since the start; \
                     the later ones are left out (said once)"
                );
            }
            false
        });
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
        Ok((text, at)) => match gpu_samples(&prometheus::parse(&text), at).as_slice() {
            [] => {
                SourceState::unavailable(format!("{url}: answered, but no DCGM_FI_* GPU metrics"))
            }
            gpus => SourceState::available(format!(
                "{url}: {} GPU(s), {}",
                gpus.len(),
                gpus[0].model_name.as_deref().unwrap_or("unknown model")
            )),
        },
        Err(e) => SourceState::unavailable(http::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
