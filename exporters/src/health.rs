//! How each signal's exports are going: items exported and dropped, and the first failure,
//! reported once.
//!
//! A collector that is down must not flood the log: the first failure of a signal is one
//! warning naming the (redacted) endpoint and the cause, later ones are only counted, and a
//! recovery is noted once. Counts are exported as `canary.exporter.dropped` and returned by
//! [`OtlpExporter::shutdown`](crate::OtlpExporter::shutdown).
//!
//! Every item handed to a pipeline is counted as accepted, so what is neither exported nor
//! dropped is still queued or being sent. At the shutdown deadline [`Health::settle`] counts
//! that remainder as dropped and closes the books: a pipeline thread that finishes an export
//! later cannot count it a second time.

use crate::config::{redact_url, Config, Signal};
use crate::transport::{Reply, REFUSAL_PREFIX};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One signal's export counters.
#[derive(Debug, Default)]
pub(crate) struct SignalHealth {
    pub endpoint: Option<String>,
    /// Items handed to the pipeline: queued, batched, being sent, or done.
    pub accepted: AtomicU64,
    pub exported: AtomicU64,
    pub dropped: AtomicU64,
    pub failures: AtomicU64,
    /// True once settled; held while a count changes, so settling sees a consistent set.
    settled: Mutex<bool>,
    failing: AtomicBool,
    reported: AtomicBool,
    /// The whole cause of the signal's last transport failure, kept by its HTTP client
    /// ([`crate::transport`]): the exporter's own error says only "network error".
    pub last_failure: Arc<Mutex<Option<String>>>,
    /// What the last 2xx answer said beyond its status (a `partial_success`, a body too
    /// large to read), kept by the HTTP client for the export's count.
    pub reply: Arc<Mutex<Option<Reply>>>,
    /// True once a rejection (or an unread answer) was reported.
    reply_reported: AtomicBool,
    /// True once a collector's warning (a `partial_success` rejecting nothing) was reported:
    /// apart, so a warning does not use up the report of a later real rejection.
    warning_reported: AtomicBool,
}

impl SignalHealth {
    /// Runs `f` unless the signal was settled; false when it was.
    fn count(&self, f: impl FnOnce()) -> bool {
        let settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        if *settled {
            return false;
        }
        f();
        true
    }
}

/// The most of a collector's `partial_success` message a warning quotes.
const MAX_MESSAGE_BYTES: usize = 512;

/// The most of it scrubbed, to quote its start.
const MAX_SCRUBBED_BYTES: usize = 64 * 1024;

/// The three signals' counters and the redaction rules for their error messages.
#[derive(Debug)]
pub(crate) struct Health {
    pub traces: SignalHealth,
    pub metrics: SignalHealth,
    pub logs: SignalHealth,
    scrubber: Config,
    /// Secrets beyond the OTLP settings' (a replay target's API key and headers, which a
    /// collector rarely knows), by who gave them: [`Health::scrub_also`].
    extra: Mutex<std::collections::BTreeMap<String, canary_core::Secrets>>,
}

impl Health {
    pub fn new(config: &Config, urls: [Option<String>; 3]) -> Health {
        let [t, m, l] = urls;
        let h = |u: Option<String>| SignalHealth {
            endpoint: u.as_deref().map(redact_url),
            ..SignalHealth::default()
        };
        Health {
            traces: h(t),
            metrics: h(m),
            logs: h(l),
            scrubber: Config {
                headers: config.headers.clone(),
                endpoint: config.endpoint.clone(),
                traces_endpoint: config.traces_endpoint.clone(),
                metrics_endpoint: config.metrics_endpoint.clone(),
                logs_endpoint: config.logs_endpoint.clone(),
                ..Config::default()
            },
            extra: Mutex::default(),
        }
    }

