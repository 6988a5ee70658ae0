//! Kernel receive timestamps on the response socket, for any user (issue 16).
//!
//! canaryd's read of a socket can lag the data's arrival by milliseconds when its threads wait
//! for a core. Linux stamps every received segment in software, and with `SO_TIMESTAMPING`
//! (`SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE`) `recvmsg` returns, with each
//! read, the stamp of the last segment that read consumed: no privilege needed. [`RxStream`]
//! reads the TCP socket that way (under TLS as well: rustls reads through it) and notes each
//! read's stamp in the connection's [`RxLog`]; [`RxTimer`] turns those into the times of one
//! exchange's response events, on the monotonic clock.

mod timer;

pub(crate) use timer::{Role, RxTimer, Stamp};

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// `SO_TIMESTAMPING` (`SOL_SOCKET`), also the control message type it answers with
/// (`SCM_TIMESTAMPING`): asm-generic's value, the same on x86-64 and arm64. The libc crate
/// exports it for Android only.
const SO_TIMESTAMPING: libc::c_int = 37;

/// Software receive stamps, reported to this socket.
const FLAGS: libc::c_uint = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;

/// Asks the kernel to stamp what `tcp` receives. An error means the kernel refused (a kernel
/// built without it, a seccomp filter): the connection then reads without stamps.
pub(crate) fn enable(tcp: &TcpStream) -> io::Result<()> {
    let flags = FLAGS;
    // SAFETY: valid fd, pointer to a c_uint and its length, as SO_TIMESTAMPING takes.
    let rc = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_TIMESTAMPING,
            &flags as *const libc::c_uint as *const libc::c_void,
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Whether a connector's connections read with kernel receive timestamps.
#[derive(Debug)]
pub(crate) struct RxStamps {
    wanted: bool,
    /// Why the kernel refused them, the first time it did; from then on none is asked for.
    refused: OnceLock<String>,
    /// Turns them on for a socket (a seam: tests make it fail).
    pub(crate) enable: fn(&TcpStream) -> io::Result<()>,
}

impl RxStamps {
    /// Stamps `wanted` or not.
    pub(crate) fn new(wanted: bool) -> RxStamps {
        RxStamps {
            wanted,
            refused: OnceLock::new(),
            enable,
        }
    }

    /// `on`, `off` (not asked for) or `refused`, with the kernel's reason.
    pub(crate) fn state(&self) -> (&'static str, Option<String>) {
        match (self.wanted, self.refused.get()) {
            (false, _) => ("off", None),
            (true, None) => ("on", None),
            (true, Some(why)) => ("refused", Some(why.clone())),
        }
    }

    /// Turns stamps on for `tcp` and returns the log its reads will note them in; `None` when
    /// they are off or refused (said once, the first time).
    pub(crate) fn log_for(&self, tcp: &TcpStream) -> Option<Arc<RxLog>> {
        if !self.wanted || self.refused.get().is_some() {
            return None;
        }
        match (self.enable)(tcp) {
            Ok(()) => Some(Arc::default()),
            Err(e) => {
                let why = format!("setsockopt(SO_TIMESTAMPING): {e}");
                if self.refused.set(why.clone()).is_ok() {
                    tracing::warn!(
                        "kernel receive timestamps off, the kernel refused them ({why}): \
                         response times are canaryd's own reads"
                    );
                }
                None
            }
        }
    }
}

/// The last read of one connection's socket: its sequence number (1 for the first read that
/// returned data) and the kernel's stamp of the last segment it consumed (`CLOCK_REALTIME`
/// ns), when the kernel gave one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LastRead {
    pub seq: u64,
    pub realtime_ns: Option<u64>,
}

/// What the socket's reads were stamped with, shared by the reader (the connection's task)
/// and the exchange timing the events.
#[derive(Debug, Default)]
pub(crate) struct RxLog {
    last: Mutex<LastRead>,
}

impl RxLog {
    fn note(&self, realtime_ns: Option<u64>) {
        let mut last = self.last.lock().expect("rx log lock");
        last.seq += 1;
        last.realtime_ns = realtime_ns;
    }

    /// The last read so far.
    pub(crate) fn last(&self) -> LastRead {
        *self.last.lock().expect("rx log lock")
    }
}

/// A TCP stream whose reads go through `recvmsg` and note the kernel's stamp in `log`; with
/// no log it reads as a plain stream.
pub(crate) struct RxStream {
    tcp: TcpStream,
    log: Option<Arc<RxLog>>,
}

impl RxStream {
    /// Reads `tcp`, noting stamps into `log` when there is one.
    pub(crate) fn new(tcp: TcpStream, log: Option<Arc<RxLog>>) -> RxStream {
        RxStream { tcp, log }
    }
}

impl AsyncRead for RxStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let Some(log) = &this.log else {
            return Pin::new(&mut this.tcp).poll_read(cx, buf);
        };
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(this.tcp.poll_read_ready(cx))?;
            let fd = this.tcp.as_raw_fd();
            // SAFETY: recvmsg only writes initialized bytes into the unfilled part, and the
            // count it returns is what `assume_init` is told.
            let unfilled = unsafe { buf.unfilled_mut() };
            match this
                .tcp
                .try_io(Interest::READABLE, || recv_stamped(fd, unfilled))
            {
                Ok((n, stamp)) => {
                    // End of stream carries no data, and no stamp.
                    if n > 0 {
                        log.note(stamp);
                    }
                    // SAFETY: the kernel wrote `n` bytes at the start of the unfilled part.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale: `try_io` cleared it, wait again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for RxStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Control-message space: one `scm_timestamping` (three timespecs) with its header, and room
/// to spare; u64s keep it aligned for `cmsghdr`.
const CONTROL_WORDS: usize = 16;

/// One non-blocking `recvmsg` into `buf`: the bytes read and the software receive stamp of
/// the last segment consumed (`CLOCK_REALTIME` ns), if the kernel attached one.
fn recv_stamped(fd: RawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<u64>)> {
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid (no name, no iov, no control) before it is filled.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: the iovec and control buffer outlive the call and their lengths are theirs.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: msg and its control buffer are as the kernel left them.
    let stamp = unsafe { software_stamp(&msg) };
    Ok((n as usize, stamp))
}

/// The software stamp (`ts[0]` of `SCM_TIMESTAMPING`) among `msg`'s control messages.
///
/// # Safety
/// `msg` must be a msghdr filled by `recvmsg`, its control buffer still alive.
unsafe fn software_stamp(msg: &libc::msghdr) -> Option<u64> {
    let mut cmsg = libc::CMSG_FIRSTHDR(msg);
    while !cmsg.is_null() {
        let c = &*cmsg;
        if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == SO_TIMESTAMPING {
            // struct scm_timestamping { struct timespec ts[3]; }: ts[0] is the software stamp.
            let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
            if ts.tv_sec > 0 || ts.tv_nsec > 0 {
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
        }
        cmsg = libc::CMSG_NXTHDR(msg, cmsg);
    }
    None
}
