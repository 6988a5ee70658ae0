//! [`ServerMetricsScraper`]: scrapes the inference server's `/metrics` on an interval, maps
//! each page onto canonical signals ([`ServerSample`]) stamped with [`MonoTime`], and keeps
//! them in a bounded ring that the daemon reads through a [`ServerMetrics`] handle.

mod notes;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use canary_core::MonoTime;
use tokio_util::sync::CancellationToken;

use crate::engine::ServerSample;
use crate::http::{self, Endpoint, Note, OutageLog, ScrapeError};
use crate::prometheus;
use crate::ring::Ring;
use crate::server_summary::server_summary;
use crate::source::{SharedState, SourceState};
use canary_core::RunServerSummary;

/// Settings of a [`ServerMetricsScraper`].
#[derive(Debug, Clone)]
pub struct ServerMetricsConfig {
    /// The `/metrics` URL (`http://host:port/metrics` or `https://…`).
    pub url: String,
    /// TLS client settings for an `https://` URL (e.g. `canary_replay::client_config` with
    /// the target's CA bundle); `None` trusts the system's roots. Unused for `http://`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Time between scrapes (default 1 s).
    pub interval: Duration,
    /// Give up on one scrape after this long; `None` (the default) derives it from `interval`
    /// with [`default_scrape_timeout`](crate::default_scrape_timeout) (900 ms at 1 s).
    pub timeout: Option<Duration>,
    /// Samples kept in the ring (default 7200: two hours at 1 s).
    pub capacity: usize,
    /// Shared with earlier scrapers of the same endpoint so an outage is warned about once.
    pub outage: OutageLog,
    /// Keep every parsed page in its sample (memory grows with the page size times
    /// `capacity`; default false, whatever the engine).
    pub keep_raw: bool,
    /// The run's model (`--model`): of a page with several models' series, only its are
    /// read (`engine::ModelChoice`); `None` reads every series.
    pub model: Option<String>,
}

impl ServerMetricsConfig {
    /// Defaults for `url`.
    pub fn new(url: impl Into<String>) -> ServerMetricsConfig {
        ServerMetricsConfig {
            url: url.into(),
            tls: None,
            interval: Duration::from_secs(1),
            timeout: None,
            capacity: 7200,
            keep_raw: false,
            outage: OutageLog::default(),
            model: None,
        }
    }
}

/// Scrapes one server's `/metrics` until shut down. Build it, take a [`ServerMetrics`]
/// handle with [`ServerMetricsScraper::handle`], then spawn [`ServerMetricsScraper::run`].
#[derive(Debug)]
pub struct ServerMetricsScraper {
    handle: ServerMetrics,
    interval: Duration,
}

/// A cheap, cloneable view of a scraper's ring and state, for the daemon and `doctor`.
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    endpoint: Arc<Endpoint>,
    timeout: Duration,
    /// How long a scrape tells the server's state: two intervals and a timeout, so one
    /// failed or slow scrape does not blank it, and a failing endpoint's last page is not
    /// taken for the state minutes later.
    in_force: Duration,
    keep_raw: bool,
    ring: Ring<ServerSample>,
    state: SharedState,
    /// Whether a histogram too large to use was warned about (once per scraper).
    oversized_warned: Arc<AtomicBool>,
    /// The run's model, whose series alone are read from a page of several models.
    model: Option<Arc<str>>,
    /// Whether which model's series are read was said (once per scraper).
    model_said: Arc<AtomicBool>,
    /// Failed scrapes, parse issues and values left out so far, for the source's detail.
    notes: Arc<Mutex<notes::Notes>>,
    /// What was warned about this endpoint, shared with earlier scrapers of it (a daemon's
    /// runs, `--runs N`): each trouble of its pages is warned once, not once per scraper.
    said: OutageLog,
    /// Stops the interval's scrapes ([`ServerMetrics::last_scrape`]), before the run's
    /// `shutdown` does.
    interval_stop: CancellationToken,
}

