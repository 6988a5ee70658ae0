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

/// The target's context length and where it was read (`/v1/models max_model_len`); `None`
/// when no route states it in time (the run then says nothing new).
pub async fn context_limit(target: &Target) -> Option<(u64, String)> {
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
