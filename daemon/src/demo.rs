//! `canaryd demo`: the built-in simulator as target and the bundled trace, in one process.
//! This is the embedded default a fresh machine can run with no server and no files.

use crate::bundled::{BUNDLED_TRACE, BUNDLED_TRACE_NAME};
use crate::replay::{self, ShapeArgs};
use anyhow::{Context, Result};
use canary_replay::{Endpoint, LoadOptions};
use clap::{Args, Parser};
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
    /// Simulator latency profile (`fast`, `illustrative`, or a profile file).
    #[arg(long, default_value = "illustrative")]
    pub profile: String,
    /// Replay at most this many of the bundled 300 requests.
    #[arg(long)]
    pub max_requests: Option<usize>,
    /// Where the run's artifacts go.
    #[arg(long, short = 'o', default_value = "canaryd-out/demo")]
    pub output_dir: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Parser)]
struct SimOnly {
    #[command(flatten)]
    sim: canary_sim::Args,
}

/// The model name the demo asks the simulator for.
const DEMO_MODEL: &str = "canary-sim";

#[derive(Parser)]
struct ShapeOnly {
    #[command(flatten)]
    shape: ShapeArgs,
}

/// Runs the demo; returns the exit code.
pub async fn demo(args: DemoArgs, shutdown: CancellationToken) -> Result<i32> {
    let mut flags = vec![
        "demo".to_string(),
        "--speedup".into(),
        args.speedup.to_string(),
        "--output-dir".into(),
        args.output_dir.display().to_string(),
        "--scale-lengths".into(),
        args.scale_lengths.to_string(),
    ];
    if let Some(n) = args.max_requests {
        flags.extend(["--max-requests".into(), n.to_string()]);
    }
    if args.json {
        flags.push("--json".into());
    }
    let shape = ShapeOnly::try_parse_from(flags)?.shape;
    let trace = canary_replay::parse(
        BUNDLED_TRACE.as_bytes(),
        Path::new(BUNDLED_TRACE_NAME),
        &LoadOptions::default(),
    )?;
    let loaded = replay::select(trace, &shape)?;
    // The trace is selected (and its scaled lengths checked) before anything starts.
    // The simulator's prefix-cache blocks match the scaled trace blocks, so reuse shows.
    let block = ((512.0 * args.scale_lengths).round() as u32)
        .max(1)
        .to_string();
    let sim_args = SimOnly::try_parse_from([
        "sim",
        "--port",
        "0",
        "--profile",
        &args.profile,
        "--block-size",
        &block,
    ])?
    .sim;
    let sim_config = canary_sim::Config::try_from(sim_args).context("simulator configuration")?;
    let sim = canary_sim::spawn(sim_config)
        .await
        .context("starting the simulator")?;
    let url = sim.url();
    tracing::info!("simulator ({} profile) listening on {url}", args.profile);

    let target = replay::target(&url, Endpoint::Chat, DEMO_MODEL, &shape)?;
    let prompts = replay::prompts(&shape)?;
    let outcome = replay::replay(loaded, target, &shape, prompts, shutdown).await?;
    sim.shutdown().await.context("stopping the simulator")?;
    if !args.json {
        outln!(
            "demo done: {} requests against the simulator; see {}/summary.json and records.jsonl",
            outcome.summary.requests,
            args.output_dir.display()
        )?;
    }
    Ok(if outcome.interrupted {
        crate::INTERRUPTED
    } else {
        0
    })
}
