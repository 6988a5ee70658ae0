//! Before a run: the target's context length, read from the server, and the planned
//! requests that cannot fit it (the server refuses them, HTTP 400, and the run used to say
//! nothing before). What is sent does not change; the run only says so, once, and counts them
//! in `summary.json`'s `run.trace.selection` (a trace) or `run.load` (synthetic requests).
//!
//! The routes, fields, body cap and source names are telemetry's one reader
//! ([`canary_telemetry::context_length`]), which `summary.json`'s
//! `context.server.max_model_len` is read with after the run, asked of the target itself
//! (its TLS, API key and headers) before the run: `/v1/models` under the API root (vLLM,
//! canary-sim), then llama.cpp's `/props`, SGLang's `/get_server_info` and TGI's `/info`.

use canary_replay::{LoadShape, SelectionReport, Target};
use canary_telemetry::context_length;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest the routes are waited for, all together: a server that accepts but never
/// answers delays the run's start by this much at most, and the run goes on unwarned.
const BUDGET: Duration = Duration::from_secs(3);

/// How long a target's answer is kept: every point of a sweep, probe of a capacity search,
/// repeat of `--runs` and period of a daemon workload would otherwise ask again (up to four
/// GETs, 3 s against a server that never answers, while the daemon holds the server's turn).
/// A server restarted with another context length is read again after this.
const KEPT_FOR: Duration = Duration::from_secs(600);

/// Targets whose answers are kept at most (a daemon's config names a few); past it the
/// oldest answers go.
const KEPT_TARGETS: usize = 64;

/// A target: its URL and the model asked for.
type TargetKey = (String, String);

/// A context length, where it was read and the engine's rule, or none.
type Answer = Option<context_length::ContextLimit>;

/// What each target answered, when, and the warnings already said of it.
#[derive(Default)]
struct Kept {
    answers: std::collections::HashMap<TargetKey, (std::time::Instant, Answer)>,
    said: std::collections::HashSet<(TargetKey, String)>,
}

fn kept() -> std::sync::MutexGuard<'static, Kept> {
    static KEPT: std::sync::OnceLock<std::sync::Mutex<Kept>> = std::sync::OnceLock::new();
    let m = KEPT.get_or_init(Default::default);
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `warning` about `target` is new in this process: the same counts against the same
/// limit are warned once, later runs say them at debug (`summary.json` counts them each run).
pub fn first_time(target: &Target, warning: &str) -> bool {
    let mut k = kept();
    if k.said.len() >= KEPT_TARGETS * 16 {
        k.said.clear();
    }
    k.said
        .insert(((target.url(), target.model.clone()), warning.to_owned()))
}

/// The target's context length, where it was read (`/v1/models max_model_len`) and its
/// engine's rule; `None` when no route states it in time (the run then says nothing new). An
/// answer (or none) is kept for [`KEPT_FOR`].
pub async fn context_limit(target: &Target) -> Answer {
    let key = (target.url(), target.model.clone());
    if let Some((at, answer)) = kept().answers.get(&key) {
        if at.elapsed() < KEPT_FOR {
            return answer.clone();
        }
    }
    let answer = ask(target).await;
    let mut k = kept();
    if k.answers.len() >= KEPT_TARGETS {
        let oldest = k
            .answers
            .iter()
            .min_by_key(|(_, (at, _))| *at)
            .map(|(t, _)| t.clone());
        if let Some(t) = oldest {
            k.answers.remove(&t);
        }
    }
    k.answers
        .insert(key, (std::time::Instant::now(), answer.clone()));
    answer
}

/// The target's transport for its info routes: a GET of a path with its TLS, API key and
/// headers (`doctor`'s), the body read up to the info routes' cap. The pre-flight asks with
/// it, and `summary.json`'s `context.server` is read with it on the target's origin. Errors
/// never quote a header.
pub fn target_info(target: &Target) -> context_length::TargetInfo {
    let t = std::sync::Arc::new(target.clone());
    let get: context_length::InfoGet = std::sync::Arc::new(move |path: String| {
        let t = t.clone();
        Box::pin(async move {
            match crate::cli::doctor::get(&t, &path).await {
                Ok((status, _, body)) => Ok((status.as_u16(), body.to_vec())),
                Err(e) => Err(format!("{e:#}")),
            }
        })
    });
    context_length::TargetInfo {
        base: target.base_url(),
        model: target.model.clone(),
        models_path: target.models_path(),
        get,
    }
}

/// `observe` with the run's target as the one its telemetry asks the server's info routes
/// of ([`canary_telemetry::Config::server_info_target`]): `target` must hold its API key
/// (read by then).
pub fn observing(observe: &crate::execute::Observe, target: &Target) -> crate::execute::Observe {
    let mut observe = observe.clone();
    observe.telemetry.server_info_target = Some(target_info(target));
    observe
}

