//! `[workloads.NAME]`: a target that exists, one schedule whose jitter fits it, the trace,
//! and lengths the limit allows.

use super::Source;
use crate::config::cadence::{Cadence, OnOverrun};
use crate::config::recover::Dropped;
use crate::config::{
    line_of, raw, CapacitySearch, ConfigError, Target, TraceSource, Workload, BUNDLED_TRACE,
};
use canary_replay::{Plan, TraceFormat};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

type RawWorkloads = Option<toml::Spanned<BTreeMap<String, toml::Spanned<raw::Workload>>>>;

/// Every workload; at least one.
/// Every error is collected: one per bad workload. A workload naming a target in
/// `bad_targets` (whose own error is said) is skipped, as is "none defined" when `dropped`
/// left some out.
pub(super) fn workloads(
    raw: RawWorkloads,
    targets: &BTreeMap<String, Target>,
    bad_targets: &BTreeSet<String>,
    dropped: &Dropped,
    src: &Source,
) -> Result<Vec<Workload>, Vec<ConfigError>> {
    let (workloads_at, raw_workloads) = match raw {
        Some(w) => (Some(w.span().start), w.into_inner()),
        None => (None, BTreeMap::new()),
    };
    let mut workloads = Vec::new();
    let mut errors = Vec::new();
    for (name, w) in raw_workloads {
        if bad_targets.contains(w.get_ref().target.get_ref()) {
            continue;
        }
        match workload(name, w, targets, src) {
            Ok(w) => workloads.push(w),
            Err(e) => errors.push(e),
        }
    }
    if workloads.is_empty() && errors.is_empty() && bad_targets.is_empty() && !dropped.workloads {
        errors.push(src.err(
            workloads_at,
            "workloads: none defined; expected at least one [workloads.NAME] table".into(),
        ));
    }
    match errors.is_empty() {
        true => Ok(workloads),
        false => Err(errors),
    }
}

