//! Loading the socket programs into the kernel, attaching them, and reading their events.
//!
//! Everything that can be missing is reported as an [`Unavailable`] reason, never a panic:
//! programs not built (no clang at build time), no kernel BTF, not permitted (no CAP_BPF /
//! CAP_PERFMON, or a locked-down kernel), a kernel without one of the tracepoints.

use crate::abi::SocketEvent;
use aya::maps::{Array, MapData, RingBuf};
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf, EbpfLoader};
use std::path::Path;

include!(concat!(env!("OUT_DIR"), "/programs.rs"));

/// Kernel BTF, needed to relocate the programs (CO-RE) and to attach `tp_btf` programs.
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Program name in `socket.bpf.c` → the tracepoint it attaches to.
const ATTACHMENTS: [(&str, &str); 4] = [
    ("on_state", "inet_sock_set_state"),
    ("on_send", "sock_send_length"),
    ("on_data", "sk_data_ready"),
    ("on_destroy", "tcp_destroy_sock"),
];

/// The hook without which nothing is tracked: it gives a connecting socket its storage.
const ESSENTIAL: &str = "inet_sock_set_state";

/// Diagnostic: names one tracepoint (`sk_data_ready`, say) not to attach, to see what a
/// kernel without it would report.
pub const SKIP_HOOK_ENV: &str = "CANARY_EBPF_SKIP_HOOK";

/// A hook that did not attach while the others did: the figures it feeds are absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingHook {
    /// The tracepoint (`sk_data_ready`, ...).
    pub tracepoint: &'static str,
    /// Why it did not attach.
    pub reason: String,
}

impl MissingHook {
    /// The per-request figures this hook feeds, which are absent without it.
    pub fn figures_lost(&self) -> &'static str {
        figures_lost(self.tracepoint)
    }

    /// Since when Linux has the tracepoint, where that is a known cause.
    pub fn since(&self) -> Option<&'static str> {
        (self.tracepoint == "sk_data_ready").then_some("6.4")
    }
}

impl std::fmt::Display for MissingHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no {} hook", self.tracepoint)?;
        if let Some(since) = self.since() {
            write!(
                f,
                " (the tracepoint exists since Linux {since}; this kernel is {})",
                kernel_release()
            )?;
        } else {
            write!(f, " (kernel {})", kernel_release())?;
        }
        write!(f, ": {}; lost: {}", self.reason, self.figures_lost())
    }
}

fn figures_lost(tracepoint: &str) -> &'static str {
    match tracepoint {
        "sk_data_ready" => {
            "server_wait, remainder, client_overhead, chunk delay, bytes received, \
             last_received"
        }
        "sock_send_length" => "request_write, server_wait, remainder, bytes sent, first_send",
        "tcp_destroy_sock" => {
            "closed_ms (and closed sockets are kept until idle for 900 s instead of 30 s)"
        }
        _ => "all kernel timing",
    }
}

/// The running kernel's release (`uname -r`), or "unknown".
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Loads one program and attaches it to its tracepoint.
fn attach(ebpf: &mut Ebpf, btf: &Btf, name: &str, tracepoint: &str) -> Result<(), Unavailable> {
    let program: &mut BtfTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| Unavailable::Load(format!("program {name} missing")))?
        .try_into()
        .map_err(|e| classify(&e))?;
    program
        .load(tracepoint, btf)
        .map_err(|e| match classify(&e) {
            Unavailable::Load(m) => Unavailable::Load(format!(
                "tracepoint {tracepoint} (kernel {}): {m}",
                kernel_release()
            )),
            other => other,
        })?;
    program.attach().map_err(|e| classify(&e))?;
    Ok(())
}

/// Why socket timing is off on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The programs were not compiled into this binary.
    #[error("eBPF programs not built into this binary: {0}")]
    NotBuilt(&'static str),
    /// The kernel exposes no BTF.
    #[error("no kernel BTF ({KERNEL_BTF}): {0}")]
    NoBtf(String),
    /// The kernel refused: missing privileges or lockdown.
    #[error(
        "not permitted to load eBPF programs ({0}): run as root or grant CAP_BPF and \
         CAP_PERFMON; a kernel locked down against BPF refuses even root"
    )]
    NotPermitted(String),
    /// Anything else the kernel or loader rejected.
    #[error("could not load the eBPF socket programs: {0}")]
    Load(String),
}

/// The attached socket programs. Dropping it detaches them.
pub struct Tracer {
    // Owns the programs and their links: they stay attached while this lives.
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    lost: Array<MapData, u64>,
    missing: Vec<MissingHook>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").finish_non_exhaustive()
    }
}

/// This process's PID namespace as `bpf_get_ns_current_pid_tgid` names it: the device of
/// `/proc/self/ns/pid` in the kernel's own encoding (major << 20 | minor; `stat` gives the
/// userspace one, which differs once the minor passes 255) and its inode.
fn own_pid_namespace() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata("/proc/self/ns/pid").ok()?;
    let dev = ns.dev();
    let kernel_dev = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
    Some((kernel_dev, ns.ino()))
}

