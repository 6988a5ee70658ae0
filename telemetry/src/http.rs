//! A tiny HTTP/1.1 GET for `/metrics` pages (`http://`, or `https://` through rustls), and the
//! polling loop shared by the server and DCGM scrapers: scrape every interval, report an
//! unreachable endpoint once, retry quietly.

mod ended;

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use canary_core::redact_url;
use canary_core::InterimCount;
use canary_core::MonoTime;
use http::{header, Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use crate::source::{SharedState, SourceState};

/// The largest `/metrics` body accepted; a vLLM page with many models is a few hundred KiB.
pub const MAX_BODY_BYTES: usize = 32 << 20;

/// Interim (1xx) responses a scrape takes before its final one: the replay's cap too, kept
/// by the same count (canary-core's `InterimCount`).
pub use canary_core::MAX_INTERIM;

/// [`canary_core::error_chain`], with a TLS error in it said in plain words as the target's
/// and OTLP's are ([`canary_tls::explain_chain`]): a server refusing a missing client
/// certificate says so by an alert rustls names tersely.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    canary_tls::explain_chain(e)
        .map_or_else(|| canary_core::error_chain(e), |s| format!("{e}: {s}"))
}

/// A body cap as people read it: `32 MiB`, else in bytes.
fn show_cap(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

/// Why one scrape failed. Every variant names the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The URL does not parse or lacks a host.
    #[error("{url}: not a valid http:// or https:// URL")]
    BadUrl {
        /// The URL as configured.
        url: String,
    },
    /// A scheme other than `http` and `https`.
    #[error("{url}: only http:// and https:// are supported for metrics endpoints")]
    UnsupportedScheme {
        /// The URL as configured.
        url: String,
    },
    /// An `https://` endpoint without TLS settings, and no usable system root certificates.
    #[error("{url}: cannot scrape over https: {reason}")]
    TlsConfig {
        /// The URL as configured.
        url: String,
        /// Why no TLS client could be built.
        reason: String,
    },
    /// The TLS handshake failed (unknown issuer, wrong name, not TLS at all).
    #[error("{url}: TLS handshake failed")]
    Tls {
        /// The endpoint.
        url: String,
        /// rustls' error, through tokio-rustls.
        #[source]
        source: std::io::Error,
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
        /// hyper's error, or its connection's when hyper's says only that the connection
        /// closed before the GET went out.
        #[source]
        source: ended::Cause,
    },
    /// No complete response within the timeout.
    #[error("{url}: no complete response within {timeout:?}")]
    Timeout {
        /// The endpoint.
        url: String,
        /// The configured timeout.
        timeout: Duration,
    },
    /// Over [`MAX_INTERIM`] interim (1xx) responses came before the final one: a server
    /// answering `100 Continue` forever would be parsed until the timeout, a core busy.
    #[error("{url}: over {max} interim (1xx) responses")]
    Interim {
        /// The endpoint.
        url: String,
        /// The cap, [`MAX_INTERIM`].
        max: u32,
    },
    /// The server answered with a non-2xx status.
    #[error("{url}: HTTP status {status}")]
    Status {
        /// The endpoint.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The body was longer than its cap ([`MAX_BODY_BYTES`] for a page); not read further.
    #[error("{url}: the response body is over {}, the most read of it", show_cap(*cap))]
    TooLarge {
        /// The endpoint.
        url: String,
        /// The cap, bytes.
        cap: usize,
    },
    /// Reading the body failed.
    #[error("{url}: reading the response body failed")]
    Body {
        /// The endpoint.
        url: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The body came compressed (`Content-Encoding` other than `identity`), which was not
    /// asked for and cannot be read: parsed as text it was `0 metric families`.
    #[error("{url}: body sent with Content-Encoding {encoding:?}, which canaryd does not decode")]
    Encoding {
        /// The endpoint.
        url: String,
        /// The header's value.
        encoding: String,
    },
    /// The scrape in flight before this one (the interval's) held the endpoint for all of
    /// this one's time: one scrape of an endpoint at a time, so its pages are kept in order.
    #[error(
        "{url}: no page within {timeout:?}: the scrape already in flight held the endpoint \
             that long"
    )]
    Busy {
        /// The endpoint.
        url: String,
        /// The scrape's whole time.
        timeout: Duration,
    },
    /// The page came but was not read within the scrape's time (a large page); it is kept
    /// once read, in order.
    #[error("{url}: the page was not read within {timeout:?} (a large page; kept once read)")]
    SlowParse {
        /// The endpoint.
        url: String,
        /// The scrape's whole time.
        timeout: Duration,
    },
    /// A page with no metric family in it at all (an auth proxy's JSON, junk): not a
    /// metrics page, whatever its `Content-Type`.
    #[error("{reason}")]
    NoMetrics {
        /// What the page held, its URL first.
        reason: String,
    },
    /// The body is an HTML page (a login page, a proxy's error page), not metrics.
    #[error("{url}: body is {content_type:?}, not a metrics page")]
    NotMetrics {
        /// The endpoint.
        url: String,
        /// The `Content-Type` header's value.
        content_type: String,
    },
}

