//! One scheduled run of a workload: load and window the trace, build the target, replay with
//! telemetry attached, keep per-request samples for the baseline, judge the verdict.
//! Artifacts go to `<artifacts>/<workload>/<run-id>/`; an interrupted run still writes
//! everything it measured, and its verdict is `interrupted`. A run (a sweep's or a
//! capacity search's too) a stop caught before its first measured request never started: a
//! skip ([`Ran::NotStarted`]).

use crate::config::{run_length, Config, Target, TraceSource, Workload, WorkloadPlan};
use crate::execute::{execute, ExportFuture, Front, Judged, Observe};
use crate::judge::baseline::Samples;
use crate::judge::verdict::Verdict;
use crate::service::run_result::{Ran, RunResult};
use anyhow::{Context, Result};
use canary_core::{ContextBaseline, MonoTime, Observer, RequestRecord, RunOutcome, Source};
use canary_replay::{Plan, Progress, PromptBuilder, PromptSpec, Setting};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

mod capacity;
mod sweep;

/// Prompt synthesizers kept loaded between runs before unused ones are let go.
const PROMPT_BUILDERS_KEPT: usize = 16;

/// Things shared by every run of the daemon: loaded tokenizers, telemetry sources found
/// missing (reported once, then left off instead of warned about every run), the OTLP
/// exporter.
#[derive(Default)]
pub struct RunContext {
    /// A prompt synthesizer per tokenizer and seed, kept loaded between runs.
    prompts: Mutex<HashMap<PromptSpec, Arc<PromptBuilder>>>,
    /// Sources an earlier run found unavailable, with why (said so in every later run) and
    /// when they are tried again.
    missing_sources: Mutex<MissingSources>,
    /// Per scraped source and URL: whether its outage was warned about, so it is once, not
    /// every run. By source too: a `dcgm_url` that is also a target's `metrics_url` is scraped
    /// twice, as two endpoints, each with its own notes (a server page's trouble is not the
    /// DCGM page's).
    outages: Mutex<HashMap<(Source, String), canary_telemetry::OutageLog>>,
    /// NVML's opening and whether eBPF's absence was said: shared from the probe on, since
    /// runs that start together probe before any of them is done (`missing_sources` is
    /// filled only then).
    nvml: canary_telemetry::NvmlOpener,
    ebpf_warned: Arc<std::sync::atomic::AtomicBool>,
    otlp: Option<Arc<crate::service::sinks::otlp::OtlpSink>>,
}

/// Telemetry sources (NVML, eBPF) an earlier run found unavailable. A cause that only a
/// restart can change (NVML's library cannot be loaded; eBPF not built in, no kernel BTF, not
/// permitted) is not tried again until then; any other (a driver not loaded yet at boot, an
/// NVML that hangs or lists no GPU, eBPF programs the kernel rejected) is tried again after a
/// back-off ([`retry_after`]): meanwhile runs say it is unavailable, and until when.
#[derive(Default)]
struct MissingSources(BTreeMap<Source, Missing>);

/// A telemetry source an earlier run found unavailable: what later runs say, the NVML library
/// it was tried with, and when it is tried again. A reload that names another library
/// (`[telemetry] nvml_lib`) tries again: it may be the fix.
struct Missing {
    reason: String,
    nvml_lib: Option<std::path::PathBuf>,
    /// `None`: not before a restart (or, for NVML, a reload naming another library).
    retry: Option<Retry>,
}

/// When a source whose cause may pass is tried again, and the wait that led there.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Retry {
    at: std::time::SystemTime,
    waited: std::time::Duration,
}

/// The first wait before a source whose cause may pass is tried again: 10 min, doubling
/// after each failed try up to [`RETRY_CAP_FACTOR`] times it (1 h).
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_secs(600);

/// The longest wait, in first waits.
const RETRY_CAP_FACTOR: u32 = 6;

/// For tests only (not a setting): the first wait in milliseconds, in place of 10 min, so that
/// a test sees a source tried again within seconds.
const RETRY_TEST_ENV: &str = "CANARYD_TEST_SOURCE_RETRY_MS";

