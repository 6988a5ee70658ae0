//! [`NvmlOpener`]: each run's NVML opened and sampled on a thread of its own, the wait for its
//! opening bounded, and what the opening found said once for every run that shares it.
//!
//! `nvmlInit` on a wedged driver (a GPU fallen off the bus) never returns, and nothing can
//! cancel it. Called on an async worker it took the worker with it: the run sent nothing, a
//! SIGTERM could not end it, and a daemon with as many such runs as workers stopped answering
//! its status endpoints. Here the run waits [`OPEN_TIMEOUT`] for its NVML thread and goes on
//! without GPU figures past that. The hung thread stays (nothing can end it), so no other open
//! starts while it is hung: a run that starts meanwhile waits for it under the same bound, then
//! says NVML is still not answering. Sampling stays on that thread too: a driver that wedges
//! mid-run stops the samples, not the run, nor the process's exit.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{lib_name, LostGpus, NvmlConfig, NvmlSampler};
use crate::gpu::GpuSample;
use crate::ring::Ring;
use crate::source::SourceState;
use canary_core::GpuContext;

/// How long a run waits for NVML to open (as `canaryd doctor` waits for its probe): a healthy
/// driver answers in well under a second.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// NVML's opening, shared by the runs of one process (clones share it): one open at a time,
/// each waited for at most [`OPEN_TIMEOUT`], and each kind of failure warned about once.
#[derive(Debug, Clone, Default)]
pub struct NvmlOpener(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    /// Held by the open in flight until `nvmlInit` and the GPU listing return.
    opening: Arc<tokio::sync::Mutex<()>>,
    /// [`Said`] bits.
    said: AtomicU8,
    /// Reasons of failed opens whose cause only a restart or another library can change
    /// (the library cannot be loaded at all), as [`NvmlOpener::open`] said them.
    lasting: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// What is warned about once per opener.
#[derive(Debug, Clone, Copy)]
enum Said {
    /// NVML failed to open (no library, no GPU).
    Unavailable = 1,
    /// An open did not answer within the bound.
    Hung = 2,
    /// A run found an earlier open still hung.
    StillHung = 4,
    /// NVML's thread could not start, or ended without an answer.
    Thread = 8,
}

/// What a run keeps of an NVML opened on its thread, which samples into `samples` until the
/// run's stop.
#[derive(Debug)]
pub struct OpenedNvml {
    /// The samples.
    pub samples: Ring<GpuSample>,
    /// The GPUs as NVML describes them.
    pub context: GpuContext,
    /// The GPUs that stopped answering.
    pub lost: LostGpus,
    /// What was found ("2 GPU(s), NVIDIA H100 …, driver …").
    pub detail: String,
}

impl NvmlOpener {
    /// Opens NVML on a thread of its own that then samples until `stop`, or says why not
    /// within [`OPEN_TIMEOUT`]. A failure is warned about once per opener.
    pub async fn open(
        &self,
        config: NvmlConfig,
        stop: CancellationToken,
    ) -> (Option<OpenedNvml>, SourceState) {
        let lib = lib_name(&config);
        let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
        let lock = self.0.opening.clone().lock_owned();
        let Ok(turn) = tokio::time::timeout_at(deadline, lock).await else {
            let reason = format!(
                "NVML is still not answering: an earlier open from {lib} has not returned \
                 (the driver may be wedged; not tried again while it hangs)"
            );
            if self.first(Said::StillHung) {
                tracing::warn!("{reason}: GPU figures are missing from this run; {SILENCE}");
            }
            return (None, SourceState::unavailable(reason));
        };
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("nvml".into())
            .spawn(move || {
                let opened = NvmlSampler::open(config);
                // The next open may start: this one returned.
                drop(turn);
                match opened {
                    Ok(sampler) => {
                        let kept = OpenedNvml {
                            samples: sampler.samples(),
                            context: sampler.context().clone(),
                            lost: sampler.lost(),
                            detail: sampler.detail().to_owned(),
                        };
                        // A run that gave up waiting has gone: NVML is let go.
                        if tx.send(Ok(kept)).is_ok() {
                            sampler.sample_until(&stop);
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        if let Err(e) = thread {
            let reason = format!("cannot start NVML's thread: {e}");
            if self.first(Said::Thread) {
                tracing::warn!("{reason}: GPU figures from NVML are missing from this run");
            }
            return (None, SourceState::unavailable(reason));
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(kept))) => {
                let state = SourceState::available(kept.detail.clone());
                (Some(kept), state)
            }
            Ok(Ok(Err(e))) => {
                let reason = crate::http::error_chain(&e);
                if lasts_until_restart(&e) {
                    self.lasting().insert(reason.clone());
                }
                if self.first(Said::Unavailable) {
                    super::warn_unavailable(&reason);
                }
                (None, SourceState::unavailable(reason))
            }
            Ok(Err(_)) => {
                let reason = format!("NVML's thread ended without an answer (loading {lib})");
                if self.first(Said::Thread) {
                    tracing::warn!("{reason}: GPU figures from NVML are missing from this run");
                }
                (None, SourceState::unavailable(reason))
            }
            Err(_) => {
                let secs = OPEN_TIMEOUT.as_secs();
                let reason = format!(
                    "NVML did not answer within {secs} s (loading {lib}): the driver may be \
                     wedged"
                );
                if self.first(Said::Hung) {
                    tracing::warn!(
                        "NVML did not answer within {secs} s: GPU figures are missing from this \
                         run; the driver may be wedged; {SILENCE}"
                    );
                }
                (None, SourceState::unavailable(reason))
            }
        }
    }

    /// Whether `reason`, an unavailable NVML's as [`NvmlOpener::open`] said it, has a cause
    /// only a restart or another library can change: the library cannot be loaded at all.
    /// Every other cause (a driver not loaded yet, no GPU listed, an open that hangs, a
    /// thread that cannot start) may pass while the process lives.
    pub fn lasts_until_restart(&self, reason: &str) -> bool {
        self.lasting().contains(reason)
    }

    /// Forgets which failures were warned about: NVML answered again, and a later failure
    /// starts a new spell, warned about once again.
    pub fn forget_warnings(&self) {
        self.0.said.store(0, Ordering::Relaxed);
    }

    fn lasting(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.0.lasting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `said`; true if that was news (so it should be logged).
    fn first(&self, said: Said) -> bool {
        let bit = said as u8;
        self.0.said.fetch_or(bit, Ordering::Relaxed) & bit == 0
    }
}

/// Whether `e` lasts until a restart (or a reload naming another library): the library could
/// not be loaded at all (`dlopen` failed: no such file, not a shared object). An NVML that
/// loads and then fails (`nvmlInit` refusing, no GPU listed) may work later: the driver
/// loads late at boot, a GPU is reset.
fn lasts_until_restart(e: &super::NvmlError) -> bool {
    matches!(
        e,
        super::NvmlError::Init {
            source: nvml_wrapper::error::NvmlError::LibloadingError(_),
            ..
        }
    )
}

/// How a user silences NVML's warnings.
const SILENCE: &str = "--no-nvml / [telemetry] nvml = false silences this";

impl NvmlSampler {
    /// Samples every interval until `stop`, on the calling thread (NVML's own). A round
    /// missed (a slow read) is not made up: the next is an interval after it.
    fn sample_until(mut self, stop: &CancellationToken) {
        let interval = self.config.interval.max(Duration::from_millis(1));
        while !stop.is_cancelled() {
            let began = Instant::now();
            self.sample_now();
            std::thread::sleep(interval.saturating_sub(began.elapsed()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn reason(opener: &NvmlOpener, lib: &str) -> String {
        let config = NvmlConfig {
            lib_path: Some(lib.into()),
            ..NvmlConfig::default()
        };
        match opener.open(config, CancellationToken::new()).await {
            (None, SourceState::Unavailable { reason }) => reason,
            (_, state) => panic!("{lib}: {state:?}"),
        }
    }

    /// A library that cannot be loaded lasts until a restart; one that loads and then fails
    /// (here a shared library that is not NVML: its init cannot be found) may pass, as a
    /// driver not loaded yet at boot does. Reasons the opener did not say are not lasting.
    #[tokio::test]
    async fn only_a_library_that_cannot_be_loaded_lasts_until_restart() {
        let opener = NvmlOpener::default();
        let missing = reason(&opener, "/nonexistent/libnvidia-ml.so.1").await;
        assert!(
            missing.starts_with("cannot initialize NVML from /nonexistent/libnvidia-ml.so.1: a libloading error occurred"),
            "{missing}"
        );
        assert!(opener.lasts_until_restart(&missing), "{missing}");
        let not_nvml = reason(&opener, "libc.so.6").await;
        assert!(
            not_nvml.starts_with(
                "cannot initialize NVML from libc.so.6: function symbol failed to load"
            ),
            "{not_nvml}"
        );
        assert!(!opener.lasts_until_restart(&not_nvml), "{not_nvml}");
        assert!(!NvmlOpener::default().lasts_until_restart(&missing));
    }

    #[test]
    fn warnings_are_news_again_once_forgotten() {
        let opener = NvmlOpener::default();
        assert!(opener.first(Said::Unavailable));
        assert!(!opener.first(Said::Unavailable));
        assert!(opener.first(Said::Thread));
        opener.forget_warnings();
        assert!(opener.first(Said::Unavailable));
    }
}
