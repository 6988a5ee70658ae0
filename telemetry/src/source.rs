//! Whether a telemetry source works on this host, and why not: the one answer shared by the
//! samplers (which report it once and carry on) and `canaryd doctor` (which prints it).

use std::fmt;
use std::sync::{Arc, Mutex};

/// The state of one telemetry source (NVML, DCGM, the server's `/metrics`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SourceState {
    /// Not tried yet (a scraper before its first attempt).
    Pending,
    /// Working; `detail` says what was found ("2 GPUs: NVIDIA H100 …", "engine vllm").
    Available {
        /// What was found.
        detail: String,
    },
    /// Not working; `reason` says why (no library, connection refused, …). Samplers keep
    /// retrying where retrying can help.
    Unavailable {
        /// Why, in words, with the endpoint or path.
        reason: String,
    },
    /// Turned off in the configuration.
    Disabled,
}

impl SourceState {
    /// Shorthand for [`SourceState::Available`].
    pub fn available(detail: impl Into<String>) -> SourceState {
        SourceState::Available {
            detail: detail.into(),
        }
    }

    /// Shorthand for [`SourceState::Unavailable`].
    pub fn unavailable(reason: impl Into<String>) -> SourceState {
        SourceState::Unavailable {
            reason: reason.into(),
        }
    }

    /// True for [`SourceState::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, SourceState::Available { .. })
    }
}

impl fmt::Display for SourceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceState::Pending => f.write_str("not tried yet"),
            SourceState::Available { detail } => write!(f, "available: {detail}"),
            SourceState::Unavailable { reason } => write!(f, "unavailable: {reason}"),
            SourceState::Disabled => f.write_str("disabled"),
        }
    }
}

/// A [`SourceState`] shared between a running sampler and whoever asks about it.
#[derive(Debug, Clone)]
pub struct SharedState(Arc<Mutex<SourceState>>);

impl Default for SharedState {
    fn default() -> Self {
        SharedState(Arc::new(Mutex::new(SourceState::Pending)))
    }
}

impl SharedState {
    /// The current state.
    pub fn get(&self) -> SourceState {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the state; returns the previous one.
    pub fn set(&self, state: SourceState) -> SourceState {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_serialize() {
        let s = SourceState::unavailable("no libnvidia-ml.so");
        assert_eq!(s.to_string(), "unavailable: no libnvidia-ml.so");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"state":"unavailable","reason":"no libnvidia-ml.so"}"#
        );
        let shared = SharedState::default();
        assert_eq!(
            shared.set(SourceState::available("x")),
            SourceState::Pending
        );
        assert!(shared.get().is_available());
    }
}
