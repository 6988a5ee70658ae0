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

use crate::config::{Config, Signal};
use http::{HeaderName, HeaderValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use std::sync::{Arc, Mutex};

/// The most of a failure's cause kept.
const MAX_CAUSE_BYTES: usize = 4096;

/// The shared client, the headers each request leaves with, and where the last transport
/// failure is kept.
#[derive(Debug, Clone)]
pub(crate) struct ExportClient {
    inner: reqwest::blocking::Client,
    headers: Arc<ExactHeaders>,
    last_failure: Arc<Mutex<Option<String>>>,
}

/// What the exporter may have added from the environment (removed), and the configured
/// headers (set).
#[derive(Debug, Default)]
struct ExactHeaders {
    unset: Vec<HeaderName>,
    set: Vec<(HeaderName, HeaderValue)>,
}

impl ExportClient {
    pub fn new(
        inner: reqwest::blocking::Client,
        config: &Config,
        signal: Signal,
        last_failure: Arc<Mutex<Option<String>>>,
    ) -> Self {
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
            set: config
                .headers
                .iter()
                .filter_map(|(k, v)| {
                    Some((
                        HeaderName::from_bytes(k.as_bytes()).ok()?,
                        HeaderValue::from_str(v).ok()?,
                    ))
                })
                .collect(),
        };
        ExportClient {
            inner,
            headers: Arc::new(headers),
            last_failure,
        }
    }
}

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
        let sent = self.inner.send_bytes(request).await.map_err(without_url);
        if let Err(e) = &sent {
            let mut chain = canary_core::error_chain(e.as_ref());
            // A certificate's names are quoted whole (a thousand of them, say): a few KiB.
            chain.truncate(canary_core::prefix_within(&chain, MAX_CAUSE_BYTES).len());
            *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(chain);
        }
        sent
    }
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
