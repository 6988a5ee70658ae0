//! The HTTP client each signal exports with: the shared blocking client, sending exactly the
//! configured headers and keeping the whole cause of the last transport failure.
//!
//! - The OTLP exporter reads `OTEL_EXPORTER_OTLP_HEADERS` (or its per-signal variable) itself
//!   and lets it override the headers it was given: a credential a flag or `[otlp.headers]`
//!   sets would lose to an inherited one, and values canaryd never read would go out unknown
//!   to its scrub. Here each request's headers are put back to [`Config`]'s.
//! - The exporter reports every transport failure as "network error", so an untrusted
//!   certificate, a wrong name and a refused connection read the same; the once-only warning
//!   (see [`crate::health`]) names the cause kept here.
//! - The exporter logs a collector's `partial_success` only through its own diagnostics and
//!   reports the export as done: a 2xx answer's body is read here, and the items it says it
//!   rejected are kept ([`Reply`]) for [`crate::health::Health::exported`] to count as
//!   dropped.
//! - A 429 or 503 with `Retry-After` is retried once by the exporter only when the wait
//!   fits its timeout: a collector asking for 25 s or 600 s got no retry at all, where the
//!   exporter's one retry was promised. The wait is cut to [`MAX_RETRY_AFTER`] here.
//! - The built-in client fails a response whose body passes 4 MiB, so a 2xx answer with a
//!   large body was counted as lost. A 2xx status is the collector's acknowledgement: the
//!   body is cut short and the export counts as done (its `partial_success` unknown).
//! - A configured header this client cannot send (a name or value HTTP refuses) is an
//!   error when the client is built, naming the header, never its value: export without an
//!   `Authorization` header would only fail later as the collector's 401. Config, flags and
//!   the environment refuse such values first; this holds for a [`Config`] built in code.

use crate::config::{Config, ConfigError, Signal};
use http::{HeaderName, HeaderValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;
use std::sync::{Arc, Mutex};

/// The most of a failure's cause kept.
const MAX_CAUSE_BYTES: usize = 4096;

/// The most of a response body read (the built-in client's cap).
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// The longest a throttling collector's `Retry-After` is waited before the one retry: short
/// against the final flush's deadline (10 s unless told) and the export timeout.
pub(crate) const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// What a 2xx answer said beyond its status, kept for the export's count.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// Its `partial_success`: the items (spans, metric data points, log records) the
    /// collector rejected, at most those the request carried, and its message (as sent:
    /// scrub and cap before showing it). With none rejected the message is a warning.
    Rejected {
        items: u64,
        /// What the collector said it rejected, when more than the request carried.
        claimed: Option<u64>,
        message: String,
    },
    /// Its body passed [`MAX_RESPONSE_BYTES`] and was not read: any `partial_success` is
    /// unknown.
    Oversized,
}

/// The shared client, the headers each request leaves with, and where the last transport
/// failure is kept.
#[derive(Debug, Clone)]
pub(crate) struct ExportClient {
    inner: reqwest::blocking::Client,
    headers: Arc<ExactHeaders>,
    last_failure: Arc<Mutex<Option<String>>>,
    signal: Signal,
    reply: Arc<Mutex<Option<Reply>>>,
    /// Whole seconds a `Retry-After` is cut to: [`MAX_RETRY_AFTER`], and under half the
    /// export timeout, which also bounds the exporter's wait and retry.
    retry_after_cap: u64,
}

/// The name of the configured headers' source in an error about one of them.
const HEADERS_SOURCE: &str = "OTLP headers";

/// What the exporter may have added from the environment (removed), and the configured
/// headers (set; their values marked sensitive, so `Debug` never shows them).
#[derive(Debug, Default)]
struct ExactHeaders {
    unset: Vec<HeaderName>,
    set: Vec<(HeaderName, HeaderValue)>,
}

impl ExportClient {
    /// The client for `signal`; an error naming a configured header it cannot send.
    pub fn new(
        inner: reqwest::blocking::Client,
        config: &Config,
        signal: Signal,
        last_failure: Arc<Mutex<Option<String>>>,
        reply: Arc<Mutex<Option<Reply>>>,
    ) -> Result<Self, ConfigError> {
        let var = |name: &str| std::env::var(name).ok();
        let from_env = var(&sdk_headers_var(signal))
            .or_else(|| var("OTEL_EXPORTER_OTLP_HEADERS"))
            .unwrap_or_default();
        let headers = ExactHeaders {
            // The exporter's own parse: `name=value` pairs, `,`-separated, names trimmed.
            unset: from_env
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, _)| HeaderName::from_bytes(k.trim().as_bytes()).ok())
                .collect(),
            set: sendable(&config.headers)?,
        };
        Ok(ExportClient {
            inner,
            headers: Arc::new(headers),
            last_failure,
            signal,
            reply,
            retry_after_cap: MAX_RETRY_AFTER.as_secs().min(config.timeout.as_secs() / 2),
        })
    }
}

