//! One HTTP/1.1 connection per in-flight request, and a pool of idle ones.
//!
//! canaryd never multiplexes: with one request per connection at a time, a socket *is* a
//! request during its lifetime, which is what lets kernel socket events (keyed by the socket
//! cookie) be joined to request records. `TCP_NODELAY` is always on.

mod ended;
mod gate;

use crate::exchange::TypeNote;
use crate::rx_stamp::{RxLog, RxStamps, RxStream};
use bytes::Bytes;
use canary_core::MonoTime;
pub(crate) use ended::Ended;
use gate::Gate;
pub(crate) use gate::GateShared;
use http_body_util::Full;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Where and how to connect.
#[derive(Clone)]
pub struct Connector {
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// Bounds opening a connection: TCP connect, TLS handshake, HTTP/1.1 setup.
    connect_timeout: Duration,
    /// Bytes a response head may take (status line and headers).
    max_header_bytes: usize,
    idle: Arc<Mutex<Vec<Connection>>>,
    /// Set once a pooled connection turned out closed by the server: from then on every
    /// request opens its own connection ahead of its deadline instead of reusing one.
    no_reuse: Arc<AtomicBool>,
    /// Kernel receive timestamps: wanted, and whether the kernel refused them.
    rx: Arc<RxStamps>,
    /// Streams read under a type that is not SSE's, said once.
    types: Arc<TypeNote>,
}

/// An open connection ready for one request.
pub struct Connection {
    pub(crate) sender: SendRequest<Full<Bytes>>,
    /// The socket cookie (`SO_COOKIE`), the key kernel events are joined on.
    pub cookie: Option<u64>,
    /// How long opening it took, if it was opened for this request (not reused): TCP connect,
    /// TLS handshake and HTTP/1.1 setup.
    pub connect_time: Option<Duration>,
    /// When it was ready for a request (its opening done).
    pub(crate) opened_at: MonoTime,
    /// What its socket did, to tell a failure sending the request from one reading the
    /// response.
    pub(crate) io: Arc<IoTrace>,
    /// Holds a request's bytes until the release thread writes them ([`gate`]).
    pub(crate) gate: Arc<GateShared>,
    /// How hyper's side of it ended: the cause of a request it closed before carrying.
    pub(crate) ended: Ended,
    /// Its connector's note of streams under a type that is not SSE's.
    pub(crate) types: Arc<TypeNote>,
}

/// What a connection's socket did, as seen by the HTTP client above it, and what the kernel
/// stamped its reads with.
#[derive(Debug, Default)]
pub(crate) struct IoTrace {
    read: AtomicU64,
    read_failed: AtomicBool,
    pub(super) write_failed: AtomicBool,
    /// The kernel's receive stamps of the TCP socket's reads (below TLS), when they are on.
    pub rx: Option<Arc<RxLog>>,
}

impl IoTrace {
    /// Bytes of response read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// A read from the socket failed.
    pub fn read_failed(&self) -> bool {
        self.read_failed.load(Ordering::Relaxed)
    }

    /// A write to the socket failed.
    pub fn write_failed(&self) -> bool {
        self.write_failed.load(Ordering::Relaxed)
    }
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("connect to {addr}: {reason}")]
pub struct ConnectError {
    /// `host:port`.
    pub addr: String,
    /// The cause.
    pub reason: String,
    /// canaryd itself ran out of open files, memory or local ports: not the target's fault.
    pub client_exhausted: bool,
}

impl Connector {
    /// A connector to `host:port`, with TLS when `tls` is given. Opening a connection fails
    /// after `connect_timeout`; a response head over `max_header_bytes` fails its request.
    /// `rx_stamps`: read responses with the kernel's receive timestamps.
    pub fn new(
        host: &str,
        port: u16,
        tls: Option<Arc<rustls::ClientConfig>>,
        connect_timeout: Duration,
        max_header_bytes: usize,
        rx_stamps: bool,
    ) -> Result<Connector, ConnectError> {
        let tls = match tls {
            None => None,
            Some(config) => {
                let name = ServerName::try_from(host.to_string()).map_err(|e| ConnectError {
                    addr: format!("{host}:{port}"),
                    reason: format!("invalid TLS server name: {e}"),
                    client_exhausted: false,
                })?;
                Some((TlsConnector::from(config), name))
            }
        };
        Ok(Connector {
            host: host.to_string(),
            port,
            tls,
            connect_timeout,
            max_header_bytes,
            idle: Arc::default(),
            no_reuse: Arc::default(),
            rx: Arc::new(RxStamps::new(rx_stamps)),
            types: Arc::new(TypeNote::new(format!("{host}:{port}"))),
        })
    }

    /// Whether this connector's connections read with kernel receive timestamps: `on`, `off`
    /// (not asked for) or `refused`, with the kernel's reason.
    pub fn rx_state(&self) -> (&'static str, Option<String>) {
        self.rx.state()
    }

    /// The `Content-Type` of the first stream read as SSE under another type (or none), and
    /// how many were (exact); `None` when every stream said `text/event-stream`. (The run says
    /// it once, as it happens.)
    #[cfg(test)]
    pub(crate) fn unexpected_content_type(&self) -> Option<(&str, u64)> {
        self.types.noted()
    }

    /// An idle connection if one is ready, else a new one.
    pub async fn acquire(&self) -> Result<Connection, ConnectError> {
        loop {
            let candidate = self.idle.lock().expect("pool lock").pop();
            let Some(mut c) = candidate else {
                return self.open().await;
            };
            if !c.sender.is_closed() && c.sender.is_ready() {
                c.connect_time = None;
                return Ok(c);
            }
            // Closed by the server meanwhile: drop it.
        }
    }

