//! The status endpoint (hyper, `127.0.0.1:9464` by default): `/healthz`, `/readyz`,
//! `/metrics` (the daemon's own metrics, Prometheus text), `/api/runs` (recent runs with their
//! verdicts; `?workload=NAME&limit=N`) and `/api/runs/{id}` (one run's summary and baseline
//! comparison), and for a person `/` (an HTML page of recent runs per workload) and
//! `/runs/{id}/report` (that run's report, made on demand).

mod brief;
mod metrics;
mod page;
mod peer_group;

pub use brief::{RunBrief, SummaryBrief};
pub use metrics::{StatusMetrics, SOURCE_REASONS};

use crate::service::history::History;
use bytes::Bytes;
use canary_core::percent_decode_query as percent_decode;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use peer_group::PeerGroup;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Connections served at once. Each holds a task and a descriptor, which runs need too:
/// without a cap, clients that connect and say nothing took every descriptor the daemon had.
/// At the cap a new connection closes the oldest one with no request being worked on: one
/// that has sent no request head yet, is idle between requests (keep-alive), has a request
/// waiting for a query or report slot, or has an answer waiting for its client to read it.
/// That one is shut down gracefully within [`EVICTION_GRACE`]: a request whose head has just
/// come is still answered, an idle connection is closed at once. Only a request holding one
/// of the few query or report slots (`QUERIES`, `page::REPORTS`) keeps its connection, so
/// at most that many are safe at once, and no client, silent, idle or not reading what it
/// asked for, can lock a liveness probe out. The new connection is itself closed only when
/// every one in its way is being worked on (not reached at these caps; said if it is).
pub const MAX_CONNECTIONS: usize = 256;

/// Connections one peer may hold at once (the same rule at this cap, among its own): one
/// client cannot take every slot. A peer is a `PeerGroup`: an IPv4 address, or an IPv6 /64
/// (a client given a /64 could otherwise take a fresh address per connection).
pub const MAX_CONNECTIONS_PER_PEER: usize = 64;

/// How long a connection closed for a newer one gets to finish a request that came just
/// before (hyper's graceful shutdown) before it is dropped.
pub const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// A connection closed or refused at a cap is logged at most this often, with how many were
/// not said in between (a flood is said again while it goes on, not once per process).
const SAY_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// A client that has not sent a request's whole head this long after the connection became
/// ready for one (new, or idle between requests) is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection takes new requests; the answer in progress then gets as long
/// again before the connection is closed.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Bytes of answers held at once, over every connection: an answer stays in memory until its
/// client has read it, and 250 clients asking for `limit=1000` (750 KiB each) and never
/// reading held 380 MB. An answer that does not fit is refused with 503 and `Retry-After`.
pub const ANSWER_BYTES_IN_FLIGHT: usize = 32 << 20;

/// The budget [`ANSWER_BYTES_IN_FLIGHT`] counts down, in KiB (a permit each).
static ANSWER_KIB: Semaphore = Semaphore::const_new(ANSWER_BYTES_IN_FLIGHT >> 10);

/// Bytes of an answer handed to hyper at a time: hyper asks for the next piece only as its
/// write buffer drains, so an answer a client does not read stays here, counted, rather than
/// all in hyper's buffer, uncounted (one piece of the whole answer was taken at once and
/// gave its share back before the client had read a byte).
const ANSWER_PIECE: usize = 64 << 10;

/// An answer's body, handed out `ANSWER_PIECE` at a time, holding its share of
/// [`ANSWER_BYTES_IN_FLIGHT`] until its last piece is taken (or its connection ends).
pub struct Budgeted {
    rest: Bytes,
    held: Option<tokio::sync::SemaphorePermit<'static>>,
}