/// The first wait: [`FIRST_RETRY`], or [`RETRY_TEST_ENV`]'s in a test.
fn first_retry() -> std::time::Duration {
    std::env::var(RETRY_TEST_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(FIRST_RETRY, std::time::Duration::from_millis)
}

/// The wait before the next try, `waited` the one before the try that just failed (`None`:
/// the first failure): `first`, then doubling, at most [`RETRY_CAP_FACTOR`] times `first`.
fn retry_after(
    waited: Option<std::time::Duration>,
    first: std::time::Duration,
) -> std::time::Duration {
    match waited {
        None => first,
        Some(w) => w
            .saturating_mul(2)
            .min(first.saturating_mul(RETRY_CAP_FACTOR)),
    }
}

/// Whether eBPF's `reason` (a [`canary_ebpf::Unavailable`]'s words) lasts until a restart:
/// the programs are not built in, the kernel has no BTF, or the process may not load them (its
/// capabilities do not change while it lives). Another refusal, or programs that attached
/// but saw nothing, may pass.
fn ebpf_lasts_until_restart(reason: &str) -> bool {
    use canary_ebpf::Unavailable;
    const CUT: &str = "\u{1}";
    let head = |u: Unavailable| {
        let text = u.to_string();
        text[..text.find(CUT).unwrap_or(text.len())].to_owned()
    };
    [
        head(Unavailable::NotBuilt(CUT)),
        head(Unavailable::NoBtf(CUT.into())),
        head(Unavailable::NotPermitted(CUT.into())),
    ]
    .iter()
    .any(|h| reason.starts_with(h.as_str()))
}

/// Marks a reason said from what an earlier run found (the run was told, it did not try).
const FOUND_EARLIER: &str = "found at an earlier run;";

/// What [`MissingSources::note`] found new, for the log.
#[derive(Debug, PartialEq)]
enum Noted {
    /// Found unavailable: the start of a spell. `retry`: when it is tried again.
    Missing { retry: Option<Retry> },
    /// Tried again, still unavailable.
    StillMissing { retry: Retry },
    /// Available again after a spell.
    Back,
}

impl MissingSources {
    /// Why `source` is known unavailable for a run starting `now` with NVML's library `lib`:
    /// `None` when it is to be tried (never found missing, the library named is another, or
    /// its retry is due).
    fn known(
        &self,
        source: Source,
        lib: &Option<std::path::PathBuf>,
        now: std::time::SystemTime,
    ) -> Option<String> {
        self.0
            .get(&source)
            .filter(|m| source != Source::Nvml || m.nvml_lib == *lib)
            .filter(|m| m.retry.is_none_or(|r| now < r.at))
            .map(|m| m.reason.clone())
    }

    /// Takes what a run that ended `now` found of `source` (`state`), tried with NVML's
    /// library `lib`; `lasting` says whether an unavailable source's reason lasts until a
    /// restart, `first` is the first wait before a retry.
    fn note(
        &mut self,
        source: Source,
        state: Option<&canary_core::SourceState>,
        lib: &Option<std::path::PathBuf>,
        lasting: impl FnOnce(&str) -> bool,
        first: std::time::Duration,
        now: std::time::SystemTime,
    ) -> Option<Noted> {
        use canary_core::SourceState;
        match state? {
            // A run told the source is missing (its reason is the one said here) did not try
            // it: nothing found. Another run may have tried it meanwhile and found it back;
            // this one's told reason must not start a new spell.
            SourceState::Unavailable { reason } if reason.contains(FOUND_EARLIER) => None,
            SourceState::Unavailable { reason } => {
                let earlier = self
                    .0
                    .get(&source)
                    .filter(|m| source != Source::Nvml || m.nvml_lib == *lib);
                if let Some(m) = earlier {
                    // Said from what an earlier run found (the run may have ended after the
                    // retry fell due), found at a run that started before it was known, or
                    // not to be tried again: nothing new.
                    let due = m.retry.is_some_and(|r| now >= r.at);
                    if m.reason == *reason || !due {
                        return None;
                    }
                }
                let waited = earlier.and_then(|m| m.retry).map(|r| r.waited);
                let retry = (!lasting(reason)).then(|| {
                    let wait = retry_after(waited, first);
                    // Whole seconds, as the reason says it.
                    let at = now + wait;
                    let secs = at
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
                    Retry {
                        at: std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
                        waited: wait,
                    }
                });
                let until = match retry {
                    Some(r) => format!(
                        "until {}",
                        crate::instant::rfc3339(crate::instant::unix_ns(r.at))
                    ),
                    None if source == Source::Nvml => {
                        "until restart or a reload naming another nvml_lib".to_owned()
                    }
                    None => "until restart".to_owned(),
                };
                let short = crate::execute::short_reason(source, reason);
                self.0.insert(
                    source,
                    Missing {
                        reason: format!("{short} ({FOUND_EARLIER} not tried again {until})"),
                        nvml_lib: lib.clone(),
                        retry,
                    },
                );
                Some(match (waited, retry) {
                    (Some(_), Some(retry)) => Noted::StillMissing { retry },
                    _ => Noted::Missing { retry },
                })
            }
            SourceState::Available { .. } => self.0.remove(&source).map(|_| Noted::Back),
            _ => None,
        }
    }
}

/// One run of a workload, as the daemon carries it out: its settings named by their config
/// keys, tokenizers kept loaded, the baseline's sampler and the OTLP sink's observer attached,
/// judged by the workload's verdict rules. Its export is the service's: every run, the ones
/// that never started too, is recorded and handed to the sinks (OTLP among them) once
/// compared with the baseline.
struct WorkloadFront<'a> {
    ctx: &'a RunContext,
    plan: WorkloadPlan<'a>,
    samples: Arc<SampleCollector>,
    otlp: Option<Arc<canary_exporters::RunObserver>>,
}

