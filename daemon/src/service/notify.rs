//! systemd's notify protocol (`Type=notify`), by hand: one datagram per message to the unix
//! socket named in `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
//! `READY=1` once the first runs are scheduled, `STATUS=` lines saying what runs,
//! `WATCHDOG=1` at half of `$WATCHDOG_USEC`, `STOPPING=1` on the way out. Outside systemd
//! (no `$NOTIFY_SOCKET`) every call does nothing.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// A connection to the service manager, or nothing outside systemd.
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET`; a socket that cannot be used is reported once and ignored.
    pub fn from_env() -> Notifier {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Notifier { socket: None };
        };
        let socket = (|| -> std::io::Result<_> {
            let sock = UnixDatagram::unbound()?;
            let bytes = path.as_encoded_bytes();
            let addr = match bytes.strip_prefix(b"@") {
                Some(name) => abstract_addr(name)?,
                None => std::os::unix::net::SocketAddr::from_pathname(&path)?,
            };
            Ok((sock, addr))
        })();
        match socket {
            Ok(s) => Notifier { socket: Some(s) },
            Err(e) => {
                tracing::warn!("NOTIFY_SOCKET {path:?} unusable, not notifying systemd: {e}");
                Notifier { socket: None }
            }
        }
    }

    /// Sends one message (`READY=1`, `STATUS=…`); failures are logged at debug level.
    pub fn send(&self, msg: &str) {
        if let Some((sock, addr)) = &self.socket {
            if let Err(e) = sock.send_to_addr(msg.as_bytes(), addr) {
                tracing::debug!("sd_notify {msg:?}: {e}");
            }
        }
    }

    /// `STATUS=` text shown by `systemctl status`.
    pub fn status(&self, text: &str) {
        // One line: a newline would start a new assignment.
        self.send(&format!("STATUS={}", text.replace('\n', " ")));
    }

    /// How often to send `WATCHDOG=1`: half of `$WATCHDOG_USEC`, when it is set for us.
    /// Never zero (a zero interval would panic the timer); what cannot be honoured is
    /// said in a warning.
    pub fn watchdog_interval() -> Option<Duration> {
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        let (interval, warning) =
            watchdog_interval_from(usec.as_deref(), pid.as_deref(), std::process::id());
        if let Some(w) = warning {
            tracing::warn!("{w}");
        }
        interval
    }
}

/// The shortest watchdog ping interval: a `WatchdogSec` this short cannot be met anyway.
const MIN_WATCHDOG_PING: Duration = Duration::from_millis(1);

/// [`Notifier::watchdog_interval`] from the variables' values, with a warning to log.
fn watchdog_interval_from(
    usec: Option<&str>,
    pid: Option<&str>,
    own_pid: u32,
) -> (Option<Duration>, Option<String>) {
    let Some(usec) = usec else {
        return (None, None);
    };
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(own_pid) {
            return (None, None);
        }
    }
    let usec: u64 = match usec.trim().parse() {
        Ok(u) => u,
        Err(_) => {
            return (
                None,
                Some(format!(
                "WATCHDOG_USEC={usec:?} is not a number of microseconds: not pinging the watchdog"
            )),
            )
        }
    };
    if usec == 0 {
        return (None, None);
    }
    let half = Duration::from_micros(usec / 2);
    if half < MIN_WATCHDOG_PING {
        return (
            Some(MIN_WATCHDOG_PING),
            Some(format!(
                "WATCHDOG_USEC={usec} is too short to honour: pinging every {MIN_WATCHDOG_PING:?} \
                 (raise WatchdogSec=)"
            )),
        );
    }
    (Some(half), None)
}

#[cfg(target_os = "linux")]
fn abstract_addr(name: &[u8]) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_addr(_: &[u8]) -> std::io::Result<std::os::unix::net::SocketAddr> {
    Err(std::io::Error::other(
        "abstract sockets exist only on Linux",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_a_real_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            socket: Some((
                UnixDatagram::unbound().unwrap(),
                std::os::unix::net::SocketAddr::from_pathname(&path).unwrap(),
            )),
        };
        n.send("READY=1");
        n.status("running chat\nand more");
        let mut buf = [0u8; 256];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"STATUS=running chat and more");
        // Outside systemd nothing is sent and nothing fails.
        Notifier { socket: None }.send("READY=1");
    }

    #[test]
    fn the_watchdog_interval_is_half_the_timeout_and_never_zero() {
        let w = |usec, pid| watchdog_interval_from(usec, pid, 42);
        assert_eq!(
            w(Some("1000000"), None),
            (Some(Duration::from_millis(500)), None)
        );
        assert_eq!(
            w(Some("1000000"), Some("42")).0,
            Some(Duration::from_millis(500))
        );
        // Meant for another process, unset or zero: no pings.
        assert_eq!(w(Some("1000000"), Some("7")), (None, None));
        assert_eq!(w(None, None), (None, None));
        assert_eq!(w(Some("0"), None), (None, None));
        // 1 µs would round to a zero interval, which the timer refuses with a panic.
        for usec in ["1", "1999"] {
            let (interval, warning) = w(Some(usec), None);
            assert_eq!(interval, Some(MIN_WATCHDOG_PING), "{usec}");
            assert!(warning.unwrap().contains("too short"), "{usec}");
        }
        let (interval, warning) = w(Some("soon"), None);
        assert_eq!(interval, None);
        assert!(warning.unwrap().contains("\"soon\""));
    }
}