/// The configured headers as sent, each value marked sensitive; an error naming the first
/// one HTTP refuses (its position for a name, its name for a value, never the value).
fn sendable(headers: &[(String, String)]) -> Result<Vec<(HeaderName, HeaderValue)>, ConfigError> {
    headers
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| ConfigError::Header {
                source_name: HEADERS_SOURCE.into(),
                index: i + 1,
            })?;
            let mut value = HeaderValue::from_str(v).map_err(|_| ConfigError::HeaderValue {
                source_name: HEADERS_SOURCE.into(),
                name: name.to_string(),
            })?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// [`canary_core::error_chain`], with a TLS error in it said in plain words (a collector
/// requiring a client certificate says so by an alert rustls names tersely).
fn failure_chain(e: &(dyn std::error::Error + 'static)) -> String {
    canary_tls::explain_chain(e).map_or_else(
        || canary_core::error_chain(e),
        // The collector's CA goes in the exporter's settings, not the target's
        // `--ca-bundle`, which the hint would otherwise name first (TLS audit L7).
        |s| format!("{e}: {}", s.replace(canary_tls::GIVE_CA, GIVE_COLLECTOR_CA)),
    )
}

/// Where the collector's CA certificate is given, said when its issuer is unknown.
const GIVE_COLLECTOR_CA: &str = "give the collector's CA certificate with --otlp-certificate \
     (OTEL_EXPORTER_OTLP_CERTIFICATE; [otlp] certificate in the daemon's config), or add it \
     to the system's store";

/// The per-signal headers variable the exporter reads before `OTEL_EXPORTER_OTLP_HEADERS`.
pub(crate) fn sdk_headers_var(signal: Signal) -> String {
    format!(
        "OTEL_EXPORTER_OTLP_{}_HEADERS",
        signal.as_str().to_ascii_uppercase()
    )
}

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let headers = request.headers_mut();
        for name in &self.headers.unset {
            headers.remove(name);
        }
        for (name, value) in &self.headers.set {
            headers.insert(name, value.clone());
        }
        let sent = self.send(request).map_err(without_url);
        if let Err(e) = &sent {
            let mut chain = failure_chain(e.as_ref());
            // A certificate's names are quoted whole (a thousand of them, say): a few KiB.
            chain.truncate(canary_core::prefix_within(&chain, MAX_CAUSE_BYTES).len());
            *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(chain);
        }
        sent
    }
}

impl ExportClient {
    /// The request sent and its answer read, as the built-in blocking client does, except
    /// that a 2xx answer's body past the cap is an acknowledgement, not a failure, and a 2xx
    /// answer's `partial_success` is kept.
    fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        use std::io::Read;
        // Kept (shared, not copied) to bound a rejection's count by what was sent.
        let sent = request.body().clone();
        let request: reqwest::blocking::Request = request.try_into()?;
        let mut response = self.inner.execute(request)?;
        let status = response.status();
        let mut headers = std::mem::take(response.headers_mut());
        if matches!(status.as_u16(), 429 | 503) {
            cut_retry_after(&mut headers, self.retry_after_cap);
        }
        let capacity = response
            .content_length()
            .unwrap_or(0)
            .min(MAX_RESPONSE_BYTES as u64) as usize;
        let mut body = Vec::with_capacity(capacity);
        response
            .take(MAX_RESPONSE_BYTES as u64 + 1)
            .read_to_end(&mut body)?;
        let reply = if body.len() <= MAX_RESPONSE_BYTES {
            None
        } else if status.is_success() {
            body.clear();
            Some(Reply::Oversized)
        } else {
            return Err(Box::new(opentelemetry_http::ResponseBodyTooLarge::new()));
        };
        let reply = match reply {
            Some(r) => Some(r),
            None if status.is_success() => {
                let json = headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
                rejected(self.signal, &body, json).map(|r| bounded(r, self.signal, &sent))
            }
            None => None,
        };
        if status.is_success() {
            *self.reply.lock().unwrap_or_else(|p| p.into_inner()) = reply;
        } else if let Some(said) = refusal(&headers, &body) {
            // The exporter says only the status: the collector's reason is kept for the
            // warning (scrubbed and cut there).
            *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("{REFUSAL_PREFIX}{said}"));
        }
        let mut answer = Response::builder().status(status).body(Bytes::from(body))?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}

