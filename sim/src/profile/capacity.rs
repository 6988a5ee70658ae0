//! Closed-form throughput and latency of a profile, so that tests can check canaryd's knee and
//! capacity searches against a known answer.
//!
//! With `M` sequences running, `isl` uncached prompt tokens and `osl` output tokens per request
//! (times in µs):
//!
//! ```text
//! P      = prefill_overhead_us + prefill_us_per_token × isl      (prefill of one request)
//! S(M)   = decode_base_us + decode_per_seq_us × M                 (one step, M running)
//! cycle  = osl × S(M) + M × P                                     (M requests, start to end)
//! rate   = M / cycle × 10^6 requests/s,   tokens/s = osl × rate
//! ```
//!
//! Why: a request holds its slot for exactly `osl` steps (the first token ends its prefill step,
//! each later step adds one), and a slot freed at the end of a step is refilled at the start of
//! the next one while requests wait. So over any `osl` consecutive steps at saturation each of
//! the `M` slots starts exactly one request, the steps cost `osl × S(M)` plus one prefill per
//! request, whatever the phases of the slots. The figure is exact in the engine's virtual time
//! for a queue that never empties (the host keeping up with the engine).

use super::{KvAdmission, Profile};

/// Throughput of a profile at a given concurrency (see the module docs for the formula).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Sequences running at once.
    pub concurrency: u32,
    /// Requests completed per second.
    pub requests_per_s: f64,
    /// Output (decode) tokens per second: `requests_per_s × osl`.
    pub output_tokens_per_s: f64,
    /// Mean engine step, seconds (decode plus the prefills spread over the steps).
    pub mean_step_s: f64,
    /// Whether the figure is exact. It is an estimate only for optimistic admission when the KV
    /// budget cannot hold `concurrency × (isl + osl)` tokens: preemptions then depend on the
    /// arrival pattern, and the figure is the reserve-mode one.
    pub exact: bool,
}

/// Latency of one request alone on an idle engine, in seconds (virtual time: the sim adds up
/// to about 1 ms of timer granularity, and the client its own network and read time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnloadedLatency {
    /// Arrival to first token: its prefill step, `P + S(1)`.
    pub ttft_s: f64,
    /// Between tokens: `S(1)`.
    pub itl_s: f64,
    /// Arrival to last token: `ttft + (osl - 1) × itl`.
    pub e2e_s: f64,
}

impl Profile {
    /// Saturation throughput for requests of `isl` prompt tokens (none found in the prefix
    /// cache) and `osl` output tokens: [`Profile::throughput_at`] with the most sequences that
    /// can run at once, `min(max_running, kv_budget_tokens / (isl + osl))` (at least 1). Above
    /// this rate the waiting queue grows without bound. Infinite for a profile with no compute
    /// time (`fast`).
    pub fn capacity(&self, isl: u32, osl: u32) -> Capacity {
        let osl = osl.max(1);
        let need = isl as u64 + osl as u64;
        let by_kv = (self.kv_budget_tokens / need.max(1)).max(1);
        let concurrency = (self.max_running as u64).min(by_kv) as u32;
        let mut c = self.throughput_at(isl, osl, concurrency);
        c.exact = self.kv_admission == KvAdmission::Reserve
            || self.max_running as u64 * need <= self.kv_budget_tokens;
        c
    }

    /// Throughput with exactly `concurrency` sequences always running (a closed loop of that
    /// many users with no think time, or an open loop that keeps the engine full). For a closed
    /// loop it is an upper bound: the client's turnaround leaves slots empty for a step now and
    /// then.
    pub fn throughput_at(&self, isl: u32, osl: u32, concurrency: u32) -> Capacity {
        let osl = osl.max(1) as f64;
        let m = concurrency.max(1) as f64;
        let prefill_us = self.prefill_ns(isl as u64) / 1_000.0;
        let step_us = self.decode_step_ns(concurrency.max(1) as usize) / 1_000.0;
        let cycle_us = osl * step_us + m * prefill_us;
        let requests_per_s = if cycle_us > 0.0 {
            m * 1e6 / cycle_us
        } else {
            f64::INFINITY
        };
        Capacity {
            concurrency: concurrency.max(1),
            requests_per_s,
            output_tokens_per_s: requests_per_s * osl,
            mean_step_s: cycle_us / osl / 1e6,
            exact: true,
        }
    }

    /// Latency of one request on an otherwise idle engine.
    pub fn unloaded_latency(&self, isl: u32, osl: u32) -> UnloadedLatency {
        let itl_s = self.decode_step_ns(1) / 1e9;
        let ttft_s = self.prefill_ns(isl as u64) / 1e9 + itl_s;
        UnloadedLatency {
            ttft_s,
            itl_s,
            e2e_s: ttft_s + (osl.max(1) - 1) as f64 * itl_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_profile_numbers() {
        let p = Profile::capacity_profile();
        let c = p.capacity(32, 16);
        // cycle = 16 × (2000 + 250 × 8) + 8 × (1000 + 10 × 32) = 64000 + 10560 µs for 8 requests.
        assert_eq!(c.concurrency, 8);
        assert!((c.requests_per_s - 8e6 / 74_560.0).abs() < 1e-9, "{c:?}");
        assert!((c.output_tokens_per_s - 16.0 * 8e6 / 74_560.0).abs() < 1e-9);
        assert!((c.mean_step_s - 74_560e-6 / 16.0).abs() < 1e-12);
        assert!(c.exact);
        // One request alone: 1320 µs prefill + 2250 µs step; then 2250 µs per token.
        let u = p.unloaded_latency(32, 16);
        assert!((u.ttft_s - 3.57e-3).abs() < 1e-12, "{u:?}");
        assert!((u.e2e_s - (3.57e-3 + 15.0 * 2.25e-3)).abs() < 1e-12);
        // Fewer users than slots: less throughput.
        assert!(p.throughput_at(32, 16, 4).requests_per_s < c.requests_per_s);
    }

    #[test]
    fn kv_budget_limits_concurrency() {
        let mut p = Profile::capacity_profile();
        p.kv_budget_tokens = 100; // room for two requests of 32 + 16
        let c = p.capacity(32, 16);
        assert_eq!(c.concurrency, 2);
        assert!(c.exact);
        p.kv_admission = KvAdmission::Optimistic;
        assert!(!p.capacity(32, 16).exact, "preemptions make it an estimate");
        p.kv_budget_tokens = 8 * 48;
        assert!(p.capacity(32, 16).exact);
        // A request larger than the budget still runs, alone.
        assert_eq!(p.capacity(1000, 16).concurrency, 1);
        assert!(Profile::fast()
            .capacity(32, 16)
            .requests_per_s
            .is_infinite());
    }
}
