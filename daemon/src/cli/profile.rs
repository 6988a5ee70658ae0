//! `canaryd profile`: one run of any load shape, with aiperf's flag spellings — a trace on its
//! own schedule (`--trace`, as `canaryd replay`), synthetic requests at a rate
//! (`--request-rate`, `--arrival-pattern`), or a closed loop of users (`--concurrency` alone).
//! Combinations that mean nothing are refused before anything is sent.

use crate::cli::one_shot::Print;
use crate::cli::ranged;
use crate::cli::replay::{self, ShapeArgs};
use anyhow::{bail, Result};
use canary_replay::{
    ArrivalPattern, Balance, Cancellation, ClosedLoopPlan, Endpoint, Extent, Length, LoadShape,
    Plan, RatePlan, SyntheticRequests, TraceFormat, TracePlan,
};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `canaryd profile`.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// Replay this trace on its own schedule (Mooncake JSONL, Bailian JSONL or BurstGPT CSV)
    /// instead of synthetic requests.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_name = "mooncake|bailian|burstgpt")]
    pub format: Option<TraceFormat>,
    /// Server base URL (`http://host:port`, `https://…`); repeat it to spread requests over
    /// several replicas of one service.
    #[arg(long, short = 'u', required = true)]
    pub url: Vec<String>,
    /// How requests are spread over several --url.
    #[arg(
        long,
        default_value = "round-robin",
        value_name = "round-robin|least-in-flight"
    )]
    pub url_strategy: Balance,
    /// Model name sent in each request.
    #[arg(long, short = 'm')]
    pub model: String,
    /// API to call.
    #[arg(long, default_value = "chat", value_name = "chat|completions")]
    pub endpoint_type: Endpoint,
    /// Mean synthetic input length, in tokens (default 550, as aiperf).
    #[arg(
        long = "isl",
        visible_alias = "synthetic-input-tokens-mean",
        value_name = "N",
        value_parser = ranged::at_least_one
    )]
    pub isl: Option<u32>,
    /// Standard deviation of the input length (default 0: every request the same).
    #[arg(
        long,
        visible_alias = "synthetic-input-tokens-stddev",
        value_name = "N",
        value_parser = ranged::isl_stddev
    )]
    pub isl_stddev: Option<f64>,
    /// Mean output length, in tokens (default 150).
    #[arg(long = "osl", visible_alias = "output-tokens-mean", value_name = "N",
          value_parser = ranged::at_least_one)]
    pub osl: Option<u32>,
    /// Standard deviation of the output length (default 0).
    #[arg(long, visible_alias = "output-tokens-stddev", value_name = "N",
          value_parser = ranged::osl_stddev)]
    pub osl_stddev: Option<f64>,
    /// Tokens of a system prompt every synthetic request starts with (the server's prefix
    /// cache sees it); added to --isl.
    #[arg(long, value_name = "N")]
    pub shared_system_prompt_length: Option<u32>,
    /// Synthetic requests to send (default 10 unless --benchmark-duration is given; with
    /// both, the first reached ends the run). With --trace, the same as --max-requests.
    #[arg(long, value_name = "N", value_parser = ranged::request_count)]
    pub request_count: Option<u64>,
    /// Send synthetic requests for this long (`60`, `90s`, `5m`); those in flight then finish.
    #[arg(long, value_parser = crate::config::duration::parse_positive)]
    pub benchmark_duration: Option<Duration>,
    /// Seeds synthetic lengths, arrival gaps and prompt text (default 0: the same every run).
    #[arg(long, value_name = "N")]
    pub random_seed: Option<u64>,
    /// Open loop: requests per second, sent whatever the server does; with --concurrency,
    /// requests over the ceiling wait and the wait is recorded as hold.
    #[arg(long, value_name = "RPS", value_parser = ranged::request_rate)]
    pub request_rate: Option<f64>,
    /// How gaps between arrivals are drawn at --request-rate (default poisson).
    #[arg(long, value_name = "constant|poisson|gamma")]
    pub arrival_pattern: Option<ArrivalPattern>,
    /// Shape of gamma arrivals: 1 is Poisson, above is smoother, below burstier.
    #[arg(long, value_name = "K", value_parser = ranged::arrival_smoothness)]
    pub arrival_smoothness: Option<f64>,
    /// Percentage of requests (0 to 100) that close their stream --request-cancellation-delay
    /// after being sent, as users who give up; recorded as `cancelled`, apart from errors.
    #[arg(long, value_name = "P", value_parser = ranged::cancellation_rate)]
    pub request_cancellation_rate: Option<f64>,
    /// Time from sending a cancelled request to closing it (`0.5`, `250ms`; default 0).
    #[arg(long, value_parser = ranged::cancellation_delay, value_name = "D")]
    pub request_cancellation_delay: Option<Duration>,
    #[command(flatten)]
    pub shape: ShapeArgs,
}

