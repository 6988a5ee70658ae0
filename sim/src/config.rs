//! Command-line arguments and the validated configuration.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::ConfigError;
use crate::fault::{FaultInjector, FaultPlan};
use crate::http;
use crate::profile::Profile;

/// The most runtime worker threads (`--threads`). A sim serves loopback load from one host, so
/// a few per core is already more than helps; `--threads 100000` spent over 15 s only spawning
/// them before it served a request. A fixed bound, not one from the core count, so that a flag
/// valid on one machine is valid on every one.
pub(crate) const MAX_THREADS: usize = 1024;

/// Command-line arguments of `canaryd sim` (flattened into the daemon's CLI).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Latency profile: `illustrative` (default), `fast`, `capacity`, or a path to a JSON
    /// profile file.
    #[arg(long, default_value = "illustrative")]
    pub profile: String,
    /// Model name served by /v1/models and echoed in responses.
    #[arg(long, default_value = "canary-sim")]
    pub model: String,
    /// Append one JSON line of ground truth per finished request to this file.
    #[arg(long, value_name = "FILE")]
    pub truth_log: Option<PathBuf>,
    /// Requests kept in the in-memory ground-truth ring served by GET /sim/truth.
    #[arg(long, default_value_t = 100_000)]
    pub truth_capacity: usize,
    /// Emit the first N output tokens of every chat request as `reasoning_content`.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub reasoning_tokens: u32,
    /// Probability in [0, 1] that a generation request gets a random fault from the mix.
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub fault_rate: f64,
    /// A fault for the --fault-rate mix, in the x-sim-fault syntax (repeatable; default: a mix
    /// of every kind).
    #[arg(long = "fault", value_name = "SPEC")]
    pub faults: Vec<String>,
    /// Seed of the fault draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Runtime worker threads (1 = a current-thread runtime; at most 1024).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Prefix-cache block size in tokens.
    #[arg(long, default_value_t = 512)]
    pub block_size: u32,
    /// Prefix-cache capacity in blocks (0 disables the cache).
    #[arg(long, default_value_t = 4096)]
    pub cache_blocks: usize,
    /// Require `Authorization: Bearer KEY` on `/v1/*`, as vLLM's `--api-key` does (401
    /// without it), and on `POST /sim/*` and `GET /sim/truth`; `/health` and `/metrics` stay
    /// open.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Longest prompt + max_tokens accepted, shown as `max_model_len` in /v1/models (default
    /// and upper bound: the profile's KV budget).
    #[arg(long, value_name = "TOKENS")]
    pub max_model_len: Option<u64>,
    /// The version `GET /version` reports (default `canary-sim <crate version>`), to simulate
    /// an engine upgrade.
    #[arg(long, value_name = "VERSION")]
    pub engine_version: Option<String>,
    /// Close a connection with no request under way (before the first, or between two) after
    /// this many seconds without a byte from its client; 0: never.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub idle_timeout_secs: u64,
}

/// Validated configuration of a [`crate::Sim`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address.
    pub addr: SocketAddr,
    /// Served model name.
    pub model: String,
    /// Initial latency model.
    pub profile: Profile,
    /// JSONL ground-truth file.
    pub truth_log: Option<PathBuf>,
    /// In-memory ground-truth ring size (requests).
    pub truth_capacity: usize,
    /// Default reasoning tokens per chat request (the `x-sim-reasoning-tokens` header overrides).
    pub reasoning_tokens: u32,
    /// Random faults.
    pub faults: FaultInjector,
    /// Runtime worker threads, for [`crate::run_blocking`].
    pub threads: usize,
    /// Prefix-cache block size in tokens.
    pub block_size: u32,
    /// Prefix-cache capacity in blocks.
    pub cache_blocks: usize,
    /// The bearer token `/v1/*`, `POST /sim/*` and `GET /sim/truth` require, if any.
    pub api_key: Option<String>,
    /// Longest prompt + max_tokens accepted (`None`: the profile's KV budget, which also caps
    /// it).
    pub max_model_len: Option<u64>,
    /// What `GET /version` reports.
    pub engine_version: String,
    /// A connection with no request under way is closed after this long without a byte from
    /// its client (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// A write of a response that makes no progress for this long (the client stopped
    /// reading) ends the response and closes the connection.
    pub write_timeout: Duration,
    /// The bytes of request bodies held at once over all connections (default 256 MiB); a
    /// body that would take them past it gets 503. Not a flag.
    pub body_budget: usize,
}

