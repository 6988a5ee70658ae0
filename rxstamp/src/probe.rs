//! Waiting for the kernel to start stamping.
//!
//! The kernel stamps received packets only while some socket wants stamps, behind a switch (the
//! `netstamp_needed_key` static key) that the first such socket on the host flips from a
//! workqueue, after its `setsockopt` has returned. Until then packets arrive unstamped: a
//! server that asks for stamps and at once receives a request gets none for it (seen in the
//! simulator's tests: the first requests after start had no stamp, 50 ms later every one had).

use std::io;
use std::mem::MaybeUninit;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::recv;

/// Pause between tries.
const TRY_EVERY: Duration = Duration::from_millis(1);

/// Sends loopback datagrams to itself, with stamps on, until one comes back stamped: `true`
/// once the kernel stamps what it receives, `false` if it still did not after `within`. Call it
/// after [`crate::enable`] on the sockets that matter (which keep the switch on).
pub async fn wait_until_stamped(within: Duration) -> io::Result<bool> {
    let udp = UdpSocket::bind("127.0.0.1:0")?;
    udp.set_nonblocking(true)?;
    recv::enable(&udp)?;
    let me = udp.local_addr()?;
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [MaybeUninit::<u8>::uninit(); 8];
    loop {
        udp.send_to(b"?", me)?;
        // Loopback delivers in a softirq right after the send, almost always before it returns.
        match recv::recv_stamped(udp.as_raw_fd(), &mut buf) {
            Ok((_, Some(_))) => return Ok(true),
            Ok((_, None)) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(TRY_EVERY).await;
    }
}
