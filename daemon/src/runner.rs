//! One scheduled run of a workload: load and window the trace, build the target, replay with
//! telemetry attached, keep per-request samples for the baseline, judge the verdict.
//! Artifacts go to `<artifacts>/<workload>/<run-id>/`; an interrupted run still writes
//! everything it measured, and its verdict is `error: interrupted`.

use crate::baseline::Samples;
use crate::bundled::{BUNDLED_TRACE, BUNDLED_TRACE_NAME};
use crate::config::{ApiKeySource, Config, Target, TraceSource, Workload};
use crate::history::RunRow;
use crate::observe::TelemetryConfig;
use crate::replay::{LoadedTrace, ShapeArgs};
use crate::verdict::Verdict;
use anyhow::{Context, Result};
use canary_core::{MonoTime, RequestRecord};
use canary_replay::{Observer, Progress, PromptBuilder, RunOutcome, Schedule};
use clap::Parser;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The run id.
    pub id: String,
    /// The workload's name.
    pub workload: String,
    /// The target's name.
    pub target: String,
    /// Wall-clock start and end, Unix ms.
    pub started_unix_ms: i64,
    /// Wall-clock end, Unix ms.
    pub finished_unix_ms: i64,
    /// The verdict.
    pub verdict: Verdict,
    /// The replay's outcome, when it ran at all.
    pub outcome: Option<RunOutcome>,
    /// Per-request values for the baseline (completed, uninterrupted runs only).
    pub samples: Option<Samples>,
    /// Against the rolling baseline (filled in after the run; absent for `error` runs).
    pub comparison: Option<crate::baseline::Comparison>,
    /// The artifacts folder.
    pub artifacts: PathBuf,
    /// For a run whose process died (no outcome then): the summary rebuilt from its
    /// records at the next start, as written to its `summary.json`.
    pub recovered: Option<serde_json::Value>,
}

impl RunResult {
    /// A run of `workload` starting now, not carried out yet (`error: not started`).
    pub fn new(config: &Config, workload: &Workload, id: String) -> RunResult {
        let started_unix_ms = crate::history::now_unix_ms();
        RunResult {
            artifacts: config.artifacts_dir.join(&workload.name).join(&id),
            id,
            workload: workload.name.clone(),
            target: workload.target.clone(),
            started_unix_ms,
            finished_unix_ms: started_unix_ms,
            verdict: Verdict::error("not started"),
            outcome: None,
            samples: None,
            comparison: None,
            recovered: None,
        }
    }
}

/// The history row of a finished run.
impl From<&RunResult> for RunRow {
    fn from(r: &RunResult) -> RunRow {
        RunRow {
            id: r.id.clone(),
            workload: r.workload.clone(),
            target: r.target.clone(),
            started_unix_ms: r.started_unix_ms,
            finished_unix_ms: r.finished_unix_ms,
            verdict: r.verdict.clone(),
            trend: r.comparison.as_ref().map(|c| c.trend),
            comparison: r.comparison.clone(),
            summary: r
                .outcome
                .as_ref()
                .and_then(|o| serde_json::to_value(o).ok())
                .or_else(|| r.recovered.clone()),
            artifacts: r.artifacts.clone(),
            samples: r.samples.clone(),
        }
    }
}

/// A fresh run id: UTC start time and a random suffix, sortable and unique.
pub fn new_run_id() -> String {
    run_id_at(chrono::Utc::now())
}

/// The run id of a run started at `at`: sorts by start time to the second.
fn run_id_at(at: chrono::DateTime<chrono::Utc>) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(at.timestamp_nanos_opt().unwrap_or_default());
    format!("{}-{:08x}", at.format("%Y%m%dT%H%M%SZ"), h.finish() as u32)
}

/// A prompt synthesizer is built per tokenizer file and seed.
type PromptKey = (Option<PathBuf>, u64);

/// Things shared by every run of the daemon: loaded tokenizers, telemetry sources found
/// missing (reported once, then left off instead of warned about every run), the OTLP
/// exporter.
#[derive(Default)]
pub struct RunContext {
    prompts: Mutex<HashMap<PromptKey, Arc<PromptBuilder>>>,
    missing_sources: Mutex<BTreeSet<String>>,
    /// Per scraped URL: whether its outage was warned about, so it is once, not every run.
    outages: Mutex<HashMap<String, canary_telemetry::OutageLog>>,
    otlp: Option<Arc<crate::export::otlp::OtlpSink>>,
}

#[derive(Parser)]
struct ShapeOnly {
    #[command(flatten)]
    shape: ShapeArgs,
}

impl RunContext {
    /// A context whose runs are exported through `otlp`.
    pub fn with_otlp(otlp: Option<Arc<crate::export::otlp::OtlpSink>>) -> RunContext {
        RunContext {
            otlp,
            ..RunContext::default()
        }
    }