impl hyper::body::Body for Budgeted {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            this.held = None;
            return std::task::Poll::Ready(None);
        }
        let piece = this.rest.split_to(this.rest.len().min(ANSWER_PIECE));
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// `answer` with its body's share of `budget` taken, or 503 when the budget is spent; `None`:
/// not counted (health, readiness and the daemon's metrics: small, and a probe must never be
/// told busy because someone's large answers are stalled).
async fn budgeted(
    budget: Option<&'static Semaphore>,
    answer: Response<Full<Bytes>>,
) -> Response<Budgeted> {
    use http_body_util::BodyExt;
    let (parts, body) = answer.into_parts();
    let rest = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    let Some(budget) = budget else {
        return Response::from_parts(parts, Budgeted { rest, held: None });
    };
    // One answer past the whole budget takes all of it: served alone, not never.
    let kib = rest.len().div_ceil(1024).min(ANSWER_BYTES_IN_FLIGHT >> 10) as u32;
    match budget.try_acquire_many(kib) {
        Ok(held) => Response::from_parts(
            parts,
            Budgeted {
                rest,
                held: Some(held),
            },
        ),
        Err(_) => {
            let busy = format!(
                "busy: {} MiB of answers are waiting for their clients to read them; retry\n",
                ANSWER_BYTES_IN_FLIGHT >> 20
            );
            let mut r = Response::new(Budgeted {
                rest: Bytes::from(busy),
                held: None,
            });
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("5"),
            );
            r
        }
    }
}

/// The connections being served, oldest first.
#[derive(Default)]
struct Connections {
    next: u64,
    open: BTreeMap<u64, Connection>,
}

struct Connection {
    peer: PeerGroup,
    /// Requests being worked on now (holding a query or report slot, see [`InProgress`]):
    /// while not zero it is not closed for another.
    busy: Arc<AtomicUsize>,
    close: CancellationToken,
}

/// What [`Connections::admit`] did to make room.
#[derive(Debug, PartialEq)]
enum Made {
    /// Nothing was needed.
    Nothing,
    /// Closed the peer's oldest connection with no request being worked on, at its cap.
    ClosedPeers,
    /// Closed the oldest connection with no request being worked on, at the endpoint's cap.
    ClosedOldest,
}

/// A new connection's place: its id, its count of requests in progress and its closing token.
type Admitted = (u64, Arc<AtomicUsize>, CancellationToken, Made);

impl Connections {
    /// Takes a new connection from `peer`, closing another that has no request being worked
    /// on (silent, idle between requests, or waiting) when a cap is reached; `None` (refused)
    /// when every one in the way is being worked on. The per-peer cap counts `peer`'s group.
    fn admit(&mut self, peer: IpAddr, per_peer: usize, max: usize) -> Option<Admitted> {
        let peer = PeerGroup::of(peer);
        let mut made = Made::Nothing;
        if self.open.values().filter(|c| c.peer == peer).count() >= per_peer {
            self.close_oldest_silent(|c| c.peer == peer)?;
            made = Made::ClosedPeers;
        }
        if self.open.len() >= max {
            self.close_oldest_silent(|_| true)?;
            made = Made::ClosedOldest;
        }
        let id = self.next;
        self.next += 1;
        let (busy, close) = (Arc::new(AtomicUsize::new(0)), CancellationToken::new());
        let c = Connection {
            peer,
            busy: busy.clone(),
            close: close.clone(),
        };
        self.open.insert(id, c);
        Some((id, busy, close, made))
    }

    /// Closes the oldest connection `of` that has no request being worked on.
    fn close_oldest_silent(&mut self, of: impl Fn(&Connection) -> bool) -> Option<()> {
        let (&id, _) = self
            .open
            .iter()
            .find(|(_, c)| of(c) && c.busy.load(Ordering::Acquire) == 0)?;
        let c = self.open.remove(&id)?;
        c.close.cancel();
        Some(())
    }
}

/// A connection's place in [`Connections`], given back when its task ends.
struct Slot {
    connections: Arc<Mutex<Connections>>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut c) = self.connections.lock() {
            c.open.remove(&self.id);
        }
    }
}

/// One request being worked on, counted in its connection's [`Connection::busy`] from when it
/// holds a query or report slot until its answer is made (or the request dropped). Not from
/// when its head came: a request waits for a slot, or (pipelined) for the answers before it
/// to be read, as long as its client likes, and 256 clients pipelining `/api/runs` and never
/// reading held every connection "in progress" for their whole lifetime, refusing
/// `/healthz` to everyone else.
struct InProgress(Arc<AtomicUsize>);

