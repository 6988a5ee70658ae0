//! Before a trace run: the target's context length, read from the server, and the selected
//! requests that cannot fit it (the server refuses them, HTTP 400, and the run used to say
//! nothing before). What is sent does not change; the run only says so, once, and counts them
//! in `summary.json`'s `run.trace.selection`.
//!
//! The routes and fields are those `summary.json`'s `context.server.max_model_len` is read
//! from after the run (telemetry's `server_info`), asked of the target itself (its TLS, API
//! key and headers) before the run: `/v1/models` under the API root (vLLM, canary-sim), then
//! llama.cpp's `/props`, SGLang's `/get_server_info` and TGI's `/info`.

use canary_replay::Target;
use serde_json::Value;
use std::time::Duration;

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

/// Asks the target's routes in turn, within [`BUDGET`].
async fn ask(target: &Target) -> Option<(u64, String)> {
    let deadline = tokio::time::Instant::now() + BUDGET;
    let models = target.models_path();
    let routes: [(&str, &[&str]); 4] = [
        (models.as_str(), &["max_model_len"]),
        ("/props", &["default_generation_settings.n_ctx", "n_ctx"]),
        ("/get_server_info", &["context_length"]),
        ("/info", &["max_total_tokens"]),
    ];
    for (route, keys) in routes {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let answer = tokio::time::timeout(left, crate::cli::doctor::get(target, route)).await;
        let Ok(Ok((status, _, body))) = answer else {
            if answer.is_err() {
                tracing::debug!("the target's context length: no answer in {BUDGET:?}");
                return None;
            }
            continue;
        };
        if !status.is_success() {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&body) else {
            continue;
        };
        // A model list: the entry of the model the run asks for, else the only one (on a
        // server of several models another's context is not this run's).
        let v = match route == models {
            true => {
                let data = v.get("data").and_then(Value::as_array);
                let mine = data.and_then(|d| {
                    d.iter()
                        .find(|m| m.get("id").and_then(Value::as_str) == Some(&target.model))
                        .or(d.first().filter(|_| d.len() == 1))
                });
                match mine {
                    Some(m) => m.clone(),
                    None => continue,
                }
            }
            false => v,
        };
        for key in keys {
            let found = key
                .split('.')
                .try_fold(&v, |v, part| v.get(part))
                .and_then(Value::as_u64)
                .filter(|n| *n > 0);
            if let Some(n) = found {
                let field = key.rsplit('.').next().unwrap_or(key);
                let route = if route == models { "/v1/models" } else { route };
                return Some((n, format!("{route} {field}")));
            }
        }
    }
    None
}
