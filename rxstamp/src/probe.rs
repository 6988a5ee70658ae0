//! Waiting for the kernel to start stamping, and keeping it stamping.
//!
//! The kernel stamps received packets only while some socket wants stamps, behind a switch (the
//! `netstamp_needed_key` static key) that the first such socket on the host flips from a
//! workqueue, after its `setsockopt` has returned. Until then packets arrive unstamped: a
//! server that asks for stamps and at once receives a request gets none for it (seen in the
//! simulator's tests: the first requests after start had no stamp, 50 ms later every one had).
//! The switch goes off again, the same way, when the last such socket closes: a client whose
//! connections ask for stamps only as they open, on a host where nothing else wants them, can
//! see its first responses come unstamped at every run's start. A [`StampingHold`] taken before
//! the first connection opens, and kept for the run, avoids both.

use std::io;
use std::mem::MaybeUninit;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::recv;

/// Pause between tries.
const TRY_EVERY: Duration = Duration::from_millis(1);

/// A loopback socket that wants stamps: while it lives, the kernel's switch stays on.
#[derive(Debug)]
pub struct StampingHold {
    udp: UdpSocket,
}

impl StampingHold {
    /// Asks for stamps and waits until the kernel gives them: the hold, and `true` once a
    /// datagram came back stamped, `false` if none had after `within` (the hold is kept either
    /// way; the switch may still flip later).
    pub async fn take(within: Duration) -> io::Result<(StampingHold, bool)> {
        let udp = UdpSocket::bind("127.0.0.1:0")?;
        udp.set_nonblocking(true)?;
        recv::enable(&udp)?;
        let hold = StampingHold { udp };
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if hold.stamps_now()? {
                return Ok((hold, true));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok((hold, false));
            }
            tokio::time::sleep(TRY_EVERY).await;
        }
    }

    /// Sends one datagram to itself: whether it came back stamped.
    fn stamps_now(&self) -> io::Result<bool> {
        self.send_to_itself()?;
        // Loopback delivers in a softirq right after the send, almost always before it returns.
        Ok(self.received()?.is_some_and(|stamped| stamped))
    }

    fn send_to_itself(&self) -> io::Result<()> {
        self.udp.send_to(b"?", self.udp.local_addr()?).map(drop)
    }

    /// The next datagram's stamp: `Some(true)` stamped, `Some(false)` not, `None` none came yet.
    fn received(&self) -> io::Result<Option<bool>> {
        let mut buf = [MaybeUninit::<u8>::uninit(); 8];
        match recv::recv_stamped(self.udp.as_raw_fd(), &mut buf) {
            Ok((_, stamped)) => Ok(Some(stamped.is_some())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Sends loopback datagrams to itself, with stamps on, until one comes back stamped: `true`
/// once the kernel stamps what it receives, `false` if it still did not after `within`. Call it
/// after [`crate::enable`] on the sockets that matter (which keep the switch on).
pub async fn wait_until_stamped(within: Duration) -> io::Result<bool> {
    StampingHold::take(within).await.map(|(_, on)| on)
}

#[cfg(test)]
mod tests {
    use super::*;

    // While a hold lives, a socket that asks for stamps gets them on its first packet, with no
    // wait for the kernel's switch. (Another stamping socket on the host would also keep the
    // switch on; this test fails when neither does and the hold let the switch go.)
    #[tokio::test]
    async fn a_socket_opened_under_a_hold_is_stamped_from_its_first_packet() {
        let (hold, on) = StampingHold::take(Duration::from_secs(1)).await.unwrap();
        assert!(on, "the kernel never started stamping");
        for _ in 0..3 {
            // Long enough for the switch's workqueue to have turned it off, were it free to.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
            udp.set_nonblocking(true).unwrap();
            recv::enable(&udp).unwrap();
            let fresh = StampingHold { udp };
            fresh.send_to_itself().unwrap();
            // Only the first datagram's stamp counts, however late a busy host delivers it.
            let stamped = loop {
                match fresh.received().unwrap() {
                    Some(stamped) => break stamped,
                    None => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            };
            assert!(
                stamped,
                "a fresh socket's first datagram came back unstamped"
            );
        }
        assert!(hold.stamps_now().unwrap());
    }
}
