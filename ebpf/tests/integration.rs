//! canary-ebpf's integration tests: real programs in the real kernel (CI runs as root).
//! Each test skips, counted by the suite and saying why, when the programs were not built (no
//! clang) or this process may not load them (not root).

mod load;
mod observer;

use canary_testkit::skip;

/// Starts the tracer for this process, or records why the test is skipped (`None`); fails
/// instead when `CANARYD_REQUIRE` lists `ebpf` (scripts/test.sh does when clang and root are
/// there, so CI cannot pass by skipping).
fn tracer_or_skip() -> Option<canary_ebpf::Tracer> {
    if let Err(reason) = canary_ebpf::built() {
        skip("ebpf", reason);
        return None;
    }
    match canary_ebpf::Tracer::start(std::process::id()) {
        Ok(t) => Some(t),
        // As root the programs must load: a failure there is a bug, not a skip.
        Err(e) if unsafe { libc::geteuid() } == 0 => panic!("eBPF failed as root: {e}"),
        Err(e) => {
            skip("ebpf", &format!("not root: {e}"));
            None
        }
    }
}