fn workload(
    name: String,
    w: toml::Spanned<raw::Workload>,
    targets: &BTreeMap<String, Target>,
    src: &Source,
) -> Result<Workload, ConfigError> {
    let err = |at, message| src.err(at, message);
    let at = Some(w.span().start);
    let w = w.into_inner();
    // It names the workload's folder of runs, its log lines and its labels.
    if name.is_empty()
        || name.len() > MAX_NAME_BYTES
        || name.contains(['/', '\\'])
        || name.chars().any(char::is_control)
        || name.starts_with('.')
    {
        return Err(err(
            at,
            format!(
                "workloads.{}: a name must be usable as a folder name: 1 to \
                 {MAX_NAME_BYTES} bytes, no '/', '\\' or control character, not starting with '.'",
                canary_core::printable(canary_core::prefix_within(&name, MAX_NAME_BYTES))
            ),
        ));
    }
    if !targets.contains_key(w.target.get_ref()) {
        let known: Vec<&str> = targets.keys().map(String::as_str).collect();
        return Err(err(
            Some(w.target.span().start),
            format!(
                "workloads.{name}.target: no target {:?}; expected one of [{}]",
                w.target.get_ref(),
                known.join(", ")
            ),
        ));
    }
    let length_limit = w
        .length_limit
        .map_or(canary_replay::trace::DEFAULT_LENGTH_LIMIT, |l| l.0);
    let concurrency = w.concurrency.as_ref().map(|c| c.get_ref().0);
    let shape = crate::config::shape::shape(&name, &w, at, length_limit, concurrency, err)?;
    let capacity = capacity_search(&name, &w, at, &shape.synthetic, src)?;
    let synthesis = super::synthesis::synthesis(&name, &w, src)?;
    let sweep = super::sweep::sweep_spec(&name, &w, &shape.synthetic, src)?;
    let sweep_at = super::sweep::list_at(&w);
    let schedule_line = w
        .every
        .as_ref()
        .map(|e| e.span().start)
        .or(at)
        .map(|a| line_of(src.text, a));
    no_jitter_on_a_grid(&name, &w, src)?;
    let on_overrun = on_overrun(&name, &w, src)?;
    let cadence = cadence(&name, at, w.every, w.cron.clone(), w.jitter.clone(), src)?;
    let trace_line = w.trace.as_ref().map(|t| line_of(src.text, t.span().start));
    let sweep_line = sweep_at.map(|a| line_of(src.text, a));
    let trace = match w.trace.as_ref().map(|t| t.get_ref().as_str()) {
        None => None,
        Some(BUNDLED_TRACE) if w.format.is_some() => {
            // The bundled trace is Mooncake; a format beside it was dropped without a word.
            return Err(err(
                w.trace.as_ref().map(|t| t.span().start),
                format!(
                    "workloads.{name}.format: the bundled trace has its own format (Mooncake); \
                     leave format out, or give a trace file"
                ),
            ));
        }
        Some(BUNDLED_TRACE) => Some(TraceSource::Bundled),
        Some(path) => {
            let format = w.format.map(|f| match f {
                raw::FormatName::Mooncake => TraceFormat::Mooncake,
                raw::FormatName::Bailian => TraceFormat::Bailian,
                raw::FormatName::Burstgpt => TraceFormat::BurstGpt,
            });
            Some(TraceSource::File(src.rel(PathBuf::from(path)), format))
        }
    };
    let scale_lengths = w.scale_lengths.map(|f| (f.span().start, f.into_inner().0));
    if let Some((f_at, f)) = scale_lengths.filter(|&(_, f)| f > f64::from(length_limit)) {
        // Every row holds at least one token: all of them would end over the limit.
        return Err(err(
            Some(f_at),
            format!(
                "workloads.{name}.scale_lengths: {} takes every length over the length \
                 limit of {length_limit} tokens (length_limit)",
                canary_replay::trace::Number(f)
            ),
        ));
    }
    if let (Some(f), None) = (&w.min_good_fraction, &w.slos) {
        // `--min-good-fraction` without `--slo` is refused too: nothing would be judged good.
        return Err(err(
            Some(f.span().start),
            format!(
                "workloads.{name}.min_good_fraction: is the share of requests meeting the slos, \
                 which are not set; give slos (slos = \"time_to_first_token:400\") or leave \
                 min_good_fraction out"
            ),
        ));
    }
    let run_deadline = run_deadline(&name, w.run_deadline.as_ref(), &w.benchmark_duration, src)?;
    let start_at = start_at(&name, w.start_at, w.max_late_start, src)?;
    let tokenizer = tokenizer(&name, w.tokenizer, w.prompt_seed, src)?;
    let workload = Workload {
        capacity,
        sweep,
        name,
        start_at,
        target: w.target.into_inner(),
        trace,
        trace_line,
        schedule_line,
        sweep_line,
        synthetic: shape.synthetic,
        cancellation: shape.cancellation,
        start_offset: w.start_offset.map(|d| d.0),
        end_offset: w.end_offset.map(|d| d.0),
        max_requests: w.max_requests.map(|n| n.0),
        speedup: w.speedup.map_or(Plan::SPEEDUP, |s| s.0),
        scale_lengths: scale_lengths.map(|(_, f)| f),
        length_limit,
        max_line_bytes: w
            .max_line_bytes
            .map_or(canary_replay::trace::DEFAULT_MAX_LINE_BYTES, |b| b.0),
        concurrency,
        warmup_requests: w.warmup_requests.map_or(Plan::WARMUP_REQUESTS, |n| n.0),
        cadence,
        on_overrun,
        slos: w.slos.map(|s| s.0).unwrap_or_default(),
        min_good_fraction: w.min_good_fraction.map_or(0.95, |f| f.get_ref().0),
        max_error_rate: w.max_error_rate.map_or(0.05, |f| f.0),
        grace_period: w.grace_period.map_or(Plan::GRACE_PERIOD, |d| d.0),
        run_deadline,
        slice_duration: w.slice_duration.map(|d| d.0),
        tokenizer,
        prompt_seed: w.prompt_seed.unwrap_or(Plan::PROMPT_SEED),
        synthesis,
    };
    let target = &targets[&workload.target];
    super::sweep::check_points(&workload, target, sweep_at, src)?;
    Ok(workload)
}

/// `run_deadline`, when given: one that cannot outlast the run's own `benchmark_duration`
/// would cut every run short, so it is refused, at its line.
fn run_deadline(
    name: &str,
    given: Option<&toml::Spanned<raw::PositivePeriod>>,
    benchmark_duration: &Option<toml::Spanned<raw::HumanDuration>>,
    src: &Source,
) -> Result<Option<std::time::Duration>, ConfigError> {
    let Some(d) = given else {
        return Ok(None);
    };
    let deadline = d.get_ref().0;
    if let Some(length) = benchmark_duration.as_ref().map(|b| b.get_ref().0) {
        if deadline <= length {
            return Err(src.err(
                Some(d.span().start),
                format!(
                    "workloads.{name}.run_deadline: {} is not longer than benchmark_duration {}; \
                     every run would be stopped before its end (give more, or leave it out \
                     for the default)",
                    crate::run_deadline::human(deadline),
                    crate::run_deadline::human(length),
                ),
            ));
        }
    }
    Ok(Some(deadline))
}

