//! `canaryd sweep`: a series of full runs of one load shape, one axis varied from point to
//! point (`--concurrency 1,4,16`, `--request-rate 10,20,40`, or a trace's `--speedup 1,2,4`),
//! each with its own artifacts folder, then `sweep.json` and `sweep.csv` with the knee and the
//! Pareto front; or, with `--find-max-rate`, a bounded search for the highest request rate
//! whose good-request fraction meets `--min-good-fraction`.
//!
//! Every point is a plan of `canaryd profile`'s flags run through the one run function
//! ([`crate::execute::execute`]); with `--runs N`, N times, as `canaryd profile --runs N`
//! runs a plan (the point's folder is then that experiment's), and the point's figures are the
//! runs' means, with their confidence intervals beside them.

pub(crate) mod document;
pub(crate) mod point;
mod points;
mod table;

use crate::cli::profile::ProfileArgs;
use crate::config::duration;
use anyhow::{bail, Result};
use clap::{ArgMatches, Args, Command, FromArgMatches};
use point::Axis;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The exit status when a point of the sweep could not run, or its verdict is an error
/// (nothing completed, or canaryd itself was the bottleneck).
pub const POINT_FAILED: i32 = 5;
/// The exit status when `--find-max-rate` found no rate that met the SLOs.
pub const NO_PASSING_RATE: i32 = 6;

/// The sweep's own flags; the rest are `canaryd profile`'s, set the same for every point.
#[derive(Debug, Clone, Args)]
pub struct SweepFlags {
    /// Sweep closed loops of these many users (`1,4,16,64`); with --request-rate or --trace,
    /// one value is the in-flight ceiling of every point.
    #[arg(
        long = "concurrency",
        id = "sweep_concurrency",
        value_delimiter = ',',
        value_name = "N,N,…",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub concurrency: Vec<usize>,
    /// Sweep open-loop request rates (`10,20,40`, requests/s); with --find-max-rate, one value
    /// is the search's first rate (default 10).
    #[arg(
        long = "request-rate",
        id = "sweep_request_rate",
        value_delimiter = ',',
        value_name = "RPS,RPS,…",
        value_parser = crate::cli::ranged::request_rate
    )]
    pub request_rate: Vec<f64>,
    /// Sweep a --trace's speedups (`1,2,4,8`).
    #[arg(
        long = "speedup",
        id = "sweep_speedup",
        value_delimiter = ',',
        value_name = "F,F,…",
        value_parser = crate::cli::replay::positive_number
    )]
    pub speedup: Vec<f64>,
    /// Pause between points, so one point's backlog does not spill into the next (`5s`); at
    /// most a year, as the daemon's `cooldown`.
    #[arg(long, value_parser = duration::parse_period, default_value = "0s")]
    pub cooldown: Duration,
    /// GPUs serving the target, for tokens/s per GPU when neither NVML nor DCGM sees them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub gpus: Option<u64>,
    /// Search for the highest --request-rate whose share of good requests (by --slo) meets
    /// --min-good-fraction: bracketing, then bisection.
    #[arg(long, requires = "min_good_fraction")]
    pub find_max_rate: bool,
    /// Most probes the search may make (each of --runs runs).
    #[arg(long, default_value_t = 12, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_runs: usize,
    /// The search stops when the bracket (last pass .. first fail) is narrower than this share
    /// of its passing rate.
    #[arg(long, default_value_t = 0.05, value_name = "F",
          value_parser = crate::cli::replay::positive_number)]
    pub search_precision: f64,
    /// The lowest rate the search tries (requests/s).
    #[arg(long, default_value_t = 0.1, value_name = "RPS",
          value_parser = crate::cli::replay::positive_number)]
    pub min_rate: f64,
}

/// Flags of `canaryd sweep`: the sweep's own, and `canaryd profile`'s for every point.
#[derive(Debug, Clone)]
pub struct SweepArgs {
    /// Every point's flags (the axis set per point).
    pub profile: ProfileArgs,
    /// The sweep's own.
    pub sweep: SweepFlags,
}

impl FromArgMatches for SweepArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(SweepArgs {
            profile: ProfileArgs::from_arg_matches(m)?,
            sweep: SweepFlags::from_arg_matches(m)?,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.profile.update_from_arg_matches(m)?;
        self.sweep.update_from_arg_matches(m)
    }
}

