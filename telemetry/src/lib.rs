//! canary-telemetry: GPU and server telemetry.