/// The workload's `tokenizer.json`, loaded (and its prompt words checked) as each run loads
/// it: a missing file, or one that is not a tokenizer, is an error naming the key and line,
/// where check-config said ok and every run failed. A file replaced later is loaded again by
/// each run.
fn tokenizer(
    name: &str,
    path: Option<toml::Spanned<PathBuf>>,
    seed: Option<u64>,
    src: &Source,
) -> Result<Option<PathBuf>, ConfigError> {
    let Some(path) = path else { return Ok(None) };
    let at = Some(path.span().start);
    let path = src.rel(path.into_inner());
    let spec = canary_replay::PromptSpec {
        tokenizer: canary_replay::TokenizerSpec::HuggingFace(path.clone()),
        seed: seed.unwrap_or(Plan::PROMPT_SEED),
    };
    match spec.build() {
        Ok(_) => Ok(Some(path)),
        Err(e) => Err(src.err(
            at,
            format!("workloads.{name}.tokenizer: {:#}", anyhow::Error::from(e)),
        )),
    }
}

/// `kind = "capacity"` and its keys: a synthetic open-loop load (its `request_rate` is the
/// search's first rate) and SLOs to search by; the keys are refused on other kinds.
fn capacity_search(
    name: &str,
    w: &raw::Workload,
    at: Option<usize>,
    synthetic: &Option<crate::config::shape::Synthetic>,
    src: &Source,
) -> Result<Option<CapacitySearch>, ConfigError> {
    let kind = w.kind.as_ref().map(|k| (k.span().start, *k.get_ref()));
    let keys = [
        ("max_probes", w.max_probes.as_ref().map(|k| k.span().start)),
        (
            "search_precision",
            w.search_precision.as_ref().map(|k| k.span().start),
        ),
        ("min_rate", w.min_rate.as_ref().map(|k| k.span().start)),
        (
            "capacity_tolerance",
            w.capacity_tolerance.as_ref().map(|k| k.span().start),
        ),
    ];
    let Some((kind_at, raw::WorkloadKind::Capacity)) = kind else {
        if let Some((key, key_at)) = keys.iter().find(|k| k.1.is_some()) {
            return Err(src.err(
                *key_at,
                format!("workloads.{name}.{key}: only taken by kind = \"capacity\""),
            ));
        }
        return Ok(None);
    };
    if w.trace.is_some() {
        return Err(src.err(
            Some(kind_at),
            format!(
                "workloads.{name}.kind: a capacity search varies request_rate: give a synthetic \
                 load (request_rate, benchmark_duration), not a trace"
            ),
        ));
    }
    if !matches!(synthetic, Some(crate::config::shape::Synthetic::Rate(_))) {
        return Err(src.err(
            Some(kind_at),
            format!("workloads.{name}.kind: a capacity search needs request_rate (its first rate)"),
        ));
    }
    if w.concurrency.is_some() {
        // A ceiling holds requests in canaryd once it is reached, where TTFT (timed from the
        // send) does not see them: the SLOs would pass rates never offered.
        return Err(src.err(
            at,
            format!(
                "workloads.{name}.concurrency: a capacity search offers open-loop rates; an \
                 in-flight ceiling would hold requests in canaryd, where the SLOs do not time \
                 them: leave concurrency out"
            ),
        ));
    }
    if w.slos.is_none() {
        return Err(src.err(
            at,
            format!(
                "workloads.{name}.slos: a capacity search needs the SLOs its rates must meet \
                 (slos = \"time_to_first_token:400\")"
            ),
        ));
    }
    if let (Some(m), Some(crate::config::shape::Synthetic::Rate(plan))) = (&w.min_rate, synthetic) {
        if m.get_ref().0 > plan.rate {
            // The search starts at request_rate: begun below its own floor, its first failure
            // stopped it "by the floor" without trying the floor.
            return Err(src.err(
                Some(m.span().start),
                format!(
                    "workloads.{name}.min_rate: {} req/s is above request_rate ({} req/s), \
                     where the search starts; give a floor at or below it",
                    canary_replay::trace::Number(m.get_ref().0),
                    canary_replay::trace::Number(plan.rate)
                ),
            ));
        }
    }
    Ok(Some(CapacitySearch {
        max_probes: w.max_probes.as_ref().map_or(6, |m| m.get_ref().0),
        precision: w.search_precision.as_ref().map_or(0.1, |p| p.get_ref().0),
        min_rate: w.min_rate.as_ref().map_or(0.1, |m| m.get_ref().0),
        tolerance: w.capacity_tolerance.as_ref().map_or(0.1, |t| t.get_ref().0),
    }))
}