impl Front for WorkloadFront<'_> {
    fn spell(&self, setting: Setting) -> String {
        self.plan.key(setting)
    }

    fn prompts(&self, spec: &PromptSpec) -> Result<Arc<PromptBuilder>> {
        if let Some(p) = self.ctx.prompts.lock().unwrap().get(spec) {
            return Ok(p.clone());
        }
        let p = spec.build()?;
        let mut cache = self.ctx.prompts.lock().unwrap();
        if cache.len() >= PROMPT_BUILDERS_KEPT {
            // Reloads that change seeds or tokenizers would otherwise keep every one loaded
            // (tens of MB each) for the daemon's life; those no run holds go.
            cache.retain(|_, p| Arc::strong_count(p) > 1);
        }
        cache.insert(spec.clone(), p.clone());
        Ok(p)
    }

    fn observers(&self) -> Vec<Arc<dyn Observer>> {
        let mut own: Vec<Arc<dyn Observer>> = vec![self.samples.clone()];
        own.extend(self.otlp.clone().map(|o| o as Arc<dyn Observer>));
        own
    }

    fn limits(&self, planned: Option<std::time::Duration>) -> crate::run_deadline::Limits {
        let w = self.plan.workload;
        crate::run_deadline::Limits {
            deadline: w.run_deadline.or_else(|| {
                crate::run_deadline::default_for(w, planned, self.plan.target.request_timeout)
            }),
            unresponsive_after: Some(crate::run_deadline::UNRESPONSIVE_AFTER),
        }
    }

    fn judge(&self, outcome: &RunOutcome) -> Option<Verdict> {
        // A run whose files were not all written (a full disk) is an error, whatever its
        // figures: for a single run (its figures kept in the history), a capacity probe and
        // a sweep point alike.
        if let Some(e) = &outcome.artifacts_error {
            return Some(Verdict::error(e.clone()));
        }
        Some(Verdict::judge(
            self.plan.workload,
            &outcome.summary,
            outcome.interrupted,
        ))
    }

    fn export<'a>(&'a self, _: &'a Judged) -> ExportFuture<'a> {
        Box::pin(async {})
    }
}

impl RunContext {
    /// Ends the OTLP last-run series of workloads no longer in `config`, and forgets the
    /// outages of metrics URLs it no longer names (a run going on keeps its own).
    pub fn retain_workloads(&self, config: &Config) {
        if let Some(otlp) = &self.otlp {
            otlp.retain_workloads(config);
        }
        let named: std::collections::HashSet<(Source, &String)> = config
            .targets
            .values()
            .filter_map(|t| t.metrics_url.as_ref())
            .map(|u| (Source::ServerMetrics, u))
            .chain(
                config
                    .telemetry
                    .dcgm_url
                    .as_ref()
                    .map(|u| (Source::Dcgm, u)),
            )
            .collect();
        self.outages
            .lock()
            .unwrap()
            .retain(|(s, u), _| named.contains(&(*s, u)));
    }

    /// Seeds the OTLP last-run gauges again from each workload's last stored run (`latest`:
    /// after runs were recorded late at start, one of them may be a workload's newest).
    pub fn seed_last_runs(&self, config: &Config, latest: &[crate::service::history::ListedRow]) {
        if let Some(otlp) = &self.otlp {
            otlp.seed(config, latest);
        }
    }

    /// A context whose runs are exported through `otlp`.
    pub fn with_otlp(otlp: Option<Arc<crate::service::sinks::otlp::OtlpSink>>) -> RunContext {
        RunContext {
            otlp,
            ..RunContext::default()
        }
    }

    /// Runs `workload` once, its context compared with `baseline`'s; never fails: what goes
    /// wrong becomes an `error` verdict, and a stop before its first measured request
    /// [`Ran::NotStarted`].
    pub async fn run(
        &self,
        config: &Config,
        workload: &Workload,
        id: String,
        baseline: Option<ContextBaseline>,
        shutdown: CancellationToken,
        progress: Arc<Progress>,
    ) -> Ran {
        let mut result = RunResult::new(config, workload, id);
        if let Err(why) = regular_trace(workload) {
            result.run.verdict = Verdict::error(why);
            result.run.finished_unix_ms = crate::service::history::now_unix_ms();
            return Ran::Finished(result);
        }
        if let Some(search) = workload.capacity {
            let stopped = capacity::run(
                self,
                config,
                workload,
                search,
                &mut result,
                shutdown,
                progress,
            )
            .await;
            if let Some(why) = stopped {
                return self.not_started(result, why);
            }
            result.run.finished_unix_ms = crate::service::history::now_unix_ms();
            return Ran::Finished(result);
        }
        if let Some(spec) = &workload.sweep {
            let stopped = sweep::run(
                self,
                config,
                workload,
                spec,
                &mut result,
                shutdown,
                progress,
            )
            .await;
            if let Some(why) = stopped {
                return self.not_started(result, why);
            }
            result.run.finished_unix_ms = crate::service::history::now_unix_ms();
            return Ran::Finished(result);
        }
        let ids = RunIds {
            run: &result.run.id,
            export: &result.run.id,
            artifacts: &result.run.artifacts,
        };
        match self
            .replay(config, workload, ids, baseline, shutdown, progress)
            .await
        {
            // Warm-up requests are not measured: a stop during the warm-up measured nothing.
            // One its limits stopped (a deadline, a silent target) is an error, not a skip.
            Ok((judged, _)) if judged.cut.is_none() && measured_nothing(&judged.outcome) => {
                return self.not_started(result, stopped_before_measuring(workload));
            }
            Ok((judged, samples)) => {
                result.run.load = judged.info.plan.as_ref().map(crate::judge::load::of_plan);
                result.run.verdict = judged.verdict.unwrap_or_else(|| Verdict::error("unjudged"));
                // Neither an error's nor an interrupted run's: a baseline takes whole runs.
                if matches!(
                    result.run.verdict.kind,
                    crate::judge::verdict::VerdictKind::Pass
                        | crate::judge::verdict::VerdictKind::Fail
                ) {
                    result.run.samples = Some(samples);
                }
                result.outcome = Some(judged.outcome);
            }
            Err(e) if e.is::<StoppedLoading>() => {
                return self.not_started(result, STOPPED_LOADING);
            }
            Err(e) => result.run.verdict = Verdict::error(format!("{e:#}")),
        }
        result.run.finished_unix_ms = crate::service::history::now_unix_ms();
        Ran::Finished(result)
    }

