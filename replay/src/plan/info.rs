//! [`RunInfo`]: `summary.json`'s `run` block — what the run was (its id, workload, target,
//! trace and how it was read, speedup, concurrency, prompts, SLOs), the same keys whichever
//! front end wrote it (`canaryd replay`, `canaryd demo`, the daemon). A run rebuilt from its
//! records after its process died knows less: only its id and workload, and says so.

use super::load::Prepared;
use super::synthetic::LoadInfo;
use super::Plan;
use crate::prompt::PromptBuilder;
use crate::trace::{LoadReport, Selection, SelectionReport};
use serde::Serialize;
use std::path::PathBuf;

/// `summary.json`'s `run` block.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// The version of canaryd that wrote it.
    pub canaryd_version: String,
    /// The run's id (the prefix of its `x-request-id`s; the daemon's artifacts folder).
    pub run_id: String,
    /// The workload: its name in the daemon, `--workload` (or the trace's file stem) on the
    /// command line.
    pub workload: String,
    /// What was planned; absent for a run rebuilt from its records.
    #[serde(flatten)]
    pub plan: Option<PlanInfo>,
    /// Set for a run rebuilt from its records after its process died: how, and what is not
    /// known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<String>,
}

/// What a run was asked to do.
#[derive(Debug, Clone, Serialize)]
pub struct PlanInfo {
    /// The server.
    pub target: TargetInfo,
    /// The load's shape: a trace, a rate or a closed loop, and its settings.
    pub load: LoadInfo,
    /// The trace, for a trace replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceInfo>,
    /// Trace-time divisor (1 for generated schedules, which run in real time).
    pub speedup: f64,
    /// The in-flight ceiling asked for (`null`: none; see `in_flight_cap` for the one used).
    pub concurrency: Option<usize>,
    /// Warm-up requests before the measured phase.
    pub warmup_requests: usize,
    /// The tokenizer prompt lengths were measured in.
    pub tokenizer: String,
    /// Whether that is the target model's own (`--tokenizer`), so lengths are exact.
    pub tokenizer_exact_for_target: bool,
    /// The prompt seed.
    pub prompt_seed: u64,
    /// The SLOs, in aiperf's syntax (empty: none).
    pub goodput: String,
    /// Requests cancelled on purpose (`--request-cancellation-rate`), so a run with them is
    /// never mistaken for one without; absent when none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancellation: Option<CancellationInfo>,
}

/// The cancellation a run was asked for.
#[derive(Debug, Clone, Serialize)]
pub struct CancellationInfo {
    /// Percentage of measured requests cancelled, 0 to 100.
    pub rate_percent: f64,
    /// Time from sending a request to closing it, seconds.
    pub delay_s: f64,
    /// The seed that picks which requests (the same seed cancels the same indexes).
    pub seed: u64,
}

/// The server a run was sent to.
#[derive(Debug, Clone, Serialize)]
pub struct TargetInfo {
    /// Its name in the daemon's config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The URL requests went to (never with credentials).
    pub url: String,
    /// The model asked for.
    pub model: String,
    /// The GenAI operation (`chat`, `text_completion`).
    pub endpoint: String,
    /// Whether responses were streamed.
    pub streaming: bool,
}

/// The trace a run replayed and what loading and selecting it did.
#[derive(Debug, Clone, Serialize)]
pub struct TraceInfo {
    /// The file, or the name of the trace built into the binary.
    pub path: PathBuf,
    /// Its format.
    pub format: String,
    /// A digest of every row as read, before selection (`fnv1a64:…`): shards of one replay
    /// show the same one.
    pub digest: String,
    /// What loading it did.
    pub load: LoadReport,
    /// What selecting the window did.
    pub selection: SelectionReport,
    /// The selection asked for, so the run can be repeated from its summary.
    pub asked: SelectionAsked,
    /// The transforms applied to the trace before selection (`--synthesis-*`) and what they
    /// did; absent when the rows were replayed as read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synthesis: Option<super::SynthesisInfo>,
}

