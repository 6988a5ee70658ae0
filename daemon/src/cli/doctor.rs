//! `canaryd doctor`: what this host and a target offer, and why not where they don't.
//!
//! Exits 0 when a replay can run (the target, if one is given, answers `/v1/models` with an
//! OpenAI model list); every optional source is reported with the reason it is off.

use anyhow::Result;
use canary_telemetry::{
    probe_dcgm, probe_nvml, probe_server_metrics, SourceState, DEFAULT_DCGM_URL,
};
use clap::Args;
use http_body_util::{BodyExt, Empty};
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `canaryd doctor`.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The inference server to check (`http://host:port`).
    #[arg(long, short = 'u')]
    pub url: Option<String>,
    /// Its Prometheus endpoint (default: `/metrics` on the target); needs --url.
    #[arg(long, value_name = "URL", requires = "url")]
    pub server_metrics_url: Option<String>,
    /// dcgm-exporter endpoint.
    #[arg(long, value_name = "URL", default_value = DEFAULT_DCGM_URL)]
    pub dcgm_url: String,
    /// `libnvidia-ml.so` to try instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub nvml_lib: Option<PathBuf>,
    /// The target's API key from this variable (default: `OPENAI_API_KEY` if set).
    #[arg(long, value_name = "VAR", requires = "url")]
    pub api_key_env: Option<String>,
    /// The target's API key from this file.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "api_key_env",
        requires = "url"
    )]
    pub api_key_file: Option<PathBuf>,
    /// Extra CA certificates (PEM) to trust for an https target.
    #[arg(long, value_name = "FILE", requires = "url")]
    pub ca_bundle: Option<PathBuf>,
    /// Client certificate (PEM) presented to an https target, and its metrics endpoint, that
    /// ask for one (mutual TLS); needs --client-key.
    #[arg(long, value_name = "FILE", requires_all = ["client_key", "url"])]
    pub client_cert: Option<PathBuf>,
    /// Its private key (PEM); needs --client-cert. Its contents are never shown.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Extra request header `Name: value` sent to the target (repeatable), as `replay -H`:
    /// a gateway's own key header (`api-key: …`). Its value is never printed.
    #[arg(
        long = "header",
        short = 'H',
        value_name = "NAME: VALUE",
        requires = "url"
    )]
    pub headers: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the checks; returns the exit code.
pub async fn doctor(args: DoctorArgs) -> Result<i32> {
    let timeout = Duration::from_secs(2);
    let mut checks: Vec<(&str, SourceState)> = Vec::new();
    let mut target_ok = true;
    if let Some(url) = &args.url {
        let mut target = canary_replay::Target::root_of(url).map_err(|e| {
            anyhow::anyhow!(
                "target URL {}: {}",
                crate::config::redact_url(url),
                e.reason
            )
        })?;
        crate::config::refuse_user_info(url, "--api-key-env, --api-key-file or -H")
            .map_err(|m| anyhow::anyhow!("--url: {m}"))?;
        let key = crate::cli::replay::api_key_source(
            args.api_key_file.as_deref(),
            args.api_key_env.as_deref(),
        );
        target.api_key = key
            .read()
            .map_err(|e| crate::execute::spelled(e, crate::cli::replay::flag))?;
        target.ca_bundle.clone_from(&args.ca_bundle);
        target.client_identity = crate::cli::replay::client_identity(
            args.client_cert.as_ref(),
            args.client_key.as_ref(),
        );
        for (i, h) in args.headers.iter().enumerate() {
            target.headers.push(
                crate::cli::replay::parse_header(h)
                    .map_err(|e| anyhow::anyhow!("--header #{} (value not shown): {e}", i + 1))?,
            );
        }
        let state = probe_models(&target, timeout).await;
        target_ok = state.is_available();
        checks.push(("target", state));
        let metrics = args
            .server_metrics_url
            .clone()
            .unwrap_or_else(|| target.metrics_url());
        checks.push((
            "server_metrics",
            probe_server_metrics(
                &metrics,
                args.ca_bundle.as_deref(),
                target.client_identity.as_ref(),
                timeout,
            )
            .await,
        ));
    }
    let lib = args.nvml_lib.clone();
    checks.push(("nvml", bounded(move || probe_nvml(lib)).await));
    checks.push(("dcgm", probe_dcgm(&args.dcgm_url, timeout).await));
    checks.push(("ebpf", bounded(canary_ebpf::probe).await));
    checks.push(("open_files", open_files()));
    // The prompt builder a replay would use: the built-in tokenizer and its word list.
    let prompts = canary_replay::Tokenizer::load(&canary_replay::TokenizerSpec::BuiltinO200k)
        .and_then(|t| canary_replay::PromptBuilder::new(t, 0));
    checks.push((
        "tokenizer",
        match prompts {
            Ok(p) => SourceState::available(format!(
                "{}: {} single-token words",
                p.tokenizer().name(),
                p.vocabulary_len()
            )),
            Err(e) => SourceState::unavailable(e.to_string()),
        },
    ));
    // States quote the endpoints: never with their user info or query.
    let mut redactions = canary_core::Redactions::default();
    redactions.add(&args.dcgm_url);
    if let Some(url) = &args.server_metrics_url {
        redactions.add(url);
    }
    let checks: Vec<(&str, SourceState)> = checks
        .into_iter()
        .map(|(k, v)| (k, redactions.state(v)))
        .collect();
    if args.json {
        let map: serde_json::Map<String, serde_json::Value> = checks
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        outln!("{}", serde_json::to_string_pretty(&map)?)?;
    } else {
        for (name, state) in &checks {
            outln!("{name:<16} {state}")?;
        }
    }
    Ok(if target_ok { 0 } else { 1 })
}

