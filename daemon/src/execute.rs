//! One run of a plan, whoever asked for it — `canaryd replay`, `canaryd demo` or a daemon
//! workload — read top to bottom: plan → load → synthesize → dispatch → measure → correlate
//! → judge → export. What differs between those front ends is a [`Front`]: how it names
//! settings, where its prompts come from, its own observers, how it judges, where it exports.

use crate::judge::verdict::Verdict;
use anyhow::{Context, Result};
use canary_core::{Observer, Observers, RunOutcome, Source, SourceState};
use canary_replay::{
    LoadError, Plan, Progress, PromptBuilder, PromptSpec, ReplayError, RunInfo, Setting,
    SettingError,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The telemetry joined to a run: the telemetry crate's sources (server `/metrics`, NVML,
/// DCGM) and kernel socket timing (eBPF).
#[derive(Debug, Clone)]
pub struct Observe {
    /// The telemetry sources.
    pub telemetry: canary_telemetry::Config,
    /// Time sockets in the kernel.
    pub ebpf: bool,
    /// Why eBPF is known to be unavailable (an earlier run found it so): reported as such,
    /// not tried again.
    pub ebpf_known_unavailable: Option<String>,
    /// Whether eBPF's unavailability was warned about, shared by runs that share it: the
    /// daemon's runs can start together, each probing before either is done.
    pub ebpf_warned: Arc<AtomicBool>,
}

/// Sources a command's earlier run found unavailable, with why: carried from one run (a sweep's
/// point, a capacity probe) to the next, whose fresh [`Observe`] takes them.
#[derive(Debug, Clone, Default)]
pub struct KnownUnavailable {
    /// eBPF's reason.
    pub ebpf: Option<String>,
    /// NVML's reason.
    pub nvml: Option<String>,
}

impl Observe {
    /// Takes what an earlier run found unavailable: not tried, nor warned about, again.
    pub fn take_known(&mut self, known: &KnownUnavailable) {
        if known.ebpf.is_some() {
            self.ebpf_known_unavailable = known.ebpf.clone();
        }
        if known.nvml.is_some() {
            self.telemetry.nvml_known_unavailable = known.nvml.clone();
        }
    }

    /// What this run and those before it found unavailable.
    pub fn known(&self) -> KnownUnavailable {
        KnownUnavailable {
            ebpf: self.ebpf_known_unavailable.clone(),
            nvml: self.telemetry.nvml_known_unavailable.clone(),
        }
    }

    /// Remembers eBPF and NVML found unavailable by `outcome`'s run, so that the command's
    /// later runs (`--runs N`, a sweep's points) say they are unavailable, and why, rather
    /// than load them again and warn each time: the daemon does the same across its runs.
    pub fn remember_unavailable(&mut self, outcome: &RunOutcome) {
        self.remember_from(&outcome.telemetry);
    }

    /// [`Observe::remember_unavailable`] of a run's telemetry: its short reason
    /// ([`short_reason`]; the whole one was warned about and is in that run's summary).
    fn remember_from(&mut self, telemetry: &canary_core::RunTelemetry) {
        let found = |source| match telemetry.source(source) {
            Some(SourceState::Unavailable { reason }) => Some(format!(
                "{} (found at an earlier run of this command; not tried again)",
                short_reason(source, reason)
            )),
            _ => None,
        };
        if self.ebpf_known_unavailable.is_none() {
            self.ebpf_known_unavailable = found(Source::Ebpf);
        }
        if self.telemetry.nvml_known_unavailable.is_none() {
            self.telemetry.nvml_known_unavailable = found(Source::Nvml);
        }
    }
}

/// What later runs say of `source` found unavailable for `reason`: NVML's loader error
/// (`a libloading error occurred: …: cannot open shared object file …`) was warned about once
/// and is in the run's summary, so later runs say what failed (`cannot initialize NVML from
/// …`), not its whole chain again in every diagnosis; eBPF's reason is short already.
pub fn short_reason(source: Source, reason: &str) -> &str {
    match source {
        Source::Nvml => reason.split(": ").next().unwrap_or(reason),
        _ => reason,
    }
}

/// What a front end does with a judged run, besides its artifacts (already written).
pub type ExportFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What differs between the front ends that run a plan.
pub trait Front: Sync {
    /// How the front end names `setting` in its errors (`--concurrency`,
    /// `workloads.chat.concurrency`).
    fn spell(&self, setting: Setting) -> String;

    /// The prompt synthesizer for `spec`.
    fn prompts(&self, spec: &PromptSpec) -> Result<Arc<PromptBuilder>> {
        Ok(spec.build()?)
    }

    /// The front end's own observers (an exporter, a baseline sampler), called after the
    /// telemetry and kernel ones, so they see what those added to each record.
    fn observers(&self) -> Vec<Arc<dyn Observer>> {
        Vec::new()
    }

    /// What may stop a run before its end besides a signal ([`crate::run_deadline`]);
    /// `planned`: the least time its trace's schedule takes (`None`: a synthetic load).
    /// Default: nothing.
    fn limits(&self, _planned: Option<std::time::Duration>) -> crate::run_deadline::Limits {
        crate::run_deadline::Limits::default()
    }

    /// The verdict on a measured run; `None`: unjudged.
    fn judge(&self, outcome: &RunOutcome) -> Option<Verdict>;

    /// Where a judged run goes besides its artifacts.
    fn export<'a>(&'a self, run: &'a Judged) -> ExportFuture<'a>;
}

/// A run measured and judged.
#[derive(Debug)]
pub struct Judged {
    /// What the run was: `summary.json`'s `run` block.
    pub info: RunInfo,
    /// What it produced.
    pub outcome: RunOutcome,
    /// Its verdict; `None`: unjudged.
    pub verdict: Option<Verdict>,
    /// Why its limits stopped it (a run deadline, a target that answered nothing); its
    /// verdict is then that error. `None`: they did not.
    pub cut: Option<String>,
}

/// Runs `plan` with the telemetry `observe` names, for `front`. `None` when `shutdown`
/// fired while the trace was loading (nothing was sent); a stop later ends dispatching and
/// the run is measured, judged and exported as far as it went.
pub async fn execute(
    mut plan: Plan,
    observe: &Observe,
    front: &dyn Front,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<Option<Judged>> {
    // Plan: settings that hold together, and the API key from where the plan says it is.
    let spell = |s: Setting| front.spell(s);
    plan.validate().map_err(|e| spelled(e, spell))?;
    plan.read_api_key().map_err(|e| spelled(e, spell))?;

    // Load: the trace, windowed and scaled, then its schedule; or the synthetic requests
    // of a rate or a closed loop, generated as they come due.
    let prepared = plan
        .load
        .prepare(plan.replay.length_limit, &shutdown)
        .await
        .map_err(|e| load_error(e, spell));
    let Some(mut prepared) = prepared.context("loading the trace")? else {
        return Ok(None);
    };
    let empty_shard = prepared.trace.as_ref().and_then(|t| t.empty_shard());
    if let Some(note) = &empty_shard {
        tracing::warn!("{note}");
    }
    // A cap above what the window holds sends fewer than asked (summary.json's
    // `run.trace.selection.notes` says so too).
    let asked = plan.trace().and_then(|t| t.selection.max_requests);
    if let (Some(n), Some(loaded)) = (asked, &prepared.trace) {
        let out = loaded.selection.requests_out;
        if (n as u64) > out {
            tracing::warn!(
                "{} {n}: the selected window holds only {out} requests; all of them are sent",
                spell(Setting::MaxRequests)
            );
        }
    }

    // Requests that ask for more tokens than the target's context: said before anything is
    // sent, and counted (a trace's in `run.trace.selection`, synthetic ones in the `load`
    // block), when the server states its context length. They are sent as planned.
    let over_context = crate::context_fit::preflight(&plan, &mut prepared, &shutdown).await;

    // Synthesize: the tokenizer and the prompt synthesizer; each prompt is built just in
    // time, shortly before its deadline, by the dispatcher.
    let prompts = front.prompts(&plan.prompts)?;
    let mut info = RunInfo::new(&plan, &prepared, &prompts);
    if let (Some(counted), Some(p)) = (&over_context, &mut info.plan) {
        p.load.note_context(counted);
    }
    let requests = prepared.work.expected_text();
    tracing::info!(
        workload = %plan.workload,
        run = %plan.replay.run_id,
        requests = requests.as_deref().map(tracing::field::display),
        url = %plan.replay.target.url(),
        "{}",
        plan.load.describe()
    );

    // Dispatch, measure and correlate: each request released at its deadline and measured,
    // each record joined to what the server, the GPUs, the kernel and the front end's own
    // observers saw at the same moments.
    let stop_sources = CancellationToken::new();
    // `summary.json`'s `context.server` is read as the pre-flight read it: over the target's
    // transport (its API key, read above), on the target's origin.
    let observe = &crate::context_fit::observing(observe, &plan.replay.target);
    let tls = plan.replay.target.tls;
    // The run's own limits: a deadline, a target that answers nothing. Either stops it as a
    // signal would, and its verdict says which.
    let planned = match &prepared.work {
        canary_replay::Work::Schedule(s) => Some(s.min_duration()),
        _ => None,
    };
    let limits = front.limits(planned);
    let cutoff = crate::run_deadline::Cutoff::new(&shutdown, limits);
    let mut own = front.observers();
    if limits.unresponsive_after.is_some() {
        own.push(cutoff.clone());
    }
    let observers = attach(observe, tls, own, &stop_sources, cutoff.stop()).await;
    // Before anything is sent, once the run has opened its own files: a ceiling the
    // open-file limit lowers is said, once.
    let mut config = plan.dispatcher_config();
    let (setting, asked) = (spell(Setting::Concurrency), config.concurrency);
    config.on_in_flight_cap = Some(canary_replay::CapHook(Arc::new(move |cap| {
        crate::file_limit::warn_if_short(&setting, asked, cap)
    })));
    // `summary.json` says the cut (`cut`), and no signal (`interrupted` false).
    let why = cutoff.clone();
    config.stop_reason = Some(canary_replay::StopReason(Arc::new(move || why.why())));
    let deadline = cutoff.arm(limits.deadline);
    let outcome = canary_replay::run_work(
        config,
        prepared.work,
        prompts,
        info.clone(),
        Some(observers),
        cutoff.stop(),
        progress,
    )
    .await;
    if let Some(timer) = deadline {
        timer.abort();
    }
    stop_sources.cancel();
    let outcome = outcome.map_err(|e| replay_error(front, e))?;

    // Judge. A shard that owns none of the window's requests did all it was asked: it passes,
    // with nothing to judge (no gate can be missed by no request).
    // A run its limits stopped is that error, not a signal's interruption.
    let cut = outcome.cut.clone();
    let verdict = match (&cut, empty_shard) {
        (Some(why), _) => Some(Verdict::error(why.clone())),
        (None, Some(_)) if !outcome.interrupted => Some(Verdict {
            kind: crate::judge::verdict::VerdictKind::Pass,
            reasons: Vec::new(),
        }),
        _ => front.judge(&outcome),
    };
    let judged = Judged {
        info,
        outcome,
        verdict,
        cut,
    };

    // Export.
    front.export(&judged).await;
    Ok(Some(judged))
}

/// The run's observers: telemetry first, then kernel socket timing, then the front end's.
/// A source that cannot start is reported once (a warning and its state in `summary.json`)
/// and the run goes on without it.
async fn attach(
    observe: &Observe,
    tls: bool,
    own: Vec<Arc<dyn Observer>>,
    stop_sources: &CancellationToken,
    run_stop: CancellationToken,
) -> Arc<dyn Observer> {
    let mut observers = Observers::new();
    // The run's own scrapes are not waited for once the run is stopped.
    observers.push(Arc::new(
        canary_telemetry::TelemetryObserver::start(&observe.telemetry, stop_sources)
            .await
            .stopped_by(run_stop),
    ));
    // canaryd's own CPU: the diagnosis's client-bound rule reads it.
    match canary_telemetry::ClientCpuObserver::start() {
        Some(c) => observers.push(Arc::new(c)),
        // Once per process: the host does not change between a daemon's runs.
        None if first_time(&OWN_CPU_WARNED) => {
            tracing::warn!("canaryd's own CPU is not measured: no /proc/self/task/*/schedstat")
        }
        None => tracing::debug!("canaryd's own CPU is not measured"),
    }
    if !observe.ebpf {
        observers.note(Source::Ebpf, SourceState::Disabled);
    } else if let Some(why) = &observe.ebpf_known_unavailable {
        observers.note(Source::Ebpf, SourceState::unavailable(why.clone()));
    } else {
        match canary_ebpf::KernelObserver::start(tls) {
            Ok(k) => observers.push(Arc::new(k)),
            Err(e) => {
                if !observe.ebpf_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!("kernel socket timing off: {e}");
                }
                observers.note(Source::Ebpf, SourceState::unavailable(e.to_string()));
            }
        }
    }
    for o in own {
        observers.push(o);
    }
    Arc::new(observers)
}

/// Whether canaryd's own CPU not measured was warned about in this process.
static OWN_CPU_WARNED: AtomicBool = AtomicBool::new(false);

/// True the first time it is asked of `said` (so the one to warn).
fn first_time(said: &AtomicBool) -> bool {
    !said.swap(true, Ordering::Relaxed)
}

/// `e` with its setting named by `spell` (a front end's words), its cause kept.
pub fn spelled(e: SettingError, spell: impl Fn(Setting) -> String) -> anyhow::Error {
    let message = e.spelled(&spell(e.setting));
    match e.source {
        Some(cause) => anyhow::Error::new(cause).context(message),
        None => anyhow::anyhow!(message),
    }
}

/// A trace that cannot be loaded or scheduled, a setting named by `spell`.
pub fn load_error(e: LoadError, spell: impl Fn(Setting) -> String) -> anyhow::Error {
    match e {
        LoadError::Setting(e) => spelled(e, spell),
        other => other.into(),
    }
}

fn replay_error(front: &dyn Front, e: ReplayError) -> anyhow::Error {
    match e {
        ReplayError::Invalid(_) => anyhow::anyhow!(e.spelled(|s| front.spell(s))),
        other => other.into(),
    }
}

/// The OTLP labels of a run of `workload` against `target`.
pub fn run_labels(target: &canary_replay::Target, workload: &str) -> canary_exporters::RunLabels {
    canary_exporters::RunLabels::new(
        workload,
        target.endpoint.operation(),
        &target.model,
        &target.host,
        target.port,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `--runs N` or sweep command's later runs say NVML's short reason (what failed), as
    /// the daemon's do, not the loader's whole chain again: here the real opener's words for
    /// a library that loads but is not NVML.
    #[tokio::test]
    async fn later_runs_of_a_command_say_nvml_short_reason() {
        let config = canary_telemetry::NvmlConfig {
            lib_path: Some("libc.so.6".into()),
            ..Default::default()
        };
        let opener = canary_telemetry::NvmlOpener::default();
        let (None, SourceState::Unavailable { reason }) =
            opener.open(config, CancellationToken::new()).await
        else {
            panic!("libc.so.6 opened as NVML");
        };
        assert!(
            reason.starts_with("cannot initialize NVML from libc.so.6: "),
            "{reason}"
        );
        let mut telemetry = canary_core::RunTelemetry::default();
        telemetry
            .sources
            .insert(Source::Nvml, SourceState::unavailable(reason));
        let mut observe = Observe {
            telemetry: canary_telemetry::Config::default(),
            ebpf: false,
            ebpf_known_unavailable: None,
            ebpf_warned: Arc::default(),
        };
        observe.remember_from(&telemetry);
        assert_eq!(
            observe.telemetry.nvml_known_unavailable.as_deref(),
            Some(
                "cannot initialize NVML from libc.so.6 (found at an earlier run of this \
                 command; not tried again)"
            )
        );
    }

    /// The own-CPU warning is news once a process.
    #[test]
    fn own_cpu_unmeasured_is_warned_once() {
        let said = AtomicBool::new(false);
        assert!(first_time(&said));
        assert!(!first_time(&said));
        assert!(!first_time(&said));
    }
}