impl ServerMetricsScraper {
    /// Validates the URL (`http://` or `https://`) and builds the TLS client an `https://`
    /// URL needs; nothing is contacted yet.
    pub fn new(config: ServerMetricsConfig) -> Result<ServerMetricsScraper, ScrapeError> {
        let endpoint =
            Endpoint::parse(&config.url, config.tls.clone())?.with_outage(config.outage.clone());
        let timeout = config
            .timeout
            .unwrap_or_else(|| http::default_scrape_timeout(config.interval));
        Ok(ServerMetricsScraper {
            handle: ServerMetrics {
                endpoint: Arc::new(endpoint),
                timeout,
                in_force: config.interval.saturating_mul(2).saturating_add(timeout),
                keep_raw: config.keep_raw,
                ring: Ring::new(config.capacity),
                state: SharedState::default(),
                oversized_warned: Arc::default(),
                model: config.model.as_deref().map(Arc::from),
                model_said: Arc::default(),
                notes: Arc::default(),
                said: config.outage,
                interval_stop: CancellationToken::new(),
            },
            interval: config.interval,
        })
    }

    /// The handle through which samples are read while [`ServerMetricsScraper::run`] runs.
    pub fn handle(&self) -> ServerMetrics {
        self.handle.clone()
    }

    /// Scrapes every interval until `shutdown` is cancelled, or the handle's
    /// [`ServerMetrics::last_scrape`] stops it. An unreachable endpoint is logged once
    /// (`warn`) and retried quietly; this never fails the caller.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ScrapeError> {
        let h = &self.handle;
        let poll = http::poll(
            "server /metrics",
            &h.endpoint,
            self.interval,
            h.timeout,
            &h.state,
            h.interval_stop.clone(),
            |text, at| h.keep_page(&text, at).0,
            |reason| h.failed(reason),
        );
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = poll => {}
        }
        Ok(())
    }
}

impl ServerMetrics {
    fn notes(&self) -> std::sync::MutexGuard<'_, notes::Notes> {
        self.notes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a failed scrape; returns the source's reason.
    fn failed(&self, reason: String) -> String {
        self.notes().failed(&reason);
        reason
    }

    /// Maps and keeps a page, and sets the source's state from it: available with its detail
    /// (see [`ServerMetrics::ingest`]), or unavailable when no metric family could be read
    /// from it at all (an auth proxy's JSON, junk): such a page is not kept. The reason is
    /// returned too.
    fn keep_page(&self, text: &str, at: MonoTime) -> (SourceState, Option<String>) {
        match self.ingest(text, at) {
            Ok(detail) => {
                self.said.clear(Note::NotMetrics);
                (SourceState::available(detail), None)
            }
            Err(why) => {
                if self.said.note(Note::NotMetrics) {
                    tracing::warn!(
                        url = %self.endpoint.url,
                        "server /metrics: unavailable: {why} (said once until a page with \
                         metrics comes)"
                    );
                }
                let reason = self.failed(why);
                (SourceState::unavailable(reason.clone()), Some(reason))
            }
        }
    }

