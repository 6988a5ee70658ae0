//! dcgm-exporter: its `DCGM_FI_*` metrics mapped onto [`GpuSample`] (one per GPU and one per
//! MIG instance; `page.rs`), and a scraper that keeps them in a bounded ring (default endpoint
//! `http://127.0.0.1:9400/metrics`).
//!
//! Units follow dcgm-exporter's `default-counters.csv`: framebuffer in MiB, power in W, energy
//! in mJ, clocks in MHz, `DCGM_FI_PROF_PCIE_*_BYTES` as bytes per second.

mod page;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use canary_core::MonoTime;

use crate::gpu::GpuSample;
use crate::http::{self, Endpoint, Note, OutageLog, ScrapeError};
use crate::prometheus::{self, MAX_FAMILIES, MAX_SAMPLES};
use crate::ring::Ring;
use crate::source::{SharedState, SourceState};

#[cfg(test)]
pub(crate) use page::MAX_GPU_INSTANCE_ID;
pub use page::{gpu_samples, gpu_samples_cut, MAX_GPUS, MAX_GPU_INSTANCES, MAX_LABELS};

/// dcgm-exporter's default address.
pub const DEFAULT_DCGM_URL: &str = "http://127.0.0.1:9400/metrics";

/// The largest dcgm-exporter page read. A real page is about 11 KB per GPU with Kubernetes
/// labels (`shared/fixtures`), so [`MAX_GPUS`] GPUs' is under 1 MiB; the 32 MiB a server's
/// `/metrics` may take cost the daemon ~0.5 GB and ~40 % of a core at one scrape a second.
pub const MAX_PAGE_BYTES: usize = 4 << 20;

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
    /// What was warned about this endpoint, shared with earlier scrapers of it.
    said: OutageLog,
}

impl DcgmScraper {
    /// Validates the URL; nothing is contacted yet.
    pub fn new(config: DcgmConfig) -> Result<DcgmScraper, ScrapeError> {
        Ok(DcgmScraper {
            endpoint: Endpoint::parse(&config.url, config.tls.clone())?
                .with_outage(config.outage.clone())
                .with_body_cap(MAX_PAGE_BYTES),
            interval: config.interval,
            timeout: config
                .timeout
                .unwrap_or_else(|| http::default_scrape_timeout(config.interval)),
            ring: Ring::new(config.capacity),
            state: SharedState::default(),
            said: config.outage,
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

    /// How long one scrape may take before it counts as failed.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The endpoint's URL as shown (without user info or query).
    pub fn url(&self) -> &str {
        &self.endpoint.url
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
                let url = &self.endpoint.url;
                let page = read_page(&text, at);
                // A page without a GPU's DCGM_FI_* sample is no dcgm-exporter's (the server's
                // own `/metrics`, a proxy's page): said once, and again only after a page
                // with GPUs, as an outage is.
                let no_gpu = page.gpus.is_empty() && page.over_caps == 0;
                if self.said.page_news(Note::NotDcgm, no_gpu) {
                    tracing::warn!(
                        %url,
                        "dcgm-exporter: unavailable: {}; retrying quietly every {:?} (said once)",
                        page.no_gpus(url),
                        self.interval
                    );
                }
                if no_gpu {
                    return SourceState::unavailable(page.no_gpus(url));
                }
                let Page {
                    mut gpus,
                    cut,
                    over_caps,
                    ..
                } = page;
                let dropped = known.keep(&mut gpus);
                if (cut || dropped) && self.said.note(Note::GpusLeftOut) {
                    tracing::warn!(
                        %url,
                        "dcgm-exporter: more than {MAX_GPUS} GPU ids or {MAX_GPU_INSTANCES} MIG \
                         instances seen; the later ones are left out (said once)"
                    );
                }
                if over_caps > 0 && self.said.note(Note::OverCaps) {
                    tracing::warn!(%url, "dcgm-exporter: {} (said once)", over(over_caps));
                }
                let counted = count(&gpus, cut || dropped);
                let empty = gpus.is_empty();
                gpus.into_iter().for_each(|g| ring.push(g));
                match over_caps {
                    0 => SourceState::available(format!("{url}: {counted}")),
                    n if empty => SourceState::unavailable(format!("{url}: {}", over(n))),
                    n => SourceState::available(format!("{url}: {counted}; {}", over(n))),
                }
            },
            |reason| reason,
        )
        .await;
        Ok(())
    }
}

/// One page read: its GPU samples within the caps, whether GPUs or instances past them were
/// left out, how many lines past the parser's own caps were, and what else it held.
struct Page {
    gpus: Vec<GpuSample>,
    cut: bool,
    over_caps: usize,
    held: Held,
}

/// What a page held besides GPU samples, counted as it is read (no sample is kept for it):
/// to say what a page without a GPU was.
#[derive(Debug, Default)]
struct Held {
    /// `DCGM_FI_*` samples, of a GPU or not.
    dcgm_samples: usize,
    /// Families declared `DCGM_FI_*` (a `# TYPE` or `# HELP` line).
    dcgm_families: usize,
    /// Families in all, and the first one's name (cut to [`NAME_SHOWN`] bytes).
    families: usize,
    first_family: Option<String>,
    /// Samples of other metrics, and the first one's name, for a page that declares none.
    other_samples: usize,
    first_other: Option<String>,
    /// Lines that could not be read as Prometheus text.
    unread: usize,
}

/// The bytes of a metric name quoted in a reason.
const NAME_SHOWN: usize = 64;

fn shown(name: &str) -> String {
    canary_core::printable(canary_core::prefix_within(name, NAME_SHOWN)).into_owned()
}

impl Page {
    /// Why a page without GPUs is no use, in words: what it held instead.
    fn no_gpus(&self, url: &str) -> String {
        let h = &self.held;
        let unread = match h.unread {
            0 => String::new(),
            n => format!(", {n} line(s) that could not be read as Prometheus text"),
        };
        if h.dcgm_samples > 0 {
            return format!(
                "{url}: {} DCGM_FI_* sample(s), none of a GPU (no `gpu` index label){unread}",
                h.dcgm_samples
            );
        }
        if h.dcgm_families > 0 {
            return format!(
                "{url}: DCGM_FI_* metrics declared but no GPU sample (an exporter that sees no \
                 GPU?){unread}"
            );
        }
        let held = match (&h.first_family, &h.first_other) {
            (Some(first), _) => format!("{} metric families (first: {first})", h.families),
            (None, Some(first)) => {
                format!(
                    "{} samples of other metrics (first: {first})",
                    h.other_samples
                )
            }
            (None, None) => "no metric".to_owned(),
        };
        format!("{url}: not a dcgm-exporter page, no DCGM_FI_* metric: {held}{unread}")
    }
}

/// Parses a page keeping only the lines the GPU samples need, within the GPU caps.
fn read_page(text: &str, at: MonoTime) -> Page {
    let mut wanted = page::Wanted::default();
    let mut held = Held::default();
    let scrape = prometheus::parse_wanted(text, |n, l, v| {
        match n.starts_with("DCGM_FI_") {
            true => held.dcgm_samples += 1,
            false => {
                held.other_samples += 1;
                held.first_other.get_or_insert_with(|| shown(n));
            }
        }
        wanted.keep(n, l, v)
    });
    let (gpus, cut) = gpu_samples_cut(&scrape, at);
    held.families = scrape.families.len();
    held.first_family = scrape.families.first().map(|f| shown(&f.name));
    held.dcgm_families = scrape
        .families
        .iter()
        .filter(|f| f.name.starts_with("DCGM_FI_"))
        .count();
    held.unread = scrape.skipped_lines;
    Page {
        gpus,
        cut: cut || wanted.cut,
        over_caps: scrape.over_caps,
        held,
    }
}

/// Lines past the parser's caps, in words: the families that lost some are left empty, so
/// the figures miss them.
fn over(lines: usize) -> String {
    format!(
        "the page is over the parser's caps ({MAX_SAMPLES} samples, {MAX_FAMILIES} metric \
         families): {lines} line(s) left out, and the fields that lost lines are left empty"
    )
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
}

impl KnownGpus {
    /// Leaves out the samples of GPUs past the first [`MAX_GPUS`] ids seen, and of instances
    /// past the first [`MAX_GPU_INSTANCES`] or of a GPU left out; true when it left some
    /// out. A page lists each GPU before its instances.
    fn keep(&mut self, gpus: &mut Vec<GpuSample>) -> bool {
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
            }
            room
        });
        gpus.len() < before
    }
}

