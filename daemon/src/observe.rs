//! One replay run with its observers: server `/metrics`, NVML and DCGM sampled on the same
//! monotonic clock, joined to every record and summarized beside the client's figures.
//!
//! Every source is optional. One that cannot start is reported once (a warning and a
//! `telemetry.sources` entry in `summary.json`) and the replay goes on without it.

use anyhow::Result;
use canary_core::RunSummary;
use canary_core::{MonoTime, RequestRecord, RequestTelemetry};
use canary_replay::{
    Config, Observer, Observers, Progress, PromptBuilder, RunOutcome, Schedule, SectionsFuture,
};
use canary_telemetry::{
    gpu_over_interval, DcgmConfig, DcgmScraper, GpuSample, NvmlConfig, NvmlSampler, OutageLog,
    Ring, RunGpuSummary, ServerMetrics, ServerMetricsConfig, ServerMetricsScraper, SourceState,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Which telemetry sources a run uses.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// The server's Prometheus endpoint; `None` turns scraping off.
    pub server_metrics_url: Option<String>,
    /// How often to scrape it.
    pub server_metrics_interval: Duration,
    /// Sample GPUs through NVML.
    pub nvml: bool,
    /// `libnvidia-ml.so` to load instead of the system's.
    pub nvml_lib: Option<PathBuf>,
    /// How often to sample NVML.
    pub nvml_interval: Duration,
    /// A dcgm-exporter endpoint; `None` turns it off.
    pub dcgm_url: Option<String>,
    /// How often to scrape DCGM.
    pub dcgm_interval: Duration,
    /// The inference server's PID, for per-process GPU utilization.
    pub server_pid: Option<u32>,
    /// Extra trust anchors (PEM) for `https://` metrics endpoints, the target's `--ca-bundle`.
    pub ca_bundle: Option<PathBuf>,
    /// Kernel socket timing through eBPF (needs CAP_BPF and CAP_PERFMON).
    pub ebpf: bool,
    /// Whether the server endpoint's outage was already warned about (shared across runs).
    pub server_metrics_outage: OutageLog,
    /// The same for DCGM.
    pub dcgm_outage: OutageLog,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            server_metrics_url: None,
            server_metrics_interval: Duration::from_secs(1),
            nvml: true,
            nvml_lib: None,
            nvml_interval: Duration::from_millis(500),
            dcgm_url: None,
            dcgm_interval: Duration::from_secs(1),
            server_pid: None,
            ca_bundle: None,
            ebpf: true,
            server_metrics_outage: OutageLog::default(),
            dcgm_outage: OutageLog::default(),
        }
    }
}

