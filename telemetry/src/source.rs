//! A running sampler's [`SourceState`] (the type is `canary_core`'s), shared with whoever
//! asks about it: the run's observer and `canaryd doctor`.

pub use canary_core::SourceState;
use std::sync::{Arc, Mutex};

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