impl InProgress {
    fn new(busy: &Arc<AtomicUsize>) -> Self {
        busy.fetch_add(1, Ordering::AcqRel);
        Self(busy.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// When a message repeated by a flood is said: the first time, then at most once per
/// [`SAY_AGAIN_AFTER`], with how many went unsaid in between.
#[derive(Default)]
struct Said {
    last: Option<Instant>,
    unsaid: u64,
}

impl Said {
    /// `Some(unsaid since the last time)` when it is to be said at `now`.
    fn due(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < SAY_AGAIN_AFTER => {
                self.unsaid += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.unsaid))
            }
        }
    }
}

/// ` (N more since it was last said)`, or nothing.
fn more_since(unsaid: u64) -> String {
    match unsaid {
        0 => String::new(),
        n => format!(" ({n} more since this was last said)"),
    }
}

/// Serves the endpoint until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<StatusMetrics>,
    history: Arc<History>,
    stop: CancellationToken,
) {
    let connections = Arc::new(Mutex::new(Connections::default()));
    let (mut refused, mut closed) = (Said::default(), Said::default());
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors, say: accept fails at once until one is freed, so
                    // wait rather than spin a core.
                    tracing::debug!("status endpoint accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let admitted =
            connections
                .lock()
                .unwrap()
                .admit(peer.ip(), MAX_CONNECTIONS_PER_PEER, MAX_CONNECTIONS);
        let group = PeerGroup::of(peer.ip());
        let Some((id, busy, close, made)) = admitted else {
            if let Some(unsaid) = refused.due(Instant::now()) {
                tracing::warn!(
                    "status endpoint: {MAX_CONNECTIONS} connections open (or \
                     {MAX_CONNECTIONS_PER_PEER} from {group}), each with a request being \
                     worked on: closed a new one from {}{}",
                    peer.ip(),
                    more_since(unsaid)
                );
            }
            continue;
        };
        if made != Made::Nothing {
            if let Some(unsaid) = closed.due(Instant::now()) {
                let full = match made {
                    Made::ClosedPeers => format!("{MAX_CONNECTIONS_PER_PEER} from {group}"),
                    _ => MAX_CONNECTIONS.to_string(),
                };
                tracing::warn!(
                    "status endpoint: {full} connections open: closed the oldest that had \
                     sent no request or had none being worked on (idle, waiting for a slot, \
                     or its client not reading), for a new one from {}{}",
                    peer.ip(),
                    more_since(unsaid)
                );
            }
        }
        let slot = Slot {
            connections: connections.clone(),
            id,
        };
        let (metrics, history) = (metrics.clone(), history.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let svc = hyper::service::service_fn(move |req| {
                let (metrics, history, busy) = (metrics.clone(), history.clone(), busy.clone());
                async move {
                    // A report reads files and draws charts: made off the async threads.
                    let report = (req.method() == Method::GET)
                        .then(|| report_id(req.uri().path()))
                        .flatten();
                    let exempt = matches!(req.uri().path(), "/healthz" | "/readyz" | "/metrics");
                    let answer = match report {
                        Some(id) => page::report(history, id, &busy).await,
                        None => answer(req, metrics, history, &busy).await,
                    };
                    let budget = (!exempt).then_some(&ANSWER_KIB);
                    Ok::<_, std::convert::Infallible>(budgeted(budget, answer).await)
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let serving = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(io, svc);
            tokio::pin!(serving);
            // A client that stops reading its answers would hold its slot for ever (hyper
            // has no write timeout): a connection gets a lifetime, then ends after the
            // answer in progress (a report may wait behind others), within a grace.
            tokio::select! {
                _ = serving.as_mut() => {}
                // Closed for a newer one while it had no request being worked on: a request
                // that came just before is still answered if it can be within the grace (one
                // waiting for a slot, or for its client to read, is cut), an idle connection
                // closes at once.
                _ = close.cancelled() => {
                    serving.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(EVICTION_GRACE, serving).await;
                }
                _ = tokio::time::sleep(CONNECTION_LIFETIME) => {
                    serving.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CONNECTION_LIFETIME, serving).await;
                }
            }
        });
    }
}

/// Binds the listen address, naming it on failure.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    use anyhow::Context;
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("status endpoint: cannot listen on {addr}"))
}

/// Queries of the history answered at once: each reads and parses up to
/// [`MAX_RUNS_LISTED`] summaries, off the async threads, so a burst of them queues rather
/// than holding the runtime (and the history the scheduler writes to).
static QUERIES: Semaphore = Semaphore::const_new(4);