    /// Scrubs `secrets` too from what a collector says, in place of those given before
    /// under `key` (a target's name): a reloaded target's new key replaces its old one.
    pub fn scrub_also(&self, key: &str, secrets: canary_core::Secrets) {
        self.extra
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), secrets);
    }

    /// `text` scrubbed of the OTLP headers and endpoints, then of the other secrets.
    fn scrub(&self, text: &str) -> String {
        let mut out = self.scrubber.scrub(text);
        for secrets in self
            .extra
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            if let Some(s) = secrets.scrub(&out) {
                out = s;
            }
        }
        out
    }

    pub fn of(&self, signal: Signal) -> &SignalHealth {
        match signal {
            Signal::Traces => &self.traces,
            Signal::Metrics => &self.metrics,
            Signal::Logs => &self.logs,
        }
    }

    /// `items` were handed to the signal's pipeline.
    pub fn accepted(&self, signal: Signal, items: u64) {
        let s = self.of(signal);
        s.count(|| {
            s.accepted.fetch_add(items, Ordering::Relaxed);
        });
    }

    /// `items` were exported: the collector answered 2xx. Those its `partial_success` says
    /// it rejected are counted as dropped instead (for metrics, the unit is the export: one
    /// that had any data point rejected counts as failed), and reported once.
    pub fn exported(&self, signal: Signal, items: u64) {
        let s = self.of(signal);
        let reply = s.reply.lock().unwrap_or_else(|p| p.into_inner()).take();
        let lost = match &reply {
            Some(Reply::Rejected { items: r, .. }) if *r > 0 => match signal {
                Signal::Metrics => items,
                _ => (*r).min(items),
            },
            _ => 0,
        };
        if !s.count(|| {
            s.exported.fetch_add(items - lost, Ordering::Relaxed);
            s.dropped.fetch_add(lost, Ordering::Relaxed);
        }) {
            return;
        }
        if let Some(reply) = reply {
            self.report_reply(signal, s, &reply);
        }
        if lost == 0 && s.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(
                "OTLP {} export to {} works again",
                signal.as_str(),
                s.endpoint.as_deref().unwrap_or("?")
            );
        }
    }

    /// The first rejection (or unread answer) of a signal, as one warning; the first
    /// warning a collector gave with an export it took whole, as another.
    fn report_reply(&self, signal: Signal, s: &SignalHealth, reply: &Reply) {
        let once = match reply {
            Reply::Rejected { items: 0, .. } => &s.warning_reported,
            _ => &s.reply_reported,
        };
        if once.swap(true, Ordering::Relaxed) {
            return;
        }
        let endpoint = s.endpoint.as_deref().unwrap_or("?");
        match reply {
            Reply::Rejected {
                items: 0, message, ..
            } => tracing::warn!(
                "OTLP {} export to {endpoint}: the collector took it with a warning (partial success rejecting nothing: \"{}\"); later warnings are not logged",
                signal.as_str(),
                self.shown(message),
            ),
            Reply::Rejected {
                items,
                claimed,
                message,
            } => {
                let what = match signal {
                    Signal::Traces => "spans",
                    Signal::Metrics => "metric data points",
                    Signal::Logs => "log records",
                };
                // The count is the collector's, bounded by what the request carried.
                let claimed = match claimed {
                    Some(c) => format!(", all that were sent (it claimed {c}; "),
                    None => " (".into(),
                };
                let counted = match signal {
                    Signal::Metrics => "the export counts as failed",
                    _ => "they count as dropped",
                };
                tracing::warn!(
                    "OTLP {} export to {endpoint}: the collector rejected {items} {what}{claimed}partial success: \"{}\"); {counted}, later rejections are counted (canary.exporter.dropped)",
                    signal.as_str(),
                    self.shown(message),
                );
            }
            Reply::Oversized => tracing::warn!(
                "OTLP {} export to {endpoint}: the collector acknowledged it (2xx) with a reply over 4 MiB, left unread: counted as exported, though any partial success it reported is unknown",
                signal.as_str(),
            ),
        }
    }

    /// A collector's message as a warning quotes it: scrubbed, escaped, cut.
    fn shown(&self, message: &str) -> String {
        // Only the start can be shown: scrubbing a 4 MiB message whole, once per secret
        // form, is work for nothing. Past this cut a secret's start could be shown only if
        // the secrets before it shrank the text by nearly all of it.
        let message = canary_core::prefix_within(message, MAX_SCRUBBED_BYTES);
        let message = canary_core::printable(&self.scrub(message)).into_owned();
        // Cut before a `<redacted>` the cut would halve: a `<red` reads as a leaked start.
        canary_core::Secrets::within(&message, MAX_MESSAGE_BYTES).to_owned()
    }

    /// `items` were lost (queue full or export failed); `cause` is logged the first time.
    pub fn dropped(&self, signal: Signal, items: u64, cause: Option<&dyn std::fmt::Display>) {
        let s = self.of(signal);
        // A reply kept by an attempt the exporter then gave up on is not this export's.
        s.reply.lock().unwrap_or_else(|p| p.into_inner()).take();
        if !s.count(|| {
            s.dropped.fetch_add(items, Ordering::Relaxed);
        }) {
            return;
        }
        let Some(cause) = cause else { return };
        s.failures.fetch_add(1, Ordering::Relaxed);
        s.failing.store(true, Ordering::Relaxed);
        if !s.reported.swap(true, Ordering::Relaxed) {
            let cause = self.explain(s, &cause.to_string());
            tracing::warn!(
                "OTLP {} export to {} failed: {cause}; the run goes on, later failures are counted (canary.exporter.dropped)",
                signal.as_str(),
                s.endpoint.as_deref().unwrap_or("?"),
            );
        }
    }

    /// The first failure's cause as the warning gives it, scrubbed of secrets. The exporter
    /// only says "network error": the client's own cause says which (an untrusted
    /// certificate, a refused connection); failing that, a connection attempt of our own.
    fn explain(&self, s: &SignalHealth, cause: &str) -> String {
        let mut cause = cause.to_string();
        let kept = || {
            s.last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        };
        if cause.contains("network error") {
            let kept = kept().filter(|k| !k.starts_with(REFUSAL_PREFIX));
            if let Some(why) = kept.or_else(|| s.endpoint.as_deref().and_then(probe)) {
                cause = format!("{cause} ({why})");
            }
        } else if cause.contains("status code") {
            // A collector's refusal (400, 401, 500): what it said, as its partial success
            // is quoted.
            if let Some(why) = kept().and_then(|k| {
                let said = k.strip_prefix(REFUSAL_PREFIX)?.to_string();
                Some(said)
            }) {
                return format!(
                    "{} ({REFUSAL_PREFIX}\"{}\")",
                    canary_core::printable(&self.scrub(&cause)),
                    self.shown(&why)
                );
            }
        }
        canary_core::printable(&self.scrub(&cause)).into_owned()
    }

    /// The shutdown deadline has come: what `signal`'s pipeline accepted but neither
    /// exported nor dropped (still queued, or in flight) is counted as dropped, and later
    /// counts are ignored. Returns that remainder; 0 when already settled.
    pub fn settle(&self, signal: Signal) -> u64 {
        let s = self.of(signal);
        let mut settled = s.settled.lock().unwrap_or_else(|p| p.into_inner());
        if *settled {
            return 0;
        }
        *settled = true;
        let done = s.exported.load(Ordering::Relaxed) + s.dropped.load(Ordering::Relaxed);
        let pending = s.accepted.load(Ordering::Relaxed).saturating_sub(done);
        s.dropped.fetch_add(pending, Ordering::Relaxed);
        pending
    }

    /// Counts as JSON, for reports.
    pub fn report(&self) -> serde_json::Value {
        let one = |s: &SignalHealth| {
            json!({
                "endpoint": s.endpoint,
                "exported": s.exported.load(Ordering::Relaxed),
                "dropped": s.dropped.load(Ordering::Relaxed),
                "failed_exports": s.failures.load(Ordering::Relaxed),
            })
        };
        json!({
            "traces": one(&self.traces),
            "metrics": one(&self.metrics),
            "logs": one(&self.logs),
        })
    }
}