/// The timeout of one scrape when none is configured: 90 % of the interval, so a slow page
/// (a large vLLM page under load) still gets most of the time between scrapes, but never less
/// than 900 ms (sub-second intervals would otherwise fail every scrape of a busy server: the
/// next tick just waits) nor more than 10 s (the end-of-run scrape waits for it).
pub fn default_scrape_timeout(interval: Duration) -> Duration {
    (interval * 9 / 10).clamp(Duration::from_millis(900), Duration::from_secs(10))
}

/// A TLS client trusting the system's roots (`SSL_CERT_FILE`, `SSL_CERT_DIR` honoured), built
/// once, for `https://` endpoints given no TLS settings of their own.
fn system_tls() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = canary_tls::system_roots().map_err(|e| e.to_string())?;
            if roots.store.is_empty() {
                return Err(format!(
                    "no root certificates in {}{} (give a CA bundle, or use an http:// \
                     metrics URL)",
                    roots.source_name, roots.problems
                ));
            }
            Ok(canary_tls::with_roots(roots.store))
        })
        .clone()
}

/// A validated endpoint.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// The URL as shown in logs, errors and summaries: without user info, query or fragment,
    /// any of which may carry a token.
    pub url: String,
    uri: Uri,
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    outage: OutageLog,
    /// The most of a body read ([`MAX_BODY_BYTES`] unless set).
    body_cap: usize,
    /// One scrape at a time, its page kept before the next is asked for
    /// ([`Endpoint::one_at_a_time`]): counters' growth is judged in the order the pages
    /// were kept, and two scrapes in flight at once (the interval's and a run's last) could
    /// be kept in the other order than the server wrote them, a fall read as a restart
    /// whose whole count is growth.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Bumped by a run's own scrape ([`Endpoint::preempt`]): an interval scrape whose GET is
    /// in flight drops it (its page unkept) and gives the turn, so the run's scrape does not
    /// wait out the interval's timeout before its own (two timeouts against a silent server).
    preempt: Arc<tokio::sync::watch::Sender<u64>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// True when `authority` has a non-empty port after its host.
fn port_given(authority: &str) -> bool {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let after_host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, rest)| rest),
        None => host_port.find(':').map_or("", |i| &host_port[i..]),
    };
    after_host.len() > 1
}