/// The most runs one `/api/runs` lists.
const MAX_RUNS_LISTED: usize = 1_000;

/// [`route`]: the routes that read the history (the page, `/api/runs…`) on a blocking
/// thread, a few at a time; health, readiness and `/metrics` at once, never queued behind
/// them (a watchdog or a scrape must not wait on someone's `limit=1000`). Its connection is
/// `busy` (not closed for a newer one) only while the query holds its slot.
async fn answer(
    req: Request<Incoming>,
    metrics: Arc<StatusMetrics>,
    history: Arc<History>,
    busy: &Arc<AtomicUsize>,
) -> Response<Full<Bytes>> {
    if matches!(req.uri().path(), "/healthz" | "/readyz" | "/metrics") {
        return route(req, &metrics, &history);
    }
    // Held by the blocking work itself: a client that hangs up drops this future, and the
    // permit with it, while the query goes on.
    let permit = QUERIES.acquire().await;
    let _working = InProgress::new(busy);
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        route(req, &metrics, &history)
    })
    .await
    .unwrap_or_else(|e| text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")))
}

fn route(
    req: Request<Incoming>,
    metrics: &StatusMetrics,
    history: &History,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
    }
    let path = req.uri().path();
    match path {
        "/" => page::status(metrics, history),
        "/healthz" => match metrics.unhealthy() {
            why if why.is_empty() => text(StatusCode::OK, "ok\n"),
            why => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("unhealthy: {}\n", why.join("; ")),
            ),
        },
        "/readyz" if metrics.is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/metrics" => {
            let mut r = text(StatusCode::OK, &metrics.render());
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/api/runs" => {
            let (workload, limit) = match RunsQuery::parse(req.uri().query().unwrap_or("")) {
                Ok(q) => (q.workload, q.limit),
                Err(e) => return json_response(StatusCode::BAD_REQUEST, &e),
            };
            match history.recent(workload.as_deref(), limit) {
                // With /healthz's reasons: while the history cannot be written its runs are
                // not the newest, and a client must not take them for the latest.
                Ok(rows) => json_response(
                    StatusCode::OK,
                    &json!({
                        "unhealthy": metrics.unhealthy(),
                        // When each workload's next run is due, Unix ms (before jitter).
                        "next_run_unix_ms": metrics.next_runs(),
                        "runs": rows.iter().map(RunBrief::from).collect::<Vec<_>>(),
                    }),
                ),
                Err(e) => json_error(e),
            }
        }
        _ => match path.strip_prefix("/api/runs/") {
            Some(id) => match history.get(&canary_core::percent_decode(id)) {
                Ok(Some(row)) => {
                    let mut v = json!(RunBrief::from(&row));
                    v["comparison"] = json!(row.run.comparison);
                    v["summary"] = json!(row.summary);
                    json_response(StatusCode::OK, &v)
                }
                Ok(None) => json_response(
                    StatusCode::NOT_FOUND,
                    &json!({ "error": format!("no run {id:?}") }),
                ),
                Err(e) => json_error(e),
            },
            None => text(
                StatusCode::NOT_FOUND,
                "routes: / /runs/{id}/report /healthz /readyz /metrics /api/runs /api/runs/{id}\n",
            ),
        },
    }
}

/// What `/api/runs` was asked for: `workload` (any name; one with no runs, configured or
/// not, lists none) and `limit` (1 to [`MAX_RUNS_LISTED`], 100 when not given).
#[derive(Debug, PartialEq)]
struct RunsQuery {
    workload: Option<String>,
    limit: usize,
}

