//! The inference server's engine version, model and context length, for `summary.json`'s
//! `context.server`: read from what each engine exposes beside its `/metrics` (same host and
//! port) — vLLM's `/version`, SGLang's `/get_server_info`, TGI's `/info`, llama.cpp's
//! `/props` — and the OpenAI-compatible `/v1/models`. Each field not found says which routes
//! were tried and what they answered.
//!
//! The context length is read as the pre-flight reads it ([`crate::context_length`]): the
//! run's model's entry of the model list, then the engines' routes in the same order, the
//! first stating one. On the target's own origin the routes are asked over the target's
//! transport (its model list under its API root, its API key and headers); another host
//! (a `/metrics` URL elsewhere) gets no secret of the target's.

use crate::context_length::{
    context_in, context_routes, model_entry, read_body, Got, TargetInfo, INFO_BODY_BYTES, MODELS,
};
use crate::http::{error_chain, Endpoint, ScrapeError};
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

/// What one engine route says: (version, model).
fn engine_info(route: &str, v: &Value) -> (Option<String>, Option<String>) {
    match route {
        // vLLM (and canary-sim): {"version": "0.10.1"}.
        "/version" => (text(v, &["version"]), None),
        // SGLang: {"version", "model_path", "context_length"?, ...}.
        "/get_server_info" => (
            text(v, &["version"]),
            text(v, &["served_model_name", "model_path"]),
        ),
        // TGI: {"model_id", "version", "max_total_tokens", ...}.
        "/info" => (text(v, &["version"]), text(v, &["model_id"])),
        // llama.cpp: {"build_info", "model_path", "default_generation_settings": {"n_ctx"}}.
        "/props" => (
            text(v, &["build_info"]),
            text(v, &["model_alias", "model_path"]),
        ),
        _ => (None, None),
    }
}

/// GETs `path` on `base` over this crate's transport (TLS only, no credential): the status
/// and body, or why none. An HTML page is said to be one (not "not a metrics page": it was
/// asked for JSON).
async fn get_plain(base: &str, path: &str, tls: Option<Arc<ClientConfig>>, t: Duration) -> Got {
    let url = format!("{base}{path}");
    let endpoint = Endpoint::parse(&url, tls)
        .map_err(|e| error_chain(&e))?
        .with_body_cap(INFO_BODY_BYTES);
    match endpoint.get(t).await {
        Ok((body, _)) => Ok((200, body.into_bytes())),
        Err(ScrapeError::Status { status, .. }) => Ok((status, Vec::new())),
        Err(ScrapeError::NotMetrics { content_type, .. }) => {
            Err(format!("body is {content_type:?}, not JSON"))
        }
        Err(e) => {
            // The transport's errors name the URL; said once, by the caller.
            let said = error_chain(&e);
            Err(said
                .strip_prefix(&format!("{url}: "))
                .map(str::to_owned)
                .unwrap_or(said))
        }
    }
}

/// Whether two roots (`scheme://host[:port]`) are the same origin: the target's API key
/// and headers may go there.
fn same_origin(a: &str, b: &str) -> bool {
    let parts = |u: &str| {
        let uri: http::Uri = u.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        Some((scheme, uri.host()?.to_ascii_lowercase(), port))
    };
    matches!((parts(a), parts(b)), (Some(x), Some(y)) if x == y)
}

/// The route that gives vLLM's version (it states no context length), asked after the
/// model list.
const VERSION: &str = "/version";

