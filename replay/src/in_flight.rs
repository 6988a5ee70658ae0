//! How many requests a run keeps in flight at most, and why.
//!
//! Every request in flight holds a socket, and a process may open only `RLIMIT_NOFILE` files.
//! Past it, `connect` fails with "Too many open files": canaryd's own limit, which used to be
//! recorded as the target's `connect` errors (issue 14: 110,800 of them at 30k req/s offered).
//! So a run keeps at most the open-file limit, less what is already open and some headroom
//! for telemetry, artifacts and eBPF, in flight; `--concurrency` wins when it is lower.

use canary_core::{CapSource, InFlightCap};

/// The ceiling for a run asking for `concurrency`, on this process as it is now.
pub fn in_flight_cap(concurrency: Option<usize>) -> InFlightCap {
    let files = open_files();
    let derived = files.map(|(limit, open)| {
        let headroom = headroom(limit);
        let cap = limit.saturating_sub(open.unwrap_or(0) + headroom).max(1);
        (cap.min(usize::MAX as u64) as usize, limit, open, headroom)
    });
    match (concurrency, derived) {
        (Some(c), Some((cap, ..))) if c <= cap => setting(c),
        (Some(c), None) => setting(c),
        (_, Some((cap, limit, open, headroom))) => InFlightCap {
            limit: Some(cap),
            source: CapSource::OpenFiles,
            open_files_limit: Some(limit),
            open_files_at_start: open,
            headroom: Some(headroom),
            waited: 0,
        },
        (None, None) => InFlightCap {
            limit: None,
            source: CapSource::None,
            open_files_limit: None,
            open_files_at_start: None,
            headroom: None,
            waited: 0,
        },
    }
}

/// Whether this process has a descriptor to spare beyond `cap`'s requests and the headroom
/// (for something a run may do without, as the receive-stamp hold); `true` when the
/// open-file limit is unknown or unlimited.
pub fn file_to_spare(cap: &InFlightCap) -> bool {
    let Some((limit, open)) = open_files() else {
        return true;
    };
    let requests = cap.limit.unwrap_or(0) as u64;
    open.unwrap_or(0) + requests + headroom(limit) < limit
}

fn setting(c: usize) -> InFlightCap {
    InFlightCap {
        limit: Some(c),
        source: CapSource::Concurrency,
        open_files_limit: None,
        open_files_at_start: None,
        headroom: None,
        waited: 0,
    }
}

/// Files kept free for everything but requests: a quarter of the limit, at most 128.
fn headroom(limit: u64) -> u64 {
    (limit / 4).min(128)
}

/// The soft `RLIMIT_NOFILE` and the files open now (unknown when `/proc/self/fd` cannot be
/// read, as when no descriptor is left to read it with); `None` without a finite limit.
fn open_files() -> Option<(u64, Option<u64>)> {
    let (soft, _) = open_files_limits()?;
    let open = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    Some((soft, open))
}

/// The process's `RLIMIT_NOFILE`, soft and hard; `None` when it cannot be read or the soft
/// limit is unlimited.
pub fn open_files_limits() -> Option<(u64, u64)> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0
        || rl.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some((rl.rlim_cur, rl.rlim_max))
}

/// True when an I/O error means canaryd itself is out of a resource: open files (per process
/// or system-wide), memory or buffer space, or local ports for a new connection.
pub fn is_client_exhaustion(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS | libc::EADDRNOTAVAIL)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_leaves_headroom_below_the_open_file_limit() {
        let (limit, _) = open_files().expect("Linux has a finite RLIMIT_NOFILE here");
        let cap = in_flight_cap(None);
        assert_eq!(cap.source.as_str(), "open_files");
        assert_eq!(cap.open_files_limit, Some(limit));
        let n = cap.limit.unwrap() as u64;
        assert!(n >= 1 && n <= limit - headroom(limit), "{cap:?}");
        // A lower setting wins; a higher one does not.
        assert_eq!(in_flight_cap(Some(3)), setting(3));
        assert_eq!(
            in_flight_cap(Some(usize::MAX)).source.as_str(),
            "open_files",
            "{cap:?}"
        );
        assert_eq!(headroom(64), 16);
        assert_eq!(headroom(1 << 20), 128);
    }

    #[test]
    fn running_out_of_files_memory_or_ports_is_the_clients_doing() {
        for errno in [
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOMEM,
            libc::ENOBUFS,
            libc::EADDRNOTAVAIL,
        ] {
            assert!(is_client_exhaustion(&std::io::Error::from_raw_os_error(
                errno
            )));
        }
        for errno in [libc::ECONNREFUSED, libc::ETIMEDOUT, libc::ENETUNREACH] {
            assert!(!is_client_exhaustion(&std::io::Error::from_raw_os_error(
                errno
            )));
        }
    }
}
