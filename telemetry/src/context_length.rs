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

/// An engine's own info route stating the context length.
#[derive(Debug, Clone, Copy)]
pub struct EngineRoute {
    /// The route, at the server's root.
    pub route: &'static str,
    /// The fields stating the context length (`a.b` for nested), the first present read.
    pub keys: &'static [&'static str],
    /// How that engine refuses a request against it.
    pub rule: FitRule,
    /// Said when no field states it: where the engine would.
    pub hint: &'static str,
}

/// The engines' own routes, in the order asked after [`MODELS`] (the first route stating a
/// context length wins; within a route, the first field present).
///
/// SGLang's `max_total_num_tokens` (also on `/get_server_info`) is not read: it is the size
/// of the KV-cache pool, shared by all running requests, not a request's context length.
pub const ENGINE_ROUTES: [EngineRoute; 3] = [
    // llama.cpp: {"default_generation_settings": {"n_ctx"}} (older builds: top-level n_ctx).
    EngineRoute {
        route: "/props",
        keys: &["default_generation_settings.n_ctx", "n_ctx"],
        rule: FitRule::AtMost,
        hint: "",
    },
    // SGLang: {"context_length", ...}: the server's arguments, `null` unless it was started
    // with --context-length (the model's own length is then not on this route).
    EngineRoute {
        route: "/get_server_info",
        keys: &["context_length"],
        rule: FitRule::Below,
        hint: " (SGLang states it only when started with --context-length; its \
               max_total_num_tokens is the KV-cache pool's size, not a context length)",
    },
    // TGI: {"max_total_tokens"}.
    EngineRoute {
        route: "/info",
        keys: &["max_total_tokens"],
        rule: FitRule::AtMost,
        hint: "",
    },
];

/// The routes asked for the context length, in order: [`MODELS`], then [`ENGINE_ROUTES`].
/// The pre-flight and `summary.json`'s `context.server` both ask them in this order, and
/// take the first that states one.
pub fn context_routes() -> impl Iterator<Item = &'static str> {
    std::iter::once(MODELS).chain(ENGINE_ROUTES.iter().map(|r| r.route))
}

/// The fields of a model list's entry stating the context length.
const MODELS_KEYS: &[&str] = &["max_model_len"];

/// The largest context length believed (tokens): the longest contexts served today are
/// about 10 million tokens; a number past 2^32 is a sentinel or garbage, not a length.
pub const MOST_TOKENS: u64 = 1 << 32;

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
    /// The rule of the engine whose route stated it (SGLang's `/get_server_info`:
    /// [`FitRule::Below`]; the others [`FitRule::AtMost`]), set where the route is read.
    pub rule: FitRule,
}

/// A field's value as a context length, or what is wrong with it (`field` names it).
/// An integral float (`4096.0`, `1e3`) is read as its integer: JSON does not tell the two
/// apart, and a server or proxy that went through a float (Python's `float`, a JSON
/// library without integers) writes one for the same length; anything else that is not a
/// positive integer up to [`MOST_TOKENS`] is refused.
fn tokens(field: &str, x: &Value) -> Result<u64, String> {
    let n = match x {
        Value::Number(n) => n,
        Value::Null => return Err(format!("{field} is null")),
        Value::String(s) => {
            let s = canary_core::printable(canary_core::prefix_within(s, 32)).into_owned();
            return Err(format!("{field} is the string \"{s}\", not a number"));
        }
        Value::Bool(_) | Value::Array(_) | Value::Object(_) => {
            return Err(format!("{field} is not a number"))
        }
    };
    let whole = match (n.as_u64(), n.as_f64()) {
        (Some(u), _) => Some(u),
        // Exactly an integer, and small enough for f64 to hold every integer up to it.
        (None, Some(f)) if f.fract() == 0.0 && f > 0.0 && f <= MOST_TOKENS as f64 => Some(f as u64),
        (None, Some(f)) if f.fract() == 0.0 && f > MOST_TOKENS as f64 => {
            return Err(format!(
                "{field} {n} is over {MOST_TOKENS} tokens: not a context length"
            ))
        }
        _ => None,
    };
    match whole {
        Some(0) | None => Err(format!("{field} {n} is not a positive integer")),
        Some(t) if t > MOST_TOKENS => Err(format!(
            "{field} {n} is over {MOST_TOKENS} tokens: not a context length"
        )),
        Some(t) => Ok(t),
    }
}

