//! Shared helpers: a simulator on loopback, generated requests, and one-call replays.

use canary_core::{Observer, RequestRecord, RunOutcome, TraceRequest, TraceRows};
use canary_replay::{
    Config, Endpoint, LoadOptions, Progress, PromptBuilder, RunInfo, Schedule, Target, Tokenizer,
    TokenizerSpec, Trace,
};
use clap::Parser;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tokio_util::sync::CancellationToken;

pub use canary_sim::{SimHandle, TruthRecord};

#[derive(Parser)]
struct SimArgs {
    #[command(flatten)]
    sim: canary_sim::Args,
}

/// A loopback TCP server that accepts connections and never reads or writes: TLS handshakes
/// against it never finish. Returns its port.
pub fn silent_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.extend(conn.ok());
        }
    });
    port
}

/// A loopback TCP server that closes every connection as soon as it accepts it. Returns its
/// port.
pub fn closing_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    port
}

/// Starts the simulator on a free loopback port with the given `canaryd sim` flags.
pub async fn sim(flags: &[&str]) -> SimHandle {
    let mut argv = vec!["sim", "--port", "0"];
    argv.extend_from_slice(flags);
    let args = SimArgs::try_parse_from(argv).expect("valid sim flags").sim;
    let config = canary_sim::Config::try_from(args).expect("valid sim config");
    canary_sim::spawn(config).await.expect("simulator starts")
}

/// A chat target pointing at the simulator.
pub fn target(sim: &SimHandle) -> Target {
    Target::new(&sim.url(), Endpoint::Chat, "canary-sim").unwrap()
}

/// A request header.
pub fn header(name: &'static str, value: &str) -> (http::HeaderName, http::HeaderValue) {
    (
        http::HeaderName::from_static(name),
        http::HeaderValue::from_str(value).unwrap(),
    )
}

/// `n` generated requests, all due at t = 0, with unique prompts.
pub fn requests(n: u32, input: u32, output: u32) -> Vec<TraceRequest> {
    (0..n)
        .map(|i| TraceRequest::new(i, i + 1, 0, None, 0, input, output, Default::default(), 512))
        .collect()
}

