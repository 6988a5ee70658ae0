//! The load of a plan: which requests a run sends, and when. A trace on its own schedule
//! ([`TracePlan`]), an open-loop rate ([`RatePlan`]) or a closed loop of users
//! ([`ClosedLoopPlan`]), each turned into [`Work`] for the same dispatcher
//! ([`LoadShape::prepare`]).

use super::setting::{Setting, SettingError};
use super::synthesis::{self, SynthesisInfo};
use super::synthetic::{ClosedLoopPlan, LoadInfo, RatePlan};
use crate::run::Work;
use crate::schedule::Schedule;
use crate::trace::{
    self, LoadOptions, LoadReport, Number, Prompts, Selection, SelectionReport, Shard, Synthesis,
    Trace, TraceError, TraceFormat, MAX_SPAN,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a run sends, and when.
#[derive(Debug, Clone)]
pub enum LoadShape {
    /// A production trace, replayed on its own schedule.
    Trace(TracePlan),
    /// Synthetic requests at a rate, open loop.
    Rate(RatePlan),
    /// Synthetic requests from a closed loop of users.
    ClosedLoop(ClosedLoopPlan),
}

/// A load ready to send: its [`Work`], and the trace it came from, if any.
#[derive(Debug)]
pub struct Prepared {
    /// What the dispatcher sends.
    pub work: Work,
    /// The trace loaded and selected (what is left once its schedule is taken describes it
    /// for `summary.json`); `None` for synthetic loads.
    pub trace: Option<Loaded>,
}

impl LoadShape {
    /// Loads what the shape needs (a trace file; nothing for synthetic requests) and turns it
    /// into work, lengths kept within `length_limit`; `None` when `stop` fired first.
    pub async fn prepare(
        &self,
        length_limit: u32,
        stop: &CancellationToken,
    ) -> Result<Option<Prepared>, LoadError> {
        let (work, trace) = match self {
            LoadShape::Trace(t) => {
                let Some(mut loaded) = t.load(stop).await? else {
                    return Ok(None);
                };
                (Work::Schedule(loaded.take_schedule()?), Some(loaded))
            }
            LoadShape::Rate(r) => (Work::rate(r, length_limit), None),
            LoadShape::ClosedLoop(c) => (Work::closed_loop(c, length_limit), None),
        };
        Ok(Some(Prepared { work, trace }))
    }

    /// Checks the shape's own settings (those shared with the dispatcher are checked by
    /// [`Plan::validate`](super::Plan::validate)).
    pub fn validate(&self, length_limit: u32) -> Result<(), SettingError> {
        match self {
            LoadShape::Trace(t) => {
                let speedup = t.speedup;
                if !(speedup > 0.0 && speedup.is_finite()) {
                    return Err(SettingError::new(
                        Setting::Speedup,
                        format!("expected a positive number, found {speedup}"),
                    ));
                }
                t.synthesis.as_ref().map_or(Ok(()), synthesis::validate)
            }
            LoadShape::Rate(r) => r.validate(length_limit),
            LoadShape::ClosedLoop(c) => c.validate(length_limit),
        }
    }

    /// One line for the log: what is sent, and how fast.
    pub fn describe(&self) -> String {
        match self {
            LoadShape::Trace(t) => {
                let what = match &t.source {
                    TraceSource::File(p) => p.display().to_string(),
                    TraceSource::Embedded { name, .. } => (*name).to_string(),
                };
                let synthesized = match t.synthesis {
                    Some(_) => ", synthesized",
                    None => "",
                };
                format!("replaying {what}{synthesized} at {}x", Number(t.speedup))
            }
            LoadShape::Rate(r) => format!(
                "{} req/s, {} arrivals, {} in / {} out tokens",
                Number(r.rate),
                r.arrival,
                r.requests.isl.mean,
                r.requests.osl.mean
            ),
            LoadShape::ClosedLoop(c) => format!(
                "closed loop of {} users, {} in / {} out tokens",
                c.users, c.requests.isl.mean, c.requests.osl.mean
            ),
        }
    }

    /// `summary.json`'s `load` block.
    pub fn info(&self) -> LoadInfo {
        match self {
            LoadShape::Trace(_) => LoadInfo::Trace,
            LoadShape::Rate(r) => r.info(),
            LoadShape::ClosedLoop(c) => c.info(),
        }
    }
}

/// A trace to replay: where it is, how to read it, which part of it, how fast.
#[derive(Debug, Clone)]
pub struct TracePlan {
    /// The file, or a trace built into the binary.
    pub source: TraceSource,
    /// How rows are read and checked (format, bad rows, length and line limits).
    pub read: LoadOptions,
    /// The window, count, length scaling and caps, and shard.
    pub selection: Selection,
    /// Trace-time divisor (2.0 replays twice as fast).
    pub speedup: f64,
    /// Transforms applied to the whole trace as loaded, before the window, shard and caps
    /// (`--synthesis-*`): the rows `canaryd synthesize` would write. `None`: as read.
    pub synthesis: Option<Synthesis>,
}

/// Where a trace is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceSource {
    /// A file (Mooncake or Bailian JSONL, BurstGPT CSV).
    File(PathBuf),
    /// Text built into the binary, under a name for reports.
    Embedded {
        /// The name reports show (`bundled:…`).
        name: &'static str,
        /// The trace.
        text: &'static str,
    },
}