impl Tracer {
    /// Loads and attaches the programs, tracking the TCP connections that process `tgid`
    /// opens from now on; `tgid` as this process's PID namespace numbers it
    /// (`std::process::id()` for this process), so a container without the host's PID
    /// namespace is followed as well.
    ///
    /// A hook other than `inet_sock_set_state` that does not attach (a kernel before 6.4
    /// has no `sk_data_ready`) leaves the others attached: [`Tracer::missing`] says which and
    /// what its figures were. [`SKIP_HOOK_ENV`] names one not to attach (a diagnostic).
    pub fn start(tgid: u32) -> Result<Tracer, Unavailable> {
        Tracer::start_skipping(tgid, std::env::var(SKIP_HOOK_ENV).ok().as_deref())
    }

    /// [`Tracer::start`], leaving the hook on tracepoint `skip` unattached (a diagnostic: what
    /// a kernel without it reports and measures).
    pub fn start_skipping(tgid: u32, skip: Option<&str>) -> Result<Tracer, Unavailable> {
        let object = PROGRAMS.map_err(Unavailable::NotBuilt)?;
        if !Path::new(KERNEL_BTF).exists() {
            return Err(Unavailable::NoBtf("the file does not exist".into()));
        }
        let btf =
            Btf::from_sys_fs().map_err(|e| Unavailable::NoBtf(canary_core::error_chain(&e)))?;
        // Without /proc the programs compare the pid as the initial namespace numbers it,
        // which is right outside a container.
        let (pidns_dev, pidns_ino) = own_pid_namespace().unwrap_or((0, 0));
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("target_tgid", &tgid, true)
            .override_global("target_pidns_dev", &pidns_dev, true)
            .override_global("target_pidns_ino", &pidns_ino, true)
            .load(object)
            .map_err(|e| classify(&e))?;
        let mut missing = Vec::new();
        for (name, tracepoint) in ATTACHMENTS {
            let attached = if skip == Some(tracepoint) {
                Err(Unavailable::Load(format!(
                    "not attached on purpose ({SKIP_HOOK_ENV}={tracepoint}, a diagnostic)"
                )))
            } else {
                attach(&mut ebpf, &btf, name, tracepoint)
            };
            match attached {
                Ok(()) => {}
                // Without the state hook no socket is ever tracked: nothing works.
                Err(e) if tracepoint == ESSENTIAL => return Err(e),
                // Not permitted is the whole tracer's problem, not one hook's.
                Err(e @ Unavailable::NotPermitted(_)) => return Err(e),
                Err(e) => missing.push(MissingHook {
                    tracepoint,
                    reason: match e {
                        Unavailable::Load(m) => m,
                        other => other.to_string(),
                    },
                }),
            }
        }
        let ring = take(&mut ebpf, "events")?;
        let ring = RingBuf::try_from(ring).map_err(|e| classify(&e))?;
        let lost = take(&mut ebpf, "lost")?;
        let lost = Array::try_from(lost).map_err(|e| classify(&e))?;
        Ok(Tracer {
            ebpf,
            ring,
            lost,
            missing,
        })
    }

    /// Hooks that did not attach (the others did): their figures are absent.
    pub fn missing(&self) -> &[MissingHook] {
        &self.missing
    }

    /// Hands every event waiting in the ring buffer to `f`; returns how many there were.
    pub fn drain(&mut self, mut f: impl FnMut(SocketEvent)) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            if let Some(e) = SocketEvent::from_bytes(&item) {
                f(e);
                n += 1;
            }
        }
        n
    }

    /// Events the kernel dropped because the ring buffer was full.
    pub fn lost(&self) -> u64 {
        self.lost.get(&0, 0).unwrap_or(0)
    }

    /// How often each program ran and the CPU time it took, every socket on the host
    /// included (the filtered-out ones too). The kernel only counts while BPF statistics are
    /// enabled (`sysctl kernel.bpf_stats_enabled=1`); otherwise this is empty.
    pub fn program_stats(&self) -> Vec<ProgramStats> {
        ATTACHMENTS
            .iter()
            .filter(|(_, tp)| self.missing.iter().all(|m| m.tracepoint != *tp))
            .filter_map(|&(name, tracepoint)| {
                let info = self.ebpf.program(name)?.info().ok()?;
                Some(ProgramStats {
                    tracepoint,
                    runs: info.run_count(),
                    run_time: info.run_time(),
                })
            })
            .filter(|s| s.runs > 0)
            .collect()
    }
}

/// One program's cost, from the kernel's BPF statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramStats {
    /// The tracepoint it is attached to.
    pub tracepoint: &'static str,
    /// Runs so far.
    pub runs: u64,
    /// CPU time of those runs.
    pub run_time: std::time::Duration,
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map, Unavailable> {
    ebpf.take_map(name)
        .ok_or_else(|| Unavailable::Load(format!("map {name} missing")))
}

/// Whether this binary carries the programs at all (`Err` with the reason when not).
pub fn built() -> Result<(), &'static str> {
    PROGRAMS.map(|_| ())
}

/// Sorts a loader error into a reason, looking through its causes for the kernel's errno.
fn classify(e: &(dyn std::error::Error + 'static)) -> Unavailable {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(libc::EPERM) {
                return Unavailable::NotPermitted(canary_core::error_chain(e));
            }
        }
        cause = c.source();
    }
    Unavailable::Load(canary_core::error_chain(e))
}