/// How long a driver probe (NVML's init, loading the eBPF probe) may take.
const DRIVER_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// `probe` on a thread of its own, unavailable when it has not answered within
/// [`DRIVER_PROBE_TIMEOUT`]: `nvmlInit` on a wedged driver never returns, and doctor, the tool
/// meant to find that, hung with it. The thread is left behind (nothing can cancel it); the
/// command's runtime is shut down without waiting for it.
async fn bounded(probe: impl FnOnce() -> SourceState + Send + 'static) -> SourceState {
    match tokio::time::timeout(DRIVER_PROBE_TIMEOUT, tokio::task::spawn_blocking(probe)).await {
        Ok(Ok(state)) => state,
        Ok(Err(e)) => SourceState::unavailable(format!("the probe failed: {e}")),
        Err(_) => SourceState::unavailable(format!(
            "no answer within {DRIVER_PROBE_TIMEOUT:?} (a hung driver?)"
        )),
    }
}

/// The open-file limit (`RLIMIT_NOFILE`) this process runs under, after `main` raised the soft
/// limit to the hard one as every command does, and the requests in flight a run would keep at
/// most under it. In a container it is the runtime's, which a Pod spec cannot set: this is
/// where a user sees what the node gave.
fn open_files() -> SourceState {
    let Some((soft, hard)) = canary_replay::open_files_limits() else {
        return SourceState::available("unlimited: no ceiling on requests in flight");
    };
    let cap = canary_replay::in_flight_cap(None);
    let room = cap
        .limit
        .map_or("no".to_string(), |n| format!("about {n} (an estimate)"));
    SourceState::available(format!(
        "soft limit {soft}, hard {hard} (canaryd raises the soft one to the hard one at start): \
         {room} requests in flight at most without a lower --concurrency; raise the hard \
         limit to keep more (README \"Limits\")"
    ))
}

