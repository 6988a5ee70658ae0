//! The inference server's engine version, model and context length, for `summary.json`'s
//! `context.server`: read from what each engine exposes beside its `/metrics` (same host and
//! port) — vLLM's `/version`, SGLang's `/get_server_info`, TGI's `/info`, llama.cpp's
//! `/props` — and the OpenAI-compatible `/v1/models`. Each field not found says which routes
//! were tried and what they answered.

use crate::context_length::{context_in, read_body, INFO_BODY_BYTES, MODELS};
use crate::http::{error_chain, Endpoint};
use canary_core::{Known, ServerContext};
use rustls::ClientConfig;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The server's base URL from its metrics URL: the scheme and host (and port), user info
/// and path dropped. `None` when an `@` after the authority's end (in the path, query or
/// fragment) leaves unclear where user info ends (a password holding `/`, `?` or `#`): the
/// base would carry part of it into the routes' error messages, and from there into
/// summary.json.
pub(crate) fn base_url(metrics_url: &str) -> Option<String> {
    let (scheme, rest) = metrics_url.split_once("://")?;
    let (authority, after) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    if after.contains('@') {
        return None;
    }
    let host = authority.rsplit('@').next()?;
    (!host.is_empty()).then(|| format!("{scheme}://{host}"))
}

/// The longest version or model name kept (bytes): they go into every run's context, the
/// history, verdicts and log lines.
const TEXT_LIMIT: usize = 128;

/// The first of `keys` (`a.b` for nested) holding a string or a number, as text: at most
/// [`TEXT_LIMIT`] bytes, control characters escaped.
fn text(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| {
        let x = k.split('.').try_fold(v, |v, part| v.get(part))?;
        match x {
            Value::String(s) if !s.is_empty() => {
                Some(canary_core::printable(canary_core::prefix_within(s, TEXT_LIMIT)).into_owned())
            }
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    })
}

/// What one engine route says: (version, model, context length). The context length is read
/// as the pre-flight reads it ([`context_in`]: the same fields).
fn engine_info(route: &str, v: &Value) -> (Option<String>, Option<String>, Option<u64>) {
    match route {
        // vLLM (and canary-sim): {"version": "0.10.1"}.
        "/version" => (text(v, &["version"]), None, None),
        // SGLang: {"version", "model_path", "context_length"?, ...}.
        "/get_server_info" => (
            text(v, &["version"]),
            text(v, &["served_model_name", "model_path"]),
            context_in(route, v, None).map(|c| c.tokens),
        ),
        // TGI: {"model_id", "version", "max_total_tokens", ...}.
        "/info" => (
            text(v, &["version"]),
            text(v, &["model_id"]),
            context_in(route, v, None).map(|c| c.tokens),
        ),
        // llama.cpp: {"build_info", "model_path", "default_generation_settings": {"n_ctx"}}.
        "/props" => (
            text(v, &["build_info"]),
            text(v, &["model_alias", "model_path"]),
            context_in(route, v, None).map(|c| c.tokens),
        ),
        _ => (None, None, None),
    }
}

/// The first model of a `/v1/models` list: its id and `max_model_len` (vLLM, canary-sim).
fn models_info(v: &Value) -> (Option<String>, Option<u64>) {
    let first = v.get("data").and_then(|d| d.get(0));
    match first {
        Some(m) => (
            text(m, &["id"]),
            context_in(MODELS, v, None).map(|c| c.tokens),
        ),
        None => (None, None),
    }
}

/// GETs `route` on `base` and parses its JSON body; why not, in words.
async fn get_json(
    base: &str,
    route: &str,
    tls: Option<Arc<ClientConfig>>,
    t: Duration,
) -> Result<Value, String> {
    let url = format!("{base}{route}");
    let endpoint = Endpoint::parse(&url, tls)
        .map_err(|e| error_chain(&e))?
        .with_body_cap(INFO_BODY_BYTES);
    let (body, _) = endpoint.get(t).await.map_err(|e| error_chain(&e))?;
    read_body(route, body.as_bytes())
}

/// The engines' info routes, in the order tried.
const ROUTES: [&str; 4] = ["/version", "/get_server_info", "/info", "/props"];