/// Runs one replay with telemetry attached. Sources that are unavailable are reported once
/// and left out; the replay never depends on them. An observer already set in `config`
/// (an exporter, say) is kept and runs after the telemetry one.
pub async fn observed_run(
    mut config: Config,
    schedule: Schedule,
    prompts: Arc<PromptBuilder>,
    info: serde_json::Value,
    telemetry: &TelemetryConfig,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<RunOutcome> {
    let stop_sources = CancellationToken::new();
    let mut observer = TelemetryObserver::start(telemetry, &stop_sources);
    let mut observers: Vec<Arc<dyn Observer>> = Vec::new();
    let ebpf = if !telemetry.ebpf {
        SourceState::Disabled
    } else {
        match crate::kernel::KernelObserver::start() {
            Ok(k) => {
                observers.push(Arc::new(k));
                SourceState::available("socket timing joined by cookie")
            }
            Err(e) => {
                tracing::warn!("kernel socket timing off: {e}");
                SourceState::unavailable(e.to_string())
            }
        }
    };
    observer.sources.insert("ebpf", ebpf);
    observers.insert(0, Arc::new(observer));
    observers.extend(config.observer.take());
    config.observer = Some(Arc::new(Observers(observers)));
    let outcome = canary_replay::run(config, schedule, prompts, info, shutdown, progress).await;
    stop_sources.cancel();
    Ok(outcome?)
}

/// Samples the configured sources and joins them to records by time.
pub struct TelemetryObserver {
    server: Option<ServerMetrics>,
    gpus: Vec<Ring<GpuSample>>,
    dcgm_state: Option<canary_telemetry::SharedState>,
    sources: BTreeMap<&'static str, SourceState>,
    /// The endpoints' URLs as configured and as shown: states quote the URL, and its user
    /// info or query may hold a secret.
    redactions: Redactions,
}

/// Replaces each configured URL by its redacted form in text shown to people.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactions(Vec<(String, String)>);

impl Redactions {
    /// Redacts `url` from now on.
    pub(crate) fn add(&mut self, url: &str) {
        let shown = crate::config::redact_url(url);
        if shown != url {
            self.0.push((url.to_string(), shown));
        }
    }

    /// `s` with every URL added shown redacted.
    pub(crate) fn text(&self, s: &str) -> String {
        self.0
            .iter()
            .fold(s.to_string(), |s, (raw, shown)| s.replace(raw, shown))
    }

    /// A state whose text is redacted.
    pub(crate) fn state(&self, state: SourceState) -> SourceState {
        match state {
            SourceState::Available { detail } => SourceState::available(self.text(&detail)),
            SourceState::Unavailable { reason } => SourceState::unavailable(self.text(&reason)),
            other => other,
        }
    }
}

impl TelemetryObserver {
    /// Starts every configured source; they stop when `stop` is cancelled.
    pub fn start(cfg: &TelemetryConfig, stop: &CancellationToken) -> TelemetryObserver {
        let mut sources = BTreeMap::new();
        // https:// metrics endpoints trust what the target trusts; without a bundle the
        // telemetry crate uses the system's roots itself.
        let tls =
            cfg.ca_bundle
                .as_deref()
                .and_then(|b| match canary_replay::client_config(Some(b)) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!("metrics over https: {e}; using the system's roots");
                        None
                    }
                });
        let mut server = None;
        let mut redactions = Redactions::default();
        for url in [&cfg.server_metrics_url, &cfg.dcgm_url]
            .into_iter()
            .flatten()
        {
            redactions.add(url);
        }
        match &cfg.server_metrics_url {
            None => {
                sources.insert("server_metrics", SourceState::Disabled);
            }
            Some(url) => {
                let mut c = ServerMetricsConfig::new(url.clone());
                c.interval = cfg.server_metrics_interval;
                c.tls = tls.clone();
                c.outage = cfg.server_metrics_outage.clone();
                match ServerMetricsScraper::new(c) {
                    Ok(scraper) => {
                        server = Some(scraper.handle());
                        tokio::spawn(scraper.run(stop.clone()));
                        sources.insert("server_metrics", SourceState::Pending);
                    }
                    Err(e) => {
                        let e = redactions.text(&e.to_string());
                        tracing::warn!("server metrics off: {e}");
                        sources.insert("server_metrics", SourceState::unavailable(e));
                    }
                }
            }
        }
        let mut gpus = Vec::new();
        let mut dcgm_state = None;
        if cfg.nvml {
            let nvml_cfg = NvmlConfig {
                lib_path: cfg.nvml_lib.clone(),
                interval: cfg.nvml_interval,
                server_pid: cfg.server_pid,
                ..NvmlConfig::default()
            };
            let (sampler, state) = NvmlSampler::open_or_report(nvml_cfg);
            if let Some(sampler) = sampler {
                gpus.push(sampler.samples());
                tokio::spawn(sampler.run(stop.clone()));
            }
            sources.insert("nvml", state);
        } else {
            sources.insert("nvml", SourceState::Disabled);
        }
        match &cfg.dcgm_url {
            None => {
                sources.insert("dcgm", SourceState::Disabled);
            }
            Some(url) => {
                let dcgm_cfg = DcgmConfig {
                    url: url.clone(),
                    tls: tls.clone(),
                    outage: cfg.dcgm_outage.clone(),
                    interval: cfg.dcgm_interval,
                    ..DcgmConfig::default()
                };
                match DcgmScraper::new(dcgm_cfg) {
                    Ok(scraper) => {
                        gpus.push(scraper.samples());
                        dcgm_state = Some(scraper.state());
                        tokio::spawn(scraper.run(stop.clone()));
                        sources.insert("dcgm", SourceState::Pending);
                    }
                    Err(e) => {
                        let e = redactions.text(&e.to_string());
                        tracing::warn!("DCGM off: {e}");
                        sources.insert("dcgm", SourceState::unavailable(e));
                    }
                }
            }
        }
        TelemetryObserver {
            server,
            gpus,
            dcgm_state,
            sources,
            redactions,
        }
    }
}

