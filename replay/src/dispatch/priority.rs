//! The release thread's own scheduling: the tightest timer slack, and real-time priority where
//! the process may have it.

/// The real-time priority asked for: the lowest, enough to preempt every ordinary thread at
/// once and below the kernel's own real-time threads (interrupt handlers run at 50).
const FIFO_PRIORITY: libc::c_int = 1;

/// How the calling thread ended up scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scheduling {
    /// `SCHED_FIFO` at [`FIFO_PRIORITY`].
    Realtime,
    /// Ordinary scheduling, and why real-time priority was not had.
    Ordinary(String),
}

/// Applies both to the calling thread. Setting `CANARYD_NO_REALTIME=1` keeps ordinary
/// scheduling on purpose (a host where a real-time thread is unwelcome).
pub(crate) fn tighten() -> Scheduling {
    // The default 50 µs timer slack would be most of the wake-up error; 1 ns asks for none.
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    if std::env::var_os("CANARYD_NO_REALTIME").is_some_and(|v| v != "0" && !v.is_empty()) {
        return Scheduling::Ordinary("CANARYD_NO_REALTIME is set".into());
    }
    let param = libc::sched_param {
        sched_priority: FIFO_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Scheduling::Realtime
    } else {
        let e = std::io::Error::last_os_error();
        Scheduling::Ordinary(format!(
            "sched_setscheduler(SCHED_FIFO, {FIFO_PRIORITY}): {e} (needs CAP_SYS_NICE or an \
             RLIMIT_RTPRIO of at least {FIFO_PRIORITY}, e.g. LimitRTPRIO=1 in a systemd unit)"
        ))
    }
}

impl Scheduling {
    /// The policy's name as `sched(7)` spells it.
    pub(crate) fn policy(&self) -> &'static str {
        match self {
            Scheduling::Realtime => "SCHED_FIFO",
            Scheduling::Ordinary(_) => "SCHED_OTHER",
        }
    }

    /// Why real-time priority was not had.
    pub(crate) fn unavailable(&self) -> Option<&str> {
        match self {
            Scheduling::Realtime => None,
            Scheduling::Ordinary(why) => Some(why),
        }
    }
}
