//! GPU and inference-server telemetry for canaryd, stamped on the same monotonic clock
//! ([`canary_core::MonoTime`]) as request records, so both can be joined by time.
//!
//! - [`prometheus`]: a tolerant Prometheus-text / OpenMetrics parser (colon names, escapes,
//!   exemplars, `# EOF`; a bad line is skipped and counted, never the whole scrape).
#![deny(missing_docs)]

pub mod prometheus;
