//! `canaryd merge`: the artifacts of the shards of one replay (`--shard I/N`) combined into one
//! run's, as one process replaying every row would have written them (issues 18 and 22).
//!
//! - **Coverage first.** The shards must be one replay: one trace (the same digest), one
//!   shard count, every index once, the same settings, and records whose trace lines are
//!   disjoint, each in the shard owning its session, together the whole window. Anything
//!   else is refused, every problem named with its folder ([`MergeError::Coverage`]).
//! - **Exact figures.** Counts, tokens, errors and goodput are folded again from the union of
//!   the records (`records.jsonl`); each metric's distribution is the sum of the shards'
//!   histograms (`histograms.json`), never an average of percentiles.
//! - **Clocks stated.** Each shard's schedule lag is exact on its own monotonic clock. The
//!   union is put on one time axis with each shard's t0 ([`alignment`]), and the merge says
//!   how far that axis can be off between shards (`merged.alignment.bound_ms`).
//! - **Slices of the union.** When every shard ran with one `--slice-duration`, the union's
//!   records are sliced again on that axis as one run slices its own (`timeslices`,
//!   `timeslices.csv`); otherwise the merge has none, and its notes say why.

mod alignment;
mod coverage;
mod sending;
mod shard;

pub use alignment::{Alignment, ShardClock};

use crate::histograms::Histograms;
use crate::results::{read_records, write_summary, ArtifactError};
use canary_core::{Aggregator, Distribution, Goodput, RunSummary, Stats, SUMMARY_SCHEMA_VERSION};
use serde::Serialize;
use serde_json::Value;
use shard::ShardRun;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why shards could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No folder given.
    #[error("no shard folders given")]
    NoInput,
    /// A folder that is not a usable shard run.
    #[error("{}: {problem}", dir.display())]
    Shard {
        /// The folder.
        dir: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// Several folders that are not usable shard runs, each named (audit L7: the merge
    /// stopped at the first).
    #[error("{} of the folders given are not usable shard runs:\n  - {}", problems.len(), problems.join("\n  - "))]
    Unreadable {
        /// Each folder's problem, naming it.
        problems: Vec<String>,
    },
    /// The shards' clocks cannot be aligned; the problem names the shard's folder.
    #[error("{0}")]
    Alignment(String),
    /// The output folder is a file (or another non-folder).
    #[error("{}: is not a folder: --output-dir takes a folder (created when missing)", .0.display())]
    OutputNotAFolder(PathBuf),
    /// The shards do not cover the trace exactly once.
    #[error("the shards do not cover the trace exactly once:\n  - {}", problems.join("\n  - "))]
    Coverage {
        /// Each problem, naming its folder.
        problems: Vec<String>,
    },
    /// The merged artifacts could not be written.
    #[error("writing the merged artifacts")]
    Write(#[from] ArtifactError),
}

/// `summary.json`'s `merged` block: what was merged and what the union's timing means.
#[derive(Debug, Clone, Serialize)]
pub struct MergedInfo {
    /// N of `--shard I/N`.
    pub shard_count: u32,
    /// The trace every shard replayed (`run.trace.digest`).
    pub trace_digest: String,
    /// Requests in the trace's window.
    pub window_requests: u64,
    /// Of those, replayed by the shards together (each once): the window less later turns
    /// whose first turn fell outside it.
    pub replayed: u64,
    /// The shard folders, by shard index.
    pub inputs: Vec<MergedInput>,
    /// How the shards' clocks line up, and the bound on it.
    pub alignment: Alignment,
    /// The union's schedule lag against one schedule: each request's lag on its own shard's
    /// clock plus its shard's t0 offset (ms). Within `alignment.bound_ms` of the truth.
    pub cross_host_schedule_lag: Option<Stats>,
    /// Where the metrics' distributions come from: `histograms` (every shard's
    /// `histograms.json`, summed: exact as one process) or `records` (some shard has none).
    pub metrics_from: &'static str,
    /// What the merge leaves out or can only bound.
    pub notes: Vec<String>,
    /// Seconds on the merged axis when no shard was running: between one shard's last end
    /// and a later shard's t0, gaps wider than the alignment bound. Shards run one after
    /// another; the union's duration and rates include them. Absent when the shards' runs
    /// overlap, as shards started on one `--start-at` do (the trace's own idle time is not
    /// counted: one process has it too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_shard_sending_s: Option<f64>,
    /// `--concurrency` as each shard had it: a cap per shard; the union's bound is N times
    /// it (`run.concurrency`). `None`: no cap.
    pub per_shard_concurrency: Option<u64>,
    /// `--warmup-requests` as each shard had it; `run.warmup_requests` is the shards' together.
    pub per_shard_warmup_requests: u64,
}

/// One merged shard.
#[derive(Debug, Clone, Serialize)]
pub struct MergedInput {
    /// Its folder, as given.
    pub dir: PathBuf,
    /// `I/N`.
    pub shard: String,
    /// Its run id.
    pub run_id: String,
    /// Measured requests it recorded.
    pub records: u64,
    /// How late it began after its `--start-at`, ms, when it did (`--max-late-start`): its
    /// requests due by then left at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_by_ms: Option<f64>,
    /// Its place on the merged time axis.
    #[serde(flatten)]
    pub clock: ShardClock,
}

/// A merge's result, written to the output folder.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The union's statistics.
    pub summary: RunSummary,
    /// The `merged` block.
    pub info: MergedInfo,
}

