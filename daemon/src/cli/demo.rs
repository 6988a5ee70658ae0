//! `canaryd demo`: the built-in simulator as target and the bundled trace, in one process.
//! This is the embedded default a fresh machine can run with no server and no files.

use crate::bundled::{BUNDLED_TRACE, BUNDLED_TRACE_NAME};
use crate::cli::one_shot::{self, Print};
use crate::cli::replay;
use crate::execute::Observe;
use anyhow::{Context, Result};
use canary_replay::{Endpoint, LoadShape, Plan, Selection, Target, TracePlan};
use clap::Args;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// Flags of `canaryd demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Replay speed relative to the trace (300 rows span 102 s of trace time).
    #[arg(long, default_value_t = 5.0, value_parser = replay::positive_number)]
    pub speedup: f64,
    /// Scale the trace's lengths (and its 512-token blocks) so the simulated small model keeps
    /// up: Mooncake prompts average 15k tokens, sized for a large cluster.
    #[arg(long, default_value_t = 0.125, value_parser = replay::positive_number)]
    pub scale_lengths: f64,
    /// Simulator latency profile: `illustrative` (the default), `fast`, `capacity`, or a
    /// profile file.
    #[arg(long, default_value = "illustrative")]
    pub profile: String,
    /// Replay at most this many of the bundled 300 requests (1 or more).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_requests: Option<usize>,
    /// Where the run's artifacts go.
    #[arg(long, short = 'o', default_value = "canaryd-out/demo")]
    pub output_dir: PathBuf,
    /// Replace an earlier run's artifacts in the output directory (refused without it).
    #[arg(long)]
    pub overwrite: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The model name the demo asks the simulator for.
const DEMO_MODEL: &str = "canary-sim";

/// Runs the demo; returns the exit code.
pub async fn demo(args: DemoArgs, shutdown: CancellationToken) -> Result<i32> {
    // The simulator's prefix-cache blocks match the scaled trace blocks, so reuse shows.
    let block_size = ((512.0 * args.scale_lengths).round() as u32).max(1);
    let profile = match canary_sim::Profile::named(&args.profile) {
        Some(p) => p,
        None => canary_sim::Profile::load(Path::new(&args.profile))
            .context("simulator configuration")?,
    };
    let sim = canary_sim::spawn(canary_sim::Config {
        block_size,
        profile,
        ..Default::default()
    })
    .await
    .context("starting the simulator")?;
    let url = sim.url();
    tracing::info!("simulator ({} profile) listening on {url}", args.profile);

    let target = Target::new(&url, Endpoint::Chat, DEMO_MODEL)?;
    let observe = Observe {
        telemetry: canary_telemetry::Config {
            server_metrics_url: Some(target.metrics_url()),
            server_metrics_model: Some(target.model.clone()),
            ..Default::default()
        },
        ebpf: true,
        ebpf_known_unavailable: None,
        ebpf_warned: Default::default(),
    };
    let mut trace = TracePlan::embedded(BUNDLED_TRACE_NAME, BUNDLED_TRACE);
    trace.speedup = args.speedup;
    trace.selection = Selection {
        max_requests: args.max_requests,
        scale_lengths: Some(args.scale_lengths),
        ..Selection::default()
    };
    let mut plan = Plan::new(workload_name(), LoadShape::Trace(trace), target);
    plan.replay.output_dir = Some(args.output_dir.clone());
    plan.api_key = Some(replay::api_key_source(None, None));
    let print = Print {
        json: args.json,
        token_counts: false,
        criteria: crate::judge::verdict::Criteria::NONE,
        overwrite: args.overwrite,
        quiet: false,
    };
    let export = crate::cli::otlp_flags::ExportArgs::from_env_only();
    let outcome = one_shot::one_shot(plan, &observe, &export, print, shutdown).await?;
    sim.shutdown().await.context("stopping the simulator")?;
    let Some(run) = outcome else {
        return Ok(crate::INTERRUPTED);
    };
    let outcome = &run.outcome;
    if !args.json {
        outln!(
            "demo done: {} requests against the simulator; see {}/summary.json and records.jsonl",
            outcome.summary.requests,
            args.output_dir.display()
        )?;
    }
    Ok(one_shot::exit_status(&run))
}

/// The demo's workload name: the bundled trace's stem, as `canaryd replay` names a run
/// after its trace file.
fn workload_name() -> String {
    Path::new(BUNDLED_TRACE_NAME)
        .file_stem()
        .map_or("demo".into(), |s| s.to_string_lossy().into_owned())
}