/// How a collector's reason for a non-2xx answer starts where it is kept (the kept failure
/// is otherwise a transport error's cause).
pub(crate) const REFUSAL_PREFIX: &str = "the collector said: ";

/// The most of a non-2xx answer's body read for its reason.
const MAX_REFUSAL_BYTES: usize = 4096;

/// `google.rpc.Status`, what an OTLP/HTTP collector answers a failed export with (protobuf
/// or JSON); only its message is read.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// A non-2xx answer's reason: a `google.rpc.Status`'s message (protobuf or JSON), else the
/// body as text; at most [`MAX_REFUSAL_BYTES`], unscrubbed. `None` for an empty body or one
/// that is neither.
fn refusal(headers: &http::HeaderMap, body: &[u8]) -> Option<String> {
    let kind = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let said = if kind.contains("protobuf") {
        RpcStatus::decode(body).ok()?.message
    } else if kind.contains("json") {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        match v.get("message").and_then(|m| m.as_str()) {
            Some(m) => m.to_string(),
            None => String::from_utf8_lossy(body).into_owned(),
        }
    } else {
        String::from_utf8_lossy(&body[..body.len().min(MAX_REFUSAL_BYTES + 4)]).into_owned()
    };
    let said = said.trim();
    (!said.is_empty()).then(|| canary_core::prefix_within(said, MAX_REFUSAL_BYTES).to_string())
}

/// A throttling answer's `Retry-After` as at most `cap` seconds. One that is not a number of
/// seconds (an HTTP date, or junk) is taken as beyond the cap.
fn cut_retry_after(headers: &mut http::HeaderMap, cap: u64) {
    let Some(asked) = headers.get(http::header::RETRY_AFTER) else {
        return;
    };
    let asked = asked
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    let wait = asked.map_or(cap, |s| s.min(cap));
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from(wait));
}

/// A 2xx body's `partial_success` for `signal`, when it rejected anything or said something.
/// A body that does not decode is taken as no `partial_success` (an empty body is the
/// usual full success).
fn rejected(signal: Signal, body: &[u8], json: bool) -> Option<Reply> {
    let (items, message) = if json {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let p = v
            .get("partialSuccess")
            .or_else(|| v.get("partial_success"))?;
        let key = match signal {
            Signal::Traces => ["rejectedSpans", "rejected_spans"],
            Signal::Metrics => ["rejectedDataPoints", "rejected_data_points"],
            Signal::Logs => ["rejectedLogRecords", "rejected_log_records"],
        };
        // int64 is a string in OTLP/JSON; a number is taken too.
        let items = key
            .iter()
            .find_map(|k| p.get(*k))
            .and_then(|n| n.as_i64().or_else(|| n.as_str()?.parse().ok()))
            .unwrap_or(0);
        let message = ["errorMessage", "error_message"]
            .iter()
            .find_map(|k| p.get(*k)?.as_str())
            .unwrap_or_default()
            .to_string();
        (items, message)
    } else {
        match signal {
            Signal::Traces => {
                let p = ExportTraceServiceResponse::decode(body)
                    .ok()?
                    .partial_success?;
                (p.rejected_spans, p.error_message)
            }
            Signal::Metrics => {
                let p = ExportMetricsServiceResponse::decode(body)
                    .ok()?
                    .partial_success?;
                (p.rejected_data_points, p.error_message)
            }
            Signal::Logs => {
                let p = ExportLogsServiceResponse::decode(body)
                    .ok()?
                    .partial_success?;
                (p.rejected_log_records, p.error_message)
            }
        }
    };
    (items > 0 || !message.is_empty()).then(|| Reply::Rejected {
        items: items.max(0) as u64,
        claimed: None,
        message,
    })
}

/// `reply` with its rejected count at most the items `request` (the body sent) carried, and
/// the collector's claim kept when it was more. A body that does not decode bounds nothing.
fn bounded(reply: Reply, signal: Signal, request: &[u8]) -> Reply {
    let Reply::Rejected { items, message, .. } = reply else {
        return reply;
    };
    match sent_items(signal, request) {
        Some(sent) if items > sent => Reply::Rejected {
            items: sent,
            claimed: Some(items),
            message,
        },
        _ => Reply::Rejected {
            items,
            claimed: None,
            message,
        },
    }
}