/// The first of `keys` (`a.b` for nested) present in `v`, as a context length, and its last
/// part; what was wrong when none is usable (a present but unusable one is named).
fn number<'k>(v: &Value, keys: &[&'k str]) -> Result<(u64, &'k str), String> {
    let mut wrong = None;
    for k in keys {
        let Some(x) = k.split('.').try_fold(v, |v, part| v.get(part)) else {
            continue;
        };
        match tokens(k, x) {
            Ok(n) => return Ok((n, k.rsplit('.').next().unwrap_or(k))),
            Err(e) => wrong = wrong.or(Some(e)),
        }
    }
    Err(wrong.unwrap_or_else(|| format!("no {} field", keys.join(" or "))))
}

/// The entry of a model list for `model`: its own, else the only one (on a server of several
/// models another's context is not this run's). Without a model to look for, the first.
/// Why none, in words.
pub fn model_entry<'v>(list: &'v Value, model: Option<&str>) -> Result<&'v Value, String> {
    let data = list
        .get("data")
        .and_then(Value::as_array)
        .ok_or("no \"data\" list of models")?;
    let first = data.first().ok_or("an empty list of models")?;
    let Some(model) = model else {
        return Ok(first);
    };
    let id = |m: &Value| m.get("id").and_then(Value::as_str).map(str::to_owned);
    data.iter()
        .find(|m| id(m).as_deref() == Some(model))
        .or(data.first().filter(|_| data.len() == 1))
        .ok_or_else(|| {
            let model = canary_core::printable(canary_core::prefix_within(model, 128));
            let other = id(first).unwrap_or_default();
            let other = canary_core::printable(canary_core::prefix_within(&other, 128));
            format!(
                "no entry for model \"{model}\" among its {} (the first: \"{other}\")",
                data.len()
            )
        })
}

/// The context length `route`'s parsed answer states (`route` is [`MODELS`] or one of
/// [`ENGINE_ROUTES`]); for a model list, that of `model`'s entry ([`model_entry`]). Why
/// none, in words (the route not named: the caller says where it asked).
pub fn context_in(route: &str, v: &Value, model: Option<&str>) -> Result<ContextLimit, String> {
    let (v, keys, rule, hint) = match route {
        MODELS => (model_entry(v, model)?, MODELS_KEYS, FitRule::AtMost, ""),
        _ => {
            let r = ENGINE_ROUTES
                .iter()
                .find(|r| r.route == route)
                .ok_or("not a route stating a context length")?;
            (v, r.keys, r.rule, r.hint)
        }
    };
    // The hint where the field is missing or null, not where it holds a wrong number.
    let (tokens, field) =
        number(v, keys).map_err(|e| match e.starts_with("no ") || e.ends_with(" is null") {
            true => format!("{e}{hint}"),
            false => e,
        })?;
    Ok(ContextLimit {
        tokens,
        source: format!("{route} {field}"),
        rule,
    })
}

/// A route's body as JSON: refused past [`INFO_BODY_BYTES`] (a transport that read more
/// than the cap is refused here too) or when not JSON, the reason in words (the route not
/// named: the caller says where it asked).
pub fn read_body(body: &[u8]) -> Result<Value, String> {
    if body.len() > INFO_BODY_BYTES {
        return Err(format!(
            "the response body is over {} MiB, the most read of it",
            INFO_BODY_BYTES >> 20
        ));
    }
    serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))
}

/// What a transport answered a GET: the status and the body (at most [`INFO_BODY_BYTES`]
/// read), or why none, in words (the path not named: the caller says where it asked).
pub type Got = Result<(u16, Vec<u8>), String>;

/// A GET of a path on the target, over its own transport (its TLS, API key and headers).
pub type InfoGet = std::sync::Arc<
    dyn Fn(String) -> std::pin::Pin<Box<dyn Future<Output = Got> + Send>> + Send + Sync,
>;

/// The run's target, for `summary.json`'s `context.server`: asked as the pre-flight asks it
/// (its model's entry of its model list under its API root, over its own transport) when
/// the server's info routes are on the target's own origin (scheme, host and port). The API
/// key and headers never go to another host.
#[derive(Clone)]
pub struct TargetInfo {
    /// The target's root, `scheme://host:port`.
    pub base: String,
    /// The model the run asks for.
    pub model: String,
    /// The model list's path under the target's API root.
    pub models_path: String,
    /// The target's transport.
    pub get: InfoGet,
}