/// `start_at` (an RFC 3339 instant) and the lateness `max_late_start` allows, which means
/// nothing without it.
fn start_at(
    name: &str,
    start_at: Option<toml::Spanned<String>>,
    max_late_start: Option<toml::Spanned<raw::Period>>,
    src: &Source,
) -> Result<Option<canary_replay::StartAt>, ConfigError> {
    let max_late_at = max_late_start.as_ref().map(|m| m.span().start);
    let max_late = max_late_start.map(|m| m.into_inner().0);
    match (start_at, max_late) {
        (Some(s), max_late) => {
            let s_at = s.span().start;
            crate::instant::start_at(s.get_ref(), max_late.unwrap_or_default())
                .map(Some)
                .map_err(|e| src.err(Some(s_at), format!("workloads.{name}.start_at: {e}")))
        }
        (None, Some(_)) => Err(src.err(
            max_late_at,
            format!("workloads.{name}.max_late_start: only meaningful with start_at"),
        )),
        (None, None) => Ok(None),
    }
}

/// With `start_at` the runs start on a grid shared by every daemon given it (see
/// [`Cadence::next_on_grid`]): a random delay per run would undo that.
fn no_jitter_on_a_grid(name: &str, w: &raw::Workload, src: &Source) -> Result<(), ConfigError> {
    match (&w.start_at, &w.jitter) {
        (Some(_), Some(j)) => Err(src.err(
            Some(j.span().start),
            format!(
                "workloads.{name}.jitter: not taken with start_at: runs start on the grid \
                 start_at + k × every (or the cron firings from start_at on), the same instants \
                 on every daemon given it"
            ),
        )),
        _ => Ok(()),
    }
}

/// `on_overrun`; `start_when_free` is refused with `start_at`, whose runs start on their grid
/// instant or not at all.
fn on_overrun(name: &str, w: &raw::Workload, src: &Source) -> Result<OnOverrun, ConfigError> {
    match (&w.on_overrun, &w.start_at) {
        (Some(o), Some(_)) if *o.get_ref() == OnOverrun::StartWhenFree => Err(src.err(
            Some(o.span().start),
            format!(
                "workloads.{name}.on_overrun: \"start_when_free\" is not taken with start_at: \
                 its runs start on their grid instant (every daemon given it starts there), \
                 and a grid instant missed is skipped"
            ),
        )),
        (o, _) => Ok(o.as_ref().map_or(OnOverrun::Skip, |o| *o.get_ref())),
    }
}

/// The longest workload name (bytes): a folder name may be 255.
const MAX_NAME_BYTES: usize = 100;

/// The shortest `every`.
const MIN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// `every` or `cron` (one of them), with a jitter shorter than the gap between runs.
fn cadence(
    name: &str,
    at: Option<usize>,
    every: Option<toml::Spanned<raw::Period>>,
    cron: Option<raw::CronExpr>,
    jitter: Option<toml::Spanned<raw::Period>>,
    src: &Source,
) -> Result<Cadence, ConfigError> {
    let err = |at, message| src.err(at, message);
    let jitter_at = jitter.as_ref().map(|j| j.span().start);
    let jitter = jitter.map(|j| j.into_inner().0);
    let every_at = every.as_ref().map(|e| e.span().start);
    let every = every.map(toml::Spanned::into_inner);
    let cadence = match (every, cron) {
        // Cron's resolution. Shorter, a run still going makes each tick due at once: the
        // scheduler skipped without ever waiting, one worker spun and the log flooded.
        (Some(every), None) if every.0 < MIN_EVERY => {
            return Err(err(
                every_at,
                format!(
                    "workloads.{name}.every: at least 1s, found {:?}",
                    every.0
                ),
            ))
        }
        (Some(every), None) => Cadence::Every {
            period: every.0,
            jitter,
        },
        (None, Some(c)) => Cadence::cron(&c.0, jitter).expect("checked when parsed"),
        (Some(_), Some(_)) => {
            return Err(err(
                at,
                format!("workloads.{name}: set either every or cron, not both"),
            ))
        }
        (None, None) => {
            return Err(err(
                at,
                format!("workloads.{name}: missing schedule; expected every = \"15m\" or cron = \"0 */15 * * * *\""),
            ))
        }
    };
    // A jitter as long as the gap between runs pushes a run past the next one's due
    // time: the schedule would no longer be the one written.
    if let (Some(j), Some(gap)) = (jitter, cadence.shortest_gap()) {
        if j >= gap {
            let what = match &cadence {
                Cadence::Every { .. } => "every",
                Cadence::Cron { .. } => "the shortest gap between the cron expression's runs",
            };
            return Err(err(
                jitter_at,
                format!(
                    "workloads.{name}.jitter: {j:?} is not shorter than {what} ({gap:?}); \
                     a run would start after the next one is due"
                ),
            ));
        }
    }
    Ok(cadence)
}
