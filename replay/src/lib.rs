//! canary-replay: replays a production trace against an OpenAI-compatible server.
#![deny(missing_docs)]

pub mod trace;
pub use trace::{Trace, TraceError, TraceFormat};