impl Endpoint {
    /// An `http://` or `https://` endpoint; `https` uses `tls`, else the system's roots.
    pub fn parse(url: &str, tls: Option<Arc<ClientConfig>>) -> Result<Endpoint, ScrapeError> {
        let uri: Uri = url.parse().map_err(|_| ScrapeError::BadUrl {
            url: redact_url(url),
        })?;
        let url = &redact_url(url);
        let bad = || ScrapeError::BadUrl {
            url: url.to_owned(),
        };
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(_) => {
                return Err(ScrapeError::UnsupportedScheme {
                    url: url.to_owned(),
                })
            }
            None => return Err(bad()),
        };
        let host = uri.host().ok_or_else(bad)?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        // `Uri` reads a port it cannot parse (`:99999`, `:abc`) as none, which would mean 80.
        let port = match uri.port_u16() {
            Some(0) => return Err(bad()),
            Some(p) => p,
            None if port_given(uri.authority().map_or("", |a| a.as_str())) => return Err(bad()),
            None => {
                if https {
                    443
                } else {
                    80
                }
            }
        };
        let tls = if https {
            let config = match tls {
                Some(c) => c,
                None => system_tls().map_err(|reason| ScrapeError::TlsConfig {
                    url: url.to_owned(),
                    reason,
                })?,
            };
            let name = ServerName::try_from(host.clone()).map_err(|_| bad())?;
            Some((TlsConnector::from(config), name))
        } else {
            None
        };
        Ok(Endpoint {
            url: url.to_owned(),
            uri,
            host,
            port,
            tls,
            outage: OutageLog::default(),
            body_cap: MAX_BODY_BYTES,
            turn: Arc::default(),
            preempt: Arc::new(tokio::sync::watch::Sender::new(0)),
        })
    }

    /// Waits until no other scrape of this endpoint (or of a clone of it) is in flight: hold
    /// the guard across the GET and the keeping of its page.
    pub async fn one_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Asks an interval scrape whose GET is in flight to drop it and give the turn (a page
    /// already come is still kept first).
    pub fn preempt(&self) {
        self.preempt.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// [`Endpoint::one_at_a_time`], the guard owned: it can be held by a blocking task that
    /// keeps the page after its caller stopped waiting.
    pub async fn one_at_a_time_owned(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.turn.clone().lock_owned().await
    }

    /// Reads at most `bytes` of a body (an info route's JSON, parsed whole into a tree, is
    /// kept far smaller than a `/metrics` page).
    pub fn with_body_cap(mut self, bytes: usize) -> Endpoint {
        self.body_cap = bytes;
        self
    }

    /// Shares `outage` with earlier scrapers of this endpoint.
    pub fn with_outage(mut self, outage: OutageLog) -> Endpoint {
        self.outage = outage;
        self
    }

    /// GETs the page; the returned time is when its head arrived: the server wrote the
    /// page's values just before, and a large body can take hundreds of ms more to read.
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
        match &self.tls {
            None => self.exchange(stream).await,
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), stream)
                    .await
                    .map_err(|source| ScrapeError::Tls { url: url(), source })?;
                self.exchange(tls).await
            }
        }
    }

    async fn exchange<IO>(&self, io: IO) -> Result<(String, MonoTime), ScrapeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let url = || self.url.clone();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|source| ScrapeError::Http {
                url: url(),
                source: source.into(),
            })?;
        // The connection task ends by itself once `sender` is dropped; `ended` says why it
        // failed, when the GET is told only that it closed.
        let (task, ended) = ended::watch(conn);
        tokio::spawn(task);
        let path = self.uri.path_and_query().map_or("/", |p| p.as_str());
        // Never the URL's user info: `Host` is read by every proxy and access log on the way.
        let authority = self.uri.authority().map_or(self.host.as_str(), |a| {
            a.as_str()
                .rsplit_once('@')
                .map_or(a.as_str(), |(_, host)| host)
        });
        let mut req = Request::get(path)
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
        // Past the cap the response's future is dropped, and hyper closes the connection.
        let interim = Arc::new(InterimCount::default());
        let counter = interim.clone();
        hyper::ext::on_informational(&mut req, move |_| counter.count());
        // The cap first: a flood and its final answer read in one go are both ready at once,
        // and an unbiased select would take the answer one time in two.
        let resp = tokio::select! {
            biased;
            () = interim.over_cap() => {
                return Err(ScrapeError::Interim {
                    url: url(),
                    max: MAX_INTERIM,
                })
            }
            r = sender.send_request(req) => r,
        };
        let resp = match resp {
            Ok(resp) => resp,
            Err(e) => {
                return Err(ScrapeError::Http {
                    url: url(),
                    source: ended.why(e).await,
                })
            }
        };
        let at = MonoTime::now();
        let status = resp.status();
        if !status.is_success() {
            return Err(ScrapeError::Status {
                url: url(),
                status: status.as_u16(),
            });
        }
        let text = |h| {
            resp.headers()
                .get(h)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        };
        if let Some(encoding) = text(header::CONTENT_ENCODING)
            .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
        {
            return Err(ScrapeError::Encoding {
                url: url(),
                encoding,
            });
        }
        if let Some(content_type) =
            text(header::CONTENT_TYPE).filter(|t| t.to_ascii_lowercase().starts_with("text/html"))
        {
            return Err(ScrapeError::NotMetrics {
                url: url(),
                content_type,
            });
        }
        // A declared length over the cap is refused at the head: waiting for the body would
        // spend the whole timeout on a server that says it will send too much.
        let declared = hyper::body::Body::size_hint(resp.body()).lower();
        if declared > self.body_cap as u64 {
            return Err(ScrapeError::TooLarge {
                url: url(),
                cap: self.body_cap,
            });
        }
        let body = Limited::new(resp.into_body(), self.body_cap)
            .collect()
            .await
            .map_err(
                |source| match source.is::<http_body_util::LengthLimitError>() {
                    true => ScrapeError::TooLarge {
                        url: url(),
                        cap: self.body_cap,
                    },
                    false => ScrapeError::Body { url: url(), source },
                },
            )?
            .to_bytes();
        Ok((String::from_utf8_lossy(&body).into_owned(), at))
    }
}