    /// A run a stop caught before its first measured request: a skip. The OTLP sink lets go
    /// of the labels it kept for it (a skip is not exported), so a long-lived daemon does not
    /// gather one per skip.
    fn not_started(&self, result: RunResult, why: &'static str) -> Ran {
        if let Some(otlp) = &self.otlp {
            otlp.end_unexported(&result.run.id);
        }
        Ran::NotStarted { result, why }
    }

    /// The workload's plan for run `ids`, executed with its telemetry.
    async fn replay(
        &self,
        config: &Config,
        w: &Workload,
        ids: RunIds<'_>,
        baseline: Option<ContextBaseline>,
        shutdown: CancellationToken,
        progress: Arc<Progress>,
    ) -> Result<(Judged, Samples)> {
        let t = &config.targets[&w.target];
        let wp = WorkloadPlan {
            workload: w,
            target: t,
        };
        let mut plan = Plan::try_from(wp)?;
        plan.replay.run_id = ids.run.to_string();
        plan.replay.output_dir = Some(ids.artifacts.to_path_buf());
        plan.replay.baseline_context = baseline;
        let otlp = self
            .otlp
            .as_ref()
            .and_then(|o| o.begin_run(w, t, ids.export));
        if let Some((_, sample_ratio)) = &otlp {
            // The traceparent's sampled flag follows the exporter's ratio.
            plan.replay.trace_sample_ratio = *sample_ratio;
        }
        let front = WorkloadFront {
            ctx: self,
            plan: wp,
            samples: Arc::new(SampleCollector::default()),
            otlp: otlp.map(|(o, _)| Arc::new(o)),
        };
        let observe = self.observe(config, t);
        let judged = execute(plan, &observe, &front, shutdown, progress).await?;
        let Some(judged) = judged else {
            return Err(StoppedLoading.into());
        };
        self.note_missing_sources(&judged.outcome, &config.telemetry);
        let WorkloadFront { samples, .. } = front;
        let samples = Arc::into_inner(samples)
            .map(|c| c.samples.into_inner().unwrap().values)
            .unwrap_or_default();
        Ok((judged, samples))
    }

    /// The telemetry joined to a run against `t`.
    fn observe(&self, config: &Config, t: &Target) -> Observe {
        let missing = self.missing_sources.lock().unwrap();
        let tel = &config.telemetry;
        let now = std::time::SystemTime::now();
        let known_missing = |source| missing.known(source, &tel.nvml_lib, now);
        let outage = |source: Source, url: &Option<String>| {
            let mut outages = self.outages.lock().unwrap();
            url.as_ref()
                .map(|u| outages.entry((source, u.clone())).or_default().clone())
                .unwrap_or_default()
        };
        let telemetry = canary_telemetry::Config {
            server_metrics_outage: outage(Source::ServerMetrics, &t.metrics_url),
            dcgm_outage: outage(Source::Dcgm, &tel.dcgm_url),
            server_metrics_url: t.metrics_url.clone(),
            server_metrics_interval: tel.scrape_interval,
            server_metrics_model: Some(t.model.clone()),
            nvml: tel.nvml,
            nvml_known_unavailable: known_missing(Source::Nvml),
            nvml_lib: tel.nvml_lib.clone(),
            nvml_opener: self.nvml.clone(),
            nvml_interval: tel.gpu_interval,
            dcgm_url: tel.dcgm_url.clone(),
            dcgm_interval: tel.scrape_interval,
            server_pid: t.server_pid,
            ca_bundle: t.ca_bundle.clone(),
            client_identity: t.client_identity.clone(),
            // Set by `execute`, from the run's target with its key.
            server_info_target: None,
        };
        Observe {
            telemetry,
            ebpf: tel.ebpf,
            ebpf_known_unavailable: known_missing(Source::Ebpf),
            ebpf_warned: self.ebpf_warned.clone(),
        }
    }

