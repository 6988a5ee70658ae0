//! The server's context length, read one way for both its readers: the pre-flight before a
//! trace or synthetic run (the daemon's `context_fit`, asking the target itself with its TLS,
//! API key and headers) and `summary.json`'s `context.server.max_model_len` after the run
//! ([`server_context`](crate::server_info)). The routes, the fields, the body cap and the
//! answer's source name (`context_limit_source`, e.g. `/v1/models max_model_len`) are here
//! once; each reader brings its own transport.
//!
//! A hostile server costs bounded memory ([`INFO_BODY_BYTES`] a body, read by the
//! transport under that cap) and time (the reader's budget), and its answer is refused with a
//! reason in words ([`read_body`]), never a panic.

use serde_json::Value;
use std::future::Future;
use std::time::Duration;

/// The most of an info route's body read: the answers are a few KiB, and a JSON tree of
/// 32 MiB of `[0,0,…]` takes over half a gigabyte.
pub const INFO_BODY_BYTES: usize = 1 << 20;

/// The OpenAI-compatible model list (vLLM, canary-sim): `data[].max_model_len`. Its path is
/// under the target's API root; the source names it `/v1/models` whatever the root.
pub const MODELS: &str = "/v1/models";

/// The engines' own routes and the fields stating the context length, in the order asked
/// after [`MODELS`] (the first route stating one wins; within a route, the first field).
pub const ENGINE_ROUTES: [(&str, &[&str]); 3] = [
    // llama.cpp: {"default_generation_settings": {"n_ctx"}} (older builds: top-level n_ctx).
    ("/props", &["default_generation_settings.n_ctx", "n_ctx"]),
    // SGLang: {"context_length"?, "max_total_num_tokens"} — the KV pool's size, which also
    // bounds a request (its scheduler's longest input is the smaller of the two, less one).
    (
        "/get_server_info",
        &["context_length", "max_total_num_tokens"],
    ),
    // TGI: {"max_total_tokens"}.
    ("/info", &["max_total_tokens"]),
];

/// The fields of a model list's entry stating the context length.
const MODELS_KEYS: &[&str] = &["max_model_len"];

/// How a server refuses a request against its context length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitRule {
    /// vLLM (and canary-sim, TGI, llama.cpp: the same rule assumed there, not read from
    /// their code): refused when prompt + max_tokens > limit, and, without `max_tokens`,
    /// when the prompt leaves no room for one output token (prompt >= limit).
    ///
    /// Read in vllm-project/vllm, `vllm/v1/engine/input_processor.py`
    /// (`InputProcessor._validate_prompt_len`: `prompt_len > max_prompt_len` refused, and
    /// `prompt_len == max_prompt_len` refused for a generating model, "plus the number of
    /// requested output tokens (at least 1)"), and the OpenAI server's older check,
    /// `vllm/entrypoints/openai/serving_engine.py` (`_validate_prompt_and_tokenize`:
    /// without `max_tokens`, `token_num >= self.max_model_len` refused and `max_tokens`
    /// defaults to `max_model_len - token_num`; with it, `token_num + max_tokens >
    /// max_model_len` refused).
    AtMost,
    /// SGLang: the total must stay below the limit. Read in sgl-project/sglang,
    /// `python/sglang/srt/managers/tokenizer_manager.py` (`_validate_one_request`:
    /// `input_token_num >= self.context_len` refused, and with `max_new_tokens`,
    /// `max_new_tokens + input_token_num >= self.context_len` refused).
    Below,
}

impl FitRule {
    /// Whether a request of `prompt` tokens carrying `max_tokens` (`None`: none sent, the
    /// server picks) is refused against `limit`: (over, over by its prompt alone — refused
    /// whatever `max_tokens` it carried).
    pub fn refused(self, limit: u64, prompt: u64, max_tokens: Option<u64>) -> (bool, bool) {
        // At least one output token: a request leaving none is refused (vLLM's
        // SamplingParams asks max_tokens >= 1 too).
        let prompt_over = prompt.saturating_add(1) > limit;
        let over = match (self, max_tokens) {
            (_, None) => prompt_over,
            (FitRule::AtMost, Some(m)) => prompt.saturating_add(m.max(1)) > limit,
            (FitRule::Below, Some(m)) => prompt.saturating_add(m.max(1)) >= limit,
        };
        (over || prompt_over, prompt_over)
    }
}

