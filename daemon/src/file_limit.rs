//! The open-file limit (`RLIMIT_NOFILE`): every request in flight holds a socket, and the
//! usual soft limit of 1024 is below what a closed loop of 1,000 users needs. At start the soft
//! limit is raised to the hard one (which needs no privilege); when a run asks for more
//! requests in flight than the limit then leaves room for, that is said once, before its
//! first request, with the exact ceiling and how to raise it, instead of showing up only as
//! a lower ceiling (or `client_resources` errors) in the results. The ceiling itself is the
//! replay's (`in_flight_cap`), set once the run has opened its own files.

use canary_core::{CapSource, InFlightCap};
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

/// Why a run keeps fewer requests in flight than it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Requests in flight asked for (`--concurrency`, a closed loop's users).
    pub asked: usize,
    /// Files that needs: one socket each, the files open at the run's start and the
    /// replay's headroom.
    pub need: u64,
    /// The limits.
    pub limits: Limits,
    /// Files open at the run's start (its own artifacts, runtime and telemetry included).
    pub open: u64,
    /// Files kept for everything but requests.
    pub headroom: u64,
    /// Requests in flight at most: the run's ceiling (exact).
    pub ceiling: usize,
}

/// The shortfall of a run that asked for `asked` in flight and got `cap` (the replay's
/// ceiling, set once the run had opened its own files); `None` when the open-file limit did
/// not lower it.
pub fn shortfall(asked: usize, cap: &InFlightCap, limits: Limits) -> Option<Shortfall> {
    if cap.source != CapSource::OpenFiles {
        return None;
    }
    let ceiling = cap.limit?;
    let open = cap.open_files_at_start.unwrap_or(0);
    let headroom = cap.headroom.unwrap_or(0);
    (ceiling < asked).then(|| Shortfall {
        asked,
        need: asked as u64 + open + headroom,
        limits,
        open,
        headroom,
        ceiling,
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
            "{} requests in flight need {} open files (one socket each, plus the {} open at \
             the run's start and {} kept for telemetry and artifacts), but the open-file limit \
             (RLIMIT_NOFILE) is {} (hard limit {}): at most {} (exact) will be in flight, the \
             rest wait for a slot (recorded as hold_ms; summary.json's in_flight_cap counts \
             them). To raise it: {raise} before canaryd starts, or LimitNOFILE={} in its \
             systemd unit",
            self.asked,
            self.need,
            self.open,
            self.headroom,
            self.limits.soft,
            self.limits.hard,
            self.ceiling,
            (self.need * 2).next_power_of_two().max(65_536),
        )
    }
}

/// Largest need already warned about, by setting: each is said once per process (a sweep's
/// points and a daemon's runs repeat the same settings).
static WARNED: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

/// Warns once, before the run's first request, when the open-file limit holds a run that
/// asked for `asked` requests in flight (named `setting`) to a lower ceiling, `cap`. Called
/// by the replay once it set the ceiling ([`canary_replay::Config::on_in_flight_cap`]):
/// checked earlier, the files the run opens itself (artifacts, its runtime, telemetry) were
/// not counted, and asks within that margin were held back silently.
pub fn warn_if_short(setting: &str, asked: Option<usize>, cap: &InFlightCap) {
    let (Some(asked), Some(limits)) = (asked, limits()) else {
        return;
    };
    let Some(short) = shortfall(asked, cap, limits) else {
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

    /// The replay's ceiling under the limit `soft` with `open` files open at the start, for
    /// `asked` requests in flight (as `canary_replay::in_flight_cap` sets it).
    fn cap(asked: usize, open: u64, soft: u64) -> InFlightCap {
        let headroom = (soft / 4).min(128);
        let room = soft.saturating_sub(open + headroom).max(1) as usize;
        InFlightCap {
            limit: Some(asked.min(room)),
            source: match asked <= room {
                true => CapSource::Concurrency,
                false => CapSource::OpenFiles,
            },
            open_files_limit: Some(soft),
            open_files_at_start: Some(open),
            headroom: Some(headroom),
            waited: 0,
        }
    }

    #[test]
    fn a_thousand_users_do_not_fit_in_1024_files() {
        let s = shortfall(1000, &cap(1000, 5, 1024), SOFT_1024).unwrap();
        assert_eq!((s.need, s.ceiling), (1000 + 5 + 128, 1024 - 5 - 128));
        let msg = s.to_string();
        assert!(
            msg.contains("1000 requests in flight need 1133 open files"),
            "{msg}"
        );
        assert!(
            msg.contains("plus the 5 open at the run's start and 128 kept"),
            "{msg}"
        );
        assert!(
            msg.contains("limit (RLIMIT_NOFILE) is 1024 (hard limit 1024)"),
            "{msg}"
        );
        assert!(
            msg.contains("at most 891 (exact) will be in flight"),
            "{msg}"
        );
        assert!(msg.contains("LimitNOFILE=65536"), "{msg}");
        assert!(msg.contains("raise the hard limit"), "{msg}");
    }

    #[test]
    fn what_fits_is_not_a_shortfall() {
        assert_eq!(shortfall(891, &cap(891, 5, 1024), SOFT_1024), None);
        assert!(shortfall(892, &cap(892, 5, 1024), SOFT_1024).is_some());
        // The files the run opened itself count: 8 asked under 48 files with 30 open.
        let low = Limits { soft: 48, hard: 48 };
        assert_eq!(shortfall(8, &cap(8, 30, 48), low).unwrap().ceiling, 6);
        let roomy = Limits {
            soft: 1024,
            hard: 524_288,
        };
        let msg = shortfall(5000, &cap(5000, 5, 1024), roomy)
            .unwrap()
            .to_string();
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