/// What the server at `base` says of itself. `/v1/models` first (the model and, on vLLM,
/// `max_model_len`), then each engine's route until one gives a version, all within `budget`:
/// the routes are asked after the run, and a server that accepts but never answers would
/// otherwise hold the run's end (and a shutdown) for a timeout per route.
pub(crate) async fn server_context(
    base: &str,
    tls: Option<Arc<ClientConfig>>,
    budget: Duration,
) -> ServerContext {
    let deadline = tokio::time::Instant::now() + budget;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let mut tried: Vec<String> = Vec::new();
    let (mut model, mut max_len) = (None, None);
    match get_json(base, MODELS, tls.clone(), left()).await {
        Ok(v) => (model, max_len) = models_info(&v),
        Err(e) => tried.push(e),
    }
    let mut version = None;
    for route in ROUTES {
        if left().is_zero() {
            tried.push(format!(
                "{route} and after: not asked, the {} ms for the server's info routes spent",
                budget.as_millis()
            ));
            break;
        }
        match get_json(base, route, tls.clone(), left()).await {
            Ok(v) => {
                let (ver, m, len) = engine_info(route, &v);
                model = model.or(m);
                max_len = max_len.or(len);
                if ver.is_some() {
                    version = ver;
                    break;
                }
                tried.push(format!("{route}: no version in its answer"));
            }
            Err(e) => tried.push(e),
        }
    }
    let why = |what: &str| format!("{what} not found: {}", tried.join("; "));
    ServerContext {
        version: Known::from_option(version, why("version")),
        model: Known::from_option(model, why("model")),
        max_model_len: Known::from_option(max_len, why("context length")),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on loopback answering each GET with `answer(path)` (404 when `None`).
    async fn serve_routes(answer: fn(&str) -> Option<String>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head);
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    let reply = match answer(&path) {
                        Some(body) => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        ),
                        None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\
                                 Connection: close\r\n\r\n"
                            .to_string(),
                    };
                    // The reader may hang up once past its cap.
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        format!("http://{addr}")
    }

    /// An info route past its cap is refused (its JSON would be parsed whole into a tree),
    /// said among what was tried, and the next route answers.
    #[tokio::test]
    async fn an_info_route_past_its_cap_is_refused_and_the_next_one_read() {
        let base = serve_routes(|path| match path {
            "/v1/models" => Some(r#"{"data":[{"id":"m","max_model_len":4096}]}"#.into()),
            // A version beside 2 MiB of padding: past the 1 MiB cap.
            "/version" => Some(format!(
                r#"{{"version":"9.9.9","pad":"{}"}}"#,
                "x".repeat(2 << 20)
            )),
            "/get_server_info" => Some(r#"{"version":"0.4.1"}"#.into()),
            _ => None,
        })
        .await;
        let ctx = server_context(&base, None, Duration::from_secs(10)).await;
        assert_eq!(ctx.version.value().map(String::as_str), Some("0.4.1"));
        assert_eq!(ctx.model.value().map(String::as_str), Some("m"));
        assert_eq!(ctx.max_model_len.value().copied(), Some(4096));

        // With no other route, the cap is the reason given.
        let base = serve_routes(|path| {
            (path == "/version")
                .then(|| format!(r#"{{"version":"1","pad":"{}"}}"#, "x".repeat(2 << 20)))
        })
        .await;
        let ctx = server_context(&base, None, Duration::from_secs(10)).await;
        let Known::Unavailable { unavailable: why } = &ctx.version else {
            panic!("a version read past the cap: {:?}", ctx.version);
        };
        assert!(why.starts_with("version not found: "), "{why}");
        assert!(
            why.contains("/version: the response body is over 1 MiB, the most read of it"),
            "{why}"
        );
    }

    /// The pre-flight's reader (over this crate's transport here) and `server_context` read
    /// the same context from the same server: SGLang's `max_total_num_tokens` when it states
    /// no `context_length`; a route past the 1 MiB cap is refused in words, the next read.
    #[tokio::test]
    async fn the_preflight_reader_and_server_context_agree() {
        let base = serve_routes(|path| match path {
            "/props" => Some(format!(r#"{{"n_ctx":1,"pad":"{}"}}"#, "x".repeat(2 << 20))),
            "/get_server_info" => Some(r#"{"version":"0.4.1","max_total_num_tokens":4096}"#.into()),
            _ => None,
        })
        .await;
        let ctx = server_context(&base, None, Duration::from_secs(10)).await;
        assert_eq!(ctx.max_model_len.value().copied(), Some(4096));
        let get = |path: String| {
            let url = format!("{base}{path}");
            async move {
                let e = Endpoint::parse(&url, None)
                    .map_err(|e| error_chain(&e))?
                    .with_body_cap(INFO_BODY_BYTES);
                let (body, _) = e
                    .get(Duration::from_secs(5))
                    .await
                    .map_err(|e| error_chain(&e))?;
                Ok((200, body.into_bytes()))
            }
        };
        let limit = crate::context_length::ask_context(
            "/v1/models",
            Some("m"),
            Duration::from_secs(10),
            get,
        )
        .await
        .unwrap();
        assert_eq!(
            (limit.tokens, limit.source.as_str()),
            (4096, "/get_server_info max_total_num_tokens")
        );
        // Against a server that never answers: the budget once, said in words.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let get = |path: String| {
            let url = format!("{silent}{path}");
            async move {
                let e = Endpoint::parse(&url, None).map_err(|e| error_chain(&e))?;
                let (body, _) = e
                    .get(Duration::from_secs(60))
                    .await
                    .map_err(|e| error_chain(&e))?;
                Ok((200, body.into_bytes()))
            }
        };
        let why =
            crate::context_length::ask_context("/v1/models", None, Duration::from_millis(300), get)
                .await
                .unwrap_err();
        assert_eq!(
            why,
            "/v1/models: no answer within the 300 ms for the server's info routes; the rest \
             not asked"
        );
    }

    /// A server that accepts and never answers spends the budget on its first route; the
    /// rest are not asked (each used to wait its own timeout: 10 s at a run's end, and at a
    /// shutdown's).
    #[tokio::test]
    async fn a_server_that_never_answers_costs_the_budget_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let ctx = server_context(&base, None, Duration::from_millis(300)).await;
        let Known::Unavailable { unavailable: why } = &ctx.version else {
            panic!("{:?}", ctx.version);
        };
        assert!(
            why.contains(
                "/version and after: not asked, the 300 ms for the server's info routes spent"
            ),
            "{why}"
        );
        assert!(!why.contains("/get_server_info"), "{why}");
    }

    #[test]
    fn the_base_of_a_metrics_url() {
        assert_eq!(
            base_url("http://127.0.0.1:8000/metrics").unwrap(),
            "http://127.0.0.1:8000"
        );
        assert_eq!(base_url("https://h/metrics?x=1").unwrap(), "https://h");
        assert!(base_url("metrics").is_none());
        // User info never reaches the routes' URLs (nor their error messages).
        assert_eq!(
            base_url("http://u:pw@h:8000/metrics").unwrap(),
            "http://h:8000"
        );
        assert_eq!(base_url("http://u:pw/REST@h:8000/metrics"), None);
        assert_eq!(base_url("http://u:p?w@h/metrics"), None);
        assert_eq!(base_url("http://u:p#w@h/metrics"), None);
        assert_eq!(base_url("http://u:p@w@h/metrics").unwrap(), "http://h");
    }

    #[test]
    fn a_hostile_version_is_one_short_printable_line() {
        let forged = format!(
            "1.0\n2026-01-01T00:00:00Z  INFO canaryd: prod: pass\u{1b}[2J{}",
            "x".repeat(1 << 20)
        );
        let (version, _, _) = engine_info("/version", &json!({ "version": forged }));
        let version = version.unwrap();
        assert!(version.len() <= TEXT_LIMIT + 16, "{} bytes", version.len());
        assert!(!version.chars().any(char::is_control), "{version}");
        assert!(version.starts_with("1.0\\n2026-01-01"), "{version}");
    }

    #[test]
    fn each_engine_route_is_read_by_its_own_keys() {
        let props = json!({"build_info": "b5000-abc", "model_path": "/m/q.gguf",
                           "default_generation_settings": {"n_ctx": 4096}});
        assert_eq!(
            engine_info("/props", &props),
            (
                Some("b5000-abc".into()),
                Some("/m/q.gguf".into()),
                Some(4096)
            )
        );
        let tgi = json!({"model_id": "m", "version": "3.0.1", "max_total_tokens": 8192});
        assert_eq!(
            engine_info("/info", &tgi),
            (Some("3.0.1".into()), Some("m".into()), Some(8192))
        );
        let models = json!({"data": [{"id": "canary-sim", "max_model_len": 1000}]});
        assert_eq!(
            models_info(&models),
            (Some("canary-sim".into()), Some(1000))
        );
        assert_eq!(models_info(&json!({"data": []})), (None, None));
    }
}
