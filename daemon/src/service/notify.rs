//! systemd's notify protocol (`Type=notify`), by hand: one datagram per message to the unix
//! socket named in `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
//! `READY=1` once the first runs are scheduled, `STATUS=` lines saying what runs,
//! `WATCHDOG=1` at half of `$WATCHDOG_USEC`, `STOPPING=1` on the way out. Outside systemd
//! (no `$NOTIFY_SOCKET`) every call does nothing.
//!
//! Sends never wait: the daemon's async loop sends (READY, STATUS, WATCHDOG), and a blocking
//! send to a receiver whose queue is full (systemd stuck, or a socket nobody reads) held that
//! loop, signals included, for as long as the queue stayed full. A message that does not fit
//! is dropped: a later `STATUS=` or `WATCHDOG=1` replaces it anyway.

use std::ffi::OsStr;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A connection to the service manager, or nothing outside systemd.
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    /// Messages dropped on a full queue, per [`Kind`] (exact counts).
    dropped: [AtomicU64; Kind::ALL.len()],
}

/// What a message is, by its first assignment: drops are counted and said per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ready,
    Status,
    Watchdog,
    Stopping,
    Other,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Ready,
        Kind::Status,
        Kind::Watchdog,
        Kind::Stopping,
        Kind::Other,
    ];

    fn of(msg: &str) -> Kind {
        match msg.split('=').next() {
            Some("READY") => Kind::Ready,
            Some("STATUS") => Kind::Status,
            Some("WATCHDOG") => Kind::Watchdog,
            Some("STOPPING") => Kind::Stopping,
            _ => Kind::Other,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET`; a socket that cannot be used is reported once and ignored.
    pub fn from_env() -> Notifier {
        match std::env::var_os("NOTIFY_SOCKET") {
            None => Notifier::with(None),
            Some(path) => Notifier::at(&path),
        }
    }

    /// Sends to the socket `path` names (a path, or `@name`), never waiting.
    fn at(path: &OsStr) -> Notifier {
        let socket = (|| -> std::io::Result<_> {
            let sock = UnixDatagram::unbound()?;
            sock.set_nonblocking(true)?;
            let bytes = path.as_encoded_bytes();
            let addr = match bytes.strip_prefix(b"@") {
                Some(name) => abstract_addr(name)?,
                None => std::os::unix::net::SocketAddr::from_pathname(path)?,
            };
            Ok((sock, addr))
        })();
        match socket {
            Ok(s) => Notifier::with(Some(s)),
            Err(e) => {
                tracing::warn!("NOTIFY_SOCKET {path:?} unusable, not notifying systemd: {e}");
                Notifier::with(None)
            }
        }
    }

    fn with(socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>) -> Notifier {
        Notifier {
            socket,
            dropped: Default::default(),
        }
    }

    /// Sends one message (`READY=1`, `STATUS=…`) without waiting. A full queue drops it,
    /// said once per kind of message (a stuck receiver would otherwise be said every 5 s);
    /// other failures are logged at debug level.
    pub fn send(&self, msg: &str) {
        let Some((sock, addr)) = &self.socket else {
            return;
        };
        match sock.send_to_addr(msg.as_bytes(), addr) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let kind = Kind::of(msg);
                if self.dropped[kind.index()].fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        "sd_notify: the service manager's queue is full, a {kind:?} message was \
                         dropped (further drops of this kind are not logged)"
                    );
                }
            }
            Err(e) => tracing::debug!("sd_notify {msg:?}: {e}"),
        }
    }

    /// Messages of `kind` dropped on a full queue so far.
    #[cfg(test)]
    fn dropped(&self, kind: Kind) -> u64 {
        self.dropped[kind.index()].load(Ordering::Relaxed)
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
        let n = Notifier::at(path.as_os_str());
        n.send("READY=1");
        n.status("running chat\nand more");
        let mut buf = [0u8; 256];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"STATUS=running chat and more");
        // Outside systemd nothing is sent and nothing fails.
        Notifier::with(None).send("READY=1");
    }

    /// A receiver that never reads: its queue fills (`net.unix.max_dgram_qlen`, 10 here by
    /// default) and a blocking send would wait for it forever. The sends are made in a thread
    /// joined with a generous bound: a liveness check, not a measure of speed.
    #[test]
    fn a_full_queue_drops_messages_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let n = std::sync::Arc::new(Notifier::at(path.as_os_str()));
        let sender = n.clone();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Far past any queue length a kernel is configured with by default.
            for _ in 0..1000 {
                sender.send("WATCHDOG=1");
                sender.status("running chat");
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(10))
            .expect("sending to a full queue blocked");
        // Every message past the queue's length is counted as dropped, per kind.
        let queued = {
            server.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 256];
            std::iter::from_fn(|| server.recv(&mut buf).ok()).count() as u64
        };
        assert!(queued > 0);
        assert_eq!(
            n.dropped(Kind::Watchdog) + n.dropped(Kind::Status) + queued,
            2000
        );
        assert!(n.dropped(Kind::Watchdog) > 0 && n.dropped(Kind::Status) > 0);
        assert_eq!(n.dropped(Kind::Ready), 0);
        // Once the receiver reads again, messages go through again.
        n.send("READY=1");
        let mut buf = [0u8; 256];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
    }

    #[test]
    fn kinds_are_told_by_the_first_assignment() {
        assert_eq!(Kind::of("READY=1"), Kind::Ready);
        assert_eq!(Kind::of("STATUS=a=b"), Kind::Status);
        assert_eq!(Kind::of("WATCHDOG=1"), Kind::Watchdog);
        assert_eq!(Kind::of("STOPPING=1"), Kind::Stopping);
        assert_eq!(Kind::of("RELOADING=1"), Kind::Other);
        assert_eq!(Kind::of(""), Kind::Other);
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