/// Why a TCP connection to the endpoint's host and port fails, if it does.
fn probe(url: &str) -> Option<String> {
    use std::net::ToSocketAddrs;
    let authority = url.strip_prefix("http://")?.split('/').next()?;
    let with_port =
        if authority.rsplit(':').next()?.parse::<u16>().is_ok() && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
    let addr = match with_port.to_socket_addrs() {
        Ok(mut a) => a.next()?,
        Err(e) => return Some(format!("cannot resolve {authority}: {e}")),
    };
    match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)) {
        Ok(_) => None,
        Err(e) => Some(format!("connecting to {addr}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling_counts_what_is_pending_once_and_ignores_late_results() {
        let h = Health::new(&Config::default(), [None, None, None]);
        h.accepted(Signal::Traces, 10);
        h.exported(Signal::Traces, 3);
        h.dropped(Signal::Traces, 2, None);
        // 5 still queued or in flight at the deadline.
        assert_eq!(h.settle(Signal::Traces), 5);
        assert_eq!(h.traces.dropped.load(Ordering::Relaxed), 7);
        // A batch the pipeline thread finishes after the deadline is not counted again.
        h.exported(Signal::Traces, 5);
        h.dropped(Signal::Traces, 5, Some(&"late"));
        assert_eq!(h.traces.exported.load(Ordering::Relaxed), 3);
        assert_eq!(h.traces.dropped.load(Ordering::Relaxed), 7);
        assert_eq!(h.settle(Signal::Traces), 0);
        // Nothing pending: nothing written off.
        h.accepted(Signal::Logs, 1);
        h.exported(Signal::Logs, 1);
        assert_eq!(h.settle(Signal::Logs), 0);
    }

    #[test]
    fn probe_says_why_a_connection_fails() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let why = probe(&format!("http://127.0.0.1:{port}/v1/traces")).unwrap();
        assert!(why.contains("refused"), "{why}");
        let live = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/metrics", live.local_addr().unwrap());
        assert_eq!(probe(&url), None);
    }

    /// Sends one export request as the exporter's thread does (the blocking client answers
    /// within the first poll).
    /// What the warning says of `signal`'s export to `url` (in `config`) after one send that
    /// failed as the exporter's own words `generic` (reqwest's client, this crate's TLS).
    async fn explained_after_one_send(
        config: Config,
        signal: Signal,
        url: String,
        generic: &'static str,
    ) -> String {
        let mut urls = [None, None, None];
        urls[signal as usize] = Some(url.clone());
        let h = Health::new(&config, urls);
        // The blocking client is built, used and dropped off the async threads.
        tokio::task::spawn_blocking(move || {
            use opentelemetry_http::HttpClient;
            use std::future::Future;
            let tls = canary_tls::with_roots(rustls::RootCertStore::empty());
            let inner = reqwest::blocking::Client::builder()
                .use_preconfigured_tls(rustls::ClientConfig::clone(&tls))
                .build()
                .unwrap();
            let s = h.of(signal);
            let client = crate::transport::ExportClient::new(
                inner,
                &config,
                signal,
                s.last_failure.clone(),
                s.reply.clone(),
            )
            .unwrap();
            let request = http::Request::post(&url)
                .body(opentelemetry_http::Bytes::from_static(b"x"))
                .unwrap();
            let mut sent = std::pin::pin!(client.send_bytes(request));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(sent.as_mut().poll(&mut cx).is_ready());
            h.explain(s, generic)
        })
        .await
        .unwrap()
    }

    // An https:// endpoint where the server speaks plain HTTP (it answers the TLS hello
    // with `400 Bad Request`, as Python's http.server does): rustls' words were "received
    // corrupt message of type InvalidContentType".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plain_http_at_an_https_endpoint_is_said_so() {
        use std::io::{Read, Write};
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}/v1/logs", plain.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in plain.incoming().take(4) {
                let Ok(mut conn) = conn else { return };
                let mut hello = [0u8; 4096];
                let _ = conn.read(&mut hello);
                let _ = conn.write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        let config = Config {
            logs_endpoint: Some(url.clone()),
            ..Config::default()
        };
        let why = explained_after_one_send(
            config,
            Signal::Logs,
            url,
            "HTTP export failed: network error",
        )
        .await;
        assert!(
            why.contains("the server answered in plain text, not TLS (InvalidContentType)"),
            "{why}"
        );
        assert!(why.contains("is the URL http://"), "{why}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_untrusted_certificate_is_named_not_only_a_network_error() {
        // A TLS endpoint whose CA this client does not trust: the exporter's own error is
        // "network error", as for a refused connection; before, so was the warning.
        let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (port, _ca) = canary_testkit::tls_terminator(backend.local_addr().unwrap()).await;
        // A token in the query, and a host in capitals: reqwest's error quotes the URL
        // lower-cased, which a scrub of the configured text would miss.
        let url = format!("https://LOCALHOST:{port}/v1/traces?token=ZQ9xSECRET");
        let config = Config {
            traces_endpoint: Some(url.clone()),
            ..Config::default()
        };
        let why = explained_after_one_send(
            config,
            Signal::Traces,
            url,
            "HTTP export failed: network error",
        )
        .await;
        assert!(
            why.starts_with("HTTP export failed: network error ("),
            "{why}"
        );
        assert!(why.contains("certificate"), "{why}");
        assert!(!why.to_lowercase().contains("zq9xsecret"), "{why}");
    }
}
