//! Which traces are sampled: one rule for the replay's `traceparent` flag and the exporter.

/// Whether the trace `trace_id` (32 hex digits) is sampled at `ratio`: the OpenTelemetry
/// SDK's `TraceIdRatioBased` rule (the low 63 bits of the trace id against the ratio). The
/// replay flags `traceparent` by it and the exporter sends spans by it, so the server's
/// parent-based sampler keeps exactly the spans canaryd exports. False for a malformed id.
pub fn trace_sampled(trace_id: &str, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let Some(low) = trace_id
        .get(16..32)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
    else {
        return false;
    };
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    (low >> 1) < bound
}