/// `GET /v1/models`: the target answers and lists its models. A 200 that is not a model list
/// (a web UI on the wrong port, a proxy's catch-all page, `{}`) is unavailable, saying what
/// came back: it used to read as "serves " (an empty list) and exit 0.
async fn probe_models(target: &canary_replay::Target, timeout: Duration) -> SourceState {
    let path = target.models_path();
    match tokio::time::timeout(timeout, get(target, &path)).await {
        Err(_) => SourceState::unavailable(format!(
            "{}: no answer within {timeout:?}",
            target.authority()
        )),
        // A TLS error quotes the certificate's names: the server's text.
        Ok(Err(e)) => SourceState::unavailable(format!(
            "{}: {}",
            target.authority(),
            canary_core::printable(&format!("{e:#}"))
        )),
        Ok(Ok((status, content_type, body))) if status.is_success() => {
            let secrets = canary_replay::Secrets::of([target]);
            match model_list(&body, &secrets) {
                Ok(list) if list.is_empty() => SourceState::available(format!(
                    "{} serves no model (its list is empty: a replay's --model may be refused)",
                    target.authority()
                )),
                Ok(list) => SourceState::available(format!("{} serves {list}", target.authority())),
                Err(why) => SourceState::unavailable(format!(
                    "{}{path} answered {status} but not with an OpenAI model list ({why}): {}",
                    target.authority(),
                    what_came(content_type.as_deref(), &body, &secrets)
                )),
            }
        }
        Ok(Ok((status, _, _))) => {
            SourceState::unavailable(format!("{}{path}: HTTP {status}", target.authority()))
        }
    }
}

/// The most model ids `doctor` names, and the longest id it shows (bytes).
const MODELS_SHOWN: usize = 16;
const MODEL_ID_LIMIT: usize = 128;

/// The model ids of a `/v1/models` body, as one printable line: the server's text, so each is
/// capped (scrubbed of the target's `secrets` before the cut: the request carried the key)
/// and its control characters escaped, and a long list says how many it left out. Empty for
/// an empty list; why not when the body is not an OpenAI model list (a JSON object whose
/// `data` is an array of objects with a string `id`).
fn model_list(body: &[u8], secrets: &canary_replay::Secrets) -> Result<String, &'static str> {
    let value = serde_json::from_slice::<serde_json::Value>(body).map_err(|e| {
        // serde_json refuses JSON nested deeper than 128 levels (its stack's guard).
        match e.to_string().starts_with("recursion limit exceeded") {
            true => "JSON nested deeper than 128 levels, the most canaryd reads",
            false => "not JSON",
        }
    })?;
    let listed = value
        .get("data")
        .and_then(|d| d.as_array())
        .ok_or("no `data` array")?;
    let ids = listed
        .iter()
        .map(|m| m.get("id").and_then(|id| id.as_str()))
        .collect::<Option<Vec<&str>>>()
        .ok_or("a `data` entry without a string `id`")?;
    let mut shown: Vec<String> = ids
        .iter()
        .take(MODELS_SHOWN)
        .map(|id| canary_core::printable(&secrets.cut(id, MODEL_ID_LIMIT)).into_owned())
        .collect();
    if ids.len() > MODELS_SHOWN {
        shown.push(format!("and {} more", ids.len() - MODELS_SHOWN));
    }
    Ok(shown.join(", "))
}

/// The most of a body that is not a model list `doctor` quotes (bytes).
const BODY_QUOTED: usize = 64;

/// What a `/v1/models` body that is not a model list was: its content type, its length and
/// its first bytes, scrubbed of the target's `secrets`, cut and escaped (the server's text).
fn what_came(content_type: Option<&str>, body: &[u8], secrets: &canary_replay::Secrets) -> String {
    let quoted = |text: &str| canary_core::printable(&secrets.cut(text, BODY_QUOTED)).into_owned();
    let kind = content_type.map_or("no content type".to_string(), quoted);
    let text = String::from_utf8_lossy(body);
    let start = quoted(&text);
    let more = if body.len() > BODY_QUOTED { "…" } else { "" };
    format!("{kind}, {} bytes: \"{start}\"{more}", body.len())
}

/// The most of a `/v1/models` body `doctor` reads.
const MODELS_BODY_LIMIT: usize = 1 << 20;

