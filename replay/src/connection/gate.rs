//! The innermost layer of a connection (on the TCP socket, below TLS): holds a request's bytes
//! until its deadline, when the release thread writes them itself.
//!
//! Waking a runtime worker at every deadline only for it to write a prepared request was most
//! of canaryd's CPU on evenly spaced arrivals (issue 21: context switches). So a request is
//! handed to the HTTP client ahead of its deadline: while the gate is *armed*, writes land in a
//! bounded buffer and are reported done, and the connection's task goes on to wait for the
//! response on the socket's readability. At the deadline the release thread sends the buffer
//! with one non-blocking `send` and stamps that moment as the request's send time. What it could
//! not send (a full socket buffer, a write error) goes back to the connection's task, which is
//! woken to write the rest itself or to fail the exchange with the error. Only the response
//! then wakes a worker.
//!
//! The socket is used by the release thread only under the gate's lock and only while armed;
//! dropping the gate (closing the socket) or withdrawing the request first takes the lock and
//! disarms it, so the thread never writes to a closed, or reused, descriptor.

use super::IoTrace;
use canary_core::MonoTime;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes held for one request at most; a larger request waits (its writer pending) for the
/// release, and its task writes the rest.
pub(crate) const HELD_MAX: usize = 256 << 10;

/// Buffer room a connection keeps between requests (a short request's head and body).
const KEPT_ROOM: usize = 4 << 10;

/// Where the connection's writes go.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
enum Phase {
    /// Straight to the socket.
    #[default]
    Open,
    /// Into the buffer, until the release.
    Armed,
    /// Released: the buffer's rest (if any) goes out first, written by the task.
    Released,
    /// The release thread's write failed with this OS error: the exchange fails with it.
    Failed(i32),
    /// The request was withdrawn before its release: nothing more may be written.
    Withdrawn,
    /// The socket is closing.
    Closed,
}

#[derive(Debug, Default)]
struct State {
    phase: Phase,
    held: Vec<u8>,
    /// The task's writer waits for room in the buffer.
    writer_waits: bool,
    /// The connection's task, to wake when the release leaves it something to do.
    waker: Option<Waker>,
    /// When the request's first bytes were written to the socket.
    sent_at: Option<MonoTime>,
}

/// The gate's state, shared by the connection's IO, the request's task and the release thread.
#[derive(Debug)]
pub(crate) struct GateShared {
    fd: RawFd,
    state: Mutex<State>,
}

