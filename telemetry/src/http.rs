//! A tiny HTTP/1.1 GET for `/metrics` pages, and the polling loop shared by the server and
//! DCGM scrapers: scrape every interval, report an unreachable endpoint once, retry quietly.

use std::time::Duration;

use bytes::Bytes;
use canary_core::MonoTime;
use http::{header, Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::source::{SharedState, SourceState};

/// The largest `/metrics` body accepted; a vLLM page with many models is a few hundred KiB.
pub const MAX_BODY_BYTES: usize = 32 << 20;

/// Why one scrape failed. Every variant names the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The URL does not parse or lacks a host.
    #[error("{url}: not a valid http:// URL")]
    BadUrl {
        /// The URL as configured.
        url: String,
    },
    /// Only plain `http://` is implemented (metrics endpoints are on the host or cluster).
    #[error("{url}: only http:// is supported for metrics endpoints")]
    UnsupportedScheme {
        /// The URL as configured.
        url: String,
    },
    /// TCP connect failed (refused, unreachable, DNS).
    #[error("{url}: cannot connect")]
    Connect {
        /// The endpoint.
        url: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed after connecting.
    #[error("{url}: HTTP exchange failed")]
    Http {
        /// The endpoint.
        url: String,
        /// hyper's error.
        #[source]
        source: hyper::Error,
    },
    /// No complete response within the timeout.
    #[error("{url}: no complete response within {timeout:?}")]
    Timeout {
        /// The endpoint.
        url: String,
        /// The configured timeout.
        timeout: Duration,
    },
    /// The server answered with a non-2xx status.
    #[error("{url}: HTTP status {status}")]
    Status {
        /// The endpoint.
        url: String,
        /// The status code.
        status: u16,
    },
    /// Reading the body failed or it exceeded [`MAX_BODY_BYTES`].
    #[error("{url}: reading the response body failed")]
    Body {
        /// The endpoint.
        url: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The timeout of one scrape when none is configured: 90 % of the interval, so a slow page
/// (a large vLLM page under load) still gets most of the time between scrapes, but never less
/// than 900 ms (sub-second intervals would otherwise fail every scrape of a busy server: the
/// next tick just waits) nor more than 10 s (the end-of-run scrape waits for it).
pub fn default_scrape_timeout(interval: Duration) -> Duration {
    (interval * 9 / 10).clamp(Duration::from_millis(900), Duration::from_secs(10))
}

/// Formats an error with its whole `source()` chain: "a: b: c".
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A validated endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub url: String,
    uri: Uri,
    host: String,
    port: u16,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, ScrapeError> {
        let bad = || ScrapeError::BadUrl {
            url: url.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|_| bad())?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => {
                return Err(ScrapeError::UnsupportedScheme {
                    url: url.to_owned(),
                })
            }
            None => return Err(bad()),
        }
        let host = uri.host().ok_or_else(bad)?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(80);
        Ok(Endpoint {
            url: url.to_owned(),
            uri,
            host,
            port,
        })
    }

    /// GETs the page; the returned time is when its body had been read.
    pub async fn get(&self, timeout: Duration) -> Result<(String, MonoTime), ScrapeError> {
        match tokio::time::timeout(timeout, self.get_inner()).await {
            Ok(r) => r,
            Err(_) => Err(ScrapeError::Timeout {
                url: self.url.clone(),
                timeout,
            }),
        }
    }

    async fn get_inner(&self) -> Result<(String, MonoTime), ScrapeError> {
        let url = || self.url.clone();
        let stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|source| ScrapeError::Connect { url: url(), source })?;
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|source| ScrapeError::Http { url: url(), source })?;
        // The connection task ends by itself once `sender` is dropped.
        tokio::spawn(conn);
        let path = self.uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = self
            .uri
            .authority()
            .map_or(self.host.as_str(), |a| a.as_str());
        let req = Request::get(path)
            .header(header::HOST, authority)
            // Prefer the classic text format; the parser reads OpenMetrics too.
            .header(
                header::ACCEPT,
                "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5,*/*;q=0.1",
            )
            .header(header::USER_AGENT, "canaryd-telemetry")
            .body(Empty::<Bytes>::new())
            .map_err(|e| ScrapeError::Body {
                url: url(),
                source: e.into(),
            })?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|source| ScrapeError::Http { url: url(), source })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(ScrapeError::Status {
                url: url(),
                status: status.as_u16(),
            });
        }
        let body = Limited::new(resp.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|source| ScrapeError::Body { url: url(), source })?
            .to_bytes();
        let at = MonoTime::now();
        Ok((String::from_utf8_lossy(&body).into_owned(), at))
    }
}

/// Scrapes `endpoint` every `interval` until `shutdown`, handing each page to `on_page`.
/// The first failure after a success (or at start) is logged once at `warn`; further failures
/// are silent until the endpoint answers again. Never returns an error.
pub(crate) async fn poll<F>(
    what: &'static str,
    endpoint: &Endpoint,
    interval: Duration,
    timeout: Duration,
    state: &SharedState,
    shutdown: CancellationToken,
    mut on_page: F,
) where
    F: FnMut(String, MonoTime) -> String,
{
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let result = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = endpoint.get(timeout) => r,
        };
        match result {
            Ok((text, at)) => {
                let detail = on_page(text, at);
                if failing {
                    tracing::info!(what, url = %endpoint.url, "reachable again");
                }
                failing = false;
                state.set(SourceState::available(detail));
            }
            Err(e) => {
                let reason = error_chain(&e);
                if !failing {
                    tracing::warn!(
                        what, url = %endpoint.url, error = %reason,
                        "metrics endpoint unavailable; retrying quietly every {interval:?}"
                    );
                }
                failing = true;
                state.set(SourceState::unavailable(reason));
            }
        }
    }
}