/// `GET path` on the target: the status, the content type and the body (at most
/// [`MODELS_BODY_LIMIT`]).
pub(crate) async fn get(
    target: &canary_replay::Target,
    path: &str,
) -> Result<(http::StatusCode, Option<String>, bytes::Bytes)> {
    use hyper_util::rt::TokioIo;
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await?;
    let mut req = http::Request::get(path)
        .header(http::header::HOST, target.authority())
        .body(Empty::<bytes::Bytes>::new())?;
    if let Some(value) = target.api_key.as_ref().and_then(|k| k.authorization()) {
        req.headers_mut().insert(http::header::AUTHORIZATION, value);
    }
    for (name, value) in &target.headers {
        req.headers_mut().insert(name.clone(), value.clone());
    }
    // Past the cap the response's future is dropped, and hyper closes the connection.
    let interim = canary_replay::interim::watch(&mut req);
    let over_cap = || {
        anyhow::anyhow!(
            "{path}: over {} interim (1xx) responses before the final one, the most doctor reads",
            canary_replay::interim::MAX_INTERIM
        )
    };
    let resp = if target.tls {
        let config = canary_replay::client_config(
            target.ca_bundle.as_deref(),
            target.client_identity.as_ref(),
        )?;
        let name = rustls_pki_types::ServerName::try_from(target.host.clone())?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| anyhow::anyhow!("TLS handshake: {}", canary_tls::explain_io(&e)))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        // TLS 1.3: a server requiring a client certificate refuses one missing at the
        // first read, after the client's side of the handshake is done.
        let sent = tokio::select! {
            biased; // the cap first (see the scraper's select)
            () = interim.over_cap() => return Err(over_cap()),
            r = send.send_request(req) => r,
        };
        sent.map_err(|e| match canary_tls::explain_chain(&e) {
            Some(said) => anyhow::anyhow!("TLS handshake: {said}"),
            None => anyhow::Error::from(e),
        })?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        tokio::select! {
            biased; // the cap first (see the scraper's select)
            () = interim.over_cap() => return Err(over_cap()),
            r = send.send_request(req) => r?,
        }
    };
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let too_large = || {
        anyhow::anyhow!(
            "{path}: the body is over {} MiB, the most doctor reads",
            MODELS_BODY_LIMIT >> 20
        )
    };
    // A declared length over the cap is refused at the head, not waited on (audit F10).
    if hyper::body::Body::size_hint(resp.body()).lower() > MODELS_BODY_LIMIT as u64 {
        return Err(too_large());
    }
    let body = http_body_util::Limited::new(resp.into_body(), MODELS_BODY_LIMIT)
        .collect()
        .await
        .map_err(|e| match e.is::<http_body_util::LengthLimitError>() {
            true => too_large(),
            false => anyhow::anyhow!("{path}: reading the body: {e}"),
        })?;
    Ok((status, content_type, body.to_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_model_list_is_one_short_printable_line() {
        let mut data = vec![serde_json::json!({
            "id": format!("\u{1b}[2J\u{1b}]8;;http://evil\u{7}click{}", "m".repeat(1 << 16))
        })];
        data.extend((0..1000).map(|i| serde_json::json!({ "id": format!("model-{i}") })));
        let body = serde_json::json!({ "data": data }).to_string();
        let none = canary_replay::Secrets::default();
        let line = model_list(body.as_bytes(), &none).unwrap();
        assert!(!line.chars().any(char::is_control), "{line}");
        assert!(line.starts_with(r"\u{1b}[2J"), "{line}");
        assert!(line.ends_with("model-14, and 985 more"), "{line}");
        assert!(line.len() < 1024, "{} bytes", line.len());
        assert_eq!(
            model_list(br#"{"data":[{"id":"a"},{"id":"b"}]}"#, &none),
            Ok("a, b".into())
        );
    }

    #[test]
    fn a_body_that_is_not_a_model_list_says_why() {
        let none = canary_replay::Secrets::default();
        assert_eq!(model_list(b"<html>hello</html>", &none), Err("not JSON"));
        assert_eq!(model_list(b"{}", &none), Err("no `data` array"));
        assert_eq!(model_list(br#"{"data":{}}"#, &none), Err("no `data` array"));
        assert_eq!(
            model_list(br#"{"data":[{"id":1}]}"#, &none),
            Err("a `data` entry without a string `id`")
        );
        assert_eq!(
            model_list(br#"{"object":"list","data":[]}"#, &none),
            Ok("".into())
        );
        // Audit (hostile servers), finding 9: a 100,000-deep array is JSON, only deeper than
        // the parser goes; it was called "not JSON".
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            model_list(deep.as_bytes(), &none),
            Err("JSON nested deeper than 128 levels, the most canaryd reads")
        );
        let long = format!("<html>\u{1b}[2J{}</html>", "x".repeat(1000));
        let said = what_came(Some("text/html"), long.as_bytes(), &none);
        let head = format!("text/html, {} bytes: \"<html>\\u{{1b}}[2Jxxx", long.len());
        assert!(said.starts_with(&head), "{said}");
        assert!(said.ends_with("xxx\"…"), "{said}");
        assert!(said.len() < 200, "{said}");
    }

    // A server answering `100 Continue` forever held the probe until its timeout, parsing
    // heads as fast as they came (`no answer within 2s`, the cause unsaid).
    #[tokio::test]
    async fn endless_interim_responses_end_the_probe_at_the_cap() {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicU64, Ordering};
        // Bounded: the flood stops here whatever the client does.
        const FLOOD_LIMIT: u64 = 256 << 20;
        let sent = std::sync::Arc::new(AtomicU64::new(0));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let counted = sent.clone();
        std::thread::spawn(move || {
            let Some(Ok(mut conn)) = listener.incoming().next() else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let heads = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(2048);
            // Until the client closes the connection (a write fails) or the bound.
            while counted.load(Ordering::Relaxed) < FLOOD_LIMIT {
                match conn.write_all(&heads) {
                    Ok(()) => counted.fetch_add(heads.len() as u64, Ordering::Relaxed),
                    Err(_) => break,
                };
            }
        });
        let target = canary_replay::Target::root_of(&format!("http://127.0.0.1:{port}")).unwrap();
        // Generous: the cap ends it long before (not a timing check).
        let state = probe_models(&target, Duration::from_secs(60)).await;
        assert!(!state.is_available(), "{state}");
        assert_eq!(
            state.to_string(),
            format!(
                "unavailable: 127.0.0.1:{port}: /v1/models: over 16 interim (1xx) responses \
                 before the final one, the most doctor reads"
            )
        );
        assert!(sent.load(Ordering::Relaxed) < FLOOD_LIMIT / 4);
    }

    // Audit (hostile servers), finding 9: a model list over the 1 MiB doctor reads was
    // "length limit exceeded (more than 1048576 bytes?)", a guess with a question mark.
    #[tokio::test]
    async fn a_model_list_over_the_cap_names_the_cap() {
        use std::io::{Read, Write};
        // A model list of 70,000 models: 1.2 MiB.
        let ids: Vec<String> = (0..70_000)
            .map(|i| format!(r#"{{"id":"model-{i}"}}"#))
            .collect();
        let body = format!(r#"{{"object":"list","data":[{}]}}"#, ids.join(","));
        assert!(body.len() > MODELS_BODY_LIMIT);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        let target = canary_replay::Target::root_of(&format!("http://127.0.0.1:{port}")).unwrap();
        let path = target.models_path();
        let e = get(&target, &path).await.unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "/v1/models: the body is over 1 MiB, the most doctor reads"
        );
    }

    // Hostile audit 2, F10: a `Content-Length` far over the cap, the body then stalled, is
    // refused at the head with the over-cap reason; it used to wait out the timeout.
    #[tokio::test]
    async fn a_declared_length_over_the_cap_is_refused_at_the_head() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                      content-length: 99999999999999999\r\n\r\n{}",
                );
                // Silent from here on, the connection open.
                held.push(conn);
            }
        });
        let target = canary_replay::Target::root_of(&format!("http://127.0.0.1:{port}")).unwrap();
        let path = target.models_path();
        // `get` has no timeout of its own (its callers bound it): before, this never ended.
        let e = tokio::time::timeout(std::time::Duration::from_secs(20), get(&target, &path))
            .await
            .expect("refused at the head, not waited on")
            .unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "/v1/models: the body is over 1 MiB, the most doctor reads"
        );
    }
}
