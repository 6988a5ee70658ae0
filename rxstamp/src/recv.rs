//! The socket calls: turning receive stamps on, and reading with them.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};

/// `SO_TIMESTAMPING` (`SOL_SOCKET`), also the control message type it answers with
/// (`SCM_TIMESTAMPING`): asm-generic's value, the same on x86-64 and arm64. The libc crate
/// exports it for Android only.
const SO_TIMESTAMPING: libc::c_int = 37;

/// Software receive stamps, reported to this socket.
const FLAGS: libc::c_uint = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;

/// Asks the kernel to stamp what `sock` receives. An error means the kernel refused (a kernel
/// built without it, a seccomp filter): the socket then reads without stamps.
///
/// On a listening socket the option is inherited by every connection it accepts (the kernel
/// copies the socket's flags into the child, `sk_clone_lock`): one call for all of them.
pub fn enable(sock: &impl AsRawFd) -> io::Result<()> {
    let flags = FLAGS;
    // SAFETY: valid fd, pointer to a c_uint and its length, as SO_TIMESTAMPING takes.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
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

/// Control-message space: one `scm_timestamping` (three timespecs) with its header, and room
/// to spare; u64s keep it aligned for `cmsghdr`.
const CONTROL_WORDS: usize = 16;

/// One non-blocking `recvmsg` into `buf`: the bytes read and the software receive stamp of
/// the last segment consumed (`CLOCK_REALTIME` ns), if the kernel attached one.
pub fn recv_stamped(fd: RawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<u64>)> {
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
    #[cfg(feature = "count-calls")]
    CALLS.with(|c| c.set(c.get() + 1));
    // SAFETY: the iovec and control buffer outlive the call and their lengths are theirs.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: msg and its control buffer are as the kernel left them.
    let stamp = unsafe { software_stamp(&msg) };
    Ok((n as usize, stamp))
}

#[cfg(feature = "count-calls")]
thread_local! {
    static CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `recvmsg` calls made by this thread so far (feature `count-calls`, for tests).
#[cfg(feature = "count-calls")]
pub fn recvmsg_calls() -> usize {
    CALLS.with(|c| c.get())
}

/// The software stamp (`ts[0]` of `SCM_TIMESTAMPING`) among `msg`'s control messages.
///
/// # Safety
/// `msg` must be a msghdr filled by `recvmsg`, its control buffer still alive.
unsafe fn software_stamp(msg: &libc::msghdr) -> Option<u64> {
    let mut cmsg = libc::CMSG_FIRSTHDR(msg);
    while !cmsg.is_null() {
        let c = &*cmsg;
        // The message must hold the timespec it is read as: the kernel's always does, a
        // truncated control buffer (MSG_CTRUNC) might not.
        let holds_a_timespec = c.cmsg_len as usize
            >= libc::CMSG_LEN(std::mem::size_of::<libc::timespec>() as u32) as usize;
        if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == SO_TIMESTAMPING && holds_a_timespec {
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
