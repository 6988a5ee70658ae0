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
            tracing::warn!("{reason}: GPU figures from NVML are missing from this run");
            return (None, SourceState::unavailable(reason));
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(kept))) => {
                let state = SourceState::available(kept.detail.clone());
                (Some(kept), state)
            }
            Ok(Ok(Err(e))) => {
                let reason = crate::http::error_chain(&e);
                if self.first(Said::Unavailable) {
                    super::warn_unavailable(&reason);
                }
                (None, SourceState::unavailable(reason))
            }
            Ok(Err(_)) => {
                let reason = format!("NVML's thread ended without an answer (loading {lib})");
                tracing::warn!("{reason}: GPU figures from NVML are missing from this run");
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

    /// Marks `said`; true if that was news (so it should be logged).
    fn first(&self, said: Said) -> bool {
        let bit = said as u8;
        self.0.said.fetch_or(bit, Ordering::Relaxed) & bit == 0
    }
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
