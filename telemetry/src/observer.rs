//! [`TelemetryObserver`]: the run's server `/metrics`, NVML and DCGM, sampled on the same
//! monotonic clock as the records, joined to every record and summarized beside the
//! client's figures.
//!
//! Every source is optional. One that cannot start is reported once (a warning and a
//! `telemetry_sources` entry in `summary.json`) and the run goes on without it.

use crate::correlate::gpu_over_interval;
use crate::dcgm::{DcgmConfig, DcgmScraper};
use crate::gpu::GpuSample;
use crate::gpu_summary::gpu_summary;
use crate::http::{Note, OutageLog};
use crate::nvml::{NvmlConfig, NvmlOpener};
use crate::ring::Ring;
use crate::scrape::{ServerMetrics, ServerMetricsConfig, ServerMetricsScraper};
use crate::series::{gpu_series, server_series};
use crate::server_info::{base_url, server_context};
use crate::source::SharedState;
use canary_core::{
    Comparison, GpuContext, Known, MonoTime, Observer, PhaseFuture, Redactions, RequestRecord,
    RequestTelemetry, RunContext, RunSummary, RunTelemetry, Source, SourceState, TelemetryFuture,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Which telemetry sources a run uses. [`Config::default`] holds every default: NVML on at
/// 500 ms, `/metrics` and DCGM off until given a URL, scraped every second.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's Prometheus endpoint; `None` turns scraping off.
    pub server_metrics_url: Option<String>,
    /// How often to scrape it.
    pub server_metrics_interval: Duration,
    /// The run's model: of a page with several models' series, only its are read.
    pub server_metrics_model: Option<String>,
    /// Sample GPUs through NVML.
    pub nvml: bool,
    /// Why NVML is known to be unavailable (an earlier run found it so): reported as such,
    /// not tried again.
    pub nvml_known_unavailable: Option<String>,
    /// `libnvidia-ml.so` to load instead of the system's.
    pub nvml_lib: Option<PathBuf>,
    /// NVML's opening, shared by runs that share it: a hung open is not started again, and
    /// what it found is warned about once (the daemon's runs can start together).
    pub nvml_opener: NvmlOpener,
    /// How often to sample NVML.
    pub nvml_interval: Duration,
    /// A dcgm-exporter endpoint; `None` turns it off.
    pub dcgm_url: Option<String>,
    /// How often to scrape DCGM.
    pub dcgm_interval: Duration,
    /// The inference server's PID, for per-process GPU utilization.
    pub server_pid: Option<u32>,
    /// Extra trust anchors (PEM) for `https://` metrics endpoints, the target's CA bundle.
    pub ca_bundle: Option<PathBuf>,
    /// The client certificate and key presented to `https://` metrics endpoints that ask for
    /// one: the target's.
    pub client_identity: Option<canary_tls::ClientIdentity>,
    /// Whether the server endpoint's outage was already warned about (shared across runs).
    pub server_metrics_outage: OutageLog,
    /// The same for DCGM.
    pub dcgm_outage: OutageLog,
    /// The run's target and its transport: the server's info routes (`summary.json`'s
    /// `context.server`) are asked over it when they are on the target's origin, as the
    /// context pre-flight asks them.
    pub server_info_target: Option<crate::context_length::TargetInfo>,
}

impl Config {
    /// How often NVML is sampled unless told otherwise: faster than ~100 ms has a cost on
    /// decode.
    pub const NVML_INTERVAL: Duration = Duration::from_millis(500);
    /// How often `/metrics` and DCGM are scraped unless told otherwise.
    pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server_metrics_url: None,
            server_metrics_interval: Config::SCRAPE_INTERVAL,
            server_metrics_model: None,
            nvml: true,
            nvml_known_unavailable: None,
            nvml_lib: None,
            nvml_opener: NvmlOpener::default(),
            nvml_interval: Config::NVML_INTERVAL,
            dcgm_url: None,
            dcgm_interval: Config::SCRAPE_INTERVAL,
            server_pid: None,
            ca_bundle: None,
            client_identity: None,
            server_metrics_outage: OutageLog::default(),
            dcgm_outage: OutageLog::default(),
            server_info_target: None,
        }
    }
}