/// A server's context length and where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextLimit {
    /// Tokens.
    pub tokens: u64,
    /// The route and field, e.g. `/v1/models max_model_len`, `/props n_ctx`.
    pub source: String,
}

impl ContextLimit {
    /// The rule of the engine the source names.
    pub fn rule(&self) -> FitRule {
        match self.source.starts_with("/get_server_info ") {
            true => FitRule::Below,
            false => FitRule::AtMost,
        }
    }
}

/// The first of `keys` (`a.b` for nested) holding a positive integer, and its last part.
fn number<'k>(v: &Value, keys: &[&'k str]) -> Option<(u64, &'k str)> {
    keys.iter().find_map(|k| {
        let n = k
            .split('.')
            .try_fold(v, |v, part| v.get(part))?
            .as_u64()
            .filter(|n| *n > 0)?;
        Some((n, k.rsplit('.').next().unwrap_or(k)))
    })
}

/// The entry of a model list for `model`: its own, else the only one (on a server of several
/// models another's context is not this run's). Without a model to look for, the first.
pub fn model_entry<'v>(list: &'v Value, model: Option<&str>) -> Option<&'v Value> {
    let data = list.get("data")?.as_array()?;
    match model {
        Some(model) => data
            .iter()
            .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
            .or(data.first().filter(|_| data.len() == 1)),
        None => data.first(),
    }
}

/// The context length `route`'s parsed answer states (`route` is [`MODELS`] or one of
/// [`ENGINE_ROUTES`]); for a model list, that of `model`'s entry ([`model_entry`]).
pub fn context_in(route: &str, v: &Value, model: Option<&str>) -> Option<ContextLimit> {
    let (v, keys) = match route {
        MODELS => (model_entry(v, model)?, MODELS_KEYS),
        _ => (v, ENGINE_ROUTES.iter().find(|(r, _)| *r == route)?.1),
    };
    let (tokens, field) = number(v, keys)?;
    Some(ContextLimit {
        tokens,
        source: format!("{route} {field}"),
    })
}

/// A route's body as JSON: refused past [`INFO_BODY_BYTES`] (a transport that read more
/// than the cap is refused here too) or when not JSON, the reason in words.
pub fn read_body(route: &str, body: &[u8]) -> Result<Value, String> {
    if body.len() > INFO_BODY_BYTES {
        return Err(format!(
            "{route}: the response body is over {} MiB, the most read of it",
            INFO_BODY_BYTES >> 20
        ));
    }
    serde_json::from_slice(body).map_err(|e| format!("{route}: not JSON: {e}"))
}

/// What a transport answered a GET: the status and the body (at most [`INFO_BODY_BYTES`]
/// read), or why none, in words.
pub type Got = Result<(u16, Vec<u8>), String>;

