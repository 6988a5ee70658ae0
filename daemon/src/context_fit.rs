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

/// A context length and where it was read, or none.
type Answer = Option<(u64, String)>;

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

/// The target's context length and where it was read (`/v1/models max_model_len`); `None`
/// when no route states it in time (the run then says nothing new). An answer (or none) is
/// kept for [`KEPT_FOR`].
pub async fn context_limit(target: &Target) -> Option<(u64, String)> {
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

/// Asks the target's routes in turn, within [`BUDGET`], with telemetry's one reader
/// ([`canary_telemetry::context_length`]: the routes, fields, body cap and source names
/// `summary.json`'s `context.server` is read with), over the target's own transport.
async fn ask(target: &Target) -> Option<(u64, String)> {
    let got = |path: String| async move {
        match crate::cli::doctor::get(target, &path).await {
            Ok((status, _, body)) => Ok((status.as_u16(), body.to_vec())),
            Err(e) => Err(format!("{path}: {e:#}")),
        }
    };
    let models = target.models_path();
    match context_length::ask_context(&models, Some(&target.model), BUDGET, got).await {
        Ok(limit) => Some((limit.tokens, limit.source)),
        Err(why) => {
            tracing::debug!("the target's context length is not known: {why}");
            None
        }
    }
}

/// The rule of the server the source names (vLLM's `>`, SGLang's `>=`): see
/// [`context_length::FitRule`], where the servers' own checks read are named.
fn refused(limit: u64, source: &str) -> impl Fn(u64, Option<u64>) -> (bool, bool) {
    let rule = context_length::ContextLimit {
        tokens: limit,
        source: source.to_string(),
    }
    .rule();
    move |prompt, max_tokens| rule.refused(limit, prompt, max_tokens)
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
    let (limit, source) = tokio::select! {
        found = context_limit(&plan.replay.target) => found,
        () = shutdown.cancelled() => None,
    }?;
    let target = &plan.replay.target;
    let refused = refused(limit, &source);
    let mut synthetic_report = None;
    let warning = match (&mut prepared.trace, &prepared.work, synthetic) {
        (Some(loaded), canary_replay::Work::Schedule(schedule), _) => {
            let requests = schedule
                .rows_in_order()
                .map(|r| (r.input_tokens(), target.max_tokens_sent(r.output_tokens())));
            loaded
                .selection
                .count_over_context(limit, &source, requests, &refused)
        }
        (None, _, Some((requests, extent))) => {
            let length_limit = plan.replay.length_limit;
            let alike = requests.isl.stddev == 0.0 && requests.osl.stddev == 0.0;
            let one = |i: u64| {
                let r = requests.request(i as u32, length_limit);
                (r.input_tokens, target.max_tokens_sent(r.output_tokens))
            };
            let mut report = SelectionReport::default();
            let warning = match extent.count() {
                // Every request alike: the first stands for all of them.
                Some(n) if alike => {
                    let first = one(0);
                    report.count_over_context(limit, &source, (0..n).map(|_| first), &refused)
                }
                Some(n) if n <= SYNTHETIC_COUNTED => {
                    report.count_over_context(limit, &source, (0..n).map(one), &refused)
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