/// Samples the configured sources and joins them to records by time.
pub struct TelemetryObserver {
    server: Option<ServerMetrics>,
    /// NVML's and DCGM's samples, by source.
    gpus: Vec<(Source, Ring<GpuSample>)>,
    dcgm: Option<DcgmRun>,
    /// The GPUs as NVML described them when it opened.
    gpu_context: Option<GpuContext>,
    /// The GPUs NVML counted that stopped answering.
    nvml_lost: Option<crate::LostGpus>,
    /// The server's base URL (its metrics URL's scheme and authority) and TLS, to ask it
    /// what it is.
    server_base: Option<(String, Option<std::sync::Arc<rustls::ClientConfig>>)>,
    /// The run's model and target, for the same ([`Config::server_info_target`]).
    server_target: (Option<String>, Option<crate::context_length::TargetInfo>),
    sources: BTreeMap<Source, SourceState>,
    /// The endpoints' URLs as configured and as shown: states quote the URL, and its user
    /// info or query may hold a secret.
    redactions: Redactions,
    /// Where the server's window starts: the scrape taken when the measured phase began
    /// (after warm-up), else the moment it began. `None` before then.
    window_from: Mutex<Option<MonoTime>>,
    /// The run's stop (a signal, its deadline): the run's own scrapes are not waited for
    /// once it fires ([`TelemetryObserver::stopped_by`]).
    run_stop: CancellationToken,
    /// Which of the run's own scrapes its stop cut, said in the source's detail.
    cut_by_stop: Mutex<Vec<&'static str>>,
}

/// What the run knows of its DCGM scraper, to say at its end why it has no page yet.
struct DcgmRun {
    state: SharedState,
    started: std::time::Instant,
    timeout: Duration,
    url: String,
    outage: OutageLog,
}

impl DcgmRun {
    /// The scraper's state at the run's end. Still pending means no page came within the run:
    /// a daemon starts a scraper per run, so an exporter that never answers a run shorter
    /// than the scrape's timeout was never reported. Named in the run's sources, and warned
    /// about once until a run has a page again (an exporter slower than the runs are long
    /// would otherwise be warned about every run).
    fn at_end(&self) -> SourceState {
        let state = self.state.get();
        if state != SourceState::Pending {
            self.outage.clear(Note::NoPageInRun);
        }
        match state {
            SourceState::Pending => {
                let reason = format!(
                    "{}: no page within the run (waited {} ms; one scrape may take up to {} \
                     ms)",
                    self.url,
                    self.started.elapsed().as_millis(),
                    self.timeout.as_millis()
                );
                if self.outage.note(Note::NoPageInRun) {
                    tracing::warn!(
                        url = %self.url,
                        "dcgm-exporter: {reason} (said once until a run has a page)"
                    );
                }
                SourceState::unavailable(reason)
            }
            other => other,
        }
    }
}

/// An available source whose ring dropped samples of the run (a run longer than it holds):
/// says so, since its figures then cover the run's later part only.
fn partly(state: SourceState, held: usize, dropped_into_run: std::time::Duration) -> SourceState {
    match state {
        SourceState::Available { detail } => SourceState::available(format!(
            "{detail}; its figures cover part of the run: samples up to {:.1} s into it were \
             dropped for room (it keeps the last {held})",
            dropped_into_run.as_secs_f64()
        )),
        other => other,
    }
}

/// The server source's state when the run's stop cut its own scrapes (`cut`): said, as the
/// server section then ends at the interval's last page (or has none).
fn stopped(state: SourceState, cut: &[&str]) -> SourceState {
    let what = format!(
        "{} not taken: the run was stopped and no page came within {} ms of it",
        cut.join(" and "),
        STOPPED_SCRAPE_BUDGET.as_millis()
    );
    match state {
        SourceState::Available { detail } => SourceState::available(format!(
            "{detail}; {what} (the server's figures end at the last page before it)"
        )),
        SourceState::Unavailable { reason } => {
            SourceState::unavailable(format!("{reason}; {what}"))
        }
        _ => SourceState::unavailable(format!("no page came before the stop; {what}")),
    }
}

/// NVML's state, saying which GPUs stopped answering during the run: their figures cover
/// part of the run, and the totals (power, energy) miss them while they were gone.
fn with_lost_gpus(state: SourceState, lost: &[u32]) -> SourceState {
    match state {
        SourceState::Available { detail } if !lost.is_empty() => {
            let ids: Vec<String> = lost.iter().map(u32::to_string).collect();
            SourceState::available(format!(
                "{detail}; GPU(s) {} stopped answering during the run: their figures, and \
                 the totals, leave them out while they did",
                ids.join(", ")
            ))
        }
        other => other,
    }
}

