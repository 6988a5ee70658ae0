//! The HTTP client each signal exports with: the shared blocking client, keeping the whole
//! cause of the last transport failure. The OTLP exporter reports every such failure as
//! "network error", so an untrusted certificate, a wrong name and a refused connection read
//! the same; the once-only warning (see [`crate::health`]) names the cause from here.

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use std::sync::{Arc, Mutex};

/// The most of a failure's cause kept.
const MAX_CAUSE_BYTES: usize = 4096;

/// The shared client, and where its last transport failure is kept.
#[derive(Debug, Clone)]
pub(crate) struct CauseKeepingClient {
    inner: reqwest::blocking::Client,
    last_failure: Arc<Mutex<Option<String>>>,
}

impl CauseKeepingClient {
    pub fn new(inner: reqwest::blocking::Client, last_failure: Arc<Mutex<Option<String>>>) -> Self {
        CauseKeepingClient {
            inner,
            last_failure,
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for CauseKeepingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
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
