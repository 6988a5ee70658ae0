//! Real-time scheduling for canaryd's own threads: the release thread (always, where the
//! process may) and, with `--realtime-workers`, the async runtime's workers
//! ([`crate::workers`]). Both get the tightest timer slack.
//!
//! Priorities are the lowest real-time ones: enough to preempt every ordinary thread at once,
//! and far below the kernel's own real-time threads (interrupt handlers run at 50). The
//! release thread sits one above the workers so that a worker busy with a response never
//! delays a deadline: under `SCHED_FIFO` a thread is preempted only by a higher priority.

/// The release thread's priority.
pub(crate) const RELEASE_PRIORITY: u8 = 2;
/// The runtime workers' priority (`--realtime-workers`), below [`RELEASE_PRIORITY`].
pub(crate) const WORKER_PRIORITY: u8 = 1;
const _: () = assert!(WORKER_PRIORITY < RELEASE_PRIORITY);

/// The environment variable that keeps every thread ordinary on purpose (a host where a
/// real-time thread is unwelcome).
pub(crate) const NO_REALTIME_ENV: &str = "CANARYD_NO_REALTIME";

/// How the calling thread ended up scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scheduling {
    /// `SCHED_FIFO` at this priority.
    Realtime(u8),
    /// Ordinary scheduling, and why real-time priority was not had.
    Ordinary(String),
}

/// Applies both to the calling thread, the release thread: [`RELEASE_PRIORITY`], else 1 where
/// the process may have only that (`LimitRTPRIO=1`). Setting `CANARYD_NO_REALTIME=1` keeps
/// ordinary scheduling on purpose.
pub(crate) fn tighten() -> Scheduling {
    tighten_timer_slack();
    if let Some(why) = refused_by_env() {
        return Scheduling::Ordinary(why);
    }
    match set_fifo(RELEASE_PRIORITY, false) {
        Ok(()) => Scheduling::Realtime(RELEASE_PRIORITY),
        Err(e) => match set_fifo(1, false) {
            Ok(()) => Scheduling::Realtime(1),
            Err(_) => Scheduling::Ordinary(refusal(RELEASE_PRIORITY, &e)),
        },
    }
}

/// The default 50 µs timer slack would be most of a timed wake-up's error; 1 ns asks for none.
pub(crate) fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Gives the calling thread its process's default timer slack back.
pub(crate) fn default_timer_slack() {
    // SAFETY: as above; 0 restores the default.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 0 as libc::c_ulong, 0, 0, 0);
    }
}

/// Why real-time priority is refused by the environment, if it is.
pub(crate) fn refused_by_env() -> Option<String> {
    std::env::var_os(NO_REALTIME_ENV)
        .is_some_and(|v| v != "0" && !v.is_empty())
        .then(|| format!("{NO_REALTIME_ENV} is set"))
}

/// `SCHED_FIFO` at `priority` for the calling thread. With `reset_on_fork`, threads it
/// creates start ordinary (`SCHED_RESET_ON_FORK`): a real-time worker that starts a
/// blocking-pool thread or any helper thread must not hand it real-time priority.
pub(crate) fn set_fifo(priority: u8, reset_on_fork: bool) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority.into(),
    };
    let policy = libc::SCHED_FIFO
        | if reset_on_fork {
            SCHED_RESET_ON_FORK
        } else {
            0
        };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Ordinary scheduling for the calling thread again (always permitted).
pub(crate) fn set_ordinary() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in `set_fifo`.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `sched(7)`'s flag, not in every libc crate version.
const SCHED_RESET_ON_FORK: libc::c_int = 0x4000_0000;

/// What a refused `sched_setscheduler` means, and how to allow it.
pub(crate) fn refusal(priority: u8, e: &std::io::Error) -> String {
    format!(
        "sched_setscheduler(SCHED_FIFO, {priority}): {e} (needs CAP_SYS_NICE or an \
         RLIMIT_RTPRIO of at least {priority}, e.g. LimitRTPRIO={RELEASE_PRIORITY} in a \
         systemd unit, or `prlimit --rtprio={RELEASE_PRIORITY}`)"
    )
}

/// How much of each period the kernel lets real-time threads run
/// (`/proc/sys/kernel/sched_rt_runtime_us` of `sched_rt_period_us`): `None` when unlimited
/// (-1) or unreadable, then nothing bounds a real-time thread that never sleeps.
pub(crate) fn rt_throttle() -> Option<(u64, u64)> {
    let read = |f: &str| -> Option<i64> {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let runtime = read("sched_rt_runtime_us")?;
    let period = read("sched_rt_period_us")?;
    (runtime >= 0 && period > 0).then_some((runtime as u64, period as u64))
}

impl Scheduling {
    /// The policy's name as `sched(7)` spells it.
    pub(crate) fn policy(&self) -> &'static str {
        match self {
            Scheduling::Realtime(_) => "SCHED_FIFO",
            Scheduling::Ordinary(_) => "SCHED_OTHER",
        }
    }

    /// The real-time priority had, if any.
    pub(crate) fn priority(&self) -> Option<u8> {
        match self {
            Scheduling::Realtime(p) => Some(*p),
            Scheduling::Ordinary(_) => None,
        }
    }

    /// Why real-time priority was not had.
    pub(crate) fn unavailable(&self) -> Option<&str> {
        match self {
            Scheduling::Realtime(_) => None,
            Scheduling::Ordinary(why) => Some(why),
        }
    }
}

/// The calling thread's policy and priority, as the kernel has them.
#[cfg(test)]
pub(crate) fn current() -> (libc::c_int, libc::c_int) {
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid out-pointer.
    let policy = unsafe { libc::sched_getscheduler(0) };
    unsafe { libc::sched_getparam(0, &mut param) };
    (policy & !SCHED_RESET_ON_FORK, param.sched_priority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_thread_sits_above_real_time_workers() {
        let (had, now) = std::thread::spawn(|| (tighten(), current()))
            .join()
            .unwrap();
        match had {
            Scheduling::Realtime(p) => {
                assert_eq!(now, (libc::SCHED_FIFO, p.into()));
                // Where the process may have 2, it has 2: above the workers' 1.
                let may_have_2 = std::thread::spawn(|| set_fifo(RELEASE_PRIORITY, false))
                    .join()
                    .unwrap()
                    .is_ok();
                assert_eq!(p == RELEASE_PRIORITY, may_have_2, "{had:?}");
            }
            Scheduling::Ordinary(why) => {
                assert_eq!(now.0, libc::SCHED_OTHER);
                assert!(
                    why.contains("CAP_SYS_NICE") || why.contains(NO_REALTIME_ENV),
                    "{why}"
                );
                canary_testkit::skip("realtime", &format!("not permitted here: {why}"));
            }
        }
    }
}
