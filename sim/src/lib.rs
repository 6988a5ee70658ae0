//! canary-sim: a simulated OpenAI-compatible inference server that behaves like vLLM and can
//! tell the truth.
//!
//! It serves `POST /v1/chat/completions` and `POST /v1/completions` (streaming SSE and not),
//! `GET /v1/models`, `GET /version`, `GET /health` and a vLLM V1-shaped `GET /metrics`, with a
//! latency model (prefill, prefix cache, continuous-batching decode, capacity, a FIFO queue, KV
//! admission with optional preemption), injectable faults, and a ground-truth record of every
//! generation request on CLOCK_MONOTONIC, so that canaryd's client-side measurements can be
//! checked against what the server really did.
//!
//! Main types:
//! - [`Args`] (the `canaryd sim` flags) → [`Config`] (validated, via `TryFrom`);
//! - [`Profile`]: the latency model's parameters ([`Profile::fast`], [`Profile::illustrative`],
//!   [`Profile::capacity_profile`], [`Profile::load`]) and its closed-form throughput
//!   ([`Profile::capacity`] → [`Capacity`]);
//! - [`Sim`]: [`Sim::bind`] then [`Sim::run`]; [`spawn`] gives a [`SimHandle`] for tests;
//! - [`TruthRecord`]: one request's ground truth; [`FaultPlan`]: one response's faults.
//!
//! # Tokens
//!
//! There is no tokenizer: one token is one whitespace-separated word of the prompt (chat: the
//! text of all messages, string or `{type: "text", text}` parts, joined with spaces; completions:
//! the prompt string, or one token per id for token-id prompts). canaryd's prompt synthesizer
//! builds prompts from single-token words separated by spaces, so the counts match. Each output
//! token is one word with a leading space, one per SSE chunk.
//!
//! # Latency model
//!
//! An engine task steps all running sequences (see the `engine` module): a step costs
//! `decode_base_us + decode_per_seq_us × running`, plus `prefill_overhead_us +
//! prefill_us_per_token × uncached_prompt_tokens` for each request admitted in that step, and
//! gives every running sequence one token. Requests wait in a FIFO queue while `max_running`
//! sequences run or the KV budget is full: by default `prompt + max_tokens` is reserved per
//! running request; with [`KvAdmission::Optimistic`] a request is admitted on its prompt, grows
//! one token per step, and the newest running sequence is preempted when the budget runs out,
//! as in vLLM. A client that leaves aborts its sequence at the next step.
//! The prefix cache hashes each `--block-size` block of prompt tokens chained with its prefix
//! and keeps `--cache-blocks` blocks in LRU order; `cached_tokens` = matched full blocks × block
//! size.
//!
//! # Faults
//!
//! Per request with the `x-sim-fault` header or server-wide with `--fault-rate P` (deterministic
//! under `--seed`); see [`FaultPlan`] for the syntax. `x-sim-reasoning-tokens: R` makes the
//! first R tokens `delta.reasoning_content`.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let sim = canary_sim::spawn(canary_sim::Config::default()).await?;
//! println!("serving on {}", sim.url());
//! // ... drive requests at sim.url() ...
//! let truth = sim.truth();
//! println!("{} requests served", truth.len());
//! sim.shutdown().await?;
//! # Ok(()) }
//! ```

mod chunk;
mod config;
mod engine;
mod error;
mod fault;
mod generate;
mod http;
mod identity;
mod link;
mod metrics;
mod openai;
mod prefix_cache;
mod profile;
mod prompt;
mod server;
mod shared;
mod truth;
mod wire_arrival;

pub use config::{default_engine_version, Args, Config};
pub use error::ConfigError;
pub use fault::{FaultInjector, FaultParseError, FaultPlan};
pub use profile::{Capacity, KvAdmission, Profile, ProfilePatch, UnloadedLatency};
pub use server::Sim;
pub use truth::{NetDelay, TruthRecord};

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A sim running on the current tokio runtime. Shuts down when dropped.
pub struct SimHandle {
    /// The bound address.
    pub addr: SocketAddr,
    shared: Arc<shared::Shared>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl SimHandle {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A snapshot of the in-memory ground-truth ring, oldest first.
    pub fn truth(&self) -> Vec<TruthRecord> {
        self.shared.truth.snapshot(0)
    }

    /// The current latency profile.
    pub fn profile(&self) -> Profile {
        (*self.shared.engine.profile()).clone()
    }

    /// Time the engine fell more than 5 ms behind its virtual clock (the host was busy) and
    /// dropped rather than caught up: the sim served that much less than its profile says.
    pub fn engine_lag_dropped(&self) -> std::time::Duration {
        let ns = self.shared.metrics.lag_dropped_ns.load(Ordering::Relaxed);
        std::time::Duration::from_nanos(ns)
    }

    /// Stops serving, waits for the server task and flushes the truth log.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        match self.task.take() {
            Some(task) => task.await.context("canary-sim task panicked")?,
            None => Ok(()),
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Binds (127.0.0.1:0 with `Config::default()`) and runs a sim on the current runtime.
pub async fn spawn(config: Config) -> anyhow::Result<SimHandle> {
    let sim = Sim::bind(config).await?;
    let addr = sim.local_addr();
    let shared = sim.shared();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(sim.run(shutdown.clone()));
    Ok(SimHandle {
        addr,
        shared,
        shutdown,
        task: Some(task),
    })
}

/// Runs the sim on its own runtime (`--threads` workers; 1 = current-thread) until Ctrl-C or
/// SIGTERM. The entry point of `canaryd sim`.
pub fn run_blocking(args: Args) -> anyhow::Result<()> {
    let config = Config::try_from(args)?;
    let runtime = if config.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads)
            .enable_all()
            .build()
    }
    .context("canary-sim: building the runtime")?;
    runtime.block_on(async move {
        let profile = config.profile.name.clone();
        let sim = Sim::bind(config).await?;
        tracing::info!(
            "canary-sim listening on http://{} (profile {profile})",
            sim.local_addr()
        );
        let shutdown = CancellationToken::new();
        let signal = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            signal.cancel();
        });
        sim.run(shutdown).await
    })
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