impl GateShared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds the next request's bytes until [`GateShared::release`]. False when the
    /// connection is not idle (closing, or a previous request's bytes still pending).
    pub(crate) fn arm(&self) -> bool {
        let mut s = self.lock();
        if s.phase != Phase::Open || !s.held.is_empty() {
            return false;
        }
        s.phase = Phase::Armed;
        s.sent_at = None;
        true
    }

    /// Withdraws the request unless some of it reached the socket: true when none did (and
    /// none will: the connection's writes fail from now); false when it is in flight.
    pub(crate) fn withdraw(&self) -> bool {
        let mut s = self.lock();
        if s.sent_at.is_some() {
            return false;
        }
        if s.phase != Phase::Closed {
            s.phase = Phase::Withdrawn;
        }
        s.held = Vec::new();
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        true
    }

    /// When the request's first bytes reached the socket, if they have.
    pub(crate) fn sent_at(&self) -> Option<MonoTime> {
        self.lock().sent_at
    }

    /// The deadline came: writes what is held to the socket now, without blocking, from the
    /// calling (release) thread. The rest, or an error, is left to the connection's task.
    /// False when the request was not armed (withdrawn, or released already).
    pub(crate) fn send_held(&self) -> bool {
        let mut s = self.lock();
        if s.phase != Phase::Armed {
            return false;
        }
        s.phase = Phase::Released;
        if s.held.is_empty() {
            // The task has not written yet: it writes through when it does.
            return true;
        }
        let at = MonoTime::now();
        match send(self.fd, &s.held) {
            Ok(n) => {
                if n > 0 {
                    s.sent_at = Some(at);
                }
                s.held.drain(..n);
                if s.held.is_empty() {
                    // A short request's room is kept for the connection's next one.
                    s.held.shrink_to(KEPT_ROOM);
                    if !s.writer_waits {
                        // Whatever hyper writes next goes straight through.
                        s.phase = Phase::Open;
                        return true;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                s.phase = Phase::Failed(e.raw_os_error().unwrap_or(libc::EIO));
                s.held = Vec::new();
            }
        }
        s.writer_waits = false;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        true
    }
}

/// One non-blocking `send` of `buf` on `fd` (no `SIGPIPE` on a closed peer).
fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `fd` is open (the caller holds the gate's lock, and the gate closes the socket
    // only after taking it), `buf` is valid for its length.
    let n = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The stream `S` (the TCP socket, owning descriptor `fd`) behind a gate.
pub(crate) struct Gate<S> {
    inner: S,
    shared: Arc<GateShared>,
    trace: Arc<IoTrace>,
}

impl<S> Gate<S> {
    /// `inner`, whose descriptor is `fd`, with its gate open; `trace` learns of failed writes.
    pub(crate) fn new(inner: S, fd: RawFd, trace: &Arc<IoTrace>) -> (Gate<S>, Arc<GateShared>) {
        let shared = Arc::new(GateShared {
            fd,
            state: Mutex::default(),
        });
        let gate = Gate {
            inner,
            shared: shared.clone(),
            trace: trace.clone(),
        };
        (gate, shared)
    }
}

impl<S> Drop for Gate<S> {
    fn drop(&mut self) {
        // Before `inner` closes the socket: the release thread may not write to it from now.
        self.shared.lock().phase = Phase::Closed;
    }
}

fn remember(s: &mut State, cx: &Context<'_>) {
    match &s.waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => s.waker = Some(cx.waker().clone()),
    }
}

fn failed(trace: &IoTrace, e: io::Error) -> Poll<io::Result<()>> {
    trace.write_failed.store(true, Ordering::Relaxed);
    Poll::Ready(Err(e))
}

impl<S: AsyncWrite + Unpin> Gate<S> {
    /// Writes `bufs` (a plain write is one slice): held while armed, else after what the
    /// release left held. Under the gate's lock, so that the first byte's time is stamped
    /// as it goes and a withdrawal never races a write.
    fn write(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let Gate {
            inner,
            shared,
            trace,
        } = self;
        let mut s = shared.lock();
        std::task::ready!(drain(&mut s, inner, trace, cx))?;
        if s.phase == Phase::Armed {
            return hold(&mut s, cx, bufs);
        }
        // Stamped before the write: loopback hands the bytes to the server inside the
        // syscall, so a stamp after it could fall after the server's arrival.
        let at = s.sent_at.is_none().then(MonoTime::now);
        let poll = match bufs {
            [one] => Pin::new(&mut *inner).poll_write(cx, one),
            _ => Pin::new(&mut *inner).poll_write_vectored(cx, bufs),
        };
        match &poll {
            Poll::Ready(Ok(n)) if *n > 0 && at.is_some() => s.sent_at = at,
            Poll::Ready(Err(_)) => trace.write_failed.store(true, Ordering::Relaxed),
            _ => {}
        }
        poll
    }
}

/// Before any other write: the bytes the release left held. Ready when nothing is held
/// (armed: writes are held, not written).
fn drain<S: AsyncWrite + Unpin>(
    s: &mut State,
    inner: &mut S,
    trace: &IoTrace,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    loop {
        match s.phase {
            Phase::Open | Phase::Armed => return Poll::Ready(Ok(())),
            Phase::Failed(errno) => return failed(trace, io::Error::from_raw_os_error(errno)),
            Phase::Withdrawn | Phase::Closed => {
                let e = io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the request was withdrawn before its release",
                );
                return failed(trace, e);
            }
            Phase::Released if s.held.is_empty() => {
                s.held.shrink_to(KEPT_ROOM);
                s.phase = Phase::Open;
                return Poll::Ready(Ok(()));
            }
            Phase::Released => {
                let at = MonoTime::now();
                match Pin::new(&mut *inner).poll_write(cx, &s.held) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        s.phase = Phase::Failed(e.raw_os_error().unwrap_or(libc::EIO));
                        return failed(trace, e);
                    }
                    Poll::Ready(Ok(0)) => return failed(trace, io::ErrorKind::WriteZero.into()),
                    Poll::Ready(Ok(n)) => {
                        if s.sent_at.is_none() {
                            s.sent_at = Some(at);
                        }
                        s.held.drain(..n);
                    }
                }
            }
        }
    }
}

/// Holds `bufs` in an armed gate: the bytes taken, or pending while the buffer is full.
fn hold(s: &mut State, cx: &Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
    remember(s, cx);
    let mut taken = 0;
    for b in bufs {
        let n = b.len().min(HELD_MAX - s.held.len());
        s.held.extend_from_slice(&b[..n]);
        taken += n;
        if n < b.len() {
            break;
        }
    }
    if taken == 0 && bufs.iter().any(|b| !b.is_empty()) {
        s.writer_waits = true;
        return Poll::Pending;
    }
    Poll::Ready(Ok(taken))
}

impl<S: AsyncRead + Unpin> AsyncRead for Gate<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        {
            let mut s = self.shared.lock();
            if s.phase == Phase::Armed {
                remember(&mut s, cx);
            }
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gate<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        {
            let mut s = this.shared.lock();
            std::task::ready!(drain(&mut s, &mut this.inner, &this.trace, cx))?;
            if s.phase == Phase::Armed {
                // Held, not written: flushed as far as the writer can tell.
                remember(&mut s, cx);
                return Poll::Ready(Ok(()));
            }
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
