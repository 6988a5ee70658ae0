//! The server under test and how requests to it are shaped.

use crate::limits::ResponseLimits;
use crate::secrets::Secrets;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use http_body_util::Full;
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::time::Duration;

/// Which OpenAI-compatible API to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`.
    #[default]
    Chat,
    /// `POST /v1/completions`.
    Completions,
}

impl Endpoint {
    /// The path under the API root.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }

    /// GenAI semantic-convention operation name.
    pub fn operation(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "text_completion",
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Endpoint, String> {
        match s {
            "chat" => Ok(Endpoint::Chat),
            "completions" => Ok(Endpoint::Completions),
            _ => Err(format!(
                "unknown endpoint type {s:?}, expected chat or completions"
            )),
        }
    }
}

/// Which output-length field(s) the request body carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// Both `max_tokens` and `max_completion_tokens` (servers read one or the other).
    #[default]
    Both,
    /// Only `max_tokens`.
    MaxTokens,
    /// Only `max_completion_tokens`.
    MaxCompletionTokens,
    /// Neither: the server decides the length.
    None,
}

impl std::str::FromStr for MaxTokensField {
    type Err = String;
    fn from_str(s: &str) -> Result<MaxTokensField, String> {
        match s {
            "both" => Ok(MaxTokensField::Both),
            "max_tokens" => Ok(MaxTokensField::MaxTokens),
            "max_completion_tokens" => Ok(MaxTokensField::MaxCompletionTokens),
            "none" => Ok(MaxTokensField::None),
            _ => Err(format!(
                "unknown value {s:?}, expected both, max_tokens, max_completion_tokens or none"
            )),
        }
    }
}

/// An API key. Never printed: `Debug` shows a placeholder, and no record or artifact holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key, trimming surrounding whitespace (files usually end in a newline) and a
    /// leading `Bearer ` (any case), which canaryd adds itself: a key file holding `Bearer
    /// sk-…` was sent as `Bearer Bearer sk-…` without a word (TLS audit L1). Warned of once
    /// per process, never quoting the key.
    pub fn new(key: &str) -> ApiKey {
        let key = key.trim();
        let bare = key
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case("bearer "))
            .map(|_| key[7..].trim_start())
            .filter(|rest| !rest.is_empty());
        match bare {
            Some(rest) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        "the API key starts with \"Bearer \", which canaryd adds itself: sent \
                         without it (`Authorization: Bearer KEY`); give the key alone"
                    )
                });
                ApiKey(rest.to_string())
            }
            None => ApiKey(key.to_string()),
        }
    }

    /// The `Authorization: Bearer …` value, marked sensitive; `None` when the key holds bytes
    /// an HTTP header cannot carry (check with this when the key is read).
    pub fn authorization(&self) -> Option<http::HeaderValue> {
        let mut v = http::HeaderValue::from_str(&format!("Bearer {}", self.0)).ok()?;
        v.set_sensitive(true);
        Some(v)
    }
}

impl ApiKey {
    /// The key itself, for the scrub that keeps it out of records ([`Secrets`]).
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// The target server, validated.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http` or `https`.
    pub tls: bool,
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Full request path (base path + endpoint path).
    pub path: String,
    /// The API called.
    pub endpoint: Endpoint,
    /// `model` sent in every request.
    pub model: String,
    /// Sent as `Authorization: Bearer`.
    pub api_key: Option<ApiKey>,
    /// Extra headers sent with every request.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Extra trust anchors (PEM), for internal PKIs.
    pub ca_bundle: Option<PathBuf>,
    /// The client certificate and key presented to a server that asks for one (mutual TLS);
    /// the target's `https` metrics endpoints get it too, as they get the CA bundle.
    pub client_identity: Option<canary_tls::ClientIdentity>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Opening a connection (TCP connect and TLS handshake) fails after this long, or after
    /// [`Target::timeout`] if that is shorter; the request is then a `connect` error.
    pub connect_timeout: Duration,
    /// SSE streaming (default) or one JSON body.
    pub streaming: bool,
    /// Output-length field(s) to send.
    pub max_tokens_field: MaxTokensField,
    /// Fields merged into every request body (`--extra-inputs`).
    pub extra_inputs: Map<String, Value>,
    /// How much of a response canaryd holds at most.
    pub limits: ResponseLimits,
    /// Read responses with the kernel's receive timestamps (default on): response times then
    /// end when the bytes reached the kernel, not when canaryd's code read them. When the
    /// kernel refuses, the run says so once and times by its reads.
    pub kernel_timestamps: bool,
}

