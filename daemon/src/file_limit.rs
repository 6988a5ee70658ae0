//! The open-file limit (`RLIMIT_NOFILE`): every request in flight holds a socket, and the
//! usual soft limit of 1024 is below what a closed loop of 1,000 users needs. At start the soft
//! limit is raised to the hard one (which needs no privilege); when a run asks for more
//! requests in flight than the limit then leaves room for, that is said once, before the
//! run, with how to raise it, instead of showing up as a lower ceiling (or `client_resources`
//! errors) in the results. The ceiling itself is the replay's (`in_flight_cap`).

use std::collections::HashMap;
use std::sync::Mutex;

/// The soft and hard limits, as read or set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The soft limit: what `open` and `connect` are held to.
    pub soft: u64,
    /// The hard limit: how far the process may raise the soft one itself.
    pub hard: u64,
}

/// The limits now; `None` when they cannot be read or are unlimited.
pub fn limits() -> Option<Limits> {
    canary_replay::open_files_limits().map(|(soft, hard)| Limits { soft, hard })
}

/// What [`raise`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raised {
    /// The soft limit went from the first to the second.
    From(u64, u64),
    /// It was already at the hard limit (or unlimited).
    AlreadyHigh,
    /// `setrlimit` refused (the error number).
    Refused(i32),
}

/// Raises the soft limit to the hard one. An unlimited hard limit is taken as the kernel's
/// `fs.nr_open` (the most a soft limit may be on Linux), else left alone.
pub fn raise() -> Raised {
    let Some(now) = limits() else {
        return Raised::AlreadyHigh;
    };
    let target = if now.hard == libc::RLIM_INFINITY {
        match nr_open() {
            Some(n) => n,
            None => return Raised::AlreadyHigh,
        }
    } else {
        now.hard
    };
    if target <= now.soft {
        return Raised::AlreadyHigh;
    }
    let rl = libc::rlimit {
        rlim_cur: target,
        rlim_max: now.hard,
    };
    // SAFETY: setrlimit reads one rlimit struct through a valid pointer.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        return Raised::Refused(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Raised::From(now.soft, target)
}

fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Why a run may keep fewer requests in flight than it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Requests in flight asked for (`--concurrency`, a closed loop's users).
    pub asked: usize,
    /// Files that needs: one socket each, the files open now and the replay's headroom.
    pub need: u64,
    /// The limits.
    pub limits: Limits,
    /// Requests in flight the limit leaves room for.
    pub room: u64,
}

/// The shortfall of a run asking for `asked` in flight, with `open` files open now; `None`
/// when the limit allows it (or is unknown). The headroom is the replay's: a quarter of the
/// limit, at most 128, kept for telemetry, artifacts and eBPF.
pub fn shortfall(asked: usize, open: u64, limits: Limits) -> Option<Shortfall> {
    let headroom = (limits.soft / 4).min(128);
    let need = asked as u64 + open + headroom;
    (need > limits.soft).then(|| Shortfall {
        asked,
        need,
        limits,
        room: limits.soft.saturating_sub(open + headroom).max(1),
    })
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let raise = if self.limits.hard > self.limits.soft {
            format!("`ulimit -n {}`", self.limits.hard)
        } else {
            format!(
                "`ulimit -Hn` is {} too: raise the hard limit (`/etc/security/limits.conf`)",
                self.limits.hard
            )
        };
        write!(
            f,
            "{} requests in flight need about {} open files (one socket each, plus the files \
             open now and headroom for telemetry and artifacts), but the open-file limit \
             (RLIMIT_NOFILE) is {} (hard limit {}): about {} (an estimate) will be in flight, the \
             rest wait for a slot (recorded as hold_ms; summary.json's in_flight_cap has the \
             exact ceiling). To raise it: {raise} before canaryd starts, or \
             LimitNOFILE={} in its systemd unit",
            self.asked,
            self.need,
            self.limits.soft,
            self.limits.hard,
            self.room,
            (self.need * 2).next_power_of_two().max(65_536),
        )
    }
}

/// Largest need already warned about, by setting: each is said once per process (a sweep's
/// points and a daemon's runs repeat the same settings).
static WARNED: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

/// Warns once, before a run, when `asked` requests in flight (named `setting`) need more
/// open files than the limit allows.
pub fn warn_if_short(setting: &str, asked: Option<usize>) {
    let (Some(asked), Some(limits)) = (asked, limits()) else {
        return;
    };
    let open = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    let Some(short) = shortfall(asked, open, limits) else {
        return;
    };
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    let seen = warned.get_or_insert_with(HashMap::new);
    if seen.get(setting).is_some_and(|&n| n >= short.need) {
        return;
    }
    seen.insert(setting.to_string(), short.need);
    tracing::warn!("{setting} {asked}: {short}");
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOFT_1024: Limits = Limits {
        soft: 1024,
        hard: 1024,
    };

    #[test]
    fn a_thousand_users_do_not_fit_in_1024_files() {
        let s = shortfall(1000, 5, SOFT_1024).unwrap();
        assert_eq!((s.need, s.room), (1000 + 5 + 128, 1024 - 5 - 128));
        let msg = s.to_string();
        assert!(
            msg.contains("1000 requests in flight need about 1133 open files"),
            "{msg}"
        );
        assert!(
            msg.contains("limit (RLIMIT_NOFILE) is 1024 (hard limit 1024)"),
            "{msg}"
        );
        assert!(
            msg.contains("about 891 (an estimate) will be in flight"),
            "{msg}"
        );
        assert!(msg.contains("LimitNOFILE=65536"), "{msg}");
        assert!(msg.contains("raise the hard limit"), "{msg}");
    }

    #[test]
    fn what_fits_is_not_a_shortfall() {
        assert_eq!(shortfall(891, 5, SOFT_1024), None);
        assert!(shortfall(892, 5, SOFT_1024).is_some());
        let roomy = Limits {
            soft: 1024,
            hard: 524_288,
        };
        let msg = shortfall(5000, 5, roomy).unwrap().to_string();
        assert!(msg.contains("`ulimit -n 524288`"), "{msg}");
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        // This test process's own limit: raised (or already) at the hard one afterwards.
        let before = limits();
        let raised = raise();
        let after = limits();
        match (before, raised, after) {
            (Some(b), Raised::From(from, to), Some(a)) => {
                assert_eq!((from, to, a.soft), (b.soft, a.soft, to));
                assert!(a.soft > b.soft);
            }
            (_, Raised::AlreadyHigh, Some(a)) => {
                assert!(a.soft == a.hard || a.hard == libc::RLIM_INFINITY, "{a:?}")
            }
            other => panic!("{other:?}"),
        }
    }
}