impl RunsQuery {
    /// Reads a query string; a parameter it does not take, one given twice or without a
    /// value, an empty `workload` or a `limit` that is not a whole number in its range is a
    /// JSON error naming the parameter and what it accepts (a client's typo or nonsense was
    /// answered with the default list, as if asked for it).
    fn parse(query: &str) -> Result<RunsQuery, Value> {
        let bad = |parameter: &str, accepted: &str, error: String| json!({ "error": error, "parameter": parameter, "accepted": accepted });
        let limit_range = format!("a whole number from 1 to {MAX_RUNS_LISTED} (default 100)");
        let mut given: BTreeMap<String, String> = BTreeMap::new();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = match kv.split_once('=') {
                Some((k, v)) => (percent_decode(k), Some(percent_decode(v))),
                None => (percent_decode(kv), None),
            };
            let accepted = match k.as_str() {
                "limit" => limit_range.as_str(),
                "workload" => "a workload's name",
                _ => {
                    return Err(bad(
                        &k,
                        "workload, limit",
                        format!("/api/runs takes workload and limit, not {k:?}"),
                    ))
                }
            };
            let Some(v) = v else {
                return Err(bad(
                    &k,
                    accepted,
                    format!("{k}: no value (want {accepted})"),
                ));
            };
            if given.insert(k.clone(), v).is_some() {
                return Err(bad(
                    &k,
                    accepted,
                    format!("{k}: given twice (want {accepted}, once)"),
                ));
            }
        }
        let limit = match given.get("limit") {
            None => 100,
            Some(l) => match l.parse::<usize>() {
                Ok(n) if (1..=MAX_RUNS_LISTED).contains(&n) => n,
                _ => {
                    return Err(bad(
                        "limit",
                        &limit_range,
                        format!("limit: {l:?} is not {limit_range}"),
                    ))
                }
            },
        };
        let workload = given.remove("workload");
        if workload.as_deref() == Some("") {
            return Err(bad(
                "workload",
                "a workload's name",
                "workload: empty (a workload's name, or leave it out for all)".into(),
            ));
        }
        Ok(RunsQuery { workload, limit })
    }
}

