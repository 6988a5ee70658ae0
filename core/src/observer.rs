//! [`Observer`]: something that watches a run from elsewhere — GPU and server telemetry, the
//! kernel's socket timing, an exporter, the daemon's baseline sampler — and adds what it saw
//! to each record and, at the end, to the run's [`RunTelemetry`].
//!
//! The replay calls every observer off the async runtime, once per record, before the record
//! is written; then once with the run's client-side statistics before `summary.json` is
//! written. Crates that observe depend on this trait only, never on the replay.

use crate::clock::MonoTime;
use crate::record::RequestRecord;
use crate::summary::RunSummary;
use crate::telemetry::{RunTelemetry, Source, SourceState};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What [`Observer::finish`] returns: the observer's part of the run's telemetry.
pub type TelemetryFuture<'a> = Pin<Box<dyn Future<Output = RunTelemetry> + Send + 'a>>;

/// What [`Observer::measured_phase`] returns.
pub type PhaseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Something that watched the run from elsewhere (GPU, server metrics, kernel, exporters).
pub trait Observer: Send + Sync {
    /// Called once per record, off the runtime, before the record is written. `t0` is the
    /// run's start on the monotonic clock (record times are milliseconds after it).
    fn annotate(&self, record: &mut RequestRecord, t0: MonoTime);

    /// [`Observer::annotate`] with the gaps (ms) between canaryd's reads of the record's
    /// consecutive token chunks (from `RequestRecord::userspace_ttft_ms`), for observers that
    /// join each chunk (kernel socket timing). The run calls this
    /// one; the default ignores the gaps. A stream longer than
    /// [`ChunkGaps::KEPT`](crate::ChunkGaps::KEPT) chunks passes only its first gaps (in
    /// order, so chunk times still add up from the first token); the later chunks are not
    /// joined one by one.
    fn annotate_chunks(&self, record: &mut RequestRecord, _chunk_gaps_ms: &[f64], t0: MonoTime) {
        self.annotate(record, t0);
    }

    /// Called once when warm-up is over (`warmup_requests` were asked for; 0 without
    /// warm-up) and before the first measured request is prepared; the run waits for it.
    /// Observers whose figures cover a window (a server's histogram deltas) start it here,
    /// so warm-up stays out of them.
    fn measured_phase(&self, _warmup_requests: usize) -> PhaseFuture<'_> {
        Box::pin(async {})
    }

    /// Called once after the last request finished, with the client-side statistics, before
    /// `summary.json` is written: what it returns joins the run's telemetry.
    fn finish<'a>(
        &'a self,
        _t0: MonoTime,
        _end: MonoTime,
        _summary: &'a RunSummary,
    ) -> TelemetryFuture<'a> {
        Box::pin(async { RunTelemetry::default() })
    }
}

impl std::fmt::Debug for dyn Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// Several observers, called in the order they were added, and the states of sources that
/// have no observer (turned off, or unable to start), so `summary.json` still says why.
#[derive(Default)]
pub struct Observers {
    list: Vec<Arc<dyn Observer>>,
    noted: BTreeMap<Source, SourceState>,
}

impl Observers {
    /// No observer yet.
    pub fn new() -> Observers {
        Observers::default()
    }

    /// Adds `observer` after those already added: it sees what they wrote into a record.
    pub fn push(&mut self, observer: Arc<dyn Observer>) {
        self.list.push(observer);
    }

    /// Reports `source` in the run's telemetry as `state` (an observer's own report of the
    /// same source wins).
    pub fn note(&mut self, source: Source, state: SourceState) {
        self.noted.insert(source, state);
    }

    /// True with no observer and no noted source.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty() && self.noted.is_empty()
    }
}

impl Observer for Observers {
    fn annotate(&self, record: &mut RequestRecord, t0: MonoTime) {
        for o in &self.list {
            o.annotate(record, t0);
        }
    }

    fn annotate_chunks(&self, record: &mut RequestRecord, chunk_gaps_ms: &[f64], t0: MonoTime) {
        for o in &self.list {
            o.annotate_chunks(record, chunk_gaps_ms, t0);
        }
    }

    fn measured_phase(&self, warmup_requests: usize) -> PhaseFuture<'_> {
        Box::pin(async move {
            for o in &self.list {
                o.measured_phase(warmup_requests).await;
            }
        })
    }

    fn finish<'a>(
        &'a self,
        t0: MonoTime,
        end: MonoTime,
        summary: &'a RunSummary,
    ) -> TelemetryFuture<'a> {
        Box::pin(async move {
            let mut telemetry = RunTelemetry::default();
            for o in &self.list {
                telemetry.merge(o.finish(t0, end, summary).await);
            }
            for (source, state) in &self.noted {
                telemetry
                    .sources
                    .entry(*source)
                    .or_insert_with(|| state.clone());
            }
            telemetry
        })
    }
}