/// Named once: a name given as a string is parsed again for every request.
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Default of [`Target::timeout`]: ten minutes, longer than any sane generation.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Default of [`Target::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Body fields canaryd sets itself, and why: `--extra-inputs` and a trace row's `extra` may
/// not replace them, since each one decides what is measured or how the response is read.
const OWNED_FIELDS: [(&str, &str); 7] = [
    ("model", "it is the target's model (--model)"),
    ("messages", "the prompt is synthesized from the trace"),
    ("prompt", "the prompt is synthesized from the trace"),
    (
        "stream",
        "it follows the streaming setting (--no-streaming), which decides how the response is read",
    ),
    (
        "stream_options",
        "canaryd asks for usage in the stream (include_usage) to count tokens",
    ),
    (
        "max_tokens",
        "output lengths come from the trace (--max-output-tokens caps them, --max-tokens-field picks the field)",
    ),
    (
        "max_completion_tokens",
        "output lengths come from the trace (--max-output-tokens caps them, --max-tokens-field picks the field)",
    ),
];

/// Why canaryd must set `key` itself, if it must.
pub(crate) fn owned_field(key: &str) -> Option<&'static str> {
    OWNED_FIELDS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, why)| *why)
}

/// Headers an extra header (`-H`, a target's `headers`) may not set, and why: they frame the
/// message or manage the connection, which canaryd's HTTP client does itself. Sent twice or
/// wrong, they break every request (`Content-Length: 5` cuts each body to five bytes).
const RESERVED_HEADERS: [(&str, &str); 10] = [
    ("host", "it follows the target URL"),
    (
        "content-length",
        "it frames the request body, which canaryd writes",
    ),
    (
        "transfer-encoding",
        "it frames the request body, which canaryd writes",
    ),
    (
        "trailer",
        "it frames the request body, which canaryd writes",
    ),
    ("te", "canaryd reads responses as HTTP/1.1 defines them"),
    (
        "expect",
        "canaryd sends each body at once, never waiting for 100 Continue",
    ),
    (
        "connection",
        "canaryd manages its connections (one request on each at a time)",
    ),
    (
        "keep-alive",
        "canaryd manages its connections (one request on each at a time)",
    ),
    (
        "proxy-connection",
        "canaryd manages its connections (one request on each at a time)",
    ),
    ("upgrade", "canaryd speaks HTTP/1.1 on every connection"),
];

/// Why an extra header may not be called `name` (compared without case), if it may not.
pub fn reserved_header(name: &str) -> Option<&'static str> {
    RESERVED_HEADERS
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, why)| *why)
}

/// An extra request header that cannot be sent. Never carries the value (it may be a key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a valid header name (it is not shown either: `-H "Bearer sk-…"` has no name and is
    /// all secret).
    InvalidName,
    /// A header canaryd sets itself, and why.
    Reserved {
        /// The header.
        name: HeaderName,
        /// Why canaryd sets it.
        why: &'static str,
    },
    /// The value holds bytes a header cannot carry.
    InvalidValue {
        /// The header.
        name: HeaderName,
    },
}

/// The extra request header `name: value`, its value marked sensitive (never logged or
/// shown by `Debug`): the one check behind `-H` and a daemon target's `headers`.
pub fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), HeaderError> {
    let name = HeaderName::try_from(name).map_err(|_| HeaderError::InvalidName)?;
    if let Some(why) = reserved_header(name.as_str()) {
        return Err(HeaderError::Reserved { name, why });
    }
    let mut value = HeaderValue::try_from(value)
        .map_err(|_| HeaderError::InvalidValue { name: name.clone() })?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// A URL canaryd cannot use as a target.
#[derive(Debug, thiserror::Error)]
#[error("target URL {url:?}: {reason}")]
pub struct UrlError {
    /// The URL as given.
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The port of `uri`: the one it names, else `default` (also for an empty port, as RFC 3986
/// 3.2.3 says). `http::Uri` reads a port it cannot parse (`:99999`, `:abc`, `:-1`) as no port
/// at all, which would quietly mean the default: such a port is an error naming it.
pub fn uri_port(uri: &http::Uri, default: u16) -> Result<u16, String> {
    let authority = uri.authority().map_or("", |a| a.as_str());
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let after_host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, rest)| rest),
        None => host_port.find(':').map_or("", |i| &host_port[i..]),
    };
    match after_host.strip_prefix(':') {
        None | Some("") => Ok(default),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(format!("port {p:?} is not a number from 1 to 65535")),
        },
    }
}

/// Where a URL puts a server's OpenAI API.
struct ApiRoot {
    tls: bool,
    host: String,
    port: u16,
    /// The path before `/v1`, without a trailing `/`.
    base: String,
    /// The endpoint whose full path the URL ends in, if it does.
    named: Option<Endpoint>,
}

impl ApiRoot {
    fn parse(url: &str) -> Result<ApiRoot, UrlError> {
        let err = |reason: &str| UrlError {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let with_scheme = if url.contains("://") {
            url.to_string()
        } else {
            format!("http://{url}")
        };
        let uri: http::Uri = with_scheme.parse().map_err(|_| err("not a valid URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(err("scheme must be http or https")),
        };
        let host = uri.host().ok_or_else(|| err("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri_port(&uri, if tls { 443 } else { 80 }).map_err(|r| err(&r))?;
        // Requests go to the path alone: a query (`?api-version=…`) would be dropped from
        // every one of them without a word.
        if uri.query().is_some() {
            return Err(err(
                "has a query string, which canaryd would not send with its requests; use a \
                 URL without one (a server's /v1 API, or the value in a header)",
            ));
        }
        let path = uri.path().trim_end_matches('/');
        // `http://host`, `http://host/v1` and an endpoint's full URL all mean the API root.
        let named = [Endpoint::Chat, Endpoint::Completions]
            .into_iter()
            .find_map(|e| Some((e, path.strip_suffix(e.path())?)));
        let (named, base) = match named {
            Some((e, base)) => (Some(e), base),
            None => (None, path.strip_suffix("/v1").unwrap_or(path)),
        };
        Ok(ApiRoot {
            tls,
            host,
            port,
            base: base.to_string(),
            named,
        })
    }
}