    /// NVML or eBPF found missing: later runs say it is unavailable, and why, not that it
    /// was turned off, and do not try (nor warn) again until a restart when its cause lasts
    /// that long, else until a back-off has passed ([`MissingSources`]). NVML is tried again
    /// when a reload names another library. A source back after a spell is logged once, and
    /// a later spell warned about again.
    fn note_missing_sources(&self, outcome: &RunOutcome, tel: &crate::config::Telemetry) {
        let first = first_retry();
        for source in [Source::Nvml, Source::Ebpf] {
            let noted = self.missing_sources.lock().unwrap().note(
                source,
                outcome.telemetry.source(source),
                &tel.nvml_lib,
                |reason| match source {
                    Source::Nvml => self.nvml.lasts_until_restart(reason),
                    _ => ebpf_lasts_until_restart(reason),
                },
                first,
                std::time::SystemTime::now(),
            );
            let name = match source {
                Source::Nvml => "NVML",
                _ => "eBPF socket timing",
            };
            let at = |r: Retry| crate::instant::rfc3339(crate::instant::unix_ns(r.at));
            match noted {
                None | Some(Noted::Missing { retry: None }) => {}
                Some(Noted::Missing { retry: Some(r) }) => tracing::info!(
                    "{name} is tried again at {} (then after waits doubling up to {} min), \
                     its cause may pass",
                    at(r),
                    (first * RETRY_CAP_FACTOR).as_secs() / 60
                ),
                Some(Noted::StillMissing { retry }) => {
                    tracing::debug!("{name} still unavailable; tried again at {}", at(retry))
                }
                Some(Noted::Back) => {
                    tracing::info!("{name} is available again");
                    match source {
                        Source::Nvml => self.nvml.forget_warnings(),
                        _ => self
                            .ebpf_warned
                            .store(false, std::sync::atomic::Ordering::Relaxed),
                    }
                }
            }
        }
    }
}

/// A stop came while the run loaded its trace: nothing was sent.
#[derive(Debug, thiserror::Error)]
#[error("stopped while loading the trace")]
struct StoppedLoading;

/// When a run that stopped while loading its trace stopped ([`Ran::NotStarted`]'s `why`).
const STOPPED_LOADING: &str = "while loading the trace";

/// Whether a replay a stop cut measured no request (warm-up requests are not measured).
fn measured_nothing(outcome: &RunOutcome) -> bool {
    outcome.interrupted && outcome.summary.requests == 0
}

/// When a replay of `w` a stop cut before its first measured request stopped: during its
/// warm-up when it has one, else before its first request.
fn stopped_before_measuring(w: &Workload) -> &'static str {
    match w.warmup_requests {
        0 => "before its first request",
        _ => "during its warm-up",
    }
}

/// Who a replay is: its run id (in its records and summary), the run id its OTLP export is
/// labelled with (a capacity search's probes are exported as its one run), its folder.
#[derive(Clone, Copy)]
struct RunIds<'a> {
    run: &'a str,
    export: &'a str,
    artifacts: &'a std::path::Path,
}

/// What `check-config` found loading a workload's trace; with a warning when a run is known
/// to take as long as the gap between two of its starts ([`run_length::overrun_warning`]).
pub enum TraceCheck {
    /// It loads; what it holds.
    Ok(String, Option<String>),
    /// No trace: the synthetic load the workload sends instead.
    Synthetic(String, Option<String>),
    /// The file is not there (a warning, not an error: it may be put there later).
    Missing,
    /// A signal stopped the load.
    Stopped,
}

impl TraceCheck {
    /// Its warning, for the log or check-config's `warning:` lines.
    pub fn warning(&self) -> Option<&str> {
        match self {
            TraceCheck::Ok(_, w) | TraceCheck::Synthetic(_, w) => w.as_deref(),
            _ => None,
        }
    }
}

/// Loads, selects and schedules `w`'s trace as a run would, sending nothing: a bad row is an
/// error naming it (`file:line: field`), as is a scale taking lengths over the limit or a
/// speedup that would take more than a year.
pub async fn check_workload(
    config: &Config,
    w: &Workload,
    shutdown: &CancellationToken,
) -> Result<TraceCheck> {
    if let Some(TraceSource::File(path, _)) = &w.trace {
        if !path.exists() {
            return Ok(TraceCheck::Missing);
        }
    }
    regular_trace(w).map_err(anyhow::Error::msg)?;
    let wp = WorkloadPlan {
        workload: w,
        target: &config.targets[&w.target],
    };
    let mut plan = Plan::try_from(wp)?;
    if let canary_replay::LoadShape::Trace(t) = &mut plan.load {
        // Only checked, never sent: each prompt is checked as a run reads it (same errors),
        // not kept (a trace of `messages` holds about five times its text).
        t.read.prompts = canary_replay::trace::Prompts::Skip;
    }
    let prepared = plan
        .load
        .prepare(plan.replay.length_limit, shutdown)
        .await
        .map_err(|e| crate::execute::load_error(e, |s| wp.key(s)))
        .context("loading the trace")
        .with_context(|| format!("workloads.{}", w.name))?;
    let Some(prepared) = prepared else {
        return Ok(TraceCheck::Stopped);
    };
    let (canary_replay::Work::Schedule(schedule), Some(loaded)) = (&prepared.work, &prepared.trace)
    else {
        return Ok(TraceCheck::Synthetic(
            plan.load.describe(),
            run_length::overrun_warning(w, None),
        ));
    };
    let rows = loaded.load.rows;
    let replay = schedule.min_duration();
    // The base workload's schedule passed; a sweep's points scale it.
    run_length::check_sweep_points(w, replay)?;
    // What the selection did other than asked (`--scale-lengths` raising outputs to 1 token).
    let notes: String = loaded
        .selection
        .notes
        .iter()
        .map(|n| format!("; note: {n}"))
        .collect();
    Ok(TraceCheck::Ok(
        format!(
            "{} of {rows} rows selected, at least {:.1} s to replay{notes}",
            schedule.len(),
            replay.as_secs_f64()
        ),
        run_length::overrun_warning(w, Some(replay)),
    ))
}

