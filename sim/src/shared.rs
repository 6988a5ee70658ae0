//! What the listener (`server`) and the generation handler (`generate`) share: the server's
//! state and what to do with a connection after a response. Its own module so that
//! `generate` does not import `server`, which calls it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::engine::EngineHandle;
use crate::fault::FaultInjector;
use crate::http::{BodyBudget, Timeouts};
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::truth::TruthStore;
use crate::wire_arrival::KernelClock;

/// State shared by every connection.
pub(crate) struct Shared {
    pub model: String,
    pub engine: EngineHandle,
    pub metrics: Arc<Metrics>,
    pub truth: TruthStore,
    pub faults: FaultInjector,
    pub reasoning_tokens: u32,
    pub block_size: u32,
    /// `Authorization` value the guarded routes require (`Bearer KEY`).
    pub authorization: Option<String>,
    /// `/version`, `/v1/models` and the context-length limit.
    pub identity: Identity,
    /// Numbers connections for the logs.
    pub seq: AtomicU64,
    pub gen_index: AtomicU64,
    /// Kernel receive stamps of request arrivals: on or refused, and their clock map.
    pub kernel_clock: KernelClock,
    /// How long a connection waits on its client.
    pub timeouts: Timeouts,
    /// The bytes of request bodies held at once, over all connections.
    pub body_budget: BodyBudget,
}

/// What to do with the connection after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    Close,
    /// Close this many milliseconds later, reading nothing meanwhile.
    CloseAfter(u64),
    /// Drop it with SO_LINGER 0 already set: the peer sees a RST.
    Reset,
}