/// The spans, metric data points or log records an export request carries; decoded only
/// when a collector claims to have rejected some.
fn sent_items(signal: Signal, body: &[u8]) -> Option<u64> {
    let n: usize = match signal {
        Signal::Traces => ExportTraceServiceRequest::decode(body)
            .ok()?
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum(),
        Signal::Metrics => ExportMetricsServiceRequest::decode(body)
            .ok()?
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| match &m.data {
                Some(Data::Gauge(g)) => g.data_points.len(),
                Some(Data::Sum(s)) => s.data_points.len(),
                Some(Data::Histogram(h)) => h.data_points.len(),
                Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                Some(Data::Summary(s)) => s.data_points.len(),
                None => 0,
            })
            .sum(),
        Signal::Logs => ExportLogsServiceRequest::decode(body)
            .ok()?
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum(),
    };
    Some(n as u64)
}

/// reqwest's error quotes the request's URL as the url crate rewrote it (user info and query
/// kept, the host lower-cased, a default port dropped), which the scrub of the endpoint as
/// configured would not find: the URL is left out (the warning names the endpoint, redacted).
fn without_url(e: HttpError) -> HttpError {
    match e.downcast::<reqwest::Error>() {
        Ok(e) => Box::new(e.without_url()),
        Err(e) => e,
    }
}

#[cfg(test)]
mod mtls_tests {
    use super::*;

    // A collector requiring a client certificate, given none: the warning said `received
    // fatal alert: CertificateRequired`, nothing of what to do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_collector_requiring_a_client_certificate_is_said_so() {
        let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let pki = canary_testkit::ClientPki::new();
        let options = canary_testkit::TlsOptions {
            client_ca: Some(pki.ca_pem),
            ..Default::default()
        };
        let (port, ca) =
            canary_testkit::tls_terminator_with(backend.local_addr().unwrap(), options).await;
        let url = format!("https://localhost:{port}/v1/traces");
        let failure = Arc::new(Mutex::new(None));
        let kept = failure.clone();
        tokio::task::spawn_blocking(move || {
            use opentelemetry_http::HttpClient;
            use rustls::pki_types::pem::PemObject;
            use std::future::Future;
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(
                rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()).flatten(),
            );
            let tls = canary_tls::with_roots(roots);
            let inner = reqwest::blocking::Client::builder()
                .use_preconfigured_tls(rustls::ClientConfig::clone(&tls))
                .build()
                .unwrap();
            let client = ExportClient::new(
                inner,
                &Config::default(),
                Signal::Traces,
                kept,
                Arc::new(Mutex::new(None)),
            )
            .unwrap();
            let request = http::Request::post(&url)
                .body(opentelemetry_http::Bytes::from_static(b"x"))
                .unwrap();
            let mut sent = std::pin::pin!(client.send_bytes(request));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(sent.as_mut().poll(&mut cx).is_ready());
        })
        .await
        .unwrap();
        let why = failure.lock().unwrap().clone().unwrap();
        assert!(
            why.contains("the server requires a client certificate and canaryd presented none"),
            "{why}"
        );
        assert!(why.contains("--otlp-client-cert"), "{why}");
    }
}

#[cfg(test)]
mod header_tests {
    use super::*;

    fn config(headers: &[(&str, &str)]) -> Config {
        Config {
            endpoint: Some("http://127.0.0.1:9/".into()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Config::default()
        }
    }

    // A header HTTP refuses was dropped without a word: export went on without its
    // `Authorization`, and the collector's 401 was all anyone saw.
    #[test]
    fn a_header_it_cannot_send_is_an_error_naming_it_never_its_value() {
        let bad = config(&[("x-ok", "fine"), ("authorization", "Bearer SECRETtok\nen")]);
        let e = sendable(&bad.headers).unwrap_err().to_string();
        assert!(e.contains("authorization"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
        let e = sendable(&config(&[("bad name", "SECRETvalue")]).headers)
            .unwrap_err()
            .to_string();
        assert!(e.contains("entry 1"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
        // So the exporter is not started.
        let Err(e) = crate::OtlpExporter::start(bad) else {
            panic!("started without its authorization header");
        };
        let e = e.to_string();
        assert!(e.contains("authorization") && !e.contains("SECRET"), "{e}");
    }

    #[test]
    fn the_headers_it_sends_are_never_printed() {
        let headers = ExactHeaders {
            unset: Vec::new(),
            set: sendable(&config(&[("authorization", "Bearer SECRETtoken")]).headers).unwrap(),
        };
        let debug = format!("{headers:?}");
        assert!(debug.contains("authorization"), "{debug}");
        assert!(!debug.contains("SECRET"), "{debug}");
    }
}
