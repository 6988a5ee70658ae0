//! [`ClientCpuObserver`]: canaryd's own CPU over a run's measured phase, from the kernel's
//! counters: each thread's CPU time, wait for a CPU and timeslices
//! (`/proc/self/task/*/schedstat`, nanoseconds), and its cgroup's CPU-quota throttling
//! (`cpu.stat`: v2 `throttled_usec`, v1 `throttled_time`). A canary starved of CPU reads late
//! what the kernel already received, and every latency it reports grows by that wait: the
//! diagnosis's `client-bound` rule reads these figures.
//!
//! Two snapshots per run (when the measured phase starts and when it ends), each holding at
//! most [`MAX_THREADS`] threads: memory is bounded whatever the run.

mod cgroup;
#[cfg(test)]
mod tests;

use canary_core::{ClientCpu, MonoTime, Observer, PhaseFuture, RequestRecord, RunSummary};
use canary_core::{RunTelemetry, TelemetryFuture};
use cgroup::CgroupCpu;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// Threads read per snapshot; beyond it a thread's figures are left out (and counted as
/// exited, so the figures read as lower bounds).
pub const MAX_THREADS: usize = 4096;

/// One thread's `schedstat`: ns on a CPU, ns runnable waiting for one, timeslices.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ThreadStat {
    cpu_ns: u64,
    wait_ns: u64,
    slices: u64,
}

fn parse_schedstat(s: &str) -> Option<ThreadStat> {
    let mut it = s.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(ThreadStat {
        cpu_ns: it.next()??,
        wait_ns: it.next()??,
        slices: it.next()??,
    })
}

/// The CPUs in a `Cpus_allowed_list` (`0-3,6`).
fn count_cpu_list(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.trim().parse::<u32>().ok()? - a.trim().parse::<u32>().ok()? + 1,
            None => {
                part.trim().parse::<u32>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

fn cpus_allowed(proc_self: &Path) -> u32 {
    std::fs::read_to_string(proc_self.join("status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(count_cpu_list)
        })
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u32)
        })
        .unwrap_or(1)
}

/// What the kernel said of the process at one moment.
#[derive(Debug, Clone)]
struct Snapshot {
    at: Instant,
    threads: BTreeMap<u32, ThreadStat>,
    /// Threads that were not read (over [`MAX_THREADS`], or unreadable).
    unread: usize,
    cgroup: Option<CgroupCpu>,
}

impl Snapshot {
    fn take(proc_self: &Path, cgroups: Option<&cgroup::Located>) -> Option<Snapshot> {
        let at = Instant::now();
        let mut threads = BTreeMap::new();
        let mut unread = 0;
        for entry in std::fs::read_dir(proc_self.join("task")).ok()?.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if threads.len() >= MAX_THREADS {
                unread += 1;
                continue;
            }
            // A thread may exit between the listing and the read.
            match std::fs::read_to_string(entry.path().join("schedstat"))
                .ok()
                .and_then(|s| parse_schedstat(&s))
            {
                Some(st) => {
                    threads.insert(tid, st);
                }
                None => unread += 1,
            }
        }
        if threads.is_empty() {
            return None;
        }
        Some(Snapshot {
            at,
            threads,
            unread,
            cgroup: cgroups.and_then(|c| c.read()),
        })
    }
}

/// What happened between two snapshots.
fn between(a: &Snapshot, b: &Snapshot, cpus_allowed: u32) -> ClientCpu {
    let wall_s = b.at.saturating_duration_since(a.at).as_secs_f64();
    let (mut cpu, mut wait, mut slices) = (0u64, 0u64, 0u64);
    for (tid, end) in &b.threads {
        // A thread born during the run counts from zero.
        let start = a.threads.get(tid).copied().unwrap_or_default();
        cpu += end.cpu_ns.saturating_sub(start.cpu_ns);
        wait += end.wait_ns.saturating_sub(start.wait_ns);
        slices += end.slices.saturating_sub(start.slices);
    }
    let exited = a
        .threads
        .keys()
        .filter(|t| !b.threads.contains_key(t))
        .count()
        + b.unread;
    let quota = b.cgroup.as_ref().and_then(|c| c.quota_cores);
    let usable = quota.map_or(cpus_allowed as f64, |q| q.min(cpus_allowed as f64));
    let cpu_s = cpu as f64 / 1e9;
    let run_delay_s = wait as f64 / 1e9;
    let throttle = match (&a.cgroup, &b.cgroup) {
        (Some(x), Some(y)) if x.stat == y.stat => y.throttled_since(x),
        _ => None,
    };
    ClientCpu {
        wall_s,
        cpu_s,
        cpus_allowed,
        cpu_quota_cores: quota,
        utilization: if wall_s > 0.0 && usable > 0.0 {
            cpu_s / (wall_s * usable)
        } else {
            0.0
        },
        run_delay_s,
        timeslices: slices,
        wait_per_wakeup_ms: (slices > 0).then(|| run_delay_s * 1e3 / slices as f64),
        exited_threads: exited,
        throttled_s: throttle.map(|t| t.0),
        throttled_periods: throttle.map(|t| t.1),
        cgroup: b.cgroup.as_ref().map(|c| c.stat.display().to_string()),
    }
}

/// Measures canaryd's own process over the measured phase.
pub struct ClientCpuObserver {
    cgroups: Option<cgroup::Located>,
    cpus_allowed: u32,
    start: Mutex<Option<Snapshot>>,
}

impl ClientCpuObserver {
    /// Starts measuring now (again when the measured phase starts). `None` where the kernel
    /// gives no per-thread `schedstat` (not Linux, or `/proc` not mounted).
    pub fn start() -> Option<ClientCpuObserver> {
        let proc_self = Path::new("/proc/self");
        let cgroups = cgroup::Located::find(proc_self);
        let first = Snapshot::take(proc_self, cgroups.as_ref())?;
        Some(ClientCpuObserver {
            cgroups,
            cpus_allowed: cpus_allowed(proc_self),
            start: Mutex::new(Some(first)),
        })
    }

    fn snapshot(&self) -> Option<Snapshot> {
        Snapshot::take(Path::new("/proc/self"), self.cgroups.as_ref())
    }
}

impl Observer for ClientCpuObserver {
    fn annotate(&self, _record: &mut RequestRecord, _t0: MonoTime) {}

    fn measured_phase(&self, _warmup_requests: usize) -> PhaseFuture<'_> {
        Box::pin(async move {
            if let Some(s) = self.snapshot() {
                *self.start.lock().expect("client cpu lock") = Some(s);
            }
        })
    }

    fn finish<'a>(
        &'a self,
        _t0: MonoTime,
        _end: MonoTime,
        _summary: &'a RunSummary,
    ) -> TelemetryFuture<'a> {
        Box::pin(async move {
            let start = self.start.lock().expect("client cpu lock").clone();
            let client_cpu = match (start, self.snapshot()) {
                (Some(a), Some(b)) => Some(between(&a, &b, self.cpus_allowed)),
                _ => None,
            };
            RunTelemetry {
                client_cpu,
                ..Default::default()
            }
        })
    }
}
