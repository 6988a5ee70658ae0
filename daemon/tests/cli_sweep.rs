//! `canaryd sweep` as a real process (daemon/tests/cli/sweep.rs), in a test binary of its own.
//!
//! Several of these tests need the simulator to keep up with its virtual time (the knee at the
//! known capacity, no knee below it, `--find-max-rate` within 10 %). Inside the `cli` binary
//! their lock held off only the other sweep tests: the rest of that binary (a thousand
//! connections in `open_files`, SCHED_FIFO workers in `realtime`, …) ran beside them on the
//! same cores. Cargo runs test binaries one after another, so here they share the host only
//! with the sweep tests, and those take `sweep::timing` or `sweep::shared`.

mod common;
#[path = "cli/file_limits.rs"]
mod file_limits;
#[allow(dead_code)] // the OTLP tests use more of it than the sweep's export does
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;
#[path = "cli/sweep.rs"]
mod sweep;

use std::path::Path;
use std::process::{Command, Output};

/// `canaryd ARGS` in `cwd`; the developer's own measurement knobs never reach it.
fn canaryd(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CANARYD_REQUEST_WORKERS")
        .output()
        .expect("canaryd runs")
}