impl Target {
    /// A target at `url` (`http://host:port[/base]`, `https://…`, or `host:port`) with defaults
    /// for everything else. The URL is the API root, its `/v1`, or the full URL of `endpoint`
    /// (as servers' docs show it); one naming the other endpoint is refused: requests would
    /// go to an endpoint other than the one pasted.
    pub fn new(url: &str, endpoint: Endpoint, model: &str) -> Result<Target, UrlError> {
        let root = ApiRoot::parse(url)?;
        match root.named {
            Some(named) if named != endpoint => Err(UrlError {
                url: url.to_string(),
                reason: format!(
                    "names {} but requests go to {}: give the server's root or its /v1, and \
                     choose the endpoint with --endpoint-type (`endpoint` in a config file)",
                    named.path(),
                    endpoint.path()
                ),
            }),
            _ => Ok(Target::at(root, endpoint, model)),
        }
    }

    /// A target at the API root of `url`, for callers that need only the server (its
    /// `/v1/models`, its `/metrics`, its address) whichever endpoint the URL names: its
    /// endpoint is the one the URL names, else chat, and it has no model.
    pub fn root_of(url: &str) -> Result<Target, UrlError> {
        let root = ApiRoot::parse(url)?;
        let endpoint = root.named.unwrap_or_default();
        Ok(Target::at(root, endpoint, ""))
    }

