//! [`KernelRunSummary`]: kernel socket timing (eBPF) over one run, `summary.json`'s `kernel`
//! section. The eBPF crate's observer fills it as it joins events to records.

use crate::stats::Stats;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the kernel saw of a run's sockets. Fields in the order `summary.json` lists them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KernelRunSummary {
    /// Each request's p99 of chunk delay (kernel arrival → canaryd's read), ms.
    pub chunk_delay_p99: Option<Stats>,
    /// First-token bytes received by TCP → canaryd's code saw the token, ms.
    pub client_overhead: Option<Stats>,
    /// Events of the run's own request sockets (those its records name) drained from the
    /// ring buffer; other sockets of the process (an exporter's, a scraper's, another run's)
    /// are not counted.
    pub events: u64,
    /// Events the ring buffer dropped (full).
    pub events_lost: u64,
    /// Events dropped because their socket already held `MAX_EVENTS_PER_SOCKET` (65,536)
    /// since its previous request: that request has no kernel figures (counted in
    /// `requests_unseen`).
    pub events_over_cap: u64,
    /// Each program's runs and CPU time; only with `sysctl kernel.bpf_stats_enabled=1`
    /// (`null` otherwise), keyed by tracepoint.
    pub programs: Option<BTreeMap<String, KernelProgramStats>>,
    /// First response byte → first-token bytes received by TCP, ms.
    pub remainder: Option<Stats>,
    /// canaryd handed the request to the connection → its last byte handed to TCP, ms.
    pub request_write: Option<Stats>,
    /// Measured requests whose socket events were found.
    pub requests_joined: u64,
    /// Measured requests whose socket the kernel never reported (those without figures
    /// because the ring buffer lost events while they were in flight are not among them).
    pub requests_unseen: u64,
    /// Last request byte sent → first response byte received by TCP, ms.
    pub server_wait: Option<Stats>,
    /// Time canaryd spent draining and joining events: its own share of the cost, ms.
    pub userspace_ms: f64,
}

/// One eBPF program's cost over the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KernelProgramStats {
    /// Times it ran.
    pub runs: u64,
    /// CPU time of those runs, ms.
    pub run_time_ms: f64,
    /// Mean cost of one run, ns.
    pub ns_per_run: f64,
}
