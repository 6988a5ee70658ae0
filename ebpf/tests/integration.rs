//! canary-ebpf's integration tests: real programs in the real kernel (CI runs as root).
//! Each test skips, counted by the suite and saying why, when the programs were not built (no
//! clang) or this process may not load them (not root).

mod load;
mod observer;

use canary_testkit::skip;

/// Starts the tracer for this process, or records why the test is skipped (`None`); fails
/// instead when `CANARYD_REQUIRE` lists `ebpf` (scripts/test.sh does when `canaryd doctor`
/// found eBPF available on the host, so CI cannot pass by skipping).
fn tracer_or_skip() -> Option<canary_ebpf::Tracer> {
    use canary_ebpf::Unavailable;
    if let Err(reason) = canary_ebpf::built() {
        skip("ebpf", reason);
        return None;
    }
    let root = unsafe { libc::geteuid() } == 0;
    match canary_ebpf::Tracer::start(std::process::id()) {
        Ok(t) => Some(t),
        Err(e) if !root => {
            skip("ebpf", &format!("not root: {e}"));
            None
        }
        // Root, and the host refuses (lockdown, seccomp, a container without CAP_BPF) or has
        // no BTF: the host's doing, a counted skip.
        Err(e @ (Unavailable::NotPermitted(_) | Unavailable::NoBtf(_))) => {
            skip(
                "ebpf",
                &format!("root, but this host does not load eBPF programs: {e}"),
            );
            None
        }
        // As root on a host that allows it the programs must load: a failure is a bug.
        Err(e) => panic!("eBPF failed as root: {e}"),
    }
}