/// Asks [`MODELS`] (at `models_path`, the target's API root) then each of
/// [`ENGINE_ROUTES`] with `get`, all within `budget`, until one states the context length
/// (of `model`, in a model list). `Err` says what each route answered, or that the budget
/// ran out (a server that accepts and never answers costs `budget` once).
pub async fn ask_context<F, Fut>(
    models_path: &str,
    model: Option<&str>,
    budget: Duration,
    mut get: F,
) -> Result<ContextLimit, String>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Got>,
{
    let deadline = tokio::time::Instant::now() + budget;
    let mut tried: Vec<String> = Vec::new();
    let routes = std::iter::once(MODELS).chain(ENGINE_ROUTES.iter().map(|(r, _)| *r));
    for route in routes {
        let path = match route {
            MODELS => models_path.to_string(),
            r => r.to_string(),
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let answer = match tokio::time::timeout(left, get(path)).await {
            Ok(a) => a,
            Err(_) => {
                tried.push(format!(
                    "{route}: no answer within the {} ms for the server's info routes; the \
                     rest not asked",
                    budget.as_millis()
                ));
                break;
            }
        };
        let found = answer.and_then(|(status, body)| match status {
            200..=299 => {
                let v = read_body(route, &body)?;
                context_in(route, &v, model).ok_or_else(|| format!("{route}: no context length"))
            }
            s => Err(format!("{route}: HTTP {s}")),
        });
        match found {
            Ok(limit) => return Ok(limit),
            Err(e) => tried.push(e),
        }
    }
    Err(tried.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_route_is_read_by_its_own_fields_and_named_as_its_source() {
        let cases = [
            (
                MODELS,
                json!({"data": [{"id": "m", "max_model_len": 1000}]}),
                "/v1/models max_model_len",
            ),
            (
                "/props",
                json!({"default_generation_settings": {"n_ctx": 1000}}),
                "/props n_ctx",
            ),
            ("/props", json!({"n_ctx": 1000}), "/props n_ctx"),
            (
                "/get_server_info",
                json!({"context_length": 1000, "max_total_num_tokens": 5}),
                "/get_server_info context_length",
            ),
            (
                "/get_server_info",
                json!({"max_total_num_tokens": 1000}),
                "/get_server_info max_total_num_tokens",
            ),
            (
                "/info",
                json!({"max_total_tokens": 1000}),
                "/info max_total_tokens",
            ),
        ];
        for (route, v, source) in cases {
            let got = context_in(route, &v, Some("m")).unwrap();
            assert_eq!((got.tokens, got.source.as_str()), (1000, source));
        }
        // Another model's entry is not this run's; the only one is.
        let two =
            json!({"data": [{"id": "a", "max_model_len": 1}, {"id": "b", "max_model_len": 2}]});
        assert_eq!(context_in(MODELS, &two, Some("m")), None);
        assert_eq!(context_in(MODELS, &two, Some("b")).unwrap().tokens, 2);
        assert_eq!(context_in(MODELS, &two, None).unwrap().tokens, 1);
        assert_eq!(context_in("/props", &json!({"n_ctx": 0}), None), None);
        assert_eq!(context_in("/props", &json!({"n_ctx": "9"}), None), None);
    }

    #[test]
    fn a_body_past_the_cap_or_not_json_is_refused_in_words() {
        let big = vec![b' '; INFO_BODY_BYTES + 1];
        let e = read_body("/props", &big).unwrap_err();
        assert_eq!(
            e,
            "/props: the response body is over 1 MiB, the most read of it"
        );
        let deep = "[".repeat(100_000);
        assert!(read_body("/info", deep.as_bytes())
            .unwrap_err()
            .starts_with("/info: not JSON: "));
    }

    /// The edge, as vLLM and SGLang refuse.
    #[test]
    fn the_fit_rule_at_the_limit() {
        let at_most = FitRule::AtMost;
        assert_eq!(at_most.refused(100, 90, Some(10)), (false, false));
        assert_eq!(at_most.refused(100, 90, Some(11)), (true, false));
        // No max_tokens: the prompt must leave room for one output token.
        assert_eq!(at_most.refused(100, 99, None), (false, false));
        assert_eq!(at_most.refused(100, 100, None), (true, true));
        assert_eq!(at_most.refused(100, 100, Some(1)), (true, true));
        assert_eq!(at_most.refused(100, u64::MAX, Some(u64::MAX)), (true, true));
        let below = FitRule::Below;
        assert_eq!(below.refused(100, 89, Some(10)), (false, false));
        assert_eq!(below.refused(100, 90, Some(10)), (true, false));
        assert_eq!(below.refused(100, 99, None), (false, false));
        assert_eq!(below.refused(100, 100, None), (true, true));
        let sglang = ContextLimit {
            tokens: 1,
            source: "/get_server_info context_length".into(),
        };
        assert_eq!(sglang.rule(), FitRule::Below);
        let vllm = ContextLimit {
            tokens: 1,
            source: "/v1/models max_model_len".into(),
        };
        assert_eq!(vllm.rule(), FitRule::AtMost);
    }
}