    /// Maps and keeps a page; returns the source's detail: the URL and engine, and what went
    /// wrong so far (failed scrapes, parse issues, values left out). A page with no metric
    /// family is not kept: its `Err` says what it held.
    fn ingest(&self, text: &str, at: MonoTime) -> Result<String, String> {
        // Only what an engine's mapping reads, unless the whole page is to be kept: a page of
        // 200,000 samples no engine reads took ~0.5 GB parsed, every scrape.
        let page = match self.keep_raw {
            true => prometheus::parse(text),
            false => prometheus::parse_wanted_families(text, |name, _, _| {
                crate::engine::read_by_some_engine(name)
            }),
        };
        if page.families.is_empty() {
            return Err(no_metrics(&self.endpoint.url, text, &page));
        }
        let issues = page.errors.clone();
        let sample = ServerSample::from_scrape_for(page, at, self.keep_raw, self.model.as_deref());
        let mut what = match sample.engine {
            Some(e) => format!("{} ({})", self.endpoint.url, e.name()),
            None => self.endpoint.url.clone(),
        };
        if let Some(choice) = &sample.model {
            what = format!("{what}: {choice}");
            if !self.model_said.swap(true, Ordering::Relaxed) {
                match choice {
                    crate::ModelChoice::Only { .. } => {
                        tracing::info!(url = %self.endpoint.url, "server /metrics: {choice}")
                    }
                    crate::ModelChoice::NoneMatched { .. } => tracing::warn!(
                        url = %self.endpoint.url,
                        "server /metrics: {choice} (said once)"
                    ),
                }
            }
        }
        // Each trouble is warned at most once per scraper (a run), and once for the endpoint
        // over the scrapers that share `said`, until one of its pages comes without it.
        let is_news = |note, trouble: bool, first_in_scraper: bool| {
            self.said.page_news(note, trouble) && first_in_scraper
        };
        let (news, detail) = {
            let mut notes = self.notes();
            let first = notes.page(&issues, sample.skipped_lines, &sample.left_out);
            let merged = notes.merged(&sample.merged_only);
            let bad = notes.bad_histograms(&sample.bad_histograms);
            let unread = !issues.is_empty() || sample.skipped_lines > 0;
            let said = (
                is_news(Note::PageIssues, unread, first.issues)
                    .then(|| notes.issues())
                    .flatten(),
                is_news(
                    Note::ValuesLeftOut,
                    !sample.left_out.is_empty(),
                    first.left_out,
                )
                .then(|| notes.left_out())
                .flatten(),
                is_news(Note::MergedOnly, !sample.merged_only.is_empty(), merged)
                    .then(|| sample.merged_only.join(", ")),
                is_news(Note::BadHistograms, !sample.bad_histograms.is_empty(), bad)
                    .then(|| notes.bad())
                    .flatten(),
            );
            (said, notes.detail(&what))
        };
        if let Some(issues) = news.0 {
            tracing::warn!(
                url = %self.endpoint.url,
                "server /metrics: lines of the page could not be read: {issues} (said once \
                 until a page comes without them; the source's detail keeps the count)"
            );
        }
        if let Some(left) = news.1 {
            tracing::warn!(
                url = %self.endpoint.url,
                "server /metrics: {left} (said once until a page comes without them; the \
                 source's detail keeps the count)"
            );
        }
        if let Some(bad) = news.3 {
            tracing::warn!(
                url = %self.endpoint.url,
                "server /metrics: {bad} (said once until a page comes without them; the \
                 source's detail keeps the count)"
            );
        }
        if let Some(merged) = news.2 {
            tracing::warn!(
                url = %self.endpoint.url,
                signals = %merged,
                "server /metrics: counters or histograms over {} label sets are kept merged \
                 only (their growth judged on the sum; said once until a page comes without \
                 them; the source's detail keeps the count)",
                crate::growth::MAX_SERIES
            );
        }
        let oversized = !sample.oversized_histograms.is_empty();
        if is_news(Note::OversizedHistograms, oversized, oversized)
            && !self.oversized_warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                url = %self.endpoint.url,
                histograms = %sample.oversized_histograms.join(", "),
                "server /metrics: histograms too large to use are left out (said once until a \
                 page comes without them)"
            );
        }
        self.ring.push(sample);
        Ok(detail)
    }

    /// Scrapes once now (outside the interval) and keeps the sample, all within one scrape
    /// timeout: the wait for an interval scrape in flight (one at a time, so pages are kept
    /// in the server's order), the GET, and the page's parse (off the async workers; a page
    /// still being read when the time is up is kept once read, in order, and this returns
    /// [`ScrapeError::SlowParse`]). At the end of a run use [`ServerMetrics::last_scrape`],
    /// which stops the interval's first.
    pub async fn scrape_now(&self) -> Result<ServerSample, ScrapeError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let url = || self.endpoint.url.clone();
        // An interval scrape waiting on its GET gives way (its page, older, is not kept).
        self.endpoint.preempt();
        let turn =
            match tokio::time::timeout_at(deadline, self.endpoint.one_at_a_time_owned()).await {
                Ok(turn) => turn,
                Err(_) => {
                    // The scrape holding the turn (an interval page being read) sets the
                    // source's state itself when done: only noted here.
                    let e = ScrapeError::Busy {
                        url: url(),
                        timeout: self.timeout,
                    };
                    self.failed(http::error_chain(&e));
                    return Err(e);
                }
            };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (text, at) = match self.endpoint.get(left).await {
            Ok(page) => page,
            // Said with the scrape's whole time: the wait for the turn was part of it.
            Err(ScrapeError::Timeout { url, .. }) => {
                return Err(self.scrape_failed(ScrapeError::Timeout {
                    url,
                    timeout: self.timeout,
                }))
            }
            Err(e) => return Err(self.scrape_failed(e)),
        };
        let me = self.clone();
        let kept = tokio::task::spawn_blocking(move || {
            // The turn is held until the page is kept, even when no one waits any more.
            let _turn = turn;
            let (state, unread) = me.keep_page(&text, at);
            me.state.set(state);
            match unread {
                Some(reason) => Err(ScrapeError::NoMetrics { reason }),
                None => Ok(me.ring.at_or_before(at).unwrap_or_default()),
            }
        });
        match tokio::time::timeout_at(deadline, kept).await {
            Ok(Ok(kept)) => kept,
            Ok(Err(join)) => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Err(ScrapeError::SlowParse {
                url: url(),
                timeout: self.timeout,
            }),
        }
    }

    /// Records a scrape that got no page and sets the source unavailable; returns `e`.
    fn scrape_failed(&self, e: ScrapeError) -> ScrapeError {
        let reason = self.failed(http::error_chain(&e));
        self.state.set(SourceState::unavailable(reason));
        e
    }

    /// Scrapes now and, when `settle` is set, again every [`SETTLE_STEP`] until two scrapes
    /// in a row count the same finished requests (at most [`SETTLE_TRIES`] more, within
    /// `SETTLE_BUDGET`): a client
    /// sees a response end a moment before the server counts it, so a scrape taken just
    /// after the last response could miss it. `None` when the endpoint did not answer.
    pub async fn settled_scrape(&self, settle: bool) -> Option<ServerSample> {
        let mut last = self.scrape_now().await.ok()?;
        if !settle {
            return Some(last);
        }
        let deadline = tokio::time::Instant::now() + SETTLE_BUDGET;
        for _ in 0..SETTLE_TRIES {
            tokio::time::sleep(SETTLE_STEP).await;
            let Ok(Ok(next)) = tokio::time::timeout_at(deadline, self.scrape_now()).await else {
                return Some(last);
            };
            let same = next.requests_counted() == last.requests_counted();
            last = next;
            if same {
                break;
            }
        }
        Some(last)
    }

    /// The run's last scrape (settled when `settle` is set, see
    /// [`ServerMetrics::settled_scrape`]), so its last requests are in the final histograms.
    /// The interval's scrapes stop first, for good: one in flight is dropped, not waited for
    /// (a slow server held the run's end up to a scrape timeout) and not kept, so the pages
    /// kept last are this one's. `None` when the endpoint did not answer.
    pub async fn last_scrape(&self, settle: bool) -> Option<ServerSample> {
        self.interval_stop.cancel();
        self.settled_scrape(settle).await
    }

    /// The URL scraped, without user info or query.
    pub fn url(&self) -> &str {
        &self.endpoint.url
    }

    /// How long one scrape may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the endpoint answers, and why not.
    pub fn state(&self) -> SourceState {
        self.state.get()
    }

    /// The ring itself (time-ordered, bounded).
    pub fn ring(&self) -> &Ring<ServerSample> {
        &self.ring
    }

    /// The ring's size and when the newest scrape dropped for room was taken, if at or
    /// after `t`.
    pub fn dropped_since(&self, t: MonoTime) -> Option<(usize, MonoTime)> {
        self.ring
            .dropped_since(t)
            .map(|d| (self.ring.capacity(), d))
    }

    /// Samples taken in `[t0, t1]`.
    pub fn samples_between(&self, t0: MonoTime, t1: MonoTime) -> Vec<ServerSample> {
        self.ring.between(t0, t1)
    }

    /// The last sample at or before `t` (the server's state at `t`).
    pub fn at_or_before(&self, t: MonoTime) -> Option<ServerSample> {
        self.ring.at_or_before(t)
    }

    /// `read` of the server's state at `t` (the last sample at or before it, if at most two
    /// intervals and a timeout older), without a copy.
    pub fn read_state_at<R>(
        &self,
        t: MonoTime,
        read: impl FnOnce(&ServerSample) -> R,
    ) -> Option<R> {
        self.ring.read_within(t, self.in_force, read)
    }

    /// The scrapes bounding a run `[t0, t1]` for histogram and counter deltas: the last one at
    /// or before `t0` (else the first in the run), and the first at or after `t1` (else the
    /// last before it). `None` without two distinct scrapes.
    pub fn run_bounds(&self, t0: MonoTime, t1: MonoTime) -> Option<(ServerSample, ServerSample)> {
        let first = self
            .ring
            .at_or_before(t0)
            .or_else(|| self.ring.at_or_after(t0))?;
        let last = self
            .ring
            .at_or_after(t1)
            .or_else(|| self.ring.at_or_before(t1))?;
        (last.at > first.at).then_some((first, last))
    }

    /// Every sample from the first to the last bound of the run (see [`Self::run_bounds`]).
    pub fn run_window(&self, t0: MonoTime, t1: MonoTime) -> Vec<ServerSample> {
        match self.run_bounds(t0, t1) {
            Some((a, b)) => self.ring.between(a.at, b.at),
            None => self.ring.between(t0, t1),
        }
    }

    /// The server-side summary of a run `[t0, t1]`.
    pub fn summary(&self, t0: MonoTime, t1: MonoTime) -> RunServerSummary {
        server_summary(&self.run_window(t0, t1))
    }

    /// The server-side summary over exactly the scrapes taken in `[from, to]`: deltas start
    /// at the first scrape at or after `from` (the one taken after warm-up), never at an
    /// earlier one.
    pub fn summary_within(&self, from: MonoTime, to: MonoTime) -> RunServerSummary {
        server_summary(&self.ring.between(from, to))
    }
}

