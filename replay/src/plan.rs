//! [`Plan`]: everything one run needs except its observers — what to load and select, the
//! target and where its API key is, the tokenizer and seeds, and how the run goes
//! (concurrency, warm-up, grace period, SLOs, artifacts, limits). Every default is here, once
//! ([`Plan::new`] and the constants beside it).
//!
//! Front ends build one: `canaryd replay` from its flags, `canaryd demo` directly, the daemon
//! from a workload and its target. [`Plan::validate`] checks it before anything is started;
//! its errors name the setting ([`Setting`]), and each front end says it in its own words.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use canary_replay::{Endpoint, LoadShape, Plan, Target, TracePlan};
//! let target = Target::new("http://127.0.0.1:8000", Endpoint::Chat, "llama")?;
//! let mut plan = Plan::new("chat", LoadShape::Trace(TracePlan::file("mooncake.jsonl")), target);
//! plan.replay.concurrency = Some(64);
//! plan.validate()?;
//! # Ok(()) }
//! ```

mod info;
mod key;
mod load;
mod pipe;
mod setting;
mod synthesis;
mod synthetic;

pub use info::{PlanInfo, RunInfo, SelectionAsked, TargetInfo, TraceInfo};
pub use key::{
    is_variable_name, key_path_shown, looks_like_a_key, ApiKeySource, MAX_KEY_FILE_BYTES,
    NAME_NOT_SHOWN, NOT_A_VARIABLE_NAME,
};
pub use load::{LoadError, LoadShape, Loaded, Prepared, TracePlan, TraceSource};
pub use setting::{Setting, SettingError, Table};
pub use synthesis::SynthesisInfo;
pub use synthetic::{
    check_stddev, ClosedLoopPlan, Extent, LoadInfo, RatePlan, SyntheticInfo, MAX_REQUEST_COUNT,
    REQUEST_RATES,
};

use crate::prompt::{PromptBuilder, PromptError, Tokenizer, TokenizerSpec};
use crate::run::Config;
use crate::target::Target;
use std::sync::Arc;
use std::time::Duration;

/// Everything a run needs except its observers.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Whose run it is: the workload on exports and in `summary.json`.
    pub workload: String,
    /// What to send, and when.
    pub load: LoadShape,
    /// How prompts are synthesized.
    pub prompts: PromptSpec,
    /// Where the target's API key is: read when the run starts ([`Plan::read_api_key`]).
    pub api_key: Option<ApiKeySource>,
    /// The target's name in the daemon's config (absent for one-shot runs).
    pub target_name: Option<String>,
    /// The dispatcher's settings: the target, and how the run goes.
    pub replay: Config,
}

/// The tokenizer prompt lengths are measured in, and the seed that picks each hash id's text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PromptSpec {
    /// The tokenizer.
    pub tokenizer: TokenizerSpec,
    /// Changes which text each hash id maps to (same seed, same prompts).
    pub seed: u64,
}

impl PromptSpec {
    /// Loads the tokenizer and builds the prompt synthesizer (says once, in the log, when
    /// lengths are approximate for the target's model).
    pub fn build(&self) -> Result<Arc<PromptBuilder>, PromptError> {
        let tokenizer = Tokenizer::load(&self.tokenizer)?;
        if tokenizer.is_builtin() {
            tracing::info!(
                "prompt lengths are exact for {}; for other models they are approximate (pass --tokenizer)",
                tokenizer.name()
            );
        }
        Ok(Arc::new(PromptBuilder::new(tokenizer, self.seed)?))
    }
}

impl Plan {
    /// Default trace-time divisor: the trace's own pace.
    pub const SPEEDUP: f64 = 1.0;
    /// Default time in-flight requests get to finish after a stop.
    pub const GRACE_PERIOD: Duration = Duration::from_secs(30);
    /// Default warm-up: none.
    pub const WARMUP_REQUESTS: usize = 0;
    /// Default prompt seed.
    pub const PROMPT_SEED: u64 = 0;

    /// A plan of `load` against `target` for `workload`, every other setting at its default:
    /// no concurrency ceiling, no warm-up, no SLOs, results in memory only, the built-in
    /// tokenizer, a fresh run id and prompt salt, no API key.
    pub fn new(workload: impl Into<String>, load: LoadShape, target: Target) -> Plan {
        Plan {
            workload: workload.into(),
            load,
            prompts: PromptSpec::default(),
            api_key: None,
            target_name: None,
            replay: Config::new(target),
        }
    }

    /// The trace this plan replays, if it replays one.
    pub fn trace(&self) -> Option<&TracePlan> {
        match &self.load {
            LoadShape::Trace(t) => Some(t),
            _ => None,
        }
    }

    /// The same, to change.
    pub fn trace_mut(&mut self) -> Option<&mut TracePlan> {
        match &mut self.load {
            LoadShape::Trace(t) => Some(t),
            _ => None,
        }
    }

    /// Sets the longest input or output a row may ask for, in tokens, everywhere it applies:
    /// loading, scaling, and the dispatcher's own guard.
    pub fn set_length_limit(&mut self, limit: u32) {
        self.replay.length_limit = limit;
        if let Some(t) = self.trace_mut() {
            t.read.length_limit = limit;
            t.selection.length_limit = limit;
        }
    }

    /// Checks the settings the run would otherwise trip on (see [`Config::validate`]) and the
    /// load shape's own (a speedup, a rate, lengths, users), before anything is started.
    pub fn validate(&self) -> Result<(), SettingError> {
        self.load.validate(self.replay.length_limit)?;
        if let (LoadShape::ClosedLoop(c), Some(n)) = (&self.load, self.replay.concurrency) {
            if n != c.users {
                return Err(SettingError::new(
                    Setting::Concurrency,
                    format!(
                        "a closed loop of {} users has exactly that many requests in flight; a \
                         ceiling of {n} beside it means nothing",
                        c.users
                    ),
                ));
            }
        }
        self.replay.validate()
    }

    /// The dispatcher's settings for this plan's load: a closed loop's users are its
    /// in-flight ceiling (never contended, and the open-file check sees it).
    pub fn dispatcher_config(&self) -> Config {
        let mut config = self.replay.clone();
        if let LoadShape::ClosedLoop(c) = &self.load {
            config.concurrency = Some(c.users);
        }
        config
    }

    /// Reads the API key from where the plan says it is into the target (no source: no key).
    pub fn read_api_key(&mut self) -> Result<(), SettingError> {
        if let Some(source) = &self.api_key {
            let key = source.read()?;
            for replica in &mut self.replay.replicas {
                replica.api_key.clone_from(&key);
            }
            self.replay.target.api_key = key;
        }
        Ok(())
    }
}