/// A scheduled run reads its trace from a regular file only: a FIFO without a writer blocks
/// the open for ever (the workload "running" until a restart, every later run skipped), and
/// a device never ends. `canaryd replay` reads them, bounded, for someone watching; a missing
/// file is left to the loader, which names it.
fn regular_trace(w: &Workload) -> Result<(), String> {
    let Some(TraceSource::File(path, _)) = &w.trace else {
        return Ok(());
    };
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(format!(
            "workloads.{}.trace: {} is not a regular file (a FIFO, a device or a folder): \
             the daemon reads traces from regular files only",
            w.name,
            path.display()
        )),
        _ => Ok(()),
    }
}

/// Keeps a bounded uniform sample (reservoir) of TTFT, ITL and e2e of measured requests.
#[derive(Default)]
struct SampleCollector {
    samples: Mutex<Reservoirs>,
}

#[derive(Default)]
struct Reservoirs {
    values: Samples,
    seen: [u64; 3],
    rng: u64,
}

impl Reservoirs {
    fn add(&mut self, metric: usize, v: Option<f64>) {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            return;
        };
        // Microseconds are plenty for a rank test, and halve the stored JSON.
        let v = (v * 1000.0).round() / 1000.0;
        self.seen[metric] += 1;
        let list = match metric {
            0 => &mut self.values.ttft_ms,
            1 => &mut self.values.itl_ms,
            _ => &mut self.values.e2e_ms,
        };
        if list.len() < Samples::CAP {
            list.push(v);
            return;
        }
        // xorshift: a uniform slot in [0, seen); kept only if it lands in the reservoir.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let slot = (self.rng % self.seen[metric]) as usize;
        if slot < Samples::CAP {
            list[slot] = v;
        }
    }
}