fn at(t0: MonoTime, ms: f64) -> MonoTime {
    MonoTime((t0.as_nanos() as f64 + ms.max(0.0) * 1e6) as u64)
}

impl Observer for TelemetryObserver {
    fn annotate(&self, rec: &mut RequestRecord, t0: MonoTime) {
        if self.server.is_none() && self.gpus.is_empty() {
            return;
        }
        let sent = at(t0, rec.sent_at_ms);
        let end = at(t0, rec.ended_at_ms.max(rec.sent_at_ms));
        let mut t = RequestTelemetry::default();
        for ring in &self.gpus {
            let w = gpu_over_interval(&ring.covering(sent, end), None, sent, end);
            t.gpu_util_avg_pct = t.gpu_util_avg_pct.or(w.util_avg_pct);
            t.gpu_util_max_pct = t.gpu_util_max_pct.or(w.util_max_pct);
            t.gpu_power_avg_w = t.gpu_power_avg_w.or(w.power_avg_w);
            t.gpu_power_max_w = t.gpu_power_max_w.or(w.power_max_w);
        }
        if let Some(server) = &self.server {
            if let Some(s) = server.at_or_before(sent) {
                t.server_queue_depth_at_send = s.queue_depth;
                t.server_kv_usage_at_send = s.kv_cache_usage;
            }
            if let Some(ttft) = rec.ttft_ms {
                if let Some(s) = server.at_or_before(at(t0, rec.sent_at_ms + ttft)) {
                    t.server_running_at_first_token = s.running_requests;
                }
            }
        }
        if t != RequestTelemetry::default() {
            rec.telemetry = Some(t);
        }
    }

    fn finish<'a>(
        &'a self,
        t0: MonoTime,
        end: MonoTime,
        summary: &'a RunSummary,
    ) -> SectionsFuture<'a> {
        Box::pin(async move {
            let mut sources: BTreeMap<&str, SourceState> = self.sources.clone();
            let mut sections = Vec::new();
            if let Some(server) = &self.server {
                // One last scrape so the run's final requests are inside the histogram deltas.
                let _ = server.scrape_now().await;
                sources.insert("server_metrics", server.state());
                let server_summary = server.summary(t0, end);
                let mut value = json!(server_summary);
                // Client minus server TTFT: network, client overhead and queueing outside the
                // engine. Server percentiles are bucket estimates, so the mean is the firmer one.
                if let (Some(client), Some(srv)) = (
                    summary.metrics.get("time_to_first_token"),
                    server_summary.ttft_s.as_ref(),
                ) {
                    let gap = |c: f64, s: Option<f64>| s.map(|s| c - s * 1e3);
                    value["client_minus_server_ttft_ms"] = json!({
                        "mean": gap(client.avg, srv.mean),
                        "p50": gap(client.p50, srv.p50),
                        "p99": gap(client.p99, srv.p99),
                    });
                }
                sections.push(("server".to_string(), value));
            }
            if let Some(state) = &self.dcgm_state {
                sources.insert("dcgm", state.get());
            }
            let gpu_samples: Vec<GpuSample> =
                self.gpus.iter().flat_map(|r| r.covering(t0, end)).collect();
            if let Some(gpu) =
                RunGpuSummary::over(&gpu_samples, t0, end, summary.total_output_tokens)
            {
                sections.push(("gpu".to_string(), json!(gpu)));
            }
            let sources: BTreeMap<&str, SourceState> = sources
                .into_iter()
                .map(|(k, v)| (k, self.redactions.state(v)))
                .collect();
            sections.push(("telemetry_sources".to_string(), json!(sources)));
            sections
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_states_never_show_user_info_or_query() {
        let mut r = Redactions::default();
        r.add("http://u:pw-SECRET@gpu1:8000/metrics?token=TOK-SECRET");
        r.add("http://127.0.0.1:9400/metrics");
        let state = r.state(SourceState::unavailable(
            "http://u:pw-SECRET@gpu1:8000/metrics?token=TOK-SECRET: cannot connect",
        ));
        assert_eq!(
            state,
            SourceState::unavailable("http://gpu1:8000/metrics: cannot connect")
        );
        let ok = SourceState::available("http://127.0.0.1:9400/metrics: 1 GPU(s)");
        assert_eq!(r.state(ok.clone()), ok);
    }
}