/// Whether an endpoint's current outage has been logged, and which of its other `Note`s
/// were. Scrapers of one endpoint that share it (clones share) warn once between them: a
/// daemon that starts a scraper per run does not repeat a warning every run.
#[derive(Debug, Clone, Default)]
pub struct OutageLog(Arc<Said>);

#[derive(Debug, Default)]
struct Said {
    failing: std::sync::atomic::AtomicBool,
    /// [`Note`] bits.
    notes: std::sync::atomic::AtomicU16,
}

/// Something about an endpoint warned about once, beside its outages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Note {
    /// A run ended before any page came (a per-run scraper never reached its timeout).
    NoPageInRun = 1,
    /// GPUs or MIG instances past the caps were left out.
    GpusLeftOut = 2,
    /// A page went past the parser's caps.
    OverCaps = 4,
    /// A DCGM page had no `DCGM_FI_*` sample of any GPU: not a dcgm-exporter's.
    NotDcgm = 8,
    /// A server page had lines that could not be read.
    PageIssues = 16,
    /// A server page had out-of-range values, left out.
    ValuesLeftOut = 32,
    /// A server page had histogram series contradicting themselves, left out.
    BadHistograms = 64,
    /// A server page had counters or histograms over `growth::MAX_SERIES` label sets.
    MergedOnly = 128,
    /// A server page had histograms too large to use.
    OversizedHistograms = 256,
    /// A server page had no metric family at all: not a metrics page.
    NotMetrics = 512,
}

impl OutageLog {
    /// Marks the endpoint failing; true if that was news (so it should be logged).
    pub(crate) fn failed(&self) -> bool {
        !self.0.failing.swap(true, Ordering::Relaxed)
    }

    /// Marks the endpoint answering; true if it had been logged as failing.
    fn recovered(&self) -> bool {
        self.0.failing.swap(false, Ordering::Relaxed)
    }

    /// Marks `note` said; true if that was news (so it should be logged).
    pub(crate) fn note(&self, note: Note) -> bool {
        let bit = note as u16;
        self.0.notes.fetch_or(bit, Ordering::Relaxed) & bit == 0
    }

    /// Whether `trouble` on this page is news: said once for the endpoint, and again only
    /// after a page without it (as an outage is said again only after the endpoint answered).
    pub(crate) fn page_news(&self, note: Note, trouble: bool) -> bool {
        match trouble {
            true => self.note(note),
            false => {
                self.clear(note);
                false
            }
        }
    }

    /// Marks `note` no longer so: the next time is news again.
    pub(crate) fn clear(&self, note: Note) {
        self.0.notes.fetch_and(!(note as u16), Ordering::Relaxed);
    }
}