/// `canary-sim <crate version>`: what `GET /version` reports by default.
pub fn default_engine_version() -> String {
    format!("canary-sim {}", env!("CARGO_PKG_VERSION"))
}

impl Default for Config {
    /// The fast profile on `127.0.0.1:0`, no faults: what tests want.
    fn default() -> Self {
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            model: "canary-sim".into(),
            profile: Profile::fast(),
            truth_log: None,
            truth_capacity: 100_000,
            reasoning_tokens: 0,
            faults: FaultInjector::default(),
            threads: 1,
            block_size: 512,
            cache_blocks: 4096,
            api_key: None,
            max_model_len: None,
            engine_version: default_engine_version(),
            idle_timeout: Some(http::IDLE_TIMEOUT),
            write_timeout: http::WRITE_TIMEOUT,
            body_budget: http::BODY_BUDGET,
        }
    }
}

/// The fault flags given without `--fault-rate`, where they do nothing (a warning each).
fn idle_fault_flags(a: &Args) -> Vec<&'static str> {
    let set = [(!a.faults.is_empty(), "--fault"), (a.seed != 0, "--seed")];
    set.into_iter()
        .filter(|&(given, _)| given && a.fault_rate == 0.0)
        .map(|(_, flag)| flag)
        .collect()
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(a: Args) -> Result<Config, ConfigError> {
        let ip: IpAddr = a
            .host
            .parse()
            .map_err(|_| ConfigError::Host(a.host.clone()))?;
        let flag = |flag, message: &str| ConfigError::Flag {
            flag,
            message: message.to_owned(),
        };
        let profile = match Profile::named(&a.profile) {
            Some(p) => p,
            // A typo of a name reads better as one than as a file that cannot be read.
            None if !std::path::Path::new(&a.profile).exists() => {
                return Err(flag(
                    "--profile",
                    &format!(
                        "{:?} is neither a known profile ({}) nor an existing profile file",
                        a.profile,
                        Profile::NAMES.join(", ")
                    ),
                ));
            }
            None => Profile::load(&a.profile)?,
        };
        for what in idle_fault_flags(&a) {
            tracing::warn!(
                "canary-sim: {what} does nothing without --fault-rate P (P > 0): no fault is drawn"
            );
        }
        if !(0.0..=1.0).contains(&a.fault_rate) {
            return Err(flag("--fault-rate", "must be in [0, 1]"));
        }
        if !(1..=MAX_THREADS).contains(&a.threads) {
            return Err(flag(
                "--threads",
                &format!("must be from 1 to {MAX_THREADS}"),
            ));
        }
        if a.block_size == 0 {
            return Err(flag("--block-size", "must be >= 1"));
        }
        if a.truth_capacity == 0 {
            return Err(flag("--truth-capacity", "must be >= 1"));
        }
        if a.max_model_len == Some(0) {
            return Err(flag("--max-model-len", "must be >= 1"));
        }
        if a.engine_version
            .as_deref()
            .is_some_and(|v| v.trim().is_empty() || v.chars().any(char::is_control))
        {
            return Err(flag(
                "--engine-version",
                "must be non-empty, without control characters",
            ));
        }
        let mix = if a.faults.is_empty() {
            FaultPlan::default_mix()
        } else {
            a.faults
                .iter()
                .map(|s| FaultPlan::parse(s))
                .collect::<Result<_, _>>()
                .map_err(ConfigError::Fault)?
        };
        Ok(Config {
            addr: SocketAddr::new(ip, a.port),
            model: a.model,
            profile,
            truth_log: a.truth_log,
            truth_capacity: a.truth_capacity,
            reasoning_tokens: a.reasoning_tokens,
            faults: FaultInjector {
                rate: a.fault_rate,
                mix,
                seed: a.seed,
            },
            threads: a.threads,
            block_size: a.block_size,
            cache_blocks: a.cache_blocks,
            api_key: a.api_key.filter(|k| !k.is_empty()),
            max_model_len: a.max_model_len,
            engine_version: a.engine_version.unwrap_or_else(default_engine_version),
            idle_timeout: (a.idle_timeout_secs > 0)
                .then(|| Duration::from_secs(a.idle_timeout_secs)),
            write_timeout: http::WRITE_TIMEOUT,
            body_budget: http::BODY_BUDGET,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Config, ConfigError> {
        let cli = Cli::try_parse_from(std::iter::once("sim").chain(argv.iter().copied())).unwrap();
        Config::try_from(cli.args)
    }

    #[test]
    fn defaults_and_flags() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.addr.to_string(), "127.0.0.1:8000");
        assert_eq!(c.profile, Profile::illustrative());
        assert_eq!(c.faults.mix, FaultPlan::default_mix());
        assert_eq!(
            c.engine_version,
            format!("canary-sim {}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(c.max_model_len, None);
        assert_eq!(c.idle_timeout, Some(Duration::from_secs(60)));
        assert_eq!(c.write_timeout, Duration::from_secs(30));
        assert_eq!(
            parse(&["--idle-timeout-secs", "0"]).unwrap().idle_timeout,
            None
        );
        assert_eq!(
            parse(&["--idle-timeout-secs", "300"]).unwrap().idle_timeout,
            Some(Duration::from_secs(300))
        );
        let c = parse(&["--engine-version", "0.9.2", "--max-model-len", "4096"]).unwrap();
        assert_eq!(
            (c.engine_version.as_str(), c.max_model_len),
            ("0.9.2", Some(4096))
        );
        let c = parse(&["--profile", "capacity"]).unwrap();
        assert_eq!(c.profile, Profile::capacity_profile());
        let c = parse(&[
            "--profile",
            "fast",
            "--port",
            "0",
            "--fault-rate",
            "0.5",
            "--fault",
            "status=503",
            "--fault",
            "no_done",
            "--seed",
            "9",
            "--threads",
            "2",
        ])
        .unwrap();
        assert_eq!(c.profile, Profile::fast());
        assert_eq!(c.faults.mix.len(), 2);
        assert_eq!((c.faults.seed, c.threads), (9, 2));
    }

    #[test]
    fn fault_flags_without_a_rate_are_named() {
        let idle = |argv: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("sim").chain(argv.iter().copied()));
            idle_fault_flags(&cli.unwrap().args)
        };
        // Before, both were silent no-ops.
        assert_eq!(
            idle(&["--fault", "no_done", "--seed", "3"]),
            ["--fault", "--seed"]
        );
        assert!(idle(&["--fault", "no_done", "--fault-rate", "0.1"]).is_empty());
        assert!(idle(&[]).is_empty());
    }

    #[test]
    fn errors_name_the_flag() {
        let e = |argv: &[&str]| parse(argv).unwrap_err().to_string();
        assert!(e(&["--host", "nope"]).contains("--host"));
        assert!(e(&["--fault-rate", "2"]).contains("--fault-rate"));
        assert!(e(&["--fault", "boom"]).contains("--fault"));
        assert!(e(&["--threads", "0"]).contains("--threads"));
        // Before, any number went, and 100,000 spent 15 s spawning threads.
        let many = e(&["--threads", "1025"]);
        assert!(
            many.contains("--threads") && many.contains("1024"),
            "{many}"
        );
        assert_eq!(parse(&["--threads", "1024"]).unwrap().threads, 1024);
        assert!(e(&["--max-model-len", "0"]).contains("--max-model-len"));
        assert!(e(&["--engine-version", " "]).contains("--engine-version"));
        assert!(e(&["--profile", "/nonexistent/p.json"]).contains("/nonexistent/p.json"));
        // Before: "cannot read" (no such file), as if a file had been meant.
        let typo = e(&["--profile", "nonsense"]);
        assert!(
            typo.contains("--profile") && typo.contains("fast, illustrative, capacity"),
            "{typo}"
        );
    }
}
