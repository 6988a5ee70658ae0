//! canary-ebpf: the kernel's view of canaryd's own TCP connections.
//!
//! Four `tp_btf` programs (`src/bpf/socket.bpf.c`, C with CO-RE, compiled by `build.rs`)
//! follow every socket canaryd's process connects: state changes, bytes handed to TCP, bytes
//! arriving, destruction. Each event carries the socket cookie and a CLOCK_MONOTONIC time, so
//! it joins a request record by `SO_COOKIE` and time window.
//!
//! * [`Tracer`] loads and attaches the programs and drains their ring buffer; when that is
//!   not possible it says why ([`Unavailable`]).
//! * [`SocketLog`] keeps the events per socket and turns one request's window into a
//!   [`canary_core::KernelTiming`] ([`SocketLog::timing`]).
//! * [`KernelObserver`] does both for a run: it joins every record by cookie and time and
//!   sums the run up as `summary.json`'s `kernel` section; [`probe`] says whether it works
//!   here (`canaryd doctor`).
//!
//! ```no_run
//! use canary_ebpf::{RequestSpan, SocketLog, Tracer};
//! let mut tracer = Tracer::start(std::process::id()).expect("eBPF available");
//! let mut log = SocketLog::default();
//! // ... run requests ...
//! tracer.drain(|e| log.push(e));
//! # let span = RequestSpan::default();
//! let timing = log.timing(&span);
//! ```

mod abi;
mod join;
mod observer;
mod tracer;

pub use abi::{tcp_state, EventKind, SocketEvent};
pub use join::{RequestSpan, SocketLog};
pub use observer::{probe, KernelObserver};
pub use tracer::{
    built, kernel_release, MissingHook, ProgramStats, Tracer, Unavailable, SKIP_HOOK_ENV,
};
