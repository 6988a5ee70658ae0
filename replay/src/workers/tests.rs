use super::*;
use crate::dispatch::priority::current;
use std::time::Duration;

/// Whether this process may take `SCHED_FIFO` (root, CAP_SYS_NICE or RLIMIT_RTPRIO); tried on
/// a throwaway thread. Else a counted skip.
fn realtime_permitted() -> bool {
    let tried = std::thread::spawn(|| priority::set_fifo(WORKER_PRIORITY, false))
        .join()
        .unwrap();
    match tried {
        Ok(()) => true,
        Err(e) => {
            canary_testkit::skip(
                "realtime",
                &format!("SCHED_FIFO is not permitted here ({e}); CI runs as root"),
            );
            false
        }
    }
}

fn runtime(workers: &RealtimeWorkers, threads: usize) -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(threads).enable_all();
    workers.configure(&mut b);
    let rt = b.build().unwrap();
    workers.register(rt.handle());
    rt
}

/// Waits (bounded; not a timing assertion) until `n` workers are raised, or returns what was.
fn wait_raised(workers: &RealtimeWorkers, n: u64) -> WorkersContext {
    for _ in 0..500 {
        let c = workers.context();
        if c.realtime_threads == n {
            return c;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    workers.context()
}

/// The policy and priority the kernel reports for thread `tid` (`/proc/self/task/TID/stat`
/// fields 40 and 41: rt_priority, policy), read from outside that thread.
fn proc_policy(tid: libc::pid_t) -> (i32, i32) {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // Fields after the command name, which ends at the last ')': state is field 3.
    let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let field = |n: usize| rest[n - 3].parse::<i32>().unwrap();
    (field(41), field(40))
}

fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Distinct workers' (tid, policy, priority); a blocking-pool thread's and a started thread's
/// (policy, priority).
type Looked = (Vec<(i32, i32, i32)>, (i32, i32), (i32, i32));

/// From tasks, what each worker thread's scheduling is: (tid, policy, priority) per distinct
/// worker seen, and the same for a blocking-pool thread and a thread a worker starts.
fn look(rt: &tokio::runtime::Runtime) -> Looked {
    rt.block_on(async {
        let mut seen = Vec::new();
        for _ in 0..64 {
            let got = tokio::spawn(async {
                let (policy, prio) = current();
                (gettid(), policy, prio)
            })
            .await
            .unwrap();
            if !seen.iter().any(|s: &(i32, i32, i32)| s.0 == got.0) {
                seen.push(got);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Asked from a worker, as a run asks: the pool's thread is started by that worker.
        let blocking = tokio::spawn(async { tokio::task::spawn_blocking(current).await.unwrap() })
            .await
            .unwrap();
        let started = tokio::spawn(async { std::thread::spawn(current).join().unwrap() })
            .await
            .unwrap();
        (seen, blocking, started)
    })
}

#[test]
fn realtime_workers_run_sched_fifo_below_the_release_thread_and_their_threads_start_ordinary() {
    if !realtime_permitted() {
        return;
    }
    let workers = RealtimeWorkers::new(true);
    let rt = runtime(&workers, 2);
    let c = wait_raised(&workers, 2);
    assert_eq!(c.realtime_threads, 2, "{c:?}");
    assert_eq!(c.scheduling, "SCHED_FIFO");
    assert_eq!(c.priority, Some(WORKER_PRIORITY));
    assert!(
        c.realtime_requested && c.realtime_unavailable.is_none(),
        "{c:?}"
    );

    let (seen, blocking, started) = look(&rt);
    assert!(!seen.is_empty());
    for (tid, policy, prio) in &seen {
        assert_eq!((*policy, *prio), (libc::SCHED_FIFO, 1), "worker {tid}");
        // The kernel's own view, from another thread.
        assert_eq!(proc_policy(*tid), (libc::SCHED_FIFO, 1), "worker {tid}");
    }
    // Prompt building and flushing run on the blocking pool: never real-time.
    assert_eq!(blocking, (libc::SCHED_OTHER, 0), "blocking-pool thread");
    assert_eq!(started, (libc::SCHED_OTHER, 0), "a thread a worker starts");
    // A run on this runtime says so.
    let said = rt.block_on(async { context() });
    assert_eq!(
        said.value().map(|c| c.realtime_threads),
        Some(2),
        "{said:?}"
    );

    // A daemon's reload turns it off: each worker follows before it next parks.
    workers.set(false);
    rt.block_on(async {
        for _ in 0..8 {
            tokio::spawn(async {}).await.unwrap();
        }
    });
    let c = wait_raised(&workers, 0);
    assert_eq!(c.realtime_threads, 0, "{c:?}");
    assert_eq!(c.scheduling, "SCHED_OTHER");
    let (seen, _, _) = look(&rt);
    for (tid, policy, _) in &seen {
        assert_eq!(*policy, libc::SCHED_OTHER, "worker {tid} after set(false)");
    }
}

#[test]
fn without_the_flag_workers_stay_ordinary() {
    let workers = RealtimeWorkers::new(false);
    let rt = runtime(&workers, 2);
    let (seen, _, _) = look(&rt);
    for (tid, policy, _) in &seen {
        assert_eq!(*policy, libc::SCHED_OTHER, "worker {tid}");
    }
    let c = workers.context();
    assert_eq!(c.realtime_threads, 0);
    assert_eq!(c.scheduling, "SCHED_OTHER");
    assert!(
        !c.realtime_requested && c.realtime_unavailable.is_none(),
        "{c:?}"
    );
}

#[test]
fn a_runtime_canaryd_did_not_build_is_unknown_not_guessed() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let c = rt.block_on(async { context() });
    assert!(c.value().is_none(), "{c:?}");
    assert!(context().value().is_none(), "outside any runtime");
}

/// `CANARYD_REALTIME_WORKERS_MAX` read as the workers take it and as the daemon warns about
/// it, from one parse: a whole number limits, anything else raises every worker and is the
/// one value warned about (never shown).
#[test]
fn the_max_threads_variable_is_a_limit_or_a_warning_from_one_parse() {
    use super::MaxThreadsEnv;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let unset = MaxThreadsEnv::parse(None);
    assert_eq!((unset.limit(), unset.warning()), (usize::MAX, None));
    let two = MaxThreadsEnv::parse(Some(OsStr::new("2")));
    assert_eq!(
        (two, two.limit(), two.warning()),
        (MaxThreadsEnv::Set(2), 2, None)
    );
    for bad in [
        OsStr::new("-3"),
        OsStr::new(" 2"),
        OsStr::new(""),
        OsStr::from_bytes(b"\xff"),
    ] {
        let got = MaxThreadsEnv::parse(Some(bad));
        assert_eq!(
            (got, got.limit()),
            (MaxThreadsEnv::Invalid, usize::MAX),
            "{bad:?}"
        );
        let w = got.warning().unwrap();
        assert!(
            w.starts_with(
                "CANARYD_REALTIME_WORKERS_MAX is not a whole number of 0 or more (the value is \
                 not shown)"
            ),
            "{w}"
        );
    }
}