impl Observer for SampleCollector {
    fn annotate(&self, r: &mut RequestRecord, _t0: MonoTime) {
        if r.warmup || !r.is_ok() {
            return;
        }
        let mut s = self.samples.lock().unwrap();
        if s.rng == 0 {
            s.rng = 0x2545_F491_4F6C_DD1D;
        }
        s.add(0, r.ttft_ms);
        s.add(1, r.itl_ms);
        s.add(2, r.e2e_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO no one writes to held its run "running" for ever (the open blocks): refused
    /// at once as an error verdict naming the file.
    #[tokio::test]
    async fn a_trace_that_is_not_a_regular_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("trace.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let text = format!(
            "state_dir = {:?}\n[targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\
             [workloads.w]\ntarget = \"t\"\ntrace = {:?}\nevery = \"1h\"\n",
            dir.path().display().to_string(),
            fifo.display().to_string()
        );
        let config = Config::parse(&text, std::path::Path::new("t.toml"), dir.path()).unwrap();
        let ctx = RunContext::default();
        let run = ctx.run(
            &config,
            &config.workloads[0],
            crate::service::run_result::new_run_id(),
            None,
            CancellationToken::new(),
            Arc::default(),
        );
        let ran = tokio::time::timeout(std::time::Duration::from_secs(20), run)
            .await
            .expect("the run ends");
        let v = ran.result().run.verdict.to_string();
        assert!(
            v.starts_with("error: workloads.w.trace: ")
                && v.contains("trace.fifo is not a regular file"),
            "{v}"
        );
    }

    /// A stop that comes while the run loads its trace (seconds for a large one), or before
    /// its first request, leaves a run that never started: a skip, where it was recorded as
    /// `error: interrupted while loading the trace` (or `error: interrupted` with 0 requests)
    /// and raised an error alert at every restart.
    #[tokio::test]
    async fn a_stop_while_the_trace_loads_is_a_run_not_started() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "state_dir = {:?}\n[targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\
             [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n",
            dir.path().display().to_string()
        );
        let config = Config::parse(&text, std::path::Path::new("t.toml"), dir.path()).unwrap();
        let stop = CancellationToken::new();
        stop.cancel();
        let ran = RunContext::default()
            .run(
                &config,
                &config.workloads[0],
                crate::service::run_result::new_run_id(),
                None,
                stop,
                Arc::default(),
            )
            .await;
        match ran {
            // The bundled trace may load before the loader looks at the stop.
            Ran::NotStarted { why, .. } => assert!(
                ["while loading the trace", "before its first request"].contains(&why),
                "{why}"
            ),
            Ran::Finished(r) => panic!("recorded as a run: {}", r.run.verdict),
        }
    }

    /// A `dcgm_url` that is also the target's `metrics_url` is two endpoints, each with its
    /// own outage record: one record shared made the first failing scraper's warning silence
    /// the other's, and a page note of one (not a dcgm-exporter page) the other's. A reload
    /// that keeps both URLs keeps both records.
    #[test]
    fn a_dcgm_url_that_is_the_metrics_url_has_its_own_outage_record() {
        let dir = tempfile::tempdir().unwrap();
        let url = "http://127.0.0.1:9/metrics";
        let text = format!(
            "state_dir = {:?}\n[telemetry]\ndcgm_url = \"{url}\"\n[targets.t]\n\
             url = \"http://127.0.0.1:9\"\nmodel = \"m\"\nmetrics_url = \"{url}\"\n\
             [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n",
            dir.path().display().to_string()
        );
        let config = Config::parse(&text, std::path::Path::new("t.toml"), dir.path()).unwrap();
        let ctx = RunContext::default();
        let _ = ctx.observe(&config, &config.targets["t"]);
        let keys = |ctx: &RunContext| {
            let mut k: Vec<(Source, String)> =
                ctx.outages.lock().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let both = vec![
            (Source::Dcgm, url.to_owned()),
            (Source::ServerMetrics, url.to_owned()),
        ];
        assert_eq!(keys(&ctx), both);
        ctx.retain_workloads(&config);
        assert_eq!(keys(&ctx), both);
    }

    const MIN: std::time::Duration = std::time::Duration::from_secs(60);

    /// 10 min, doubling after each failed try, never more than an hour.
    #[test]
    fn the_retry_back_off_doubles_from_10_min_up_to_an_hour() {
        let first = first_retry();
        assert_eq!(first, 10 * MIN);
        let mut waits = vec![];
        let mut waited = None;
        for _ in 0..6 {
            let w = retry_after(waited, first);
            waits.push(w.as_secs() / 60);
            waited = Some(w);
        }
        assert_eq!(waits, [10, 20, 40, 60, 60, 60]);
    }

    /// eBPF's refusals that only a restart can change (not built in, no BTF, not permitted:
    /// the real errors' words) last; the kernel rejecting the programs otherwise may pass.
    #[test]
    fn ebpf_lasts_until_restart_only_without_programs_btf_or_privileges() {
        use canary_ebpf::Unavailable;
        for lasting in [
            Unavailable::NotBuilt("built without the eBPF object"),
            Unavailable::NoBtf("No such file or directory (os error 2)".into()),
            Unavailable::NotPermitted("Operation not permitted (os error 1)".into()),
        ] {
            assert!(ebpf_lasts_until_restart(&lasting.to_string()), "{lasting}");
        }
        let passing = Unavailable::Load("map of 4 MiB: Cannot allocate memory".into());
        assert!(!ebpf_lasts_until_restart(&passing.to_string()), "{passing}");
    }

    fn unavailable(reason: &str) -> canary_core::SourceState {
        canary_core::SourceState::unavailable(reason.to_owned())
    }

    /// NVML failing for a cause that may pass (here a library that loads but is not NVML,
    /// as the real opener says it) is left off for 10 min, said with when it is tried again,
    /// tried again then (20 min more after a second failure), and dropped from the known
    /// missing once it answers. One whose library cannot be loaded stays missing.
    #[tokio::test]
    async fn nvml_missing_for_a_cause_that_may_pass_is_tried_again_after_a_back_off() {
        let opener = canary_telemetry::NvmlOpener::default();
        let open = |lib: &str| {
            let config = canary_telemetry::NvmlConfig {
                lib_path: Some(lib.into()),
                ..Default::default()
            };
            let opener = opener.clone();
            async move {
                match opener.open(config, CancellationToken::new()).await {
                    (None, canary_core::SourceState::Unavailable { reason }) => reason,
                    (_, state) => panic!("{state:?}"),
                }
            }
        };
        let passing = open("libc.so.6").await;
        let lasting = open("/nonexistent/libnvidia-ml.so.1").await;
        let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_518_000);
        let lib = Some(std::path::PathBuf::from("libc.so.6"));
        let mut m = MissingSources::default();
        let noted = m.note(
            Source::Nvml,
            Some(&unavailable(&passing)),
            &lib,
            |r| opener.lasts_until_restart(r),
            10 * MIN,
            t0,
        );
        let at = t0 + 10 * MIN;
        assert_eq!(
            noted,
            Some(Noted::Missing {
                retry: Some(Retry {
                    at,
                    waited: 10 * MIN
                })
            })
        );
        let said = m.known(Source::Nvml, &lib, t0 + 9 * MIN).expect("left off");
        assert_eq!(
            said,
            "cannot initialize NVML from libc.so.6 (found at an earlier run; not tried again \
             until 2026-11-24T11:10:00Z)"
        );
        // A run that said so and ended after the retry fell due changes nothing.
        let cached = m.note(
            Source::Nvml,
            Some(&unavailable(&said)),
            &lib,
            |_| false,
            10 * MIN,
            at + MIN,
        );
        assert_eq!(cached, None);
        assert_eq!(
            m.known(Source::Nvml, &lib, at),
            None,
            "tried again when due"
        );
        let again = m.note(
            Source::Nvml,
            Some(&unavailable(&passing)),
            &lib,
            |r| opener.lasts_until_restart(r),
            10 * MIN,
            at,
        );
        let retry = Retry {
            at: at + 20 * MIN,
            waited: 20 * MIN,
        };
        assert_eq!(again, Some(Noted::StillMissing { retry }));
        assert!(m.known(Source::Nvml, &lib, at + 19 * MIN).is_some());
        let back = m.note(
            Source::Nvml,
            Some(&canary_core::SourceState::available("2 GPU(s)")),
            &lib,
            |_| false,
            10 * MIN,
            retry.at,
        );
        assert_eq!(back, Some(Noted::Back));
        assert_eq!(m.known(Source::Nvml, &lib, retry.at), None);
        // A run of another workload, told NVML was missing before it came back, ends after:
        // what it was told starts no new spell (it did not try).
        let told = m.note(
            Source::Nvml,
            Some(&unavailable(&said)),
            &lib,
            |_| false,
            10 * MIN,
            retry.at + MIN,
        );
        assert_eq!(told, None);
        assert_eq!(m.known(Source::Nvml, &lib, retry.at + MIN), None);

        let gone = Some(std::path::PathBuf::from("/nonexistent/libnvidia-ml.so.1"));
        let noted = m.note(
            Source::Nvml,
            Some(&unavailable(&lasting)),
            &gone,
            |r| opener.lasts_until_restart(r),
            10 * MIN,
            t0,
        );
        assert_eq!(noted, Some(Noted::Missing { retry: None }));
        let year = 525_600 * MIN;
        assert_eq!(
            m.known(Source::Nvml, &gone, t0 + year).as_deref(),
            Some(
                "cannot initialize NVML from /nonexistent/libnvidia-ml.so.1 (found at an \
                 earlier run; not tried again until restart or a reload naming another \
                 nvml_lib)"
            )
        );
        // Another library is tried.
        assert_eq!(m.known(Source::Nvml, &lib, t0), None);
    }

    /// eBPF the kernel rejected is tried again after the back-off; eBPF without privileges
    /// is not.
    #[test]
    fn ebpf_missing_is_tried_again_only_when_its_cause_may_pass() {
        let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_518_000);
        let later = t0 + 525_600 * MIN;
        for (why, retried) in [
            (
                canary_ebpf::Unavailable::Load("verifier: EAGAIN".into()),
                true,
            ),
            (
                canary_ebpf::Unavailable::NotPermitted("Operation not permitted".into()),
                false,
            ),
        ] {
            let mut m = MissingSources::default();
            m.note(
                Source::Ebpf,
                Some(&unavailable(&why.to_string())),
                &None,
                ebpf_lasts_until_restart,
                10 * MIN,
                t0,
            );
            assert!(m.known(Source::Ebpf, &None, t0).is_some(), "{why}");
            assert_eq!(
                m.known(Source::Ebpf, &None, later).is_none(),
                retried,
                "{why}"
            );
        }
    }

    #[test]
    fn the_reservoir_stays_bounded_and_keeps_a_spread() {
        let mut r = Reservoirs {
            rng: 0x2545_F491_4F6C_DD1D,
            ..Default::default()
        };
        for i in 0..10 * Samples::CAP {
            r.add(0, Some(i as f64));
            r.add(1, None);
        }
        let v = &r.values.ttft_ms;
        assert_eq!(v.len(), Samples::CAP);
        assert!(r.values.itl_ms.is_empty());
        // A uniform sample of 0..20000 has about half its values above 10000.
        let upper = v.iter().filter(|x| **x >= 10_000.0).count();
        assert!((800..1200).contains(&upper), "{upper}");
    }

    /// A run a stop caught before its first measured request left its labels in the OTLP
    /// sink's map of runs in flight (it is never exported, so never taken out): one entry per
    /// skip for the daemon's life. Latency runs, sweeps and capacity searches alike, against
    /// a real simulator on loopback.
    #[tokio::test]
    async fn a_run_not_started_leaves_no_labels_in_the_otlp_sink() {
        let sim = canary_sim::spawn(canary_sim::Config::default())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        // A collector port nothing listens on: the exporter only queues.
        let collector = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let text = format!(
            "state_dir = {:?}\n[telemetry]\nnvml = false\nebpf = false\n\
             [otlp]\nendpoint = \"http://127.0.0.1:{collector}\"\n\
             [targets.t]\nurl = \"{}\"\nmodel = \"canary-sim\"\nmetrics_url = \"\"\n\
             [workloads.latency]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
             [workloads.knee]\ntarget = \"t\"\nkind = \"sweep\"\ntrace = \"bundled\"\n\
             every = \"1h\"\nsweep_concurrency = [2, 8]\n\
             [workloads.capacity]\ntarget = \"t\"\nkind = \"capacity\"\nevery = \"1h\"\n\
             request_rate = 5\nbenchmark_duration = \"2s\"\n\
             slos = \"time_to_first_token:100\"\n",
            dir.path().display().to_string(),
            sim.url()
        );
        let config = Config::parse(&text, std::path::Path::new("t.toml"), dir.path()).unwrap();
        let metrics = Arc::new(crate::service::status::StatusMetrics::default());
        let otlp =
            crate::service::sinks::otlp::OtlpSink::start(&config, metrics, &[]).expect("export on");
        let ctx = RunContext::with_otlp(Some(otlp.clone()));
        // The latency run first: it alone makes its observer before the stop is seen.
        for name in ["latency", "knee", "capacity"] {
            let w = config.workloads.iter().find(|w| w.name == name).unwrap();
            let stop = CancellationToken::new();
            stop.cancel();
            let ran = ctx
                .run(
                    &config,
                    w,
                    crate::service::run_result::new_run_id(),
                    None,
                    stop,
                    Arc::default(),
                )
                .await;
            assert_eq!(otlp.runs_in_flight(), 0, "{name}");
            match ran {
                Ran::NotStarted { .. } => {}
                Ran::Finished(r) => panic!("{name}: recorded as a run: {}", r.run.verdict),
            }
        }
    }
}
