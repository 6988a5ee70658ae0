//! canary-core: the data model shared by every canaryd crate.
//!
//! * [`MonoTime`] — the single monotonic clock all measurements use.
//! * [`TraceRequest`] — one row of a production trace, format-independent.
//!
//! This crate does no I/O.
#![deny(missing_docs)]

mod clock;
mod trace;

pub use clock::{MonoTime, WallAnchor};
pub use trace::{TracePrompt, TraceRequest};