    /// A target at `root` with defaults for everything else.
    fn at(root: ApiRoot, endpoint: Endpoint, model: &str) -> Target {
        Target {
            tls: root.tls,
            host: root.host,
            port: root.port,
            path: format!("{}{}", root.base, endpoint.path()),
            endpoint,
            model: model.to_string(),
            api_key: None,
            headers: Vec::new(),
            ca_bundle: None,
            client_identity: None,
            timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            streaming: true,
            max_tokens_field: MaxTokensField::Both,
            extra_inputs: Map::new(),
            limits: ResponseLimits::default(),
            kernel_timestamps: true,
        }
    }

    /// Checks that [`Target::extra_inputs`] leaves alone the fields canaryd sets itself
    /// (`model`, `messages`, `prompt`, `stream`, `stream_options`, `max_tokens`,
    /// `max_completion_tokens`). The message names the field and why.
    pub fn check_extra_inputs(&self) -> Result<(), String> {
        for key in self.extra_inputs.keys() {
            if let Some(why) = owned_field(key) {
                return Err(format!("\"{key}\" is set by canaryd: {why}"));
            }
        }
        Ok(())
    }

    /// Checks that [`Target::headers`] leaves alone the headers that frame a request or
    /// manage its connection (`Host`, `Content-Length`, `Transfer-Encoding`, `Connection`,
    /// …). The message names the header, never its value (it may be a secret).
    pub fn check_headers(&self) -> Result<(), String> {
        for (name, _) in &self.headers {
            if let Some(why) = reserved_header(name.as_str()) {
                return Err(format!("{name} is set by canaryd: {why}"));
            }
        }
        Ok(())
    }

    /// `text` (a server's error message, say) without the API key and the extra headers'
    /// values ([`Secrets::scrub`]); `None` when it holds none of them. Finds their forms on
    /// each call: a run finds them once ([`Secrets::of`]).
    pub fn scrub(&self, text: &str) -> Option<String> {
        Secrets::of([self]).scrub(text)
    }

    /// `host:port` as shown in logs (never with credentials).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URL requests go to.
    pub fn url(&self) -> String {
        format!("{}{}", self.base_url(), self.path)
    }