/// A trace loaded and selected, with what loading and selecting did.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The selected requests.
    pub trace: Trace,
    /// The load's report (rows, skipped, warnings).
    pub load: LoadReport,
    /// The selection's report (kept, dropped, scaled, capped).
    pub selection: SelectionReport,
    /// The speedup it is replayed at.
    pub speedup: f64,
    /// The whole trace's [`digest`](crate::trace::digest), before selection (after any
    /// synthesis: the rows replayed): equal in every shard of one replay.
    pub digest: String,
    /// The synthesis applied, and what it did.
    pub synthesis: Option<SynthesisInfo>,
    /// The shard selected, if any.
    pub shard: Option<Shard>,
}

impl Loaded {
    /// For a shard that owns none of the window's requests, what to say of it: it sends
    /// nothing and its run, empty, is still written, so that `canaryd merge` counts it.
    pub fn empty_shard(&self) -> Option<String> {
        let (shard, selection) = (self.shard?, &self.selection);
        (selection.requests_out == 0).then(|| {
            format!(
            "shard {shard} owns none of the {} requests of the window: nothing is sent, and its \
             empty run is written so that `canaryd merge` counts the shard",
            selection.requests_in - selection.dropped_outside_window.min(selection.requests_in)
        )
        })
    }
}

/// Why a trace could not be loaded or scheduled.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A bad row, an unreadable file, a scale over the length limit.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The loader thread could not start or died.
    #[error("the trace loader failed")]
    Loader(#[source] std::io::Error),
    /// The selection holds no request.
    #[error("the selected window of the trace holds no request")]
    Empty,
    /// A setting makes the schedule unusable (a speedup that would never end).
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// The trace cannot be synthesized as asked (`--synthesis-*`): a row with its own prompt
    /// text, or blocks other than Mooncake's.
    #[error("{}: synthesis: {reason}", path.display())]
    Synthesis {
        /// The trace file.
        path: PathBuf,
        /// Why (shown in the message, so not a `source` too).
        reason: crate::trace::SynthesisError,
    },
}

impl TracePlan {
    /// The file at `path`, read with the default checks, whole, at 1×.
    pub fn file(path: impl Into<PathBuf>) -> TracePlan {
        TracePlan::from_source(TraceSource::File(path.into()))
    }

    /// Text built into the binary, called `name` in reports.
    pub fn embedded(name: &'static str, text: &'static str) -> TracePlan {
        TracePlan::from_source(TraceSource::Embedded { name, text })
    }

    fn from_source(source: TraceSource) -> TracePlan {
        TracePlan {
            source,
            read: LoadOptions::default(),
            selection: Selection::default(),
            speedup: super::Plan::SPEEDUP,
            synthesis: None,
        }
    }

    /// Forces a format instead of detecting it.
    pub fn with_format(mut self, format: Option<TraceFormat>) -> TracePlan {
        self.read.format = format;
        self
    }

