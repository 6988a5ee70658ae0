//! canary-exporters against a real OTLP/HTTP receiver decoding what arrives (the end-to-end
//! test with a replay against `canary-sim` is the daemon's `otlp_export.rs`).

#[allow(dead_code)] // the binaries that set variables of their process use the rest of it
mod common;
mod latest;
mod logs;
mod mtls;
mod one_run;
mod partial;
#[allow(dead_code)] // the daemon's OTLP tests use the rest of it
mod receiver;
mod redirect;
mod refused;
mod retry;
mod secrets;
mod seeded;
mod tls;
mod trend;