    /// A pooled connection was closed by the server before it answered: stop pooling, since
    /// this server closes connections after a response (llama.cpp does after every stream).
    pub fn stop_reuse(&self) {
        if !self.no_reuse.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "{}:{} closes connections after a response; opening one per request",
                self.host,
                self.port
            );
            self.idle.lock().expect("pool lock").clear();
        }
    }

    /// Returns a connection whose response was read to the end, for reuse.
    pub fn release(&self, c: Connection) {
        if !c.sender.is_closed() && !self.no_reuse.load(Ordering::Relaxed) {
            let mut idle = self.idle.lock().expect("pool lock");
            // Bound the pool: at most as many idle connections as were ever concurrently busy
            // is natural, but a hard cap keeps a burst from pinning sockets forever.
            if idle.len() < 4096 {
                idle.push(c);
            }
        }
    }

    /// A new connection, never a pooled one.
    pub async fn open(&self) -> Result<Connection, ConnectError> {
        // A host that drops SYNs, or a server that accepts and never answers the TLS
        // handshake, would otherwise hold the request forever.
        match tokio::time::timeout(self.connect_timeout, self.open_unbounded()).await {
            Ok(result) => result,
            Err(_) => Err(ConnectError {
                addr: format!("{}:{}", self.host, self.port),
                reason: format!(
                    "timed out after {:?} ({})",
                    self.connect_timeout,
                    if self.tls.is_some() {
                        "TCP connect and TLS handshake"
                    } else {
                        "TCP connect"
                    }
                ),
                client_exhausted: false,
            }),
        }
    }

    async fn open_unbounded(&self) -> Result<Connection, ConnectError> {
        let addr = format!("{}:{}", self.host, self.port);
        let err = |reason: String| ConnectError {
            addr: addr.clone(),
            reason,
            client_exhausted: false,
        };
        let start = MonoTime::now();
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| ConnectError {
                client_exhausted: crate::in_flight::is_client_exhaustion(&e),
                ..err(e.to_string())
            })?;
        tcp.set_nodelay(true).map_err(|e| err(e.to_string()))?;
        let cookie = socket_cookie(&tcp);
        let rx = self.rx.log_for(&tcp);
        let io = Arc::new(IoTrace {
            rx: rx.clone(),
            ..IoTrace::default()
        });
        let fd = tcp.as_raw_fd();
        // Below TLS: the stamps are the TCP segments', and the release thread writes the
        // request's encrypted bytes.
        let (tcp, gate) = Gate::new(RxStream::new(tcp, rx), fd, &io);
        let max_header = self.max_header_bytes;
        let (sender, ended) = match &self.tls {
            None => handshake(Traced::new(tcp, &io), &io, max_header).await,
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| err(format!("TLS handshake: {}", canary_tls::explain_io(&e))))?;
                handshake(Traced::new(stream, &io), &io, max_header).await
            }
        }
        .map_err(|e| err(e.to_string()))?;
        let opened_at = MonoTime::now();
        Ok(Connection {
            sender,
            ended,
            types: self.types.clone(),
            cookie,
            connect_time: Some(opened_at.since(start)),
            opened_at,
            io,
            gate,
        })
    }
}

async fn handshake<S>(
    io: S,
    trace: &Arc<IoTrace>,
    max_header_bytes: usize,
) -> hyper::Result<(SendRequest<Full<Bytes>>, Ended)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The head must fit in hyper's read buffer as well as under its header cap; the buffer
    // also bounds each body frame, so a connection holds at most this much unread.
    let (sender, conn) = http1::Builder::new()
        .max_header_size(max_header_bytes)
        .max_buf_size(max_header_bytes.max(MIN_READ_BUFFER))
        .handshake(TokioIo::new(io))
        .await?;
    // hyper's side of the connection (it reads and writes the socket) runs in a task of its
    // own, so it reads a response's segments as they come, whether or not the request's task
    // is running: a first token read before the next one arrives keeps its own kernel stamp
    // (issue 21). Errors surface on the request that was using the connection, or, when it
    // closed before carrying one, through `ended`.
    let (task, ended) = ended::watch(conn, trace.clone());
    tokio::spawn(task);
    Ok((sender, ended))
}

/// hyper's smallest allowed read buffer (it panics below 8 KiB); 64 KiB keeps reads of a
/// fast stream few.
const MIN_READ_BUFFER: usize = 64 << 10;

/// A stream that notes, in its [`IoTrace`], what it read and which way it failed.
struct Traced<S> {
    inner: S,
    trace: Arc<IoTrace>,
}

impl<S> Traced<S> {
    fn new(inner: S, trace: &Arc<IoTrace>) -> Traced<S> {
        Traced {
            inner,
            trace: trace.clone(),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Traced<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &poll {
            Poll::Ready(Ok(())) => {
                let n = (buf.filled().len() - before) as u64;
                self.trace.read.fetch_add(n, Ordering::Relaxed);
            }
            Poll::Ready(Err(_)) => self.trace.read_failed.store(true, Ordering::Relaxed),
            Poll::Pending => {}
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> Traced<S> {
    fn noted<T>(&self, poll: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        if let Poll::Ready(Err(_)) = &poll {
            self.trace.write_failed.store(true, Ordering::Relaxed);
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Traced<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.noted(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.noted(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.noted(poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The kernel's socket cookie, equal to `bpf_get_socket_cookie` on the same socket.
fn socket_cookie(tcp: &TcpStream) -> Option<u64> {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: valid fd, out-pointer and length for SO_COOKIE (a u64).
    let rc = unsafe {
        libc::getsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            &mut cookie as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0).then_some(cookie)
}

#[cfg(test)]
mod tests;