/// Asks the target's routes in turn, within [`BUDGET`], with telemetry's one reader
/// ([`canary_telemetry::context_length`]: the routes, fields, body cap and source names
/// `summary.json`'s `context.server` is read with), over the target's own transport.
async fn ask(target: &Target) -> Answer {
    let info = target_info(target);
    let get = |path: String| (info.get)(path);
    match context_length::ask_context(&info.models_path, Some(&info.model), BUDGET, get).await {
        Ok(limit) => Some(limit),
        Err(why) => {
            tracing::debug!("the target's context length is not known: {why}");
            None
        }
    }
}

/// Synthetic requests of varying lengths counted one by one at most (more of them, or a
/// duration with no count: not counted, said at debug).
const SYNTHETIC_COUNTED: u64 = 1_000_000;

/// Before a run: the requests of `prepared` that cannot fit the target's context, said once
/// (a warning) and counted — a trace's in its `run.trace.selection`, synthetic ones
/// (`--isl`/`--osl`, rate and closed-loop workloads) in the report returned, for the `load`
/// block. Synthetic requests are counted when the plan's count is known (or every request is
/// alike); `None` when the context is not known or the requests not counted.
pub async fn preflight(
    plan: &canary_replay::Plan,
    prepared: &mut canary_replay::Prepared,
    shutdown: &CancellationToken,
) -> Option<SelectionReport> {
    let synthetic = match &plan.load {
        LoadShape::Trace(_) => None,
        LoadShape::Rate(r) => Some((&r.requests, r.extent)),
        LoadShape::ClosedLoop(c) => Some((&c.requests, c.extent)),
    };
    if prepared.trace.is_none() && synthetic.is_none() {
        return None;
    }
    // A stop while the target is asked (3 s at most) goes on to the run, which ends at once.
    let found = tokio::select! {
        found = context_limit(&plan.replay.target) => found,
        () = shutdown.cancelled() => None,
    }?;
    let (limit, source, rule) = (found.tokens, found.source.clone(), found.rule);
    let target = &plan.replay.target;
    // The rule of the engine whose route stated the limit (vLLM's `>`, SGLang's `>=`): see
    // [`context_length::FitRule`], where the servers' own checks read are named.
    let refused = move |prompt, max_tokens| rule.refused(limit, prompt, max_tokens);
    let mut synthetic_report = None;
    let warning = match (&mut prepared.trace, &prepared.work, synthetic) {
        (Some(loaded), canary_replay::Work::Schedule(schedule), _) => {
            let requests = schedule
                .rows_in_order()
                .map(|r| (r.input_tokens(), target.max_tokens_sent(r.output_tokens())));
            loaded
                .selection
                .count_over_context(limit, &source, requests, refused)
        }
        (None, _, Some((requests, extent))) => {
            let length_limit = plan.replay.length_limit;
            let alike = requests.isl.stddev == 0.0 && requests.osl.stddev == 0.0;
            let one = {
                let (requests, target) = (requests.clone(), target.clone());
                move |i: u64| {
                    let r = requests.request(i as u32, length_limit);
                    (r.input_tokens, target.max_tokens_sent(r.output_tokens))
                }
            };
            let mut report = SelectionReport::default();
            let warning = match extent.count() {
                // Every request alike: the first stands for all of them, judged once.
                Some(n) if alike => {
                    let first = one(0);
                    report.count_over_context_times(
                        limit,
                        &source,
                        std::iter::once((first, n)),
                        refused,
                    )
                }
                // Up to a million drawn one by one: off the async workers (a daemon's
                // watchdog, /metrics and other workloads' timing share them).
                Some(n) if n <= SYNTHETIC_COUNTED => {
                    let counted = tokio::task::spawn_blocking(move || {
                        let mut report = SelectionReport::default();
                        let warning =
                            report.count_over_context(limit, &source, (0..n).map(one), refused);
                        (report, warning)
                    })
                    .await;
                    match counted {
                        Ok((counted, warning)) => {
                            report = counted;
                            warning
                        }
                        Err(e) => {
                            tracing::debug!("counting the synthetic requests failed: {e}");
                            return None;
                        }
                    }
                }
                _ => {
                    tracing::debug!(
                        "the synthetic requests against the target's context ({limit}, from \
                         {source}): not counted (no request count, or over \
                         {SYNTHETIC_COUNTED} requests of varying lengths)"
                    );
                    return None;
                }
            };
            synthetic_report = Some(report);
            warning
        }
        _ => None,
    };
    if let Some(warning) = warning {
        // Once per process for the same counts against the same target: a sweep's points and
        // a daemon's periods would say it every run.
        match first_time(target, &warning) {
            true => tracing::warn!("{warning}"),
            false => tracing::debug!("{warning}"),
        }
    }
    synthetic_report
}