/// Why a page with no metric family is not a metrics page: what it held (its first
/// characters, escaped) and how many of its lines could not be read.
fn no_metrics(url: &str, text: &str, page: &prometheus::Scrape) -> String {
    let unread = page.errors.len().max(page.skipped_lines);
    let start: String = text.trim_start().chars().take(60).collect();
    let held = match (
        start.is_empty(),
        text.trim_start().chars().nth(60).is_some(),
    ) {
        (true, _) => "an empty page".to_owned(),
        (false, more) => format!(
            "{unread} line(s) that could not be read as Prometheus text, beginning {:?}{}",
            start,
            if more { "…" } else { "" }
        ),
    };
    format!("{url}: not a metrics page, no metric family read: {held}")
}

/// Time between the scrapes of [`ServerMetrics::settled_scrape`].
pub const SETTLE_STEP: Duration = Duration::from_millis(25);
/// Scrapes [`ServerMetrics::settled_scrape`] adds at most.
pub const SETTLE_TRIES: usize = 8;
/// How long [`ServerMetrics::settled_scrape`]'s added scrapes may take in all: a slow server
/// whose count keeps changing must not hold a run's end (and a stopping daemon) for eight
/// scrape timeouts.
pub const SETTLE_BUDGET: Duration = Duration::from_secs(3);