    /// The server's root: `scheme://host:port`.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.authority())
    }

    /// Where the server's Prometheus metrics are unless told otherwise: `/metrics` on its
    /// host and port.
    pub fn metrics_url(&self) -> String {
        format!("{}/metrics", self.base_url())
    }

    /// The path of the server's model list: `/v1/models` under the API root (the base path
    /// the URL gave, the endpoint's path taken off its end only: a base path may contain it).
    pub fn models_path(&self) -> String {
        let base = self
            .path
            .strip_suffix(self.endpoint.path())
            .unwrap_or(&self.path);
        format!("{base}/v1/models")
    }

    /// The `max_tokens` a request for `output_tokens` carries, if it carries one.
    pub fn max_tokens_sent(&self, output_tokens: u32) -> Option<u32> {
        (output_tokens > 0 && self.max_tokens_field != MaxTokensField::None)
            .then_some(output_tokens)
    }

    /// The HTTP request for one body. `traceparent` joins the server's spans to ours;
    /// `request_id` lets a server's logs (and the simulator's ground truth) name the request.
    pub fn request(
        &self,
        body: Vec<u8>,
        traceparent: &str,
        request_id: &str,
    ) -> http::Request<Full<Bytes>> {
        let mut req = http::Request::post(self.path.as_str())
            .header(HOST, self.authority())
            .header(CONTENT_TYPE, "application/json")
            .header(TRACEPARENT, traceparent)
            .header(X_REQUEST_ID, request_id);
        if self.streaming {
            req = req.header(http::header::ACCEPT, "text/event-stream");
        }
        if let Some(value) = self.api_key.as_ref().and_then(ApiKey::authorization) {
            req = req.header(AUTHORIZATION, value);
        }
        let mut req = req
            .body(Full::new(Bytes::from(body)))
            .expect("static parts are valid");
        for (name, value) in &self.headers {
            req.headers_mut().insert(name.clone(), value.clone());
        }
        req
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::PromptBody;
    use serde_json::json;

    // TLS audit L1: a key file holding `Bearer sk-…` was sent as `Bearer Bearer sk-…`.
    #[test]
    fn a_key_given_with_its_bearer_scheme_is_sent_once_with_it() {
        let sent = |key: &str| {
            let v = ApiKey::new(key).authorization().unwrap();
            assert!(v.is_sensitive());
            v.to_str().unwrap().to_string()
        };
        for key in [
            "sk-BEARERKEY0123456",
            "Bearer sk-BEARERKEY0123456\n",
            "bearer  sk-BEARERKEY0123456",
            "BEARER sk-BEARERKEY0123456",
        ] {
            assert_eq!(sent(key), "Bearer sk-BEARERKEY0123456", "{key:?}");
        }
        // Not a scheme word: the key as it is.
        assert_eq!(sent("Bearer"), "Bearer Bearer");
        assert_eq!(sent("Bearerish-key"), "Bearer Bearerish-key");
    }

    #[test]
    fn parses_urls_and_joins_paths() {
        let t = Target::new("http://127.0.0.1:8000", Endpoint::Chat, "m").unwrap();
        assert_eq!((t.tls, t.host.as_str(), t.port), (false, "127.0.0.1", 8000));
        assert_eq!(t.path, "/v1/chat/completions");
        let t = Target::new("https://gw.example/v1/", Endpoint::Completions, "m").unwrap();
        assert_eq!(
            (t.tls, t.port, t.path.as_str()),
            (true, 443, "/v1/completions")
        );
        let t = Target::new("localhost:9000/openai", Endpoint::Chat, "m").unwrap();
        assert_eq!(t.path, "/openai/v1/chat/completions");
        let t = Target::new("http://[::1]:8000", Endpoint::Chat, "m").unwrap();
        assert_eq!(t.authority(), "[::1]:8000");
        assert!(Target::new("ftp://x", Endpoint::Chat, "m").is_err());
        // A query would be dropped from every request: refused, saying so.
        let e = Target::new(
            "https://x.example/openai?api-version=2024-06-01",
            Endpoint::Chat,
            "m",
        )
        .unwrap_err();
        assert!(e.reason.contains("has a query string"), "{}", e.reason);
    }

    // README audit finding 12: a pasted endpoint URL was sent to
    // `/v1/chat/completions/v1/chat/completions` (404), with no hint.
    #[test]
    fn an_endpoint_url_is_its_api_root_and_the_other_endpoint_is_refused() {
        for (url, endpoint, path) in [
            (
                "http://127.0.0.1:8000/v1/chat/completions",
                Endpoint::Chat,
                "/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:8000/v1/completions/",
                Endpoint::Completions,
                "/v1/completions",
            ),
            (
                "https://gw.example/openai/v1/chat/completions",
                Endpoint::Chat,
                "/openai/v1/chat/completions",
            ),
        ] {
            let t = Target::new(url, endpoint, "m").unwrap();
            assert_eq!(t.path, path, "{url}");
        }
        for (url, endpoint, named, sent) in [
            (
                "http://h:1/v1/completions",
                Endpoint::Chat,
                "/v1/completions",
                "/v1/chat/completions",
            ),
            (
                "http://h:1/v1/chat/completions",
                Endpoint::Completions,
                "/v1/chat/completions",
                "/v1/completions",
            ),
        ] {
            let e = Target::new(url, endpoint, "m").unwrap_err();
            assert!(
                e.reason
                    .starts_with(&format!("names {named} but requests go to {sent}: ")),
                "{url}: {}",
                e.reason
            );
            assert!(e.reason.contains("--endpoint-type"), "{}", e.reason);
        }
        // Callers that need only the server take either endpoint's URL as its root.
        for (url, endpoint) in [
            ("http://h:1/v1/completions", Endpoint::Completions),
            ("http://h:1/v1/chat/completions", Endpoint::Chat),
            ("http://h:1/v1", Endpoint::Chat),
        ] {
            let t = Target::root_of(url).unwrap();
            assert_eq!((t.endpoint, t.path.as_str()), (endpoint, endpoint.path()));
            assert_eq!(t.metrics_url(), "http://h:1/metrics");
            assert_eq!(t.models_path(), "/v1/models");
        }
        // The model list is under the base path, which may itself contain the endpoint's
        // path (a proxy's route): doctor replaced every occurrence.
        let t = Target::new("http://h:1/v1/chat/completions/proxy", Endpoint::Chat, "m").unwrap();
        assert_eq!(t.path, "/v1/chat/completions/proxy/v1/chat/completions");
        assert_eq!(t.models_path(), "/v1/chat/completions/proxy/v1/models");
        assert!(Target::root_of("ftp://h/v1/completions").is_err());
    }

    // Issue 14, item 5: an unreadable port was taken as "no port", i.e. 80.
    #[test]
    fn a_port_out_of_range_or_not_a_number_is_refused_naming_it() {
        for (url, port) in [
            ("http://127.0.0.1:99999", "99999"),
            ("http://127.0.0.1:abc", "abc"),
            ("http://127.0.0.1:-1", "-1"),
            ("127.0.0.1:0", "0"),
            ("https://[::1]:65536/v1", "65536"),
            ("http://h:+80", "+80"),
        ] {
            match Target::new(url, Endpoint::Chat, "m") {
                Ok(t) => panic!("{url} was accepted as port {}", t.port),
                Err(e) => assert!(
                    e.reason.contains(&format!("port \"{port}\"")),
                    "{url}: {}",
                    e.reason
                ),
            }
        }
        let t = Target::new("http://127.0.0.1:65535", Endpoint::Chat, "m").unwrap();
        assert_eq!(t.port, 65535);
        // An empty port means the scheme's default (RFC 3986, 3.2.3).
        let t = Target::new("https://h:/v1", Endpoint::Chat, "m").unwrap();
        assert_eq!(t.port, 443);
    }

    #[test]
    fn body_has_lengths_stream_options_and_extras() {
        let mut t = Target::new("http://h:1", Endpoint::Chat, "smol").unwrap();
        t.extra_inputs.insert("ignore_eos".into(), json!(true));
        let row_extra = json!({"temperature": 0.0});
        let body = |t: &Target, prompt: &str, n, extra| -> Value {
            serde_json::from_slice(&t.body(&PromptBody::Text(prompt.into()), n, extra)).unwrap()
        };
        let b = body(&t, "hi there", 7, Some(&row_extra));
        assert_eq!(b["messages"][0]["content"], "hi there");
        assert_eq!(b["max_tokens"], 7);
        assert_eq!(b["max_completion_tokens"], 7);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["temperature"], 0.0);
        t.endpoint = Endpoint::Completions;
        t.max_tokens_field = MaxTokensField::MaxTokens;
        t.streaming = false;
        let b = body(&t, "x", 3, None);
        assert_eq!(b["prompt"], "x");
        assert!(b.get("max_completion_tokens").is_none());
        assert!(b.get("stream_options").is_none());
    }

    #[test]
    fn extra_inputs_may_not_replace_what_canaryd_sets() {
        let mut t = Target::new("http://h:1", Endpoint::Chat, "m").unwrap();
        t.extra_inputs.insert("ignore_eos".into(), json!(true));
        assert_eq!(t.check_extra_inputs(), Ok(()));
        for key in [
            "model",
            "messages",
            "prompt",
            "stream",
            "stream_options",
            "max_tokens",
            "max_completion_tokens",
        ] {
            let mut t = t.clone();
            t.extra_inputs.insert(key.into(), json!(false));
            let err = t.check_extra_inputs().unwrap_err();
            assert!(
                err.starts_with(&format!("\"{key}\" is set by canaryd: ")),
                "{err}"
            );
        }
    }

    // Issue 14, item 10: `-H 'Content-Length: 5'` was sent, and broke every request.
    #[test]
    fn headers_that_frame_the_request_are_refused_by_name() {
        let mut t = Target::new("http://h:1", Endpoint::Chat, "m").unwrap();
        t.headers.push((
            HeaderName::from_static("x-canary"),
            HeaderValue::from_static("1"),
        ));
        assert_eq!(t.check_headers(), Ok(()));
        for name in [
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "keep-alive",
            "upgrade",
            "te",
            "trailer",
            "expect",
            "proxy-connection",
        ] {
            let mut t = t.clone();
            t.headers.push((
                HeaderName::from_static(name),
                HeaderValue::from_static("v-SECRET"),
            ));
            let e = t.check_headers().unwrap_err();
            assert!(e.starts_with(&format!("{name} is set by canaryd: ")), "{e}");
            assert!(!e.contains("SECRET"), "{e}");
            assert!(reserved_header(&name.to_ascii_uppercase()).is_some());
        }
    }

    #[test]
    fn api_key_goes_in_the_header_and_never_in_debug() {
        let mut t = Target::new("http://h:1", Endpoint::Chat, "m").unwrap();
        t.api_key = Some(ApiKey::new("sk-secret\n"));
        let req = t.request(
            b"{}".to_vec(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "r-1",
        );
        assert_eq!(req.headers()[AUTHORIZATION], "Bearer sk-secret");
        assert!(!format!("{t:?}").contains("sk-secret"));
        t.headers = vec![header("x-tenant-token", "tok-42").unwrap()];
        assert_eq!(
            t.scrub("invalid key Bearer sk-secret for tok-42; sk-secret again")
                .as_deref(),
            Some("invalid key Bearer <redacted> for <redacted>; <redacted> again")
        );
        assert_eq!(t.scrub("model not found"), None);
        // A quote cut short inside the key (messages are kept to a few KiB).
        assert_eq!(
            t.scrub("invalid key Bearer sk-sec").as_deref(),
            Some("invalid key Bearer <redacted>")
        );
        assert_eq!(t.scrub("ends in sk-"), None, "3 characters say nothing");
    }

    // A credential given as a header is quoted by servers without its scheme, and bodies kept
    // as JSON text quote it escaped: both passed through (audit of issue 20's hostile targets).
    #[test]
    fn a_header_credential_is_redacted_bare_escaped_and_cut() {
        let mut t = Target::new("http://h:1", Endpoint::Chat, "m").unwrap();
        t.headers = vec![
            header("authorization", "Bearer tok-42/x&y").unwrap(),
            header("cookie", "session=c00kie-v4lue; theme=dark").unwrap(),
            header("x-canary", "A").unwrap(),
        ];
        let shown = |m: &str| t.scrub(m).unwrap_or_else(|| m.to_string());
        assert_eq!(
            shown("invalid or expired token tok-42/x&y"),
            "invalid or expired token <redacted>"
        );
        assert_eq!(
            shown(r#"{"detail":"bad token tok-42\/x\u0026y"}"#),
            r#"{"detail":"bad token <redacted>"}"#
        );
        assert_eq!(
            shown("session c00kie-v4lue expired"),
            "session <redacted> expired"
        );
        assert_eq!(shown("Bearer tok-42/x&y refused"), "<redacted> refused");
        assert_eq!(shown("token tok-4"), "token <redacted>");
        // A short value is no secret, and redacting it would garble the message; nor are the
        // words of a header that holds no credential.
        t.headers
            .push(header("x-client", "canary (X11; Linux x86_64)").unwrap());
        assert_eq!(t.scrub("A model named Alpha on Linux x86_64)"), None);
        assert_eq!(t.scrub("theme dark is fine"), None);
    }
}
