//! glibc's malloc arenas, capped at one per core (at least two) unless `MALLOC_ARENA_MAX` says
//! otherwise.
//!
//! Why: each run prepares its requests and reads their responses on worker threads of its own
//! (canary_replay's `request_runtime`), so a daemon running several workloads at once has
//! several threads allocating response buffers at the same time. glibc gives each such thread
//! an arena of its own, up to eight per core, and keeps what a thread freed in its arena: the
//! hostile-target soak (daemon/tests/soak.rs) peaked at 361 MiB that way, against 249 MiB
//! before runs had their own threads and 268 MiB with two arenas. canaryd's allocations are
//! small and come from few threads at a time, so fewer arenas cost it little contention.

/// What [`cap`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capped {
    /// Capped at this many arenas.
    At(usize),
    /// `MALLOC_ARENA_MAX` is set: glibc follows it.
    ByEnvironment,
    /// Not glibc, or glibc refused.
    Not,
}

/// Caps the arenas; call before any thread is started.
pub fn cap() -> Capped {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return Capped::ByEnvironment;
    }
    let arenas = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    set(arenas)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set(arenas: usize) -> Capped {
    let n = libc::c_int::try_from(arenas).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt takes a parameter and a value; M_ARENA_MAX with any positive value is
    // valid, and it only changes how later allocations pick an arena.
    if unsafe { libc::mallopt(libc::M_ARENA_MAX, n) } == 1 {
        Capped::At(arenas)
    } else {
        Capped::Not
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set(_arenas: usize) -> Capped {
    Capped::Not
}