/// What the server at `base` says of itself, within `budget`: the routes are asked after
/// the run, and a server that accepts but never answers would otherwise hold the run's end
/// (and a shutdown) for a timeout per route. The model list first (the model and, on vLLM,
/// `max_model_len`: `model`'s entry, else the only one), then vLLM's `/version`, then the
/// engines' routes in the pre-flight's order, until both a version and a context length are
/// found. The context length is the first route's to state one, in the pre-flight's order
/// ([`context_routes`]; `/version` states none). `target`: the run's target, whose transport
/// asks the routes when it is `base`'s origin.
pub(crate) async fn server_context(
    base: &str,
    tls: Option<Arc<ClientConfig>>,
    model: Option<&str>,
    target: Option<&TargetInfo>,
    budget: Duration,
) -> ServerContext {
    let deadline = tokio::time::Instant::now() + budget;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let target = target.filter(|t| same_origin(&t.base, base));
    let model = target.map(|t| t.model.as_str()).or(model);
    let mut tried: Vec<String> = Vec::new();
    let (mut version, mut found_model, mut max_len) = (None, None, None);
    let routes = context_routes()
        .take(1)
        .chain([VERSION])
        .chain(context_routes().skip(1));
    for route in routes {
        if version.is_some() && max_len.is_some() {
            break;
        }
        let path = match (route, target) {
            (MODELS, Some(t)) => t.models_path.clone(),
            (r, _) => r.to_string(),
        };
        let url = format!("{base}{path}");
        if left().is_zero() {
            tried.push(format!(
                "{route} and after: not asked, the {} ms for the server's info routes spent",
                budget.as_millis()
            ));
            break;
        }
        let got = match target {
            Some(t) => tokio::time::timeout(left(), (t.get)(path)).await,
            None => tokio::time::timeout(left(), get_plain(base, &path, tls.clone(), left())).await,
        };
        let v = match got {
            Err(_) => {
                tried.push(format!(
                    "{url}: no answer within the {} ms for the server's info routes",
                    budget.as_millis()
                ));
                continue;
            }
            Ok(Err(e)) => Err(e),
            Ok(Ok((200..=299, body))) => read_body(&body),
            Ok(Ok((status, _))) => Err(format!("HTTP status {status}")),
        };
        let v = match v {
            Ok(v) => v,
            Err(e) => {
                tried.push(format!("{url}: {e}"));
                continue;
            }
        };
        if route == MODELS {
            match model_entry(&v, model) {
                Ok(m) => found_model = found_model.or_else(|| text(m, &["id"])),
                Err(e) => tried.push(format!("{url}: {e}")),
            }
        } else {
            let (ver, m) = engine_info(route, &v);
            found_model = found_model.or(m);
            match ver {
                Some(ver) => version = version.or(Some(ver)),
                None if version.is_none() => tried.push(format!("{url}: no version in its answer")),
                None => {}
            }
        }
        if route != VERSION && max_len.is_none() {
            match context_in(route, &v, model) {
                Ok(c) => max_len = Some(c.tokens),
                // A model list without the run's model: said once, above.
                Err(_) if route == MODELS && model_entry(&v, model).is_err() => {}
                Err(e) => tried.push(format!("{url}: {e}")),
            }
        }
    }
    let why = |what: &str| match tried.is_empty() {
        true => format!("{what} not found: no route stated it"),
        false => format!("{what} not found: {}", tried.join("; ")),
    };
    ServerContext {
        version: Known::from_option(version, why("version")),
        model: Known::from_option(found_model, why("model")),
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
        let ctx = server_context(&base, None, Some("m"), None, Duration::from_secs(10)).await;
        assert_eq!(ctx.version.value().map(String::as_str), Some("0.4.1"));
        assert_eq!(ctx.model.value().map(String::as_str), Some("m"));
        assert_eq!(ctx.max_model_len.value().copied(), Some(4096));

        // With no other route, the cap is the reason given.
        let base = serve_routes(|path| {
            (path == "/version")
                .then(|| format!(r#"{{"version":"1","pad":"{}"}}"#, "x".repeat(2 << 20)))
        })
        .await;
        let ctx = server_context(&base, None, Some("m"), None, Duration::from_secs(10)).await;
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
    /// the same context from the same server: the run's model's entry of a model list that
    /// lists others first, else the engines' routes in one order (llama.cpp's `/props` before
    /// SGLang's `/get_server_info`); a route past the 1 MiB cap is refused in words, the next
    /// read. SGLang's `max_total_num_tokens` (its KV pool) is read by neither.
    #[tokio::test]
    async fn the_preflight_reader_and_server_context_agree() {
        let preflight = |base: String| async move {
            let get = |path: String| {
                let url = format!("{base}{path}");
                async move {
                    match get_plain(&url, "", None, Duration::from_secs(5)).await {
                        Ok(got) => Ok(got),
                        Err(e) => Err(e),
                    }
                }
            };
            crate::context_length::ask_context(
                "/v1/models",
                Some("m"),
                Duration::from_secs(10),
                get,
            )
            .await
            .map(|c| (c.tokens, c.source))
        };
        type Answers = fn(&str) -> Option<String>;
        let servers: [(Answers, Option<(u64, &str)>); 3] = [
            (
                |path| match path {
                    "/v1/models" => Some(
                        r#"{"data":[{"id":"other-0","max_model_len":10},
                                    {"id":"other-1","max_model_len":20},
                                    {"id":"m","max_model_len":100000}]}"#
                            .into(),
                    ),
                    "/version" => Some(r#"{"version":"0.10.1"}"#.into()),
                    _ => None,
                },
                Some((100000, "/v1/models max_model_len")),
            ),
            (
                |path| match path {
                    "/props" => Some(r#"{"n_ctx":2048,"build_info":"b1"}"#.into()),
                    "/get_server_info" => {
                        Some(r#"{"version":"0.4.1","context_length":4096}"#.into())
                    }
                    _ => None,
                },
                Some((2048, "/props n_ctx")),
            ),
            (
                |path| {
                    match path {
                    "/props" => Some(format!(r#"{{"n_ctx":1,"pad":"{}"}}"#, "x".repeat(2 << 20))),
                    "/get_server_info" => Some(
                        r#"{"version":"0.4.1","context_length":null,"max_total_num_tokens":912345}"#
                            .into(),
                    ),
                    _ => None,
                }
                },
                None,
            ),
        ];
        for (routes, want) in servers {
            let base = serve_routes(routes).await;
            let ctx = server_context(&base, None, Some("m"), None, Duration::from_secs(10)).await;
            let before = preflight(base.clone()).await;
            assert_eq!(
                before.as_ref().ok().map(|(t, s)| (*t, s.as_str())),
                want,
                "{before:?}"
            );
            assert_eq!(
                ctx.max_model_len.value().copied(),
                want.map(|w| w.0),
                "{ctx:?}"
            );
            if want.is_none() {
                let Known::Unavailable { unavailable: why } = &ctx.max_model_len else {
                    unreachable!()
                };
                assert!(
                    why.contains(&format!(
                        "{base}/props: the response body is over 1 MiB, the most read of it"
                    )),
                    "{why}"
                );
                assert!(
                    why.contains(&format!(
                        "{base}/get_server_info: context_length is null (SGLang"
                    )),
                    "{why}"
                );
                assert!(before
                    .unwrap_err()
                    .contains("/get_server_info: context_length is null"));
            }
        }
        // The model named is the run's, not the list's first.
        let base = serve_routes(servers[0].0).await;
        let ctx = server_context(&base, None, Some("m"), None, Duration::from_secs(10)).await;
        assert_eq!(ctx.model.value().map(String::as_str), Some("m"));
        assert_eq!(ctx.version.value().map(String::as_str), Some("0.10.1"));

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
            async move { get_plain(&url, "", None, Duration::from_secs(60)).await }
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

    /// Unusable numbers and answers that are not JSON say what was wrong, naming the URL;
    /// an HTML page is not called a metrics page.
    #[tokio::test]
    async fn each_reason_says_what_was_wrong_and_where() {
        let base = serve_routes(|path| match path {
            "/v1/models" => Some(r#"{"data":[{"id":"m","max_model_len":-1}]}"#.into()),
            "/version" => Some(r#"{"version":"0.10.1"}"#.into()),
            "/props" => Some("[[[[".into()),
            _ => None,
        })
        .await;
        let ctx = server_context(&base, None, Some("m"), None, Duration::from_secs(10)).await;
        let Known::Unavailable { unavailable: why } = &ctx.max_model_len else {
            panic!("{:?}", ctx.max_model_len);
        };
        assert!(
            why.starts_with(&format!(
                "context length not found: {base}/v1/models: max_model_len -1 is not a positive \
                 integer; {base}/props: not JSON: "
            )),
            "{why}"
        );
        assert!(
            why.contains(&format!("{base}/info: HTTP status 404")),
            "{why}"
        );
        assert_eq!(ctx.version.value().map(String::as_str), Some("0.10.1"));

        // An HTML page where JSON was asked.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let body = "<html>login</html>";
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\
                                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                });
            }
        });
        let ctx = server_context(&base, None, Some("m"), None, Duration::from_secs(10)).await;
        let Known::Unavailable { unavailable: why } = &ctx.model else {
            panic!("{:?}", ctx.model);
        };
        assert!(
            why.contains(&format!(
                "{base}/v1/models: body is \"text/html\", not JSON"
            )),
            "{why}"
        );
        assert!(!why.contains("metrics page"), "{why}");
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
        let ctx = server_context(&base, None, Some("m"), None, Duration::from_millis(300)).await;
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
        let (version, _) = engine_info("/version", &json!({ "version": forged }));
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
            (Some("b5000-abc".into()), Some("/m/q.gguf".into()))
        );
        let tgi = json!({"model_id": "m", "version": "3.0.1", "max_total_tokens": 8192});
        assert_eq!(
            engine_info("/info", &tgi),
            (Some("3.0.1".into()), Some("m".into()))
        );
    }

    #[test]
    fn the_same_origin_is_the_same_scheme_host_and_port() {
        assert!(same_origin(
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000"
        ));
        assert!(same_origin("http://H", "http://h:80"));
        assert!(same_origin("https://h", "https://h:443"));
        assert!(!same_origin("http://h:8000", "http://h:8001"));
        assert!(!same_origin("http://h:443", "https://h:443"));
        assert!(!same_origin("http://a:80", "http://b:80"));
    }
}