/// Tries one scrape of `url` and says whether it works (for `canaryd doctor`); an `https://`
/// URL is checked against the system's roots and `ca_bundle`, presenting `identity` when the
/// server asks for a client certificate, as a run's scrapes are.
pub async fn probe_server_metrics(
    url: &str,
    ca_bundle: Option<&std::path::Path>,
    identity: Option<&canary_tls::ClientIdentity>,
    timeout: Duration,
) -> SourceState {
    let tls = match (ca_bundle, identity) {
        (None, None) => None,
        _ => match canary_tls::client_config(ca_bundle, identity) {
            Ok(c) => Some(c),
            Err(e) => return SourceState::unavailable(e.to_string()),
        },
    };
    let endpoint = match Endpoint::parse(url, tls) {
        Ok(e) => e,
        Err(e) => return SourceState::unavailable(http::error_chain(&e)),
    };
    match endpoint.get(timeout).await {
        Ok((text, at)) => {
            let page = prometheus::parse(&text);
            if page.families.is_empty() {
                return SourceState::unavailable(no_metrics(url, &text, &page));
            }
            let s = ServerSample::from_scrape(page, at, false);
            match s.engine {
                Some(canary_core::Engine::Unknown) => SourceState::available(format!(
                    "{url}: unknown engine, {} metric families",
                    s.families
                )),
                Some(e) => SourceState::available(format!("{url}: engine {}", e.name())),
                None => SourceState::available(url.to_owned()),
            }
        }
        Err(e) => SourceState::unavailable(http::error_chain(&e)),
    }
}
