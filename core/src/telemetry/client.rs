//! [`ClientCpu`]: how canaryd's own process fared for CPU during a run, `summary.json`'s
//! `client_cpu` section. A canary starved of CPU reads what the kernel already received
//! late, and every latency it reports grows by that wait: the diagnosis needs to know.
//! The telemetry crate measures it from `/proc` (Linux).

use serde::Serialize;

/// canaryd's process over one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClientCpu {
    /// Wall-clock seconds measured.
    pub wall_s: f64,
    /// CPU seconds canaryd used (user and system, every thread).
    pub cpu_s: f64,
    /// CPUs canaryd may run on (its affinity mask).
    pub cpus_allowed: u32,
    /// Cores' worth of CPU its cgroup's quota allows (`cpu.max`, `cfs_quota_us`), when set.
    pub cpu_quota_cores: Option<f64>,
    /// `cpu_s / (wall_s × min(cpus_allowed, quota))`: how much of the CPU it could have had it
    /// used (1 = saturated).
    pub utilization: f64,
    /// Seconds canaryd's threads waited, runnable, for a CPU (the scheduler's `run_delay`,
    /// `/proc/self/task/*/schedstat`); a lower bound when threads exited during the run.
    pub run_delay_s: f64,
    /// Times its threads were given a CPU.
    pub timeslices: u64,
    /// `run_delay_s / timeslices` in ms: how long a thread of canaryd waited for a CPU each
    /// time it woke, on average; the delay a read of a waiting response suffers.
    pub wait_per_wakeup_ms: Option<f64>,
    /// Threads that exited during the run: their waits are missing from the figures above.
    pub exited_threads: usize,
    /// Seconds its cgroup was throttled by its CPU quota, when known.
    pub throttled_s: Option<f64>,
}