#[derive(Serialize)]
struct MergedFile<'a> {
    schema_version: u32,
    run: &'a Value,
    interrupted: bool,
    unsent: u64,
    merged: &'a MergedInfo,
    #[serde(flatten)]
    summary: &'a RunSummary,
}

/// Merges the shard runs in `dirs` into `out` (created): `summary.json`, `summary.csv`,
/// `histograms.json` and `records.jsonl` (every shard's records, each with its `shard`).
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Merged, MergeError> {
    if dirs.is_empty() {
        return Err(MergeError::NoInput);
    }
    if out.exists() && !out.is_dir() {
        return Err(MergeError::OutputNotAFolder(out.to_path_buf()));
    }
    // Every folder read before any is refused: each unusable one is named, not the first.
    let mut runs = Vec::with_capacity(dirs.len());
    let mut unreadable = Vec::new();
    for d in dirs {
        match ShardRun::read(d) {
            Ok(r) => runs.push(r),
            Err(e) => unreadable.push(e),
        }
    }
    if unreadable.len() > 1 {
        return Err(MergeError::Unreadable {
            problems: unreadable.iter().map(ToString::to_string).collect(),
        });
    }
    if let Some(e) = unreadable.pop() {
        return Err(e);
    }
    let (count, digest) =
        coverage::check_summaries(&runs).map_err(|problems| MergeError::Coverage { problems })?;
    runs.sort_by_key(|r| r.shard.map(|s| s.index));
    let coverage = coverage::check_records(&runs, count, digest)
        .map_err(|problems| MergeError::Coverage { problems })?;
    // The problem names its own shard's folder.
    let (alignment, clocks) = alignment::align(&runs).map_err(MergeError::Alignment)?;
    if let Some(r) = runs.iter().find(|r| same_dir(&r.dir, out)) {
        return Err(MergeError::Shard {
            dir: r.dir.clone(),
            problem: "is also the output folder: merge into another one".into(),
        });
    }
    let goodput: Goodput = runs[0].goodput.parse().map_err(|e| MergeError::Shard {
        dir: runs[0].dir.clone(),
        problem: format!("run.goodput: {e}"),
    })?;

    // Each shard's distributions, checked before anything is written: a histograms.json
    // that holds none used to fail the merge after records.jsonl was written, leaving an
    // output folder that a rerun refused without --overwrite.
    let file = Path::new(crate::histograms::HISTOGRAMS_FILE);
    let distributions = runs
        .iter()
        .map(|r| {
            let Some(h) = &r.histograms else {
                return Ok(None);
            };
            // The error names the file; `Shard` puts the shard's folder before it.
            h.distributions(file)
                .map(Some)
                .map_err(|e| MergeError::Shard {
                    dir: r.dir.clone(),
                    problem: canary_core::error_chain(&e),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;

    let write = |path: PathBuf| move |source| ArtifactError { path, source };
    std::fs::create_dir_all(out).map_err(write(out.to_path_buf()))?;
    let records_path = out.join("records.jsonl");
    // Whole or not at all: a shard's records that cannot be read the second time (changed or
    // gone since the checks) fail the merge without leaving part of them behind.
    let mut records_out = std::io::BufWriter::new(
        canary_files::WholeFile::create(&records_path).map_err(write(records_path.clone()))?,
    );
    let slicing = slicing(&runs);
    let mut aggregator = Aggregator::new(goodput);
    if let Ok(width) = slicing {
        // The union sliced again as one run slices its own: from the merged axis's origin
        // (the earliest shard's t0), each request by its send time there.
        aggregator = aggregator.with_timeslices(width);
    }
    let mut cross_lag = Distribution::new();
    let mut write_error = None;
    // Each shard's measured records, to check its histograms.json is of the same run.
    let mut measured = vec![0u64; runs.len()];
    // Each shard's last end on the merged axis (measured requests): with its t0, its run.
    let mut spans = vec![(f64::INFINITY, f64::NEG_INFINITY); runs.len()];
    for (span, clock) in spans.iter_mut().zip(&clocks) {
        span.0 = clock.t0_offset_ms;
    }
    for (((r, clock), measured), span) in
        runs.iter().zip(&clocks).zip(&mut measured).zip(&mut spans)
    {
        let shard = r.shard.expect("checked").to_string();
        let shift = clock.t0_offset_ms;
        read_records(&r.dir.join("records.jsonl"), |mut rec, line| {
            if write_error.is_none() {
                // `{"shard":"1/3",` then the record as the shard wrote it.
                let res = records_out
                    .write_all(format!("{{\"shard\":\"{shard}\",").as_bytes())
                    .and_then(|()| records_out.write_all(&line[1..]))
                    .and_then(|()| records_out.write_all(b"\n"));
                write_error = res.err();
            }
            if !rec.warmup {
                cross_lag.record(rec.schedule_lag_ms + shift);
                *measured += 1;
            }
            // On the merged axis; the lag itself stays as measured on the shard's own clock.
            rec.scheduled_at_ms += shift;
            rec.sent_at_ms += shift;
            rec.ended_at_ms += shift;
            if !rec.warmup {
                span.1 = span.1.max(rec.ended_at_ms);
            }
            let gaps =
                canary_core::ChunkGaps::from(rec.chunk_gaps_ms.as_deref().unwrap_or_default());
            aggregator.add(&rec, &gaps);
        })
        // Reading a shard, not writing the merge: a shard changed or gone since the checks.
        .map_err(|e| MergeError::Shard {
            dir: r.dir.clone(),
            problem: canary_core::error_chain(&e),
        })?;
    }
    if let Some(e) = write_error {
        return Err(write(records_path)(e).into());
    }
    records_out
        .into_inner()
        .map_err(|e| e.into_error())
        .and_then(canary_files::WholeFile::finish)
        .map_err(write(records_path))?;

    let mut summary = aggregator.summary();
    // A shard that recorded nothing has no run to place; the rest are judged by their t0s
    // and last ends, beyond the alignment bound (with no bound, as measured).
    let ran: Vec<(f64, f64)> = spans.into_iter().filter(|s| s.0 <= s.1).collect();
    let slack = alignment.bound_ms.unwrap_or(0.0);
    // Never a gap that reads 0.000 s.
    let no_shard_sending_s =
        Some(sending::idle_between(&ran, slack) / 1000.0).filter(|&idle| idle >= 0.0005);
    let mut notes = vec![
        "server (/metrics), GPU and kernel telemetry, the diagnosis and client_cpu are each \
         shard's own: they are in the shards' summary.json files, not merged"
            .to_string(),
        match alignment.bound_ms {
            Some(_) => "duration_s and the rates span the shards on the merged time axis: within \
                        merged.alignment.bound_ms"
                .to_string(),
            None => "duration_s and the rates span the shards on the merged time axis, with no \
                     bound (merged.alignment.unbounded_because): the shards' clocks do not \
                     compare"
                .to_string(),
        },
        match &slicing {
            Ok(_) => format!(
                "timeslices are the union's, sliced again from the earliest shard's t0 on the \
                 merged time axis, each request placed {}; each shard's own timeslices (from \
                 its own t0) stay in its folder",
                match alignment.bound_ms {
                    Some(b) => format!("within ±{b:.3} ms (merged.alignment.bound_ms)"),
                    None => "with no bound on the cross-host alignment".to_string(),
                }
            ),
            Err(why) => why.clone(),
        },
    ];
    if let Some(idle) = no_shard_sending_s {
        notes.push(sending_note(idle, summary.duration_s));
    }
    let late: Vec<Option<f64>> = runs.iter().map(late_by_ms).collect();
    for (r, late) in runs.iter().zip(&late) {
        if let Some(ms) = late {
            notes.push(format!(
                "{} began {ms:.3} ms after its --start-at (--max-late-start allowed it): its \
                 requests due by then left at once, each late by up to that in its schedule \
                 lag; start_spread_ms is of the shards' t0s (the instant), not of when they \
                 began sending",
                r.name()
            ));
        }
    }
    let n = runs.len() as u64;
    let per_shard_concurrency = runs[0].run.get("concurrency").and_then(Value::as_u64);
    let per_shard_warmup_requests = runs[0]
        .run
        .get("warmup_requests")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if let Some(c) = per_shard_concurrency.filter(|_| n > 1) {
        notes.push(format!(
            "--concurrency {c} was each shard's cap: the union's bound on requests in flight is \
             {} ({c} per shard × {n} shards, run.concurrency); an unsharded run with \
             --concurrency {c} holds requests back sooner",
            c.saturating_mul(n)
        ));
    }
    if per_shard_warmup_requests > 0 && n > 1 {
        notes.push(format!(
            "--warmup-requests {per_shard_warmup_requests} was each shard's: run.warmup_requests \
             {} is what the shards were asked together; warmup_requests counts the {} they \
             sent (a shard that owns no request sends none)",
            per_shard_warmup_requests.saturating_mul(n),
            summary.warmup_requests
        ));
    }
    // A histograms.json that counts other requests than its records (one an earlier run
    // left, when this run's could not be written) would give percentiles of another run; so
    // would one changed since, metric by metric against the summary written with it.
    let stale: Vec<String> = runs
        .iter()
        .zip(&measured)
        .zip(&distributions)
        .filter_map(|((r, &n), h)| {
            let h = h.as_ref()?;
            let counted = h.get("schedule_lag").map_or(0, |(_, d)| d.count());
            if counted != n {
                return Some(format!(
                    "{}: histograms.json counts {counted} requests, records.jsonl {n}",
                    r.dir.display()
                ));
            }
            let off: Vec<String> = h
                .iter()
                .filter_map(|(name, (_, d))| {
                    let said = *r.metric_counts.get(name)?;
                    (d.count() != said).then(|| {
                        format!(
                            "{}: histograms.json counts {} {name} values, summary.json {said}",
                            r.dir.display(),
                            d.count()
                        )
                    })
                })
                .collect();
            match off.len() {
                0 => None,
                1..=3 => Some(off.join("; ")),
                k => Some(format!(
                    "{} and {} more metrics",
                    off[..3].join("; "),
                    k - 3
                )),
            }
        })
        .collect();
    let histograms: Option<Vec<_>> = if stale.is_empty() {
        distributions.into_iter().collect()
    } else {
        notes.push(format!(
            "histograms not of the same requests as the records ({}): the distributions were \
             folded from records.jsonl",
            stale.join("; ")
        ));
        None
    };
    let metrics_from = match histograms {
        Some(hs) => {
            let mut merged: BTreeMap<String, (String, Distribution)> = BTreeMap::new();
            for ds in hs {
                for (name, (unit, d)) in ds {
                    merged
                        .entry(name)
                        .or_insert_with(|| (unit, Distribution::new()))
                        .1
                        .merge(&d);
                }
            }
            summary.metrics = merged
                .iter()
                .filter_map(|(name, (unit, d))| Some((name.clone(), d.stats_in(unit)?)))
                .collect();
            write_histograms(out, &merged)?;
            "histograms"
        }
        None => {
            // An earlier run's histograms.json (`--overwrite`) would sit beside this summary
            // as if it were the union's: another run's distributions.
            remove_stale(out.join(crate::HISTOGRAMS_FILE))?;
            let missing: Vec<String> = runs
                .iter()
                .filter(|r| r.histograms.is_none())
                .map(|r| r.dir.display().to_string())
                .collect();
            if !missing.is_empty() {
                notes.push(format!(
                    "no histograms.json in {}: the distributions were folded from \
                     records.jsonl (exact as the run's, except inter_chunk_latency, which \
                     records hold only with --record-chunks and only for each request's first \
                     16384 gaps)",
                    missing.join(", ")
                ));
            }
            "records"
        }
    };
    let info = MergedInfo {
        shard_count: coverage.count,
        trace_digest: coverage.digest,
        window_requests: coverage.window_requests,
        replayed: coverage.replayed,
        inputs: runs
            .iter()
            .zip(clocks)
            .zip(&coverage.records)
            .zip(late)
            .map(|(((r, clock), &records), late_by_ms)| MergedInput {
                dir: r.dir.clone(),
                shard: r.shard.expect("checked").to_string(),
                run_id: r.run_id.clone(),
                records,
                late_by_ms,
                clock,
            })
            .collect(),
        alignment,
        cross_host_schedule_lag: cross_lag.stats_in("ms"),
        metrics_from,
        notes,
        no_shard_sending_s,
        per_shard_concurrency,
        per_shard_warmup_requests,
    };
    let run = merged_run(&runs);
    let file = MergedFile {
        schema_version: SUMMARY_SCHEMA_VERSION,
        run: &run,
        interrupted: false,
        unsent: 0,
        merged: &info,
        summary: &summary,
    };
    if summary.timeslices.is_none() {
        // Without the union's slices an earlier run's would be taken for them.
        remove_stale(out.join("timeslices.csv"))?;
    }
    // summary.json, summary.csv and timeslices.csv, as a run writes them.
    write_summary(out, &file, &summary)?;
    Ok(Merged { summary, info })
}

/// `the shards ran one after another: 4.100 s of the 12.300 s with no shard running: …`.
pub fn sending_note(idle_s: f64, duration_s: f64) -> String {
    format!(
        "the shards ran one after another: their runs (each shard's t0 to its last request's \
         end on the merged time axis) leave {idle_s:.3} s of the {duration_s:.3} s with no \
         shard running: the rates are over the whole span"
    )
}

/// How late `r` began after its `--start-at`, ms, when it did.
fn late_by_ms(r: &ShardRun) -> Option<f64> {
    let late = r.clock.as_ref()?.start_at.as_ref()?.late_by_ms;
    (late > 0.0).then_some(late)
}

/// The shards' slice duration when they all ran with the same one; else why the merge has
/// no slices.
fn slicing(runs: &[ShardRun]) -> Result<std::time::Duration, String> {
    let first = runs[0].slice_duration;
    if let Some(width) = first.filter(|_| runs.iter().all(|r| r.slice_duration == first)) {
        return Ok(width);
    }
    if runs.iter().all(|r| r.slice_duration.is_none()) {
        return Err("no timeslices: no shard was run with --slice-duration".into());
    }
    let each: Vec<String> = runs
        .iter()
        .map(|r| {
            let d = r
                .slice_duration
                .map_or("none".to_string(), |d| format!("{} s", d.as_secs_f64()));
            format!("{} {d}", r.shard.expect("checked"))
        })
        .collect();
    Err(format!(
        "no merged timeslices: the shards' slice durations differ ({}); each shard's \
         timeslices stay in its folder",
        each.join(", ")
    ))
}

/// The first shard's `run` block as the union's: a new run id, no shard, the selection
/// summed over the shards (every field a shard's selection has: the counts summed, the
/// effective scales and context counts where the shards agree on them), and the per-shard `concurrency` and `warmup_requests` as the
/// union's (N times each shard's): a compare with an unsharded run then shows a different
/// cap as a difference in context (audit M2).
fn merged_run(runs: &[ShardRun]) -> Value {
    type Ratio = fn(&shard::SelectionCounts) -> Option<f64>;
    type Count = fn(&shard::SelectionCounts) -> Option<u64>;
    let mut run = runs[0].run.clone();
    run["run_id"] = Value::from(format!("merged-{}", runs[0].run_id));
    let n = runs.len() as u64;
    for key in ["concurrency", "warmup_requests"] {
        if let Some(each) = run.get(key).and_then(Value::as_u64) {
            run[key] = Value::from(each.saturating_mul(n));
        }
    }
    let sum = |f: fn(&shard::SelectionCounts) -> u64| -> u64 {
        runs.iter().map(|r| f(&r.selection)).sum()
    };
    let s = &runs[0].selection;
    if let Some(t) = run.get_mut("trace").and_then(Value::as_object_mut) {
        if let Some(a) = t.get_mut("asked").and_then(Value::as_object_mut) {
            a.insert("shard".into(), Value::Null);
        }
        let mut sel = serde_json::Map::new();
        for (k, v) in [
            ("requests_in", s.requests_in),
            ("requests_out", sum(|s| s.requests_out)),
            ("dropped_outside_window", s.dropped_outside_window),
            ("dropped_other_shards", 0),
            ("dropped_orphan_turns", sum(|s| s.dropped_orphan_turns)),
            ("dropped_over_limit", sum(|s| s.dropped_over_limit)),
            ("input_capped", sum(|s| s.input_capped)),
            ("output_capped", sum(|s| s.output_capped)),
            ("outputs_raised_to_1", sum(|s| s.outputs_raised_to_1)),
            ("inputs_clamped", sum(|s| s.inputs_clamped)),
        ] {
            sel.insert(k.into(), Value::from(v));
        }
        // A ratio of token totals the summaries do not keep: the union's is each shard's
        // only when they all have the same one (exact then); otherwise it is left out.
        for (k, f) in [
            (
                "input_scale_effective",
                (|s| s.input_scale_effective) as Ratio,
            ),
            ("output_scale_effective", |s| s.output_scale_effective),
        ] {
            if let Some(v) = f(s).filter(|v| runs.iter().all(|r| f(&r.selection) == Some(*v))) {
                sel.insert(k.into(), Value::from(v));
            }
        }
        // Counts against the target's context: summed where every shard read the same limit
        // from the same place; left out otherwise (none read one, or they differ).
        let same_limit = runs.iter().all(|r| {
            r.selection.context_limit == s.context_limit
                && r.selection.context_limit_source == s.context_limit_source
                && r.selection.over_context.is_some()
                && r.selection.prompt_over_context.is_some()
        });
        if let (true, Some(limit), Some(source)) =
            (same_limit, s.context_limit, &s.context_limit_source)
        {
            sel.insert("context_limit".into(), Value::from(limit));
            sel.insert("context_limit_source".into(), Value::from(source.clone()));
            for (k, f) in [
                ("over_context", (|s| s.over_context) as Count),
                ("prompt_over_context", |s| s.prompt_over_context),
            ] {
                let total: u64 = runs.iter().filter_map(|r| f(&r.selection)).sum();
                sel.insert(k.into(), Value::from(total));
            }
        }
        t.insert("selection".into(), Value::Object(sel));
    }
    run
}

fn write_histograms(
    out: &Path,
    merged: &BTreeMap<String, (String, Distribution)>,
) -> Result<(), ArtifactError> {
    let h = Histograms {
        version: crate::histograms::HISTOGRAMS_VERSION,
        metrics: merged
            .iter()
            .map(|(name, (unit, d))| {
                let m = crate::histograms::MetricHistogram {
                    unit: unit.clone(),
                    distribution: d.snapshot(),
                };
                (name.clone(), m)
            })
            .collect(),
    };
    let path = out.join(crate::HISTOGRAMS_FILE);
    let json = serde_json::to_vec(&h).expect("histograms always serialize");
    canary_files::write_whole(&path, &json).map_err(|source| ArtifactError { path, source })
}

/// Removes an earlier run's artifact at `path` that the merge does not write, when there is
/// one (`--overwrite` replaces a run's folder, not only the files the merge has).
fn remove_stale(path: PathBuf) -> Result<(), ArtifactError> {
    match std::fs::remove_file(&path) {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
            Err(ArtifactError { path, source })
        }
        _ => Ok(()),
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
