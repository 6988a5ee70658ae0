//! glibc's malloc arenas, capped at one per core (at least two) unless `MALLOC_ARENA_MAX` says
//! otherwise; and a fixed mmap threshold of 1 MiB unless `MALLOC_MMAP_THRESHOLD_` says
//! otherwise.
//!
//! Why: each run prepares its requests and reads their responses on worker threads of its own
//! (canary_replay's `request_runtime`), so a daemon running several workloads at once has
//! several threads allocating response buffers at the same time. glibc gives each such thread
//! an arena of its own, up to eight per core, and keeps what a thread freed in its arena: the
//! hostile-target soak (daemon/tests/soak.rs) peaked at 361 MiB that way, against 249 MiB
//! before runs had their own threads and 268 MiB with two arenas. canaryd's allocations are
//! small and come from few threads at a time, so fewer arenas cost it little contention.
//!
//! Why the threshold: what a response holds (an unfinished SSE line up to the event cap,
//! hyper's read buffer of 64 KiB) grows by doubling. glibc's threshold starts at 128 KiB and
//! rises to the largest mmap'd block freed, so after the first such buffers are freed the
//! next ones come from the arenas, where every step of each buffer's doubling leaves a hole
//! that is resident and rarely handed back. 300 responses each stalled inside a 300 KiB line
//! held about 200 KB each above their 300 KiB (bench/RESULTS.md, "held bytes and RSS"): RSS
//! ran far past `max_held_bytes`. A fixed threshold stops that: at 64 KiB the line buffers are
//! mmap'd (freed, they go back to the kernel; grown, they are moved by `mremap`), measured 126
//! KB per stream above the line, not 215. What is left is live: hyper grows its read buffer
//! inside the arena by `realloc`, to about twice 64 KiB.
//!
//! Why 1 MiB, not 64 KiB: 64 KiB gave every real-sized prompt (tens to hundreds of KiB)
//! pages of its own, an mmap, page faults and a munmap per request: replaying the real
//! Mooncake slice at 20× it cost 15 % more CPU and doubled the client's schedule lag p99
//! (1.05–1.83 ms against 0.55–0.57 ms; bench/RESULTS.md). At 1 MiB the line buffer's
//! doubling would be back in the arenas, so the SSE parser gives a line that outgrows 64 KiB
//! its room up to the event cap at once (canary_replay's sse.rs, `BIG_LINE`): one allocation
//! at the threshold, the same pages of its own.

/// The size from which an allocation gets pages of its own ([`cap`]): over any prompt but the
/// very longest, at the SSE event cap.
pub const MMAP_THRESHOLD: usize = 1 << 20;

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

/// Caps the arenas and fixes the mmap threshold at [`MMAP_THRESHOLD`]; call before any thread
/// is started. What it returns is about the arenas.
pub fn cap() -> Capped {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        fix_mmap_threshold(MMAP_THRESHOLD);
    }
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

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fix_mmap_threshold(bytes: usize) {
    let n = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: M_MMAP_THRESHOLD with a value up to 32 MiB is valid; it only changes where later
    // allocations come from (and stops glibc moving the threshold itself).
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, n) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_mmap_threshold(_bytes: usize) {}