impl TelemetryObserver {
    /// Starts every configured source; they stop when `stop` is cancelled. Waits for NVML to
    /// open, at most [`crate::NVML_OPEN_TIMEOUT`].
    pub async fn start(cfg: &Config, stop: &CancellationToken) -> TelemetryObserver {
        let mut redactions = Redactions::default();
        for url in [&cfg.server_metrics_url, &cfg.dcgm_url]
            .into_iter()
            .flatten()
        {
            redactions.add(url);
        }
        let mut observer = TelemetryObserver {
            server: None,
            gpus: Vec::new(),
            dcgm: None,
            gpu_context: None,
            nvml_lost: None,
            server_base: None,
            server_target: (
                cfg.server_metrics_model.clone(),
                cfg.server_info_target.clone(),
            ),
            sources: BTreeMap::new(),
            redactions,
            window_from: Mutex::new(None),
            run_stop: CancellationToken::new(),
            cut_by_stop: Mutex::new(Vec::new()),
        };
        // https:// metrics endpoints trust what the target trusts, and present its client
        // certificate; without either the scrapers try the system's roots themselves.
        // canaryd's runs refuse a bundle or identity that cannot be loaded before this starts
        // (canary_replay's Config::validate), whatever the target's scheme; a library
        // caller's is still only a warning here.
        let tls = match (&cfg.ca_bundle, &cfg.client_identity) {
            (None, None) => None,
            (bundle, identity) => {
                match canary_tls::client_config(bundle.as_deref(), identity.as_ref()) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        // The fallback is the system's store: when that is what failed, it
                        // cannot serve either, and saying "using the system's roots" read as
                        // if the scrapes went on (TLS audit L6).
                        let instead = match e {
                            canary_tls::TlsError::SystemStore { .. }
                            | canary_tls::TlsError::NoRoots { .. } => {
                                "the system's store is what failed, so scrapes over https \
                                 cannot verify any server and are off"
                            }
                            _ => {
                                "trying the system's roots alone, without the CA bundle or \
                                 client certificate"
                            }
                        };
                        tracing::warn!("metrics over https: {e}; {instead}");
                        None
                    }
                }
            }
        };
        observer.start_server_metrics(cfg, tls.clone(), stop);
        observer.start_nvml(cfg, stop).await;
        observer.start_dcgm(cfg, tls, stop);
        observer
    }

    /// Stops waiting for the run's own server scrapes (the measured phase's first, the
    /// end's last) and asking the server what it is, once `stop` (the run's stop: a signal,
    /// its deadline) fires: a slow or silent `/metrics` held a stopping run (and daemon) up
    /// to two scrape timeouts at each. What was measured is kept, and the server source's
    /// detail says which scrape the stop cut.
    pub fn stopped_by(mut self, stop: CancellationToken) -> TelemetryObserver {
        self.run_stop = stop;
        self
    }

    /// Runs `scrape`; once the run's stop has fired (before or during it), gives it no more
    /// than [`STOPPED_SCRAPE_BUDGET`] from then: a healthy server's page still lands (a
    /// stopped run keeps its last figures), a slow or silent one costs that much, not a
    /// scrape timeout. `None` then, and `what` is said in the source's detail.
    async fn unless_stopped<T>(
        &self,
        what: &'static str,
        scrape: impl std::future::Future<Output = Option<T>>,
    ) -> Option<T> {
        tokio::pin!(scrape);
        tokio::select! {
            found = &mut scrape => return found,
            () = self.run_stop.cancelled() => {}
        }
        match tokio::time::timeout(STOPPED_SCRAPE_BUDGET, scrape).await {
            Ok(found) => found,
            Err(_) => {
                self.cut_by_stop.lock().expect("cut lock").push(what);
                None
            }
        }
    }

    fn start_server_metrics(
        &mut self,
        cfg: &Config,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
        stop: &CancellationToken,
    ) {
        let Some(url) = &cfg.server_metrics_url else {
            self.sources
                .insert(Source::ServerMetrics, SourceState::Disabled);
            return;
        };
        self.server_base = base_url(url).map(|b| (b, tls.clone()));
        let mut c = ServerMetricsConfig::new(url.clone());
        c.interval = cfg.server_metrics_interval;
        c.tls = tls;
        c.outage = cfg.server_metrics_outage.clone();
        c.model = cfg.server_metrics_model.clone();
        let state = match ServerMetricsScraper::new(c) {
            Ok(scraper) => {
                self.server = Some(scraper.handle());
                tokio::spawn(scraper.run(stop.clone()));
                SourceState::Pending
            }
            Err(e) => {
                let e = self.redactions.text(&e.to_string());
                tracing::warn!("server metrics off: {e}");
                SourceState::unavailable(e)
            }
        };
        self.sources.insert(Source::ServerMetrics, state);
    }

    async fn start_nvml(&mut self, cfg: &Config, stop: &CancellationToken) {
        if !cfg.nvml {
            self.sources.insert(Source::Nvml, SourceState::Disabled);
            return;
        }
        if let Some(why) = &cfg.nvml_known_unavailable {
            self.sources
                .insert(Source::Nvml, SourceState::unavailable(why.clone()));
            return;
        }
        let nvml_cfg = NvmlConfig {
            lib_path: cfg.nvml_lib.clone(),
            interval: cfg.nvml_interval,
            server_pid: cfg.server_pid,
            ..NvmlConfig::default()
        };
        // Off the async workers, the wait bounded: a wedged driver's init never returns.
        let (opened, state) = cfg.nvml_opener.open(nvml_cfg, stop.clone()).await;
        if let Some(nvml) = opened {
            self.gpu_context = Some(nvml.context);
            self.nvml_lost = Some(nvml.lost);
            self.gpus.push((Source::Nvml, nvml.samples));
        }
        self.sources.insert(Source::Nvml, state);
    }

    fn start_dcgm(
        &mut self,
        cfg: &Config,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
        stop: &CancellationToken,
    ) {
        let Some(url) = &cfg.dcgm_url else {
            self.sources.insert(Source::Dcgm, SourceState::Disabled);
            return;
        };
        let dcgm_cfg = DcgmConfig {
            url: url.clone(),
            tls,
            outage: cfg.dcgm_outage.clone(),
            interval: cfg.dcgm_interval,
            ..DcgmConfig::default()
        };
        let state = match DcgmScraper::new(dcgm_cfg) {
            Ok(scraper) => {
                self.gpus.push((Source::Dcgm, scraper.samples()));
                self.dcgm = Some(DcgmRun {
                    state: scraper.state(),
                    started: std::time::Instant::now(),
                    timeout: scraper.timeout(),
                    url: scraper.url().to_owned(),
                    outage: cfg.dcgm_outage.clone(),
                });
                tokio::spawn(scraper.run(stop.clone()));
                SourceState::Pending
            }
            Err(e) => {
                let e = self.redactions.text(&e.to_string());
                tracing::warn!("DCGM off: {e}");
                SourceState::unavailable(e)
            }
        };
        self.sources.insert(Source::Dcgm, state);
    }

    /// What this observer knows of the run's context: the GPUs (NVML) and the server's
    /// engine (its `/metrics`); what it could not see, and why.
    fn context(&self, t: &RunTelemetry) -> RunContext {
        let state = |s: Source| match self.sources.get(&s) {
            Some(st) => format!("{s}: {}", self.redactions.state(st.clone()).name()),
            None => format!("{s}: not attached"),
        };
        let gpu = match &self.gpu_context {
            Some(g) => g.clone(),
            None => {
                let why = format!("no GPU description ({})", state(Source::Nvml));
                GpuContext {
                    model: Known::unavailable(why.clone()),
                    count: Known::unavailable(why.clone()),
                    driver: Known::unavailable(why.clone()),
                    cuda: Known::unavailable(why.clone()),
                    source: Known::unavailable(why),
                }
            }
        };
        let engine = t.server.as_ref().and_then(|s| s.engine);
        // Its name as `summary.json`'s `server.engine` spells it.
        let engine = engine.and_then(|e| match serde_json::to_value(e) {
            Ok(serde_json::Value::String(s)) => Some(s),
            _ => None,
        });
        let mut c = RunContext {
            gpu,
            ..Default::default()
        };
        let why = format!(
            "not asked: no server URL ({})",
            state(Source::ServerMetrics)
        );
        c.server.version = Known::unavailable(why.clone());
        c.server.model = Known::unavailable(why.clone());
        c.server.max_model_len = Known::unavailable(why);
        c.server.engine = match engine {
            Some(e) => Known::Value(e),
            None => Known::unavailable(format!(
                "engine not detected ({})",
                state(Source::ServerMetrics)
            )),
        };
        c
    }

    /// The server's own figures over the measured phase, and how they compare with the
    /// client's.
    async fn server_section(
        &self,
        server: &ServerMetrics,
        t0: MonoTime,
        end: MonoTime,
        summary: &RunSummary,
    ) -> canary_core::RunServerSummary {
        // One last scrape, settled, so the run's final requests are inside the deltas (the
        // interval's scrapes stopped first, one in flight not waited for); none
        // once a stop's grace period is over (the deadline passed, and a server that left
        // requests hanging would add a scrape timeout and the settle budget to the stop).
        // Nor once the run was stopped: a stop is not held up by a slow `/metrics`.
        let last = match past_stop_deadline(summary) {
            false => {
                self.unless_stopped("the run's last scrape", server.last_scrape(true))
                    .await
            }
            true => None,
        };
        let to = last.map_or(end, |s| s.at.max(end));
        let from = *self.window_from.lock().expect("window lock");
        let mut section = match from {
            Some(from) => server.summary_within(from, to),
            None => server.summary(t0, to),
        };
        // A per-gap server ITL is paired with the client's gaps; a per-request mean (TGI,
        // TensorRT-LLM) is not: its comparable figure is the client's per-request ITL.
        let per_gap = section.engine.is_some_and(|e| !e.itl_is_request_mean());
        if section.itl_s.is_some() && per_gap {
            section.client_inter_chunk_latency_ms =
                summary.metrics.get("inter_chunk_latency").cloned();
        }
        section.comparison = Comparison::of(summary, &section);
        section
    }
}