/// Scrapes `endpoint` every `interval` until `shutdown`, handing each page to `on_page` (which
/// returns the source's state: available, or unavailable when the page is unusable) and each failure's reason to `on_fail` (which returns the
/// source's reason). The first failure after a success (or at start) is logged once at `warn`;
/// further failures are silent until the endpoint answers again. Never returns an error.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn poll<F, G>(
    what: &'static str,
    endpoint: &Endpoint,
    interval: Duration,
    timeout: Duration,
    state: &SharedState,
    shutdown: CancellationToken,
    mut on_page: F,
    mut on_fail: G,
) where
    F: FnMut(String, MonoTime) -> SourceState,
    G: FnMut(String) -> String,
{
    let outage = &endpoint.outage;
    let mut preempted = endpoint.preempt.subscribe();
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // `shutdown` first in each wait: once it is cancelled no scrape is started, and none in
    // flight is kept (a run's last scrape, after stopping the interval's, keeps the last page).
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let turn = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            t = endpoint.one_at_a_time() => t,
        };
        // Only a preemption asked for once this GET holds the turn drops it.
        preempted.mark_unchanged();
        let result = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = preempted.changed() => continue,
            r = endpoint.get(timeout) => r,
        };
        // Released once the page is kept (or the failure noted), at the loop's end.
        let _turn = turn;
        match result {
            Ok((text, at)) => {
                let page = on_page(text, at);
                if outage.recovered() {
                    tracing::info!(what, url = %endpoint.url, "reachable again");
                }
                state.set(page);
            }
            Err(e) => {
                let reason = error_chain(&e);
                if outage.failed() {
                    tracing::warn!(
                        what, url = %endpoint.url, error = %reason,
                        "metrics endpoint unavailable; retrying quietly every {interval:?}{}",
                        what_is_lost(what)
                    );
                }
                state.set(SourceState::unavailable(on_fail(reason)));
            }
        }
    }
}

/// What a run misses while `what` (as [`poll`]'s callers name their endpoint) is down, and
/// the flag or key that points at the right one or turns it off: the warning says so, as the
/// eBPF one says which capabilities it lacks.
fn what_is_lost(what: &str) -> &'static str {
    match what {
        "server /metrics" => {
            ": the server's own figures (queue depth, KV-cache use, server-side TTFT and ITL, \
             token counts) are missing while it is; --server-metrics-url / [targets.NAME] \
             metrics_url names the endpoint, --no-server-metrics / metrics_url = \"\" silences \
             this"
        }
        "dcgm-exporter" => {
            ": GPU figures from DCGM are missing while it is; --dcgm-url / [telemetry] dcgm_url \
             names the endpoint, leaving it out silences this"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_news_once_until_the_endpoint_answers() {
        let run1 = OutageLog::default();
        let run2 = run1.clone();
        assert!(run1.failed());
        assert!(!run1.failed());
        assert!(
            !run2.failed(),
            "a later scraper sharing the log stays quiet"
        );
        assert!(run2.recovered());
        assert!(!run1.recovered());
        assert!(run1.failed(), "a new outage is news again");
        assert!(run1.note(Note::NoPageInRun));
        assert!(!run2.note(Note::NoPageInRun));
        assert!(run2.note(Note::OverCaps), "each note on its own");
        run1.clear(Note::NoPageInRun);
        assert!(run2.note(Note::NoPageInRun), "news again once cleared");
    }

    // Issue 14, item 5: an unreadable port used to mean port 80.
    #[test]
    fn a_port_that_is_not_one_is_a_bad_url() {
        for url in [
            "http://127.0.0.1:99999/metrics",
            "http://127.0.0.1:abc/metrics",
            "http://127.0.0.1:-1/metrics",
            "http://[::1]:0/metrics",
        ] {
            let e = Endpoint::parse(url, None).err();
            assert!(
                matches!(e, Some(ScrapeError::BadUrl { .. })),
                "{url}: {e:?}"
            );
        }
        assert_eq!(Endpoint::parse("http://h/m", None).unwrap().port, 80);
        assert_eq!(Endpoint::parse("http://[::1]:9/m", None).unwrap().port, 9);
    }

    #[test]
    fn shown_urls_carry_no_credentials() {
        for (url, shown) in [
            (
                "http://u:pw@h:9400/metrics?token=abc#x",
                "http://h:9400/metrics",
            ),
            ("https://h/metrics?k=v", "https://h/metrics"),
            ("http://h:8000", "http://h:8000"),
            ("h:1/x?y", "h:1/x"),
            ("http://u:ab/cd@h:9400/metrics", "http://h:9400/metrics"),
            ("http://u:ab?cd@h:9400/metrics", "http://h:9400/metrics"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        let e = Endpoint::parse("http://h:9400/metrics?token=abc", None).unwrap();
        assert_eq!(e.url, "http://h:9400/metrics");
        let e = Endpoint::parse("ftp://u:pw@h/metrics?token=abc", None).unwrap_err();
        assert!(
            !e.to_string().contains("pw") && !e.to_string().contains("abc"),
            "{e}"
        );
    }
}