    fn prompts(&self, shape: &ShapeArgs) -> Result<Arc<PromptBuilder>> {
        let key = (shape.tokenizer.clone(), shape.prompt_seed);
        if let Some(p) = self.prompts.lock().unwrap().get(&key) {
            return Ok(p.clone());
        }
        let p = crate::replay::prompts(shape)?;
        self.prompts.lock().unwrap().insert(key, p.clone());
        Ok(p)
    }

    /// Runs `workload` once; never fails: what goes wrong becomes an `error` verdict.
    pub async fn run(
        &self,
        config: &Config,
        workload: &Workload,
        id: String,
        shutdown: CancellationToken,
        progress: Arc<Progress>,
    ) -> RunResult {
        let target = &config.targets[&workload.target];
        let mut result = RunResult::new(config, workload, id);
        let artifacts = result.artifacts.clone();
        let otlp = self
            .otlp
            .as_ref()
            .and_then(|o| o.begin_run(workload, target, &result.id));
        match self
            .replay(
                config, workload, target, &result.id, &artifacts, shutdown, progress, otlp,
            )
            .await
        {
            Ok((outcome, samples)) => {
                result.verdict = Verdict::judge(workload, &outcome.summary, outcome.interrupted);
                if result.verdict.kind != crate::verdict::VerdictKind::Error {
                    result.samples = Some(samples);
                }
                result.outcome = Some(outcome);
            }
            Err(e) => result.verdict = Verdict::error(format!("{e:#}")),
        }
        result.finished_unix_ms = crate::history::now_unix_ms();
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn replay(
        &self,
        config: &Config,
        w: &Workload,
        t: &Target,
        id: &str,
        dir: &Path,
        shutdown: CancellationToken,
        progress: Arc<Progress>,
        otlp: Option<(canary_exporters::RunObserver, f64)>,
    ) -> Result<(RunOutcome, Samples)> {
        let shape = shape(w, t, dir)?;
        let Some(loaded) = load_trace(w, &shape, &shutdown).await? else {
            anyhow::bail!("interrupted while loading the trace");
        };
        if loaded.trace.requests.is_empty() {
            anyhow::bail!("the selected window of the trace holds no request");
        }
        let target = replay_target(t, &shape)?;
        let prompts = self.prompts(&shape)?;
        let schedule = Schedule::new(loaded.trace.requests, w.speedup);
        crate::replay::check_duration(&schedule, &format!("workloads.{}.speedup", w.name))?;
        let mut rc = canary_replay::Config::new(target);
        rc.speedup = w.speedup;
        rc.length_limit = w.length_limit;
        rc.concurrency = w.concurrency;
        rc.warmup_requests = w.warmup_requests;
        rc.grace_period = w.grace_period;
        rc.goodput = w.slos.clone();
        rc.output_dir = Some(dir.to_path_buf());
        rc.run_id = id.to_string();
        let collector = Arc::new(SampleCollector::default());
        rc.observer = Some(collector.clone());
        if let Some((observer, sample_ratio)) = otlp {
            // The traceparent's sampled flag follows the exporter's ratio.
            rc.trace_sample_ratio = sample_ratio;
            rc.observer = Some(Arc::new(canary_replay::Observers(vec![
                collector.clone(),
                Arc::new(observer),
            ])));
        }
        let info = serde_json::json!({
            "canaryd_version": env!("CARGO_PKG_VERSION"),
            "run_id": id,
            "workload": w.name,
            "target": {
                "name": t.name,
                "url": rc.target.url(),
                "model": rc.target.model,
                "endpoint": rc.target.endpoint.operation(),
            },
            "trace": loaded.report,
            "speedup": w.speedup,
            "concurrency": w.concurrency,
            "warmup_requests": w.warmup_requests,
            "tokenizer": prompts.tokenizer().name(),
            "prompt_seed": w.prompt_seed,
            "goodput": rc.goodput.to_string(),
        });
        let telemetry = self.telemetry(config, t);
        tracing::info!(
            workload = %w.name,
            run = id,
            requests = schedule.len(),
            "run started against {} ({})",
            t.name,
            rc.target.url()
        );
        let outcome = crate::observe::observed_run(
            rc, schedule, prompts, info, &telemetry, shutdown, progress,
        )
        .await?;
        self.note_missing_sources(&outcome);
        let samples = Arc::into_inner(collector)
            .map(|c| c.samples.into_inner().unwrap().values)
            .unwrap_or_default();
        Ok((outcome, samples))
    }

    fn telemetry(&self, config: &Config, t: &Target) -> TelemetryConfig {
        let missing = self.missing_sources.lock().unwrap();
        let tel = &config.telemetry;
        let outage = |url: &Option<String>| {
            let mut outages = self.outages.lock().unwrap();
            url.as_ref()
                .map(|u| outages.entry(u.clone()).or_default().clone())
                .unwrap_or_default()
        };
        TelemetryConfig {
            server_metrics_outage: outage(&t.metrics_url),
            dcgm_outage: outage(&tel.dcgm_url),
            server_metrics_url: t.metrics_url.clone(),
            server_metrics_interval: tel.scrape_interval,
            nvml: tel.nvml && !missing.contains("nvml"),
            nvml_lib: tel.nvml_lib.clone(),
            nvml_interval: tel.gpu_interval,
            dcgm_url: tel.dcgm_url.clone(),
            dcgm_interval: tel.scrape_interval,
            server_pid: t.server_pid,
            ca_bundle: t.ca_bundle.clone(),
            ebpf: tel.ebpf && !missing.contains("ebpf"),
        }
    }

    /// NVML or eBPF missing on this host will not appear later: stop trying (and warning)
    /// each run.
    fn note_missing_sources(&self, outcome: &RunOutcome) {
        for source in ["nvml", "ebpf"] {
            let state = outcome
                .sections
                .get("telemetry_sources")
                .and_then(|s| s.get(source))
                .and_then(|s| s.get("state"))
                .and_then(|s| s.as_str());
            if state == Some("unavailable") {
                self.missing_sources.lock().unwrap().insert(source.into());
            }
        }
    }
}

/// Loads and selects `w`'s trace as its runs do; `None` when `shutdown` fired first.
async fn load_trace(
    w: &Workload,
    shape: &ShapeArgs,
    shutdown: &CancellationToken,
) -> Result<Option<LoadedTrace>> {
    let trace = match &w.trace {
        TraceSource::Bundled => canary_replay::parse(
            BUNDLED_TRACE.as_bytes(),
            Path::new(BUNDLED_TRACE_NAME),
            &crate::replay::load_options(shape, None),
        )?,
        TraceSource::File(path, format) => {
            let opts = crate::replay::load_options(shape, *format);
            match crate::replay::load_until(path, opts, shutdown)
                .await
                .context("loading the trace")?
            {
                Some(trace) => trace,
                None => return Ok(None),
            }
        }
    };
    crate::replay::select(trace, shape).map(Some)
}

/// What `check-config` found loading a workload's trace.
pub enum TraceCheck {
    /// It loads; what it holds.
    Ok(String),
    /// The file is not there (a warning, not an error: it may be put there later).
    Missing,
    /// A signal stopped the load.
    Stopped,
}

/// Loads, selects and schedules `w`'s trace as a run would, sending nothing: a bad row is an
/// error naming it (`file:line: field`), as is a scale taking lengths over the limit or a
/// speedup that would take more than a year.
pub async fn check_workload(
    config: &Config,
    w: &Workload,
    shutdown: &CancellationToken,
) -> Result<TraceCheck> {
    if let TraceSource::File(path, _) = &w.trace {
        if !path.exists() {
            return Ok(TraceCheck::Missing);
        }
    }
    let shape = shape(w, &config.targets[&w.target], Path::new("."))?;
    let loaded = load_trace(w, &shape, shutdown)
        .await
        .with_context(|| format!("workloads.{}", w.name))?;
    let Some(loaded) = loaded else {
        return Ok(TraceCheck::Stopped);
    };
    let rows = loaded.trace.report.rows;
    let schedule = Schedule::new(loaded.trace.requests, w.speedup);
    crate::replay::check_duration(&schedule, &format!("workloads.{}.speedup", w.name))?;
    Ok(TraceCheck::Ok(format!(
        "{} of {rows} rows selected, at least {:.1} s to replay",
        schedule.len(),
        schedule.min_duration().as_secs_f64()
    )))
}

/// The replay's target for `t`: its headers (checked at load, values marked sensitive) and
/// its API key, read now, only from the source the target names. No `OPENAI_API_KEY`
/// fallback as in `canaryd replay`: every target, plain http included, would get that key.
fn replay_target(t: &Target, shape: &ShapeArgs) -> Result<canary_replay::Target> {
    let mut target = crate::replay::target_without_key(&t.url, t.endpoint, &t.model, shape)?;
    target.headers = t.headers.clone();
    target.api_key = crate::replay::api_key(shape, None)?;
    Ok(target)
}

/// The replay settings of a workload, in the form `canaryd replay` takes them.
fn shape(w: &Workload, t: &Target, dir: &Path) -> Result<ShapeArgs> {
    let mut s = ShapeOnly::try_parse_from(["canaryd"])?.shape;
    s.speedup = w.speedup;
    s.start_offset = w.start_offset;
    s.end_offset = w.end_offset;
    s.max_requests = w.max_requests;
    s.concurrency = w.concurrency;
    s.warmup_requests = w.warmup_requests;
    s.scale_lengths = w.scale_lengths;
    s.length_limit = w.length_limit;
    s.max_line_bytes = w.max_line_bytes;
    s.tokenizer.clone_from(&w.tokenizer);
    s.prompt_seed = w.prompt_seed;
    // The key itself is read by the replay's target builder, at run time, and never logged.
    match &t.api_key {
        Some(ApiKeySource::Env(var)) => s.api_key_env = Some(var.clone()),
        Some(ApiKeySource::File(path)) => s.api_key_file = Some(path.clone()),
        None => {}
    }
    s.ca_bundle.clone_from(&t.ca_bundle);
    s.request_timeout = t.request_timeout;
    s.max_header_bytes = Some(t.limits.header_bytes);
    s.max_event_bytes = Some(t.limits.event_bytes);
    s.max_body_bytes = Some(t.limits.body_bytes);
    s.max_output_ratio = Some(t.limits.output_ratio);
    s.no_kernel_timestamps = !t.kernel_timestamps;
    s.goodput = Some(w.slos.clone());
    s.output_dir = dir.to_path_buf();
    s.grace_period = w.grace_period;
    Ok(s)
}

/// Keeps a bounded uniform sample (reservoir) of TTFT, ITL and e2e of measured requests.
#[derive(Default)]
struct SampleCollector {
    samples: Mutex<Reservoirs>,
}

#[derive(Default)]
struct Reservoirs {
    values: Samples,
    seen: [u64; 3],
    rng: u64,
}

impl Reservoirs {
    fn add(&mut self, metric: usize, v: Option<f64>) {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            return;
        };
        // Microseconds are plenty for a rank test, and halve the stored JSON.
        let v = (v * 1000.0).round() / 1000.0;
        self.seen[metric] += 1;
        let list = match metric {
            0 => &mut self.values.ttft_ms,
            1 => &mut self.values.itl_ms,
            _ => &mut self.values.e2e_ms,
        };
        if list.len() < Samples::CAP {
            list.push(v);
            return;
        }
        // xorshift: a uniform slot in [0, seen); kept only if it lands in the reservoir.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let slot = (self.rng % self.seen[metric]) as usize;
        if slot < Samples::CAP {
            list[slot] = v;
        }
    }
}