/// Tries one scrape of dcgm-exporter (for `canaryd doctor`; `https://` against the system's
/// roots).
pub async fn probe_dcgm(url: &str, timeout: Duration) -> SourceState {
    let result = match Endpoint::parse(url, None) {
        Ok(e) => e.with_body_cap(MAX_PAGE_BYTES).get(timeout).await,
        Err(e) => Err(e),
    };
    match result {
        Ok((text, at)) => match read_page(&text, at) {
            Page { over_caps: n, .. } if n > 0 => {
                SourceState::unavailable(format!("{url}: {}", over(n)))
            }
            page if page.gpus.is_empty() => SourceState::unavailable(page.no_gpus(url)),
            Page { gpus, cut, .. } => SourceState::available(format!(
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
        assert!(known.keep(&mut page));
        assert!(!known.keep(&mut page));
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
        known.keep(&mut first);
        assert_eq!(first.len(), 40);
        let mut second = page(40..80);
        known.keep(&mut second);
        assert_eq!(second.len(), MAX_GPUS - 40, "only room for 24 more ids");
        // The ids kept go on being kept.
        let mut third = page(0..80);
        known.keep(&mut third);
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
        known.keep(&mut first);
        assert_eq!(first.len(), 1 + 100);
        let mut second = page(0, 100..200);
        known.keep(&mut second);
        assert_eq!(second.len(), 1 + MAX_GPU_INSTANCES - 100);
        let mut third = page(0, 0..200);
        known.keep(&mut third);
        assert_eq!(
            third.len(),
            1 + MAX_GPU_INSTANCES,
            "the ids kept go on being kept"
        );
        // An instance of a GPU left out goes with it; one of a GPU kept stays.
        let mut known = KnownGpus::default();
        let mut gpus = (0..80).flat_map(|gpu| page(gpu, 0..0)).collect();
        known.keep(&mut gpus);
        assert_eq!(gpus.len(), MAX_GPUS);
        let mut late = page(79, 0..1);
        known.keep(&mut late);
        assert!(late.is_empty(), "{late:?}");
        let mut kept = page(0, 0..1);
        known.keep(&mut kept);
        assert_eq!(kept.len(), 2);
    }
}