/// The run id of `/runs/{id}/report`.
fn report_id(path: &str) -> Option<String> {
    let id = path.strip_prefix("/runs/")?.strip_suffix("/report")?;
    // A path segment: `+` is a plus here, not a space (that is a query's rule).
    (!id.is_empty() && !id.contains('/')).then(|| canary_core::percent_decode(id))
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<Full<Bytes>> {
    // Compact: a thousand runs pretty-printed were twice the bytes to hold for a client.
    let mut r = text(status, &serde_json::to_string(v).unwrap_or_default());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn json_error(e: anyhow::Error) -> Response<Full<Bytes>> {
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({ "error": format!("{e:#}") }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// At a peer's cap its oldest connection with no request being worked on is closed for the
    /// new one, at the endpoint's cap the oldest such of anyone's, and a new one is refused
    /// only when every connection in its way has a request being worked on; one whose request is
    /// done is closable again.
    #[test]
    fn a_new_connection_closes_the_oldest_silent_one_at_a_cap() {
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        let mut c = Connections::default();
        let mut tokens = Vec::new();
        for n in 0..4 {
            let (id, busy, close, made) = c.admit(ip(1), 2, 5).unwrap();
            assert_eq!(id, n);
            assert_eq!(
                made,
                if n < 2 {
                    Made::Nothing
                } else {
                    Made::ClosedPeers
                }
            );
            tokens.push((busy, close));
        }
        // Peer 1's two oldest were closed for its two newest.
        let closed: Vec<bool> = tokens.iter().map(|(_, t)| t.is_cancelled()).collect();
        assert_eq!(closed, [true, true, false, false]);
        // Peer 1's connection 2 has a request in progress: at peer 1's cap, 3 goes, never 2.
        let request = InProgress::new(&tokens[2].0);
        let (_, _, _, made) = c.admit(ip(1), 2, 5).unwrap();
        assert_eq!(made, Made::ClosedPeers);
        assert!(!tokens[2].1.is_cancelled() && tokens[3].1.is_cancelled());
        // Three more peers fill the endpoint (5); the next closes the oldest silent one
        // of anyone's: peer 1's connection 4.
        for n in 2..5 {
            assert_eq!(c.admit(ip(n), 2, 5).unwrap().3, Made::Nothing);
        }
        assert_eq!(c.open.len(), 5);
        let (id, busy, ..) = c.admit(ip(9), 2, 5).unwrap();
        assert_eq!(c.admit(ip(9), 2, 5).unwrap().3, Made::ClosedOldest);
        assert!(!c.open.contains_key(&4) && c.open.contains_key(&2));
        // Every one with a request in progress: refused.
        let _mine = InProgress::new(&busy);
        let requests: Vec<_> = c.open.values().map(|c| InProgress::new(&c.busy)).collect();
        assert!(c.admit(ip(9), 2, 5).is_none());
        assert!(c.admit(ip(7), 2, 5).is_none());
        assert!(c.open.contains_key(&id));
        // Connection 2's requests are done (idle between requests): it is the oldest to go.
        drop(request);
        drop(requests);
        assert_eq!(c.admit(ip(7), 2, 5).unwrap().3, Made::ClosedOldest);
        assert!(!c.open.contains_key(&2) && tokens[2].1.is_cancelled());
    }

    /// Fresh addresses of one IPv6 /64 share one per-peer cap: the /64's third connection
    /// closes its oldest, whichever address each came from; the next /64 has its own cap;
    /// an IPv4-mapped address counts with the IPv4 address it carries.
    #[test]
    fn the_per_peer_cap_counts_an_ipv6_64_and_mapped_ipv4_as_one_peer() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let mut c = Connections::default();
        let first = c.admit(ip("2001:db8:0:1::1"), 2, 100).unwrap();
        assert_eq!(
            c.admit(ip("2001:db8:0:1::2"), 2, 100).unwrap().3,
            Made::Nothing
        );
        let third = c.admit(ip("2001:db8:0:1:abcd::3"), 2, 100).unwrap();
        assert_eq!(third.3, Made::ClosedPeers);
        assert!(first.2.is_cancelled());
        assert_eq!(
            c.admit(ip("2001:db8:0:2::1"), 2, 100).unwrap().3,
            Made::Nothing
        );
        assert_eq!(
            c.admit(ip("2001:db8:0:2::2"), 2, 100).unwrap().3,
            Made::Nothing
        );
        // IPv4, plain and as a dual-stack listener sees it: one peer.
        assert_eq!(c.admit(ip("10.0.0.1"), 2, 100).unwrap().3, Made::Nothing);
        assert_eq!(
            c.admit(ip("::ffff:10.0.0.1"), 2, 100).unwrap().3,
            Made::Nothing
        );
        assert_eq!(
            c.admit(ip("10.0.0.1"), 2, 100).unwrap().3,
            Made::ClosedPeers
        );
        assert_eq!(c.admit(ip("10.0.0.2"), 2, 100).unwrap().3, Made::Nothing);
        // With every connection of the /64 busy, a new address of it is refused.
        let busy: Vec<_> = c
            .open
            .values()
            .filter(|c| c.peer.to_string() == "2001:db8:0:1::/64")
            .map(|c| InProgress::new(&c.busy))
            .collect();
        assert_eq!(busy.len(), 2);
        assert!(c.admit(ip("2001:db8:0:1::99"), 2, 100).is_none());
    }

    /// A flood's message is said at once, then at most once per minute with the count of
    /// those not said, never just once per process.
    #[test]
    fn a_repeated_refusal_is_said_again_with_what_went_unsaid() {
        let t0 = Instant::now();
        let mut said = Said::default();
        assert_eq!(said.due(t0), Some(0));
        assert_eq!(said.due(t0 + Duration::from_secs(1)), None);
        assert_eq!(said.due(t0 + Duration::from_secs(59)), None);
        assert_eq!(said.due(t0 + SAY_AGAIN_AFTER), Some(2));
        assert_eq!(said.due(t0 + SAY_AGAIN_AFTER * 3), Some(0));
    }

    /// `/healthz` over a real socket: 200 until the daemon is unhealthy, then 503 with why.
    #[tokio::test]
    async fn healthz_says_why_the_daemon_is_unhealthy() {
        let dir = tempfile::tempdir().unwrap();
        let history = Arc::new(History::open(&dir.path().join("history.sqlite")).unwrap());
        let metrics = Arc::new(StatusMetrics::default());
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, metrics.clone(), history, stop.clone()));
        let get = || async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).await.unwrap();
            reply
        };
        let ok = get().await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok\n"),
            "{ok}"
        );
        metrics.set_unhealthy("the scheduler of workload w ended (panicked: x)".into());
        let bad = get().await;
        assert!(bad.starts_with("HTTP/1.1 503"), "{bad}");
        assert!(
            bad.ends_with("unhealthy: the scheduler of workload w ended (panicked: x)\n"),
            "{bad}"
        );
        metrics.clear_unhealthy();
        assert!(get().await.starts_with("HTTP/1.1 200"));
        stop.cancel();
        server.await.unwrap();
    }

    /// Keep-alive connections idle between requests cannot lock a probe out: with as many
    /// connections open from one address as it may hold, each having made a request and read
    /// its answer (then idle, kept alive), a new connection's `GET /healthz` is answered 200,
    /// and the oldest idle one is closed for it.
    #[tokio::test]
    async fn idle_keep_alive_connections_cannot_lock_a_probe_out() {
        let dir = tempfile::tempdir().unwrap();
        let history = Arc::new(History::open(&dir.path().join("history.sqlite")).unwrap());
        let metrics = Arc::new(StatusMetrics::default());
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, metrics, history, stop.clone()));
        const ASK: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_PEER {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(ASK).await.unwrap();
            // The whole answer (it ends with its 3-byte body), the connection kept alive.
            let mut reply = Vec::new();
            let mut buf = [0u8; 512];
            while !reply.ends_with(b"\r\n\r\nok\n") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed: {}", String::from_utf8_lossy(&reply));
                reply.extend_from_slice(&buf[..n]);
            }
            assert!(reply.starts_with(b"HTTP/1.1 200"));
            idle.push(s);
        }
        let mut probe = tokio::net::TcpStream::connect(addr).await.unwrap();
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        probe.read_to_string(&mut reply).await.unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with("ok\n"),
            "probe not answered: {reply:?}"
        );
        // The oldest idle one was closed for it (end of stream, no answer).
        let mut rest = Vec::new();
        idle[0].read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
        stop.cancel();
        server.await.unwrap();
    }

    /// Answers that clients do not read hold their share of the budget until read, through
    /// hyper as served: two stalled 16 MiB answers (more than loopback's socket buffers take)
    /// fill a 32 MiB budget and the third request is told 503 with Retry-After; once a stalled
    /// client goes, its share comes back and the next answer is served whole.
    #[tokio::test]
    async fn answers_clients_do_not_read_hold_their_share_until_they_go() {
        static BUDGET: Semaphore = Semaphore::const_new(ANSWER_BYTES_IN_FLIGHT >> 10);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|_req| async {
                        let big = text(StatusCode::OK, &"x".repeat(16 << 20));
                        Ok::<_, std::convert::Infallible>(budgeted(Some(&BUDGET), big).await)
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        });
        let ask = || async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            s
        };
        let stalled = [ask().await, ask().await];
        // Wait (not a timing assertion) until both answers took their shares.
        let since = std::time::Instant::now();
        while BUDGET.available_permits() > 0 {
            assert!(since.elapsed() < Duration::from_secs(30), "never taken");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut third = ask().await;
        let mut head = [0u8; 12];
        third.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 503");
        let mut rest = vec![0u8; 512];
        let n = third.read(&mut rest).await.unwrap();
        let rest = String::from_utf8_lossy(&rest[..n]).to_ascii_lowercase();
        assert!(rest.contains("retry-after: 5"), "{rest}");
        drop(stalled);
        let since = std::time::Instant::now();
        while BUDGET.available_permits() < ANSWER_BYTES_IN_FLIGHT >> 10 {
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "never given back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut fourth = ask().await;
        let mut answer = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        while answer.len() < 16 << 20 {
            let n = fourth.read(&mut buf).await.unwrap();
            assert!(n > 0, "cut short at {} bytes", answer.len());
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200"));
    }

    #[test]
    fn query_components_are_percent_decoded() {
        use super::percent_decode as d;
        assert_eq!(d("chat%20peak"), "chat peak");
        assert_eq!(d("a+b"), "a b");
        assert_eq!(d("caf%C3%A9"), "café");
        assert_eq!(d("100%"), "100%");
        assert_eq!(d("%zz"), "%zz");
    }

    #[test]
    fn report_paths_name_one_run() {
        use super::report_id as r;
        assert_eq!(
            r("/runs/20260101T000002Z-2/report").as_deref(),
            Some("20260101T000002Z-2")
        );
        assert_eq!(r("/runs/a%20b/report").as_deref(), Some("a b"));
        assert_eq!(r("/runs/a+b/report").as_deref(), Some("a+b"));
        assert_eq!(r("/runs//report"), None);
        assert_eq!(r("/runs/a/b/report"), None);
        assert_eq!(r("/runs/a"), None);
    }
}