impl std::fmt::Debug for TargetInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The transport holds the API key: never printed.
        f.debug_struct("TargetInfo")
            .field("base", &self.base)
            .field("model", &self.model)
            .field("models_path", &self.models_path)
            .finish_non_exhaustive()
    }
}

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
    for route in context_routes() {
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
            200..=299 => context_in(route, &read_body(&body)?, model),
            s => Err(format!("HTTP {s}")),
        });
        match found {
            Ok(limit) => return Ok(limit),
            Err(e) => tried.push(format!("{route}: {e}")),
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
                "/info",
                json!({"max_total_tokens": 1000}),
                "/info max_total_tokens",
            ),
        ];
        for (route, v, source) in cases {
            let got = context_in(route, &v, Some("m")).unwrap();
            assert_eq!((got.tokens, got.source.as_str()), (1000, source));
            // The engine's rule, set where its route is read (not guessed from `source`).
            let rule = match route {
                "/get_server_info" => FitRule::Below,
                _ => FitRule::AtMost,
            };
            assert_eq!(got.rule, rule, "{route}");
        }
        // Another model's entry is not this run's; the only one is.
        let two =
            json!({"data": [{"id": "a", "max_model_len": 1}, {"id": "b", "max_model_len": 2}]});
        assert_eq!(
            context_in(MODELS, &two, Some("m")).unwrap_err(),
            "no entry for model \"m\" among its 2 (the first: \"a\")"
        );
        assert_eq!(context_in(MODELS, &two, Some("b")).unwrap().tokens, 2);
        assert_eq!(context_in(MODELS, &two, None).unwrap().tokens, 1);
    }

    /// SGLang's `max_total_num_tokens` is its KV-cache pool (all running requests together),
    /// not a request's context: never read as one, and the reason says so.
    #[test]
    fn sglang_kv_pool_size_is_not_a_context_length() {
        let v = json!({"version": "0.4.6", "context_length": null, "max_total_num_tokens": 912345});
        let why = context_in("/get_server_info", &v, None).unwrap_err();
        assert!(
            why.starts_with("context_length is null (SGLang states it only"),
            "{why}"
        );
        assert!(
            why.contains("max_total_num_tokens is the KV-cache pool's size"),
            "{why}"
        );
        let v = json!({"max_total_num_tokens": 912345});
        let why = context_in("/get_server_info", &v, None).unwrap_err();
        assert!(why.starts_with("no context_length field (SGLang"), "{why}");
        let v = json!({"context_length": -1});
        let why = context_in("/get_server_info", &v, None).unwrap_err();
        assert_eq!(why, "context_length -1 is not a positive integer");
    }

    /// Each unusable number says what was wrong with it; an integral float is its integer.
    #[test]
    fn an_unusable_length_says_what_was_wrong() {
        let models = |x: &str| {
            let v: Value =
                serde_json::from_str(&format!(r#"{{"data":[{{"id":"m","max_model_len":{x}}}]}}"#))
                    .unwrap();
            context_in(MODELS, &v, Some("m")).map(|c| c.tokens)
        };
        for (x, why) in [
            ("-1", "max_model_len -1 is not a positive integer"),
            ("0", "max_model_len 0 is not a positive integer"),
            ("4096.5", "max_model_len 4096.5 is not a positive integer"),
            (
                "\"4096\"",
                "max_model_len is the string \"4096\", not a number",
            ),
            ("null", "max_model_len is null"),
            ("[1]", "max_model_len is not a number"),
            (
                "18446744073709551616",
                "max_model_len 1.8446744073709552e+19 is over 4294967296 tokens: not a context \
                 length",
            ),
            (
                "18446744073709551615",
                "max_model_len 18446744073709551615 is over 4294967296 tokens: not a context \
                 length",
            ),
        ] {
            assert_eq!(models(x), Err(why.to_string()), "{x}");
        }
        assert_eq!(models("4096.0"), Ok(4096));
        assert_eq!(models("1e3"), Ok(1000));
        assert_eq!(models("4294967296"), Ok(4294967296));
        assert_eq!(
            context_in(MODELS, &json!({"data": [{"id": "m"}]}), Some("m")),
            Err("no max_model_len field".to_string())
        );
        assert_eq!(
            context_in("/props", &json!({}), None),
            Err("no default_generation_settings.n_ctx or n_ctx field".to_string())
        );
    }

    #[test]
    fn a_body_past_the_cap_or_not_json_is_refused_in_words() {
        let big = vec![b' '; INFO_BODY_BYTES + 1];
        let e = read_body(&big).unwrap_err();
        assert_eq!(e, "the response body is over 1 MiB, the most read of it");
        let deep = "[".repeat(100_000);
        assert!(read_body(deep.as_bytes())
            .unwrap_err()
            .starts_with("not JSON: "));
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
    }
}
