//! Identifiers sent with each request: W3C trace context and request ids.

use std::sync::atomic::{AtomicU64, Ordering};

static STATE: AtomicU64 = AtomicU64::new(0);

/// A fast, non-cryptographic 64-bit id (splitmix64 over a per-process counter seeded from
/// the clock and pid). Trace ids need uniqueness, not secrecy.
pub fn next_u64() -> u64 {
    if STATE.load(Ordering::Relaxed) == 0 {
        let seed = canary_core::MonoTime::now().0
            ^ ((std::process::id() as u64) << 32)
            ^ 0x9e37_79b9_7f4a_7c15;
        let _ = STATE.compare_exchange(0, seed, Ordering::Relaxed, Ordering::Relaxed);
    }
    canary_core::splitmix64(STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed))
}

/// A W3C trace context for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
}

impl TraceContext {
    /// A new random, sampled context.
    pub fn new() -> TraceContext {
        TraceContext {
            trace_id: format!("{:016x}{:016x}", next_u64(), next_u64() | 1),
            span_id: format!("{:016x}", next_u64() | 1),
        }
    }

    /// The `traceparent` header value, flagged sampled.
    pub fn traceparent(&self) -> String {
        self.traceparent_sampled(true)
    }

    /// The `traceparent` header value with the sampled flag set or not, so the server's
    /// parent-based sampler exports its spans exactly when canaryd exports the parent.
    pub fn traceparent_sampled(&self, sampled: bool) -> String {
        let flags = if sampled { "01" } else { "00" };
        format!("00-{}-{}-{flags}", self.trace_id, self.span_id)
    }

    /// True when this trace is sampled at `ratio`: the OpenTelemetry SDK's
    /// `TraceIdRatioBased` rule (the low 63 bits of the trace id against the ratio), which
    /// canaryd's exporter applies too.
    pub fn is_sampled(&self, ratio: f64) -> bool {
        canary_core::trace_sampled(&self.trace_id, ratio)
    }
}

impl Default for TraceContext {
    fn default() -> Self {
        TraceContext::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::trace_sampled as sampled;

    #[test]
    fn traceparent_is_well_formed_and_unique() {
        let a = TraceContext::new();
        let b = TraceContext::new();
        assert_ne!(a, b);
        let tp = a.traceparent();
        let parts: Vec<_> = tp.split('-').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(
            (parts[0], parts[1].len(), parts[2].len(), parts[3]),
            ("00", 32, 16, "01")
        );
        assert!(parts[1].chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(parts[1], "0".repeat(32));
        assert!(a.traceparent_sampled(false).ends_with("-00"));
    }

    #[test]
    fn sampling_follows_the_low_bits_of_the_trace_id() {
        let low = "0000000000000000000000000000000f";
        let high = "0000000000000000fffffffffffffff0";
        assert!(sampled(low, 0.5) && !sampled(high, 0.5));
        assert!(sampled(high, 1.0) && !sampled(low, 0.0));
        let n = (0..4000)
            .filter(|_| TraceContext::new().is_sampled(0.25))
            .count();
        assert!((800..1200).contains(&n), "{n}");
    }
}