impl Args for SweepArgs {
    fn augment_args(cmd: Command) -> Command {
        SweepFlags::augment_args(profile_flags(ProfileArgs::augment_args(cmd)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        SweepFlags::augment_args_for_update(profile_flags(ProfileArgs::augment_args_for_update(
            cmd,
        )))
    }
}

/// `canaryd profile`'s flags as the sweep takes them: the three it varies give their names to
/// the sweep's lists (the sweep sets them per point), and the artifacts go to `canaryd-sweep`
/// by default. The SLOs are `--slo` (alias `--goodput`) as in `profile` and `replay`.
fn profile_flags(cmd: Command) -> Command {
    cmd.mut_arg("concurrency", |a| a.long("point-concurrency").hide(true))
        .mut_arg("request_rate", |a| a.long("point-request-rate").hide(true))
        .mut_arg("speedup", |a| a.long("point-speedup").hide(true))
        .mut_arg("runs", |a| {
            a.help(
                "Run each point N times into its run-1 … run-N; sweep.json's figures are then \
                 the runs' means with 95% confidence intervals (Student's t), and a point \
                 passes only when every run does",
            )
        })
        // `replay`'s wording says a missed gate sets the exit status; a sweep's does not.
        .mut_arg("min_good_fraction", |a| {
            a.help(
                "Gate, the daemon's `min_good_fraction`: a point where fewer than this share \
                 (0 to 1) of the requests sent were good by --slo fails (`fail: …` in its \
                 verdict; with --find-max-rate, a failing rate). A point's failing does not \
                 change the sweep's exit status, but a --find-max-rate search in which no \
                 rate passed exits with status 6. Needs --slo",
            )
        })
        .mut_arg("max_error_rate", |a| {
            a.help(
                "Gate, the daemon's `max_error_rate`: a point where more than this share (0 \
                 to 1) of the requests sent failed fails (`fail: …` in its verdict). A \
                 point's failing does not change the sweep's exit status, but a \
                 --find-max-rate search in which no rate passed exits with status 6",
            )
        })
        .mut_arg("output_dir", |a| {
            a.default_value("canaryd-sweep")
                .help("Directory of the sweep: sweep.json, sweep.csv and one folder per point")
        })
}

impl SweepArgs {
    /// The axis the flags vary and its values, in the order given; refuses a sweep of two
    /// axes at once, or of none.
    fn axis(&self) -> Result<(Axis, Vec<f64>)> {
        let s = &self.sweep;
        let lists = [
            (
                Axis::Concurrency,
                s.concurrency.iter().map(|&c| c as f64).collect::<Vec<_>>(),
            ),
            (Axis::RequestRate, s.request_rate.clone()),
            (Axis::Speedup, s.speedup.clone()),
        ];
        let varied: Vec<_> = lists.iter().filter(|l| l.1.len() > 1).collect();
        if s.find_max_rate {
            if self.profile.trace.is_some() {
                bail!("--find-max-rate searches --request-rate: give synthetic requests, not a --trace");
            }
            if let Some(l) = varied.first() {
                bail!(
                    "--find-max-rate picks its own rates: give {} one value at most",
                    l.0.flag()
                );
            }
            if !s.concurrency.is_empty() || self.profile.shape.concurrency.is_some() {
                // A ceiling holds requests in canaryd once it is reached, where TTFT (timed
                // from the send) does not see them: the SLOs would pass rates never offered.
                bail!(
                    "--find-max-rate offers open-loop rates: --concurrency would cap the \
                     requests in flight, and a request held for a slot waits in canaryd, where \
                     the SLOs do not time it; leave --concurrency out"
                );
            }
            let start = s.request_rate.first().copied().unwrap_or(10.0);
            return Ok((Axis::RequestRate, vec![start]));
        }
        match varied.as_slice() {
            [one] => {
                if let Some(v) = point::repeated_value(&one.1) {
                    bail!(
                        "{} lists {v} twice: a sweep's points are distinct loads (a step between \
                         two runs of one load is noise, not a knee); to repeat a point, give \
                         each value once and --runs N",
                        one.0.flag()
                    );
                }
                Ok((one.0, one.1.clone()))
            }
            [] => {
                // One value of one list: a sweep of one point is still a sweep.
                match lists.iter().rev().find(|l| !l.1.is_empty()) {
                    Some(l) => Ok((l.0, l.1.clone())),
                    None => bail!(
                        "give the points: --concurrency 1,4,16, --request-rate 10,20,40 or, with \
                         a --trace, --speedup 1,2,4; or --find-max-rate"
                    ),
                }
            }
            [a, b, ..] => bail!(
                "{} and {} both list several values: a sweep varies one at a time",
                a.0.flag(),
                b.0.flag()
            ),
        }
    }
}

/// Runs `canaryd sweep`; the exit code.
pub async fn sweep(args: &SweepArgs, shutdown: CancellationToken) -> Result<i32> {
    let (axis, values) = args.axis()?;
    if args.sweep.find_max_rate {
        points::find_max_rate(args, values[0], shutdown).await
    } else {
        points::sweep(args, axis, &values, shutdown).await
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    fn sweep(cooldown: &str) -> Result<crate::Cli, clap::Error> {
        crate::Cli::try_parse_from([
            "canaryd",
            "sweep",
            "--url",
            "http://127.0.0.1:1",
            "-m",
            "m",
            "--concurrency",
            "1,2",
            "--cooldown",
            cooldown,
        ])
    }

    /// `--cooldown 36500d` was taken (the 100 years any duration may be), and the sweep hung
    /// after its first point: capped at a year, as the daemon's `cooldown`.
    #[test]
    fn a_cooldown_past_a_year_is_refused_naming_the_flag() {
        let e = sweep("36500d").unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let e = e.to_string();
        assert!(
            e.contains("--cooldown") && e.contains("\"36500d\" is too long: at most a year"),
            "{e}"
        );
        assert!(sweep("365d").is_ok());
    }
}