/// Default synthetic input length (aiperf's).
const DEFAULT_ISL: u32 = 550;
/// Default synthetic output length.
const DEFAULT_OSL: u32 = 150;

impl ProfileArgs {
    /// Refuses flags that mean nothing together, naming them.
    fn check(&self) -> Result<()> {
        let s = &self.shape;
        let synthetic_flags = [
            ("--isl", self.isl.is_some()),
            ("--isl-stddev", self.isl_stddev.is_some()),
            ("--osl", self.osl.is_some()),
            ("--osl-stddev", self.osl_stddev.is_some()),
            (
                "--shared-system-prompt-length",
                self.shared_system_prompt_length.is_some(),
            ),
            ("--benchmark-duration", self.benchmark_duration.is_some()),
            ("--request-rate", self.request_rate.is_some()),
            ("--arrival-pattern", self.arrival_pattern.is_some()),
            ("--arrival-smoothness", self.arrival_smoothness.is_some()),
        ];
        let trace_flags = [
            ("--format", self.format.is_some()),
            ("--speedup", s.speedup != Plan::SPEEDUP),
            ("--start-offset", s.start_offset.is_some()),
            ("--end-offset", s.end_offset.is_some()),
            ("--max-requests", s.max_requests.is_some()),
            ("--scale-lengths", s.scale_lengths.is_some()),
            ("--max-input-tokens", s.max_input_tokens.is_some()),
            ("--max-output-tokens", s.max_output_tokens.is_some()),
            ("--shard", s.shard.is_some()),
            ("--skip-invalid", s.skip_invalid),
        ];
        let given = |flags: &[(&'static str, bool)]| flags.iter().find(|f| f.1).map(|f| f.0);
        match &self.trace {
            Some(_) => {
                if let Some(flag) = given(&synthetic_flags) {
                    bail!(
                        "{flag} shapes synthetic requests; a --trace brings its own lengths and \
                         schedule (use --speedup to change its pace, --scale-lengths its lengths)"
                    );
                }
                if self.request_count.is_some() && s.max_requests.is_some() {
                    bail!(
                        "--request-count and --max-requests say the same with a --trace: give one"
                    );
                }
            }
            None => {
                if let Some(flag) = given(&trace_flags).or(s.synthesis.first_given()) {
                    bail!("{flag} applies to a --trace; synthetic requests have none");
                }
            }
        }
        if self.request_rate.is_none() {
            if let Some(flag) = given(&synthetic_flags[7..]) {
                bail!("{flag} shapes the arrivals of --request-rate, which is not given");
            }
        }
        if self.request_cancellation_delay.is_some() && self.request_cancellation_rate.is_none() {
            bail!(
                "--request-cancellation-delay says when cancelled requests close; \
                 --request-cancellation-rate, which picks them, is not given"
            );
        }
        if self.arrival_smoothness.is_some()
            && !matches!(self.arrival_pattern, Some(ArrivalPattern::Gamma(_)))
        {
            bail!("--arrival-smoothness is the shape of --arrival-pattern gamma");
        }
        Ok(())
    }

    /// The synthetic requests the flags describe.
    fn requests(&self) -> SyntheticRequests {
        SyntheticRequests {
            isl: Length {
                mean: self.isl.unwrap_or(DEFAULT_ISL),
                stddev: self.isl_stddev.unwrap_or(0.0),
            },
            osl: Length {
                mean: self.osl.unwrap_or(DEFAULT_OSL),
                stddev: self.osl_stddev.unwrap_or(0.0),
            },
            shared_prefix: self.shared_system_prompt_length.unwrap_or(0),
            seed: self.random_seed.unwrap_or(0),
        }
    }

    /// The load the flags describe.
    fn load(&self) -> LoadShape {
        if let Some(path) = &self.trace {
            return LoadShape::Trace(TracePlan::file(path).with_format(self.format));
        }
        let requests = self.requests();
        let extent = Extent {
            count: self.request_count,
            duration: self.benchmark_duration,
        };
        match self.request_rate {
            Some(rate) => LoadShape::Rate(RatePlan {
                requests,
                rate,
                arrival: match (self.arrival_pattern, self.arrival_smoothness) {
                    (Some(ArrivalPattern::Gamma(_)), Some(k)) => ArrivalPattern::Gamma(k),
                    (Some(p), _) => p,
                    (None, _) => ArrivalPattern::Poisson,
                },
                extent,
            }),
            None => LoadShape::ClosedLoop(ClosedLoopPlan {
                requests,
                users: self.shape.concurrency.unwrap_or(1),
                extent,
            }),
        }
    }
}

/// The plan of `canaryd profile`.
impl TryFrom<&ProfileArgs> for Plan {
    type Error = anyhow::Error;

    fn try_from(args: &ProfileArgs) -> Result<Plan> {
        args.check()?;
        let shape = &args.shape;
        let target = replay::target(&args.url[0], args.endpoint_type, &args.model, shape)?;
        let replicas = args.url[1..]
            .iter()
            .map(|u| replay::target(u, args.endpoint_type, &args.model, shape))
            .collect::<Result<Vec<_>>>()?;
        let workload = shape.export.workload.clone().unwrap_or_else(|| {
            match (&args.trace, args.request_rate) {
                (Some(t), _) => t
                    .file_stem()
                    .map_or("profile".into(), |s| s.to_string_lossy().into_owned()),
                (None, Some(_)) => "rate".into(),
                (None, None) => "closed-loop".into(),
            }
        });
        let mut plan = Plan::new(workload, args.load(), target);
        shape.apply(&mut plan);
        plan.replay.replicas = replicas;
        plan.replay.balance = args.url_strategy;
        if let (Some(trace), Some(n)) = (plan.trace_mut(), args.request_count) {
            trace.selection.max_requests = Some(n.try_into().unwrap_or(usize::MAX));
        }
        if let Some(seed) = args.random_seed {
            plan.prompts.seed = seed;
        }
        if let Some(trace) = plan.trace_mut() {
            // aiperf's --random-seed seeds synthesis too, unless --synthesis-seed is given.
            trace.synthesis = shape.synthesis.synthesis(args.random_seed);
        }
        if let Some(rate_percent) = args.request_cancellation_rate {
            plan.replay.cancellation = Some(Cancellation {
                rate_percent,
                delay: args.request_cancellation_delay.unwrap_or_default(),
                seed: args.random_seed.unwrap_or(0),
            });
        }
        if let LoadShape::ClosedLoop(_) = plan.load {
            // The users are the ceiling (`Plan::dispatcher_config`): not a second one.
            plan.replay.concurrency = None;
        }
        plan.api_key = Some(replay::api_key_source(
            shape.api_key_file.as_deref(),
            shape.api_key_env.as_deref(),
        ));
        Ok(plan)
    }
}

/// Runs `canaryd profile`; the exit code.
pub async fn profile(
    args: &ProfileArgs,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<i32> {
    run_plan(Plan::try_from(args)?, &args.shape, shutdown).await
}

/// Runs `plan` (of `canaryd profile` or `replay`) with `shape`'s output and repeats; the exit
/// code.
pub async fn run_plan(
    plan: Plan,
    shape: &ShapeArgs,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<i32> {
    let observe = shape.telemetry.observe(&plan.replay.target);
    let print = Print {
        json: shape.json,
        token_counts: shape.use_server_token_count,
        criteria: shape.criteria(),
        overwrite: shape.overwrite,
        quiet: false,
    };
    let repeats = shape.repeats();
    crate::cli::repeats::run(plan, &observe, &shape.export, print, repeats, shutdown).await
}