/// How long the server's info routes may take to answer, all of them together.
const SERVER_INFO_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a stopped run still waits for one of its own server scrapes: enough for a healthy
/// `/metrics` on a busy host, little beside a scrape timeout.
const STOPPED_SCRAPE_BUDGET: Duration = Duration::from_millis(500);

/// GPU samples this close together are one sampling round (every GPU read in turn); the
/// fastest sampling allowed is well apart from it.
const GPU_ROUND: Duration = Duration::from_millis(50);

fn at(t0: MonoTime, ms: f64) -> MonoTime {
    MonoTime((t0.as_nanos() as f64 + ms.max(0.0) * 1e6) as u64)
}

impl Observer for TelemetryObserver {
    fn measured_phase(&self, warmup_requests: usize) -> PhaseFuture<'_> {
        Box::pin(async move {
            let Some(server) = &self.server else { return };
            let began = MonoTime::now();
            // After warm-up, wait for the server to count its last warm-up request, so the
            // window's first scrape has them all and the deltas none.
            let first = self
                .unless_stopped(
                    "the measured phase's first scrape",
                    server.settled_scrape(warmup_requests > 0),
                )
                .await;
            *self.window_from.lock().expect("window lock") = Some(first.map_or(began, |s| s.at));
        })
    }

    fn annotate(&self, rec: &mut RequestRecord, t0: MonoTime) {
        if self.server.is_none() && self.gpus.is_empty() {
            return;
        }
        let sent = at(t0, rec.sent_at_ms);
        let end = at(t0, rec.ended_at_ms.max(rec.sent_at_ms));
        let mut t = RequestTelemetry::default();
        for (_, ring) in &self.gpus {
            let w = gpu_over_interval(&ring.covering(sent, end), None, sent, end);
            t.gpu_util_avg_pct = t.gpu_util_avg_pct.or(w.util_avg_pct);
            t.gpu_util_max_pct = t.gpu_util_max_pct.or(w.util_max_pct);
            t.gpu_power_avg_w = t.gpu_power_avg_w.or(w.power_avg_w);
            t.gpu_power_max_w = t.gpu_power_max_w.or(w.power_max_w);
        }
        if let Some(server) = &self.server {
            // Once per request: read the gauges in place, not a copy of the whole sample.
            if let Some((queue, kv)) =
                server.read_state_at(sent, |s| (s.queue_depth, s.kv_cache_usage))
            {
                t.server_queue_depth_at_send = queue;
                t.server_kv_usage_at_send = kv;
            }
            if let Some(ttft) = rec.ttft_ms {
                let first_token = at(t0, rec.sent_at_ms + ttft);
                if let Some(running) = server.read_state_at(first_token, |s| s.running_requests) {
                    t.server_running_at_first_token = running;
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
    ) -> TelemetryFuture<'a> {
        Box::pin(async move {
            let mut sources = self.sources.clone();
            let mut telemetry = RunTelemetry::default();
            if let Some(server) = &self.server {
                telemetry.server = Some(self.server_section(server, t0, end, summary).await);
                telemetry.series.server = server_series(&server.run_window(t0, end), t0);
                let mut state = server.state();
                let cut = self.cut_by_stop.lock().expect("cut lock").clone();
                if !cut.is_empty() {
                    state = stopped(state, &cut);
                }
                if let Some((held, dropped)) = server.dropped_since(t0) {
                    state = partly(state, held, dropped.since(t0));
                }
                sources.insert(Source::ServerMetrics, state);
            }
            if let Some(dcgm) = &self.dcgm {
                sources.insert(Source::Dcgm, dcgm.at_end());
            }
            if let (Some(lost), Some(state)) = (&self.nvml_lost, sources.get_mut(&Source::Nvml)) {
                *state = with_lost_gpus(state.clone(), &lost.all());
            }
            for (source, ring) in &self.gpus {
                if let (Some(dropped), Some(state)) =
                    (ring.dropped_since(t0), sources.get_mut(source))
                {
                    *state = partly(state.clone(), ring.capacity(), dropped.since(t0));
                }
            }
            let gpu_samples: Vec<GpuSample> = self
                .gpus
                .iter()
                .flat_map(|(_, r)| r.covering(t0, end))
                .collect();
            telemetry.gpu = gpu_summary(&gpu_samples, t0, end, summary.total_output_tokens);
            telemetry.series.gpu = gpu_series(&gpu_samples, t0, GPU_ROUND);
            let mut context = self.context(&telemetry);
            if let Some((base, tls)) = &self.server_base {
                let found = match self.run_stop.is_cancelled() {
                    // Up to SERVER_INFO_TIMEOUT more for a stopping run: not asked.
                    true => {
                        const WHY: &str = "not asked: the run was stopped";
                        canary_core::ServerContext {
                            engine: Known::unavailable(WHY),
                            version: Known::unavailable(WHY),
                            model: Known::unavailable(WHY),
                            max_model_len: Known::unavailable(WHY),
                        }
                    }
                    false => {
                        let (model, target) = &self.server_target;
                        let (model, target) = (model.as_deref(), target.as_ref());
                        server_context(base, tls.clone(), model, target, SERVER_INFO_TIMEOUT).await
                    }
                };
                let s = &mut context.server;
                s.version = found.version;
                s.model = found.model;
                s.max_model_len = found.max_model_len;
                // Reasons quote URLs: a secret in them stays out of summary.json.
                for k in [&mut s.version, &mut s.model] {
                    if let Known::Unavailable { unavailable } = k {
                        *unavailable = self.redactions.text(unavailable);
                    }
                }
                if let Known::Unavailable { unavailable } = &mut s.max_model_len {
                    *unavailable = self.redactions.text(unavailable);
                }
            }
            telemetry.context = Some(context);
            telemetry.sources = sources
                .into_iter()
                .map(|(k, v)| (k, self.redactions.state(v)))
                .collect();
            telemetry
        })
    }
}

/// Whether the run's stop cut requests when its grace period ran out (each a `cancelled`
/// error): the stop's deadline has passed, and nothing more is waited for.
fn past_stop_deadline(summary: &RunSummary) -> bool {
    summary
        .errors_by_kind
        .get("cancelled")
        .is_some_and(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stop whose grace ran out (requests cut: `cancelled` errors) ends the run without the
    /// last settled scrape, which against a server that left requests hanging added up to a
    /// scrape timeout and the 3 s settle budget to the daemon's stop.
    #[test]
    fn no_last_scrape_once_the_stop_cut_requests() {
        let mut summary = canary_core::Aggregator::new(Default::default()).summary();
        assert!(!past_stop_deadline(&summary));
        summary.errors_by_kind.insert("timeout".into(), 2);
        assert!(!past_stop_deadline(&summary));
        summary.errors_by_kind.insert("cancelled".into(), 1);
        assert!(past_stop_deadline(&summary));
    }

    #[test]
    fn a_source_that_dropped_samples_of_the_run_says_so() {
        let s = partly(
            SourceState::available("1 GPU"),
            57_600,
            Duration::from_millis(1500),
        );
        assert_eq!(
            s,
            SourceState::available(
                "1 GPU; its figures cover part of the run: samples up to 1.5 s into it were \
                 dropped for room (it keeps the last 57600)"
            )
        );
        let nvml = SourceState::available("2 GPU(s)");
        assert_eq!(with_lost_gpus(nvml.clone(), &[]), nvml);
        assert_eq!(
            with_lost_gpus(nvml, &[1, 3]),
            SourceState::available(
                "2 GPU(s); GPU(s) 1, 3 stopped answering during the run: their figures, and \
                 the totals, leave them out while they did"
            )
        );
        let down = SourceState::unavailable("connection refused");
        assert_eq!(partly(down.clone(), 1, Duration::ZERO), down);
    }
}
