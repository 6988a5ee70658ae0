//! canary-ebpf's integration tests: real programs in the real kernel (CI runs as root).
//! Each test skips with one message when the programs were not built (no clang) or this
//! process may not load them (not root).

mod load;

/// Says why a test is skipped, or fails it when `CANARYD_REQUIRE` lists `ebpf`
/// (scripts/test.sh does when clang and root are there, so CI cannot pass by skipping).
fn skip(why: &str) {
    let required = std::env::var("CANARYD_REQUIRE").unwrap_or_default();
    if required.split_whitespace().any(|t| t == "ebpf") {
        panic!("eBPF is required here (CANARYD_REQUIRE={required}) but: {why}");
    }
    eprintln!("SKIP {why}");
}

/// Starts the tracer for this process, or says why the test is skipped (`None`).
fn tracer_or_skip(test: &str) -> Option<canary_ebpf::Tracer> {
    if let Err(reason) = canary_ebpf::built() {
        skip(&format!("{test}: {reason}"));
        return None;
    }
    match canary_ebpf::Tracer::start(std::process::id()) {
        Ok(t) => Some(t),
        // As root the programs must load: a failure there is a bug, not a skip.
        Err(e) if unsafe { libc::geteuid() } == 0 => panic!("eBPF failed as root: {e}"),
        Err(e) => {
            skip(&format!("{test}: not root: {e}"));
            None
        }
    }
}