    /// Loads and selects the trace; `None` when `stop` fired first. A file is read on a
    /// thread of its own, so a stop ends the wait at once: a FIFO that never ends, or one that
    /// sends nothing, cannot hold it (the stop flag ends the thread at its next read).
    pub async fn load(&self, stop: &CancellationToken) -> Result<Option<Loaded>, LoadError> {
        let mut read = self.read.clone();
        if self.synthesis.is_some() {
            // Synthesis refuses a row with a prompt, so none is ever sent: checked (same
            // errors) and not kept, so a prompt trace is refused before it costs its memory.
            read.prompts = Prompts::Skip;
        }
        let trace = match &self.source {
            TraceSource::Embedded { name, text } => {
                trace::parse(text.as_bytes(), Path::new(name), &read)?
            }
            TraceSource::File(path) => match load_until(path, read, stop).await? {
                Some(trace) => trace,
                None => return Ok(None),
            },
        };
        let load = trace.report.clone();
        for w in &load.warnings {
            tracing::warn!("{w}");
        }
        let (trace, synthesis) = match &self.synthesis {
            None => (trace, None),
            Some(s) => {
                // CPU work over the whole trace: off the runtime, which may be running other
                // workloads' schedules.
                let (s, limit) = (s.clone(), self.read.length_limit);
                let (trace, report) = tokio::task::spawn_blocking(move || {
                    synthesis::apply(&trace, &s, limit)
                        .map(|(t, r)| (t, SynthesisInfo::new(&s, &r)))
                })
                .await
                .map_err(|e| LoadError::Loader(std::io::Error::other(e)))??;
                (trace, Some(report))
            }
        };
        // A synthesized trace keeps its input's lines; its digest is the written file's.
        let digest = match synthesis {
            Some(_) => trace::digest_synthesized(&trace),
            None => trace::digest(&trace),
        };
        let (trace, selection) = trace.select(&self.selection)?;
        Ok(Some(Loaded {
            trace,
            load,
            selection,
            speedup: self.speedup,
            digest,
            synthesis,
            shard: self.selection.shard,
        }))
    }
}

impl Loaded {
    /// The schedule of the selected requests, which it takes (what is left describes the
    /// trace for `summary.json`). Refuses an empty selection (but a shard's, see
    /// [`Loaded::empty_shard`]), and one that would take more than [`MAX_SPAN`] to replay (a
    /// speedup of 1e-12).
    pub fn take_schedule(&mut self) -> Result<Schedule, LoadError> {
        if self.trace.requests.is_empty() && self.shard.is_none() {
            return Err(LoadError::Empty);
        }
        let rows = std::mem::take(&mut self.trace.requests);
        let schedule = Schedule::with_origin(rows, self.speedup, self.trace.origin_us);
        let takes = schedule.min_duration();
        if takes > MAX_SPAN {
            let days = |d: Duration| Number((d.as_secs_f64() / 86_400.0).round());
            return Err(SettingError::new(
                Setting::Speedup,
                format!(
                    "replaying the selected requests would take at least {} days, more than \
                     the {} days allowed",
                    days(takes),
                    days(MAX_SPAN)
                ),
            )
            .with_value(Number(self.speedup))
            .into());
        }
        Ok(schedule)
    }
}

/// Loads `path` on a thread of its own; `None` when `stop` fired first.
async fn load_until(
    path: &Path,
    mut opts: LoadOptions,
    stop: &CancellationToken,
) -> Result<Option<Trace>, LoadError> {
    let flag = Arc::new(AtomicBool::new(false));
    opts.stop = Some(flag.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let file = path.to_path_buf();
    std::thread::Builder::new()
        .name("trace-load".into())
        .spawn(move || {
            let _ = tx.send(trace::load(&file, &opts));
        })
        .map_err(LoadError::Loader)?;
    tokio::select! {
        loaded = rx => match loaded {
            Ok(trace) => Ok(Some(trace?)),
            Err(_) => Err(LoadError::Loader(std::io::Error::other("the loader thread died"))),
        },
        _ = stop.cancelled() => {
            flag.store(true, Ordering::Relaxed);
            tracing::warn!("stopped while loading {}", path.display());
            Ok(None)
        }
    }
}