/// A real trace from `shared/traces/`.
pub fn load_shared(name: &str) -> Trace {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces")
        .join(name);
    canary_replay::load(&path, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// The built-in-tokenizer prompt builder, loaded once per test binary.
pub fn prompts() -> Arc<PromptBuilder> {
    static PROMPTS: OnceLock<Arc<PromptBuilder>> = OnceLock::new();
    PROMPTS
        .get_or_init(|| {
            let tok = Tokenizer::load(&TokenizerSpec::BuiltinO200k).unwrap();
            Arc::new(PromptBuilder::new(tok, 0).unwrap())
        })
        .clone()
}

/// What one test replay produced.
pub struct Run {
    pub outcome: RunOutcome,
    pub records: Vec<RequestRecord>,
    pub run_id: String,
    pub dir: tempfile::TempDir,
}

/// What a test replay is given: the dispatcher's settings (through `Deref`), the speedup
/// and an observer.
pub struct Setup {
    pub config: Config,
    pub speedup: f64,
    pub observer: Option<Arc<dyn Observer>>,
}

impl std::ops::Deref for Setup {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.config
    }
}

impl std::ops::DerefMut for Setup {
    fn deref_mut(&mut self) -> &mut Config {
        &mut self.config
    }
}

/// The `run` block of a test replay.
pub fn info(run_id: &str) -> RunInfo {
    RunInfo::unplanned(run_id, "test")
}

/// Replays `reqs` at `target` with default settings adjusted by `tweak`.
pub async fn replay(
    reqs: impl Into<TraceRows>,
    target: Target,
    tweak: impl FnOnce(&mut Setup),
) -> Run {
    replay_with_stop(reqs, target, tweak, CancellationToken::new()).await
}

/// [`replay`] with a stop token.
pub async fn replay_with_stop(
    reqs: impl Into<TraceRows>,
    target: Target,
    tweak: impl FnOnce(&mut Setup),
    stop: CancellationToken,
) -> Run {
    replay_watched(reqs, target, tweak, stop, Arc::default()).await
}

/// [`replay_with_stop`], with live counters the test can watch.
pub async fn replay_watched(
    reqs: impl Into<TraceRows>,
    target: Target,
    tweak: impl FnOnce(&mut Setup),
    stop: CancellationToken,
    progress: Arc<Progress>,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut setup = Setup {
        config: Config::new(target),
        speedup: 1.0,
        observer: None,
    };
    setup.output_dir = Some(dir.path().to_path_buf());
    setup.grace_period = std::time::Duration::from_secs(5);
    tweak(&mut setup);
    let Setup {
        config,
        speedup,
        observer,
    } = setup;
    let work = canary_replay::Work::Schedule(Schedule::new(reqs.into(), speedup));
    run_prepared(config, work, observer, stop, progress, dir).await
}

/// Runs `work` against `target` with default settings adjusted by `tweak` (a closed loop's
/// users are its concurrency, as the plan sets them).
pub async fn run_work(
    work: canary_replay::Work,
    target: Target,
    tweak: impl FnOnce(&mut Config),
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(target);
    config.output_dir = Some(dir.path().to_path_buf());
    config.grace_period = std::time::Duration::from_secs(5);
    tweak(&mut config);
    let stop = CancellationToken::new();
    run_prepared(config, work, None, stop, Arc::default(), dir).await
}

/// [`run_work`] with a stop token.
pub async fn run_work_with_stop(
    work: canary_replay::Work,
    target: Target,
    tweak: impl FnOnce(&mut Config),
    stop: CancellationToken,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(target);
    config.output_dir = Some(dir.path().to_path_buf());
    config.grace_period = std::time::Duration::from_secs(5);
    tweak(&mut config);
    run_prepared(config, work, None, stop, Arc::default(), dir).await
}

async fn run_prepared(
    config: Config,
    work: canary_replay::Work,
    observer: Option<Arc<dyn Observer>>,
    stop: CancellationToken,
    progress: Arc<Progress>,
    dir: tempfile::TempDir,
) -> Run {
    let run_id = config.run_id.clone();
    let outcome = canary_replay::run_work(
        config,
        work,
        prompts(),
        info(&run_id),
        observer,
        stop,
        progress,
    )
    .await
    .expect("run completes");
    let records = std::fs::read_to_string(dir.path().join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        outcome,
        records,
        run_id,
        dir,
    }
}

/// Ground-truth records of one run, by request index.
pub fn truth_by_request_id<'a>(
    truth: &'a [TruthRecord],
    run_id: &str,
) -> HashMap<u32, &'a TruthRecord> {
    let prefix = format!("{run_id}-");
    truth
        .iter()
        .filter_map(|t| {
            let id = t
                .request_id
                .as_deref()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            Some((id, t))
        })
        .collect()
}

/// `a == b` to the last bits: records come back through serde_json, whose default float parser
/// may round a value's final bit differently from the one written, so a figure recomputed from
/// parsed fields can differ from the parsed figure by an ulp or two, and never by more.
#[track_caller]
pub fn assert_same(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs()),
        "{what}: {a} != {b}"
    );
}

/// A setting as `canaryd replay` spells it (`--concurrency`), as these tests name them.
pub fn flag(s: canary_replay::Setting) -> String {
    match s {
        canary_replay::Setting::Headers => "--header".into(),
        s => format!("--{}", s.name().replace('_', "-")),
    }
}

/// A target at `url` with small caps, so a hostile-server test moves little data: 16 KiB
/// heads, 64 KiB events, 256 KiB bodies, and a generous timeout.
pub fn small_target(url: &str, streaming: bool) -> Target {
    let mut t = Target::new(url, Endpoint::Chat, "m").unwrap();
    t.streaming = streaming;
    t.timeout = std::time::Duration::from_secs(30);
    t.limits = canary_replay::ResponseLimits {
        header_bytes: 16 << 10,
        event_bytes: 64 << 10,
        body_bytes: 256 << 10,
        ..canary_replay::ResponseLimits::default()
    };
    t
}

/// The message of every record's error, which must all be of `kind`.
pub fn errors_of(records: &[RequestRecord], n: usize, kind: canary_core::ErrorKind) -> Vec<String> {
    assert_eq!(records.len(), n, "every request is recorded");
    records
        .iter()
        .map(|r| {
            let e = r.error.as_ref().expect("an error");
            assert_eq!(e.kind, kind, "{e:?}");
            e.message.clone()
        })
        .collect()
}