impl Observer for SampleCollector {
    fn annotate(&self, r: &mut RequestRecord, _t0: MonoTime) {
        if r.warmup || !r.is_ok() {
            return;
        }
        let mut s = self.samples.lock().unwrap();
        if s.rng == 0 {
            s.rng = 0x2545_F491_4F6C_DD1D;
        }
        s.add(0, r.ttft_ms);
        s.add(1, r.itl_ms);
        s.add(2, r.e2e_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reservoir_stays_bounded_and_keeps_a_spread() {
        let mut r = Reservoirs {
            rng: 0x2545_F491_4F6C_DD1D,
            ..Default::default()
        };
        for i in 0..10 * Samples::CAP {
            r.add(0, Some(i as f64));
            r.add(1, None);
        }
        let v = &r.values.ttft_ms;
        assert_eq!(v.len(), Samples::CAP);
        assert!(r.values.itl_ms.is_empty());
        // A uniform sample of 0..20000 has about half its values above 10000.
        let upper = v.iter().filter(|x| **x >= 10_000.0).count();
        assert!((800..1200).contains(&upper), "{upper}");
    }

    #[test]
    fn run_ids_sort_by_time_and_differ() {
        use chrono::TimeZone;
        // Start times across second, minute, day, month and year boundaries, and one year
        // with a ninth digit of seconds since the epoch: as strings they sort as in time.
        let times = [
            (2009, 9, 9, 1, 46, 39),
            (2009, 9, 9, 1, 46, 40),
            (2009, 9, 9, 1, 47, 0),
            (2026, 9, 30, 23, 59, 59),
            (2026, 10, 1, 0, 0, 0),
            (2026, 12, 31, 23, 59, 59),
            (2027, 1, 1, 0, 0, 0),
        ];
        let ids: Vec<String> = times
            .iter()
            .map(|&(y, mo, d, h, mi, s)| {
                run_id_at(chrono::Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap())
            })
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
        assert_eq!(
            ids[0].len(),
            "20261123T110512Z-3fa2c0de".len(),
            "{}",
            ids[0]
        );
        assert!(ids[4].starts_with("20261001T000000Z-"), "{}", ids[4]);
        // Two runs started in the same second still differ.
        let (a, b) = (new_run_id(), new_run_id());
        assert_ne!(a, b);
    }
}