/// The settings that chose and shaped a run's requests, as asked (`--start-offset`,
/// `--max-requests`, `--scale-lengths`, `--shard`, …); `null`: not set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SelectionAsked {
    /// Start of the window, seconds of trace time after its first request.
    pub start_offset_s: Option<f64>,
    /// End of the window, seconds of trace time after its first request.
    pub end_offset_s: Option<f64>,
    /// At most this many requests.
    pub max_requests: Option<usize>,
    /// Lengths multiplied by this factor.
    pub scale_lengths: Option<f64>,
    /// Input lengths capped here.
    pub max_input_tokens: Option<u32>,
    /// Output lengths capped here.
    pub max_output_tokens: Option<u32>,
    /// This shard of the trace, `I/N`.
    pub shard: Option<String>,
    /// No length above this many tokens.
    pub length_limit: u32,
}

impl SelectionAsked {
    /// What `s` asks for.
    pub fn of(s: &Selection) -> SelectionAsked {
        SelectionAsked {
            start_offset_s: s.start_offset.map(|d| d.as_secs_f64()),
            end_offset_s: s.end_offset.map(|d| d.as_secs_f64()),
            max_requests: s.max_requests,
            scale_lengths: s.scale_lengths,
            max_input_tokens: s.max_input_tokens,
            max_output_tokens: s.max_output_tokens,
            shard: s.shard.map(|s| s.to_string()),
            length_limit: s.length_limit,
        }
    }
}

impl RunInfo {
    /// The `run` block of `plan`, run on `prepared` with `prompts`.
    pub fn new(plan: &Plan, prepared: &Prepared, prompts: &PromptBuilder) -> RunInfo {
        let r = &plan.replay;
        RunInfo {
            canaryd_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: r.run_id.clone(),
            workload: plan.workload.clone(),
            plan: Some(PlanInfo {
                target: TargetInfo {
                    name: plan.target_name.clone(),
                    url: r.target.url(),
                    model: r.target.model.clone(),
                    endpoint: r.target.endpoint.operation().to_string(),
                    streaming: r.target.streaming,
                },
                load: plan.load.info(),
                trace: prepared
                    .trace
                    .as_ref()
                    .zip(plan.trace())
                    .map(|(loaded, trace)| TraceInfo {
                        path: loaded.trace.path.clone(),
                        format: loaded.trace.format.to_string(),
                        digest: loaded.digest.clone(),
                        load: loaded.load.clone(),
                        selection: loaded.selection.clone(),
                        asked: SelectionAsked::of(&trace.selection),
                        synthesis: loaded.synthesis.clone(),
                    }),
                speedup: plan.trace().map_or(1.0, |t| t.speedup),
                concurrency: plan.dispatcher_config().concurrency,
                warmup_requests: r.warmup_requests,
                tokenizer: prompts.tokenizer().name().to_string(),
                tokenizer_exact_for_target: !prompts.tokenizer().is_builtin(),
                prompt_seed: plan.prompts.seed,
                goodput: r.goodput.to_string(),
                cancellation: r.cancellation.as_ref().map(|c| CancellationInfo {
                    rate_percent: c.rate_percent,
                    delay_s: c.delay.as_secs_f64(),
                    seed: c.seed,
                }),
            }),
            recovered: None,
        }
    }

    /// The `run` block of run `run_id` of `workload` rebuilt from its records: `how` says
    /// what happened and what is not known.
    pub fn recovered(run_id: &str, workload: &str, how: String) -> RunInfo {
        RunInfo {
            recovered: Some(how),
            ..RunInfo::unplanned(run_id, workload)
        }
    }

    /// The `run` block of a run driven below the plan (tests, benchmarks calling
    /// [`run()`](crate::run()) directly): its id and workload only.
    pub fn unplanned(run_id: &str, workload: &str) -> RunInfo {
        RunInfo {
            canaryd_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: run_id.to_string(),
            workload: workload.to_string(),
            plan: None,
            recovered: None,
        }
    }
}
