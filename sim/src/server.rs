//! The listener, the per-connection loop and the non-generation routes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::Context as _;
use canary_core::MonoTime;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::chunk;
use crate::config::Config;
use crate::engine::Engine;
use crate::generate;
use crate::http::{self, respond, Conn, HeadRead, ReadError, RequestHead, Timeouts};
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::openai::Api;
use crate::profile::ProfilePatch;
use crate::shared::{Next, Shared};
use crate::truth::{TruthRecord, TruthStore};
use crate::wire_arrival::{Enable, KernelClock};
use truth_page::TruthQuery;

/// A bound, not yet running, simulated server.
pub struct Sim {
    listener: TcpListener,
    shared: Arc<Shared>,
    engine: Engine,
}

impl Sim {
    /// Binds the listener and builds the engine; nothing runs until [`Sim::run`].
    pub async fn bind(config: Config) -> anyhow::Result<Sim> {
        Sim::bind_with(config, canary_rxstamp::enable).await
    }

    /// [`Sim::bind`], turning kernel receive stamps on with `enable` (a seam: tests refuse).
    pub(crate) async fn bind_with(config: Config, enable: Enable) -> anyhow::Result<Sim> {
        let listener =
            listen(config.addr).with_context(|| format!("canary-sim: binding {}", config.addr))?;
        let kernel_clock = KernelClock::enable(&listener, enable).await;
        let metrics = Arc::new(Metrics::new(&config.model));
        let (engine, handle) = Engine::new(
            config.profile.clone(),
            config.block_size,
            config.cache_blocks,
            metrics.clone(),
        );
        let truth = TruthStore::new(config.truth_capacity, config.truth_log.as_deref())
            .with_context(|| match &config.truth_log {
                Some(p) => format!("--truth-log {}: cannot open", p.display()),
                None => "truth store".into(),
            })?;
        let identity = Identity::new(&config.model, config.max_model_len, config.engine_version);
        let shared = Arc::new(Shared {
            model: config.model,
            engine: handle,
            metrics,
            truth,
            faults: config.faults,
            reasoning_tokens: config.reasoning_tokens,
            block_size: config.block_size,
            authorization: config.api_key.map(|k| format!("Bearer {k}")),
            identity,
            seq: AtomicU64::new(0),
            gen_index: AtomicU64::new(0),
            kernel_clock,
            timeouts: Timeouts {
                idle: config.idle_timeout,
                write: config.write_timeout,
            },
            body_budget: http::BodyBudget::new(config.body_budget),
        });
        Ok(Sim {
            listener,
            shared,
            engine,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Serves until `shutdown` is cancelled, then drops open connections and flushes the truth
    /// log.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Sim {
            listener,
            shared,
            engine,
        } = self;
        let mut tasks = JoinSet::new();
        tasks.spawn(engine.run());
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let mut accept_failures = AcceptFailures::default();
        let result = loop {
            // A connection past the cap waits in the listen backlog until one closes.
            let accept = async {
                let slot = slots.clone().acquire_owned().await;
                (listener.accept().await, slot)
            };
            tokio::select! {
                _ = shutdown.cancelled() => break Ok(()),
                (accepted, slot) = accept => match accepted {
                    Ok((stream, _)) => {
                        let shared = shared.clone();
                        tasks.spawn(async move {
                            serve_conn(shared, stream).await;
                            drop(slot);
                        });
                    }
                    // Out of file descriptors and the like: log and keep serving.
                    Err(e) => {
                        if let Some(line) = accept_failures.failed(std::time::Instant::now(), &e) {
                            tracing::warn!("canary-sim: {line}");
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                },
                // Reap finished connection tasks so the set does not grow.
                Some(_) = tasks.join_next(), if tasks.len() > 1 => {}
            }
        };
        tasks.shutdown().await;
        let s = shared.clone();
        tokio::task::spawn_blocking(move || s.truth.close()).await?;
        result
    }
}

/// Failed accepts, logged without a line per try (out of file descriptors, the loop tries
/// every 10 ms while clients hold them): the first at once, then at most one line per
/// [`AcceptFailures::EVERY`] with the count since the last.
#[derive(Debug, Default)]
struct AcceptFailures {
    last_logged: Option<std::time::Instant>,
    unlogged: u64,
}

impl AcceptFailures {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    /// Notes a failure at `now`; the line to log, if one is due.
    fn failed(&mut self, now: std::time::Instant, e: &std::io::Error) -> Option<String> {
        self.unlogged += 1;
        if self
            .last_logged
            .is_some_and(|t| now.duration_since(t) < Self::EVERY)
        {
            return None;
        }
        let n = std::mem::take(&mut self.unlogged);
        let line = match self.last_logged.replace(now) {
            Some(_) if n > 1 => format!(
                "accept failed {n} times since the last such line (the latest: {e}); \
                 the sim goes on trying"
            ),
            _ => format!(
                "accept failed: {e} (the sim goes on trying; more failures are counted, one \
                 line per {}s)",
                Self::EVERY.as_secs()
            ),
        };
        Some(line)
    }
}

/// Connections served at once: each holds a task, a socket, an input buffer and the body it
/// is reading (all bodies together bounded by [`crate::Config::body_budget`]).
pub const MAX_CONNECTIONS: usize = 16_384;

/// Listen backlog: the kernel caps it at `net.core.somaxconn` (4096 by default). tokio's
/// `TcpListener::bind` asks for 128: a burst of new connections while the host starves the
/// accept loop then loses SYNs, and each lost SYN costs the client a 1 s+ retransmit.
const BACKLOG: u32 = 4096;

fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

async fn serve_conn(shared: Arc<Shared>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut conn = Conn::new(stream, shared.kernel_clock.on(), shared.timeouts);
    loop {
        let HeadRead {
            head,
            parsed: arrival,
            first_byte_realtime_ns,
        } = match conn.read_head().await {
            Ok(Some(x)) => x,
            Ok(None) => return,
            Err(e) => {
                // A generation request whose head was refused still gets its record, when its
                // request line reads and, with a key, the key is there.
                let rec = conn
                    .refused_head()
                    .filter(|h| generation(h).is_some() && authorized(&shared, h))
                    .map(|h| new_record(&shared, &h, MonoTime::now(), None));
                return bad_input(&shared, &mut conn, e, None, rec).await;
            }
        };
        let mut rec = new_record(&shared, &head, arrival, first_byte_realtime_ns);
        // Before the body: a client without the key must not make the sim buffer one.
        if !authorized(&shared, &head) {
            return unauthorized(&mut conn, &head).await;
        }
        let generation = generation(&head);
        let max_body = match generation {
            Some(_) => http::MAX_BODY,
            None => http::MAX_OTHER_BODY,
        };
        let body = match conn.read_body(&head, max_body, &shared.body_budget).await {
            Ok(b) => b,
            Err(e) => {
                let rec = generation.is_some().then_some(rec);
                return bad_input(&shared, &mut conn, e, Some(&head), rec).await;
            }
        };
        rec.body_received_ns = MonoTime::now().as_nanos();
        let next = match generation {
            Some(api) => {
                let next = generate::serve(&shared, &mut conn, &head, body, &mut rec, api).await;
                shared.truth.push(rec);
                next
            }
            None => route(&shared, &mut conn, &head, &body).await,
        };
        match next {
            Next::Continue => {}
            Next::Close => {
                let _ = conn.stream.shutdown().await;
                return;
            }
            Next::CloseAfter(ms) => {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                let _ = conn.stream.shutdown().await;
                return;
            }
            Next::Reset => return,
        }
    }
}

/// The generation API `head` asks for, if any.
fn generation(head: &RequestHead) -> Option<Api> {
    match (head.method.as_str(), head.path.as_str()) {
        ("POST", "/v1/chat/completions") => Some(Api::Chat),
        ("POST", "/v1/completions") => Some(Api::Completions),
        _ => None,
    }
}

/// The truth record of a request whose head was read at `arrival` (or refused then), with its
/// sequence number.
fn new_record(
    shared: &Shared,
    head: &RequestHead,
    arrival: MonoTime,
    first_byte_realtime_ns: Option<u64>,
) -> TruthRecord {
    TruthRecord {
        seq: shared.seq.fetch_add(1, Relaxed) + 1,
        method: head.method.clone(),
        path: head.path.clone(),
        request_id: head.header("x-request-id").map(str::to_owned),
        traceparent: head.header("traceparent").map(str::to_owned),
        arrival_ns: arrival.as_nanos(),
        arrival_kernel_ns: first_byte_realtime_ns
            .and_then(|rt| shared.kernel_clock.to_mono(rt, arrival)),
        ..Default::default()
    }
}

/// Whether `head` may be served: with an API key configured, what vLLM guards (`/v1/*`), the
/// sim's own switches (`POST /sim/*`: a key-holder's sim is not re-shaped by whoever else
/// reaches its port) and the ground truth (`/sim/truth`: the key-holder's request ids,
/// traceparents and errors) need it.
fn authorized(shared: &Shared, head: &RequestHead) -> bool {
    let Some(want) = &shared.authorization else {
        return true;
    };
    let guarded = head.path.starts_with("/v1/")
        || (head.method == "POST" && head.path.starts_with("/sim/"))
        || head.path == "/sim/truth";
    !guarded || head.header("authorization") == Some(want)
}

/// Answers 401 to a request whose body has not been read, and closes: reading it first would
/// let a client without the key make the sim buffer up to 64 MiB per connection. What still
/// comes of the body is read and dropped for a while (see [`Conn::discard_body`]).
async fn unauthorized(conn: &mut Conn, head: &RequestHead) {
    let body = chunk::error_body(401, "missing or wrong API key");
    let json = "application/json";
    if respond(conn, 401, json, body.as_bytes(), false, &[])
        .await
        .is_ok()
    {
        let _ = conn.stream.shutdown().await;
        conn.discard_body(head).await;
    }
}

/// Answers a request that could not be read, then closes, reading and dropping for a while
/// what the client still sends (its body, or the rest of a head too large): the client then
/// reads the answer rather than a reset (see [`Conn::discard_body`]). `rec`, a generation
/// request's record, gets the answer (or the client's leaving) and goes to the truth.
async fn bad_input(
    shared: &Shared,
    conn: &mut Conn,
    e: ReadError,
    head: Option<&RequestHead>,
    rec: Option<TruthRecord>,
) {
    // A client that timed out sends nothing more to wait for.
    let linger = !matches!(e, ReadError::Timeout(_));
    let gone = |mut rec: TruthRecord, why: String| {
        let now = MonoTime::now().as_nanos();
        rec.error = Some(why);
        rec.end_ns = now;
        rec.disconnected = true;
        rec.disconnect_ns = Some(now);
        shared.truth.push(rec);
    };
    let (status, msg) = match e {
        ReadError::Io(_) | ReadError::Truncated => {
            if let Some(rec) = rec {
                gone(rec, e.to_string());
            }
            return;
        }
        ReadError::Bad(m) => (400, m),
        ReadError::Status(s, m) => (s, m),
        ReadError::Timeout(_) => (408, e.to_string()),
    };
    let body = chunk::error_body(status, &msg);
    let json = "application/json";
    let written = respond(conn, status, json, body.as_bytes(), false, &[]).await;
    match (written, rec) {
        (Err(e), Some(rec)) => {
            return gone(rec, format!("{msg}; the answer was not written: {e}"));
        }
        (Err(_), None) => return,
        (Ok(t), Some(mut rec)) => {
            rec.status = status;
            rec.error = Some(msg);
            rec.first_byte_ns = Some(t);
            rec.end_ns = t;
            shared.truth.push(rec);
        }
        (Ok(_), None) => {}
    }
    let _ = conn.stream.shutdown().await;
    match head {
        _ if !linger => {}
        Some(head) => conn.discard_body(head).await,
        // How much more is coming is not known: until the client closes, or LINGER.
        None => conn.discard(usize::MAX).await,
    }
}

/// Everything but generation: models, health, metrics, truth, profile.
async fn route(shared: &Shared, conn: &mut Conn, head: &RequestHead, body: &[u8]) -> Next {
    let keep = head.keep_alive;
    let json = "application/json";
    let mut extra = Vec::new();
    // HEAD is GET without the body (RFC 9110 §9.3.2), as vLLM's Starlette answers it: a body
    // after a HEAD's answer would be read as the next response.
    let is_head = head.method == "HEAD";
    let method = if is_head { "GET" } else { head.method.as_str() };
    let (status, ctype, out): (u16, &str, Vec<u8>) = match (method, head.path.as_str()) {
        ("GET", "/v1/models") => {
            let profile = shared.engine.profile();
            (200, json, shared.identity.models(&profile))
        }
        ("GET", "/version") => (200, json, shared.identity.version()),
        ("POST", "/sim/version") => match shared.identity.set_version(body) {
            Ok(out) => (200, json, out),
            Err(m) => (400, json, chunk::error_body(400, &m).into_bytes()),
        },
        ("GET", "/health") => (200, "text/plain", Vec::new()),
        ("GET", "/metrics") => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            shared.metrics.render().into_bytes(),
        ),
        ("GET", "/sim/truth") => match TruthQuery::parse(head.query.as_deref()) {
            Ok(q) => {
                let (out, more) = truth_page::render(&shared.truth, q);
                extra.push(("x-sim-truth-more", if more { "true" } else { "false" }));
                (200, "application/x-ndjson", out)
            }
            Err(m) => (400, json, chunk::error_body(400, &m).into_bytes()),
        },
        ("GET", "/sim/profile") => {
            let p = shared.engine.profile();
            (200, json, serde_json::to_vec(&*p).unwrap_or_default())
        }
        ("POST", "/sim/profile") => {
            let patched = serde_json::from_slice::<ProfilePatch>(body)
                .map_err(|e| e.to_string())
                .and_then(|patch| patch.apply(&shared.engine.profile()));
            match patched {
                Ok(p) => {
                    let out = serde_json::to_vec(&p).unwrap_or_default();
                    tracing::info!("canary-sim: profile now {}", p.name);
                    shared.engine.set_profile(p);
                    (200, json, out)
                }
                Err(m) => (400, json, chunk::error_body(400, &m).into_bytes()),
            }
        }
        (_, path) => {
            let known = [
                "/v1/chat/completions",
                "/v1/completions",
                "/v1/models",
                "/version",
                "/health",
                "/metrics",
                "/sim/truth",
                "/sim/profile",
                "/sim/version",
            ];
            let status = if known.contains(&path) { 405 } else { 404 };
            let msg = format!("{} {path}: {}", head.method, http::reason(status));
            (status, json, chunk::error_body(status, &msg).into_bytes())
        }
    };
    let written = if is_head {
        let bytes = http::response_head(status, ctype, Some(out.len()), keep, &extra);
        http::write_timed(conn, &bytes).await
    } else {
        respond(conn, status, ctype, &out, keep, &extra).await
    };
    match written {
        Ok(_) if keep => Next::Continue,
        _ => Next::Close,
    }
}

mod truth_page;

#[cfg(test)]
mod tests;
