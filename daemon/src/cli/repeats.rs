//! `--runs N` of `canaryd replay` and `canaryd profile` (issue 18): the same plan run N times,
//! each a full run with its own artifacts in `<out>/run-1` … `<out>/run-N`, then one summary
//! of the experiment in `<out>/summary.json` and `<out>/repeats.csv`: for each headline
//! figure, its mean over the runs with a 95% confidence interval from Student's t on n − 1
//! degrees of freedom ([`canary_core::MeanInterval`]). The command's exit status is the worst
//! run's.

mod summary;

pub use summary::{few_runs_line, left_out, RepeatsFile, RepeatsSummary};
#[cfg(test)]
pub use summary::{Figure, CONFIDENCE};

use crate::cli::one_shot::{self, Print};
use crate::execute::{Judged, Observe};
use anyhow::{bail, Context, Result};
use canary_replay::Plan;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// How the repeats of one command go.
pub struct Repeats {
    /// Runs asked for (1 or more).
    pub runs: u32,
    /// `--prompt-salt` was given: every run sends the same prompts. Otherwise each run
    /// draws its own salt, so no run finds the previous one's unique text in the server's
    /// prefix cache.
    pub same_prompts: bool,
}

impl Repeats {
    /// Run `i` (from 1) of the experiment of `plan` in `out`: its folder's name (`run-i`) and
    /// its plan, with a run id of its own and, unless the prompts are to be the same, a salt
    /// of its own. `--start-at` is the first run's: by the second the instant has passed, and
    /// the later runs follow on as the daemon's do.
    pub(crate) fn nth(&self, plan: &Plan, out: &Path, i: u32) -> (String, Plan) {
        let dir = format!("run-{i}");
        let mut p = plan.clone();
        if i > 1 {
            p.replay.start_at = None;
        }
        p.replay.output_dir = Some(out.join(&dir));
        p.replay.run_id = format!("{}-{i}", plan.replay.run_id);
        if !self.same_prompts {
            p.replay.prompt_salt =
                canary_core::splitmix64(plan.replay.prompt_salt ^ u64::from(i)) >> 11;
        }
        (dir, p)
    }
}

/// Runs `plan` once (`repeats` `None`: exactly as before `--runs` existed) or `runs` times;
/// the command's exit status.
pub async fn run(
    plan: Plan,
    observe: &Observe,
    export: &crate::cli::otlp_flags::ExportArgs,
    print: Print,
    repeats: Option<Repeats>,
    shutdown: CancellationToken,
) -> Result<i32> {
    let Some(repeats) = repeats else {
        let run = one_shot::one_shot(plan, observe, export, print, shutdown).await?;
        return Ok(run
            .as_ref()
            .map_or(crate::INTERRUPTED, one_shot::exit_status));
    };
    let Some(out) = plan.replay.output_dir.clone() else {
        bail!("--runs needs an output directory for each run's artifacts");
    };
    crate::service::state_lock::refuse_daemon_folder(&out)?;
    if !print.overwrite && out.join("summary.json").exists() {
        bail!(
            "{} holds an earlier run (summary.json): give another --output-dir, or --overwrite \
             to replace it",
            out.display()
        );
    }
    if print.overwrite {
        remove_earlier_runs(&out)?;
    }
    let json = print.json;
    let n = repeats.runs;
    // eBPF that one run found unavailable is not tried (nor warned about) again.
    let mut observe = observe.clone();
    let mut runs: Vec<(String, Judged, i32)> = Vec::new();
    let mut interrupted = false;
    for i in 1..=n {
        let (dir, p) = repeats.nth(&plan, &out, i);
        if !json {
            outln!("run {i}/{n} ({})", out.join(&dir).display())?;
        }
        let each = Print {
            quiet: true,
            ..print.clone()
        };
        let run = match one_shot::one_shot(p, &observe, export, each, shutdown.clone()).await {
            Ok(run) => run,
            Err(e) => {
                // The runs before it were measured: their summary is still written, with the
                // status the command exits with (1, an error).
                // A failure to write it is said, and the run's own error is the one returned.
                if !runs.is_empty() {
                    if let Err(w) = write(&out, &RepeatsSummary::of(n, &runs, 1, false)) {
                        tracing::error!("writing the summary of the runs before: {w:#}");
                    }
                }
                return Err(e.context(format!("run {i} of {n}")));
            }
        };
        let Some(run) = run else {
            interrupted = true;
            break;
        };
        observe.remember_unavailable(&run.outcome);
        let status = one_shot::exit_status(&run);
        if !json {
            outln!("  {}", summary::one_line(&run, status))?;
        }
        let stop = run.outcome.interrupted;
        runs.push((dir, run, status));
        if stop {
            interrupted = true;
            break;
        }
    }
    let status = exit_status(&runs, interrupted);
    let summary = RepeatsSummary::of(n, &runs, status, interrupted);
    write(&out, &summary)?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&RepeatsFile::new(&summary))?
        )?;
    } else {
        summary.print()?;
        outln!(
            "artifacts: {} (summary.json, repeats.csv{})",
            out.display(),
            run_folders(runs.len())
        )?;
    }
    Ok(status)
}

/// The runs' folders as the artifacts line lists them, after a comma: `, run-1 … run-5`,
/// `, run-1` (not `run-1 … run-1`), or nothing when none ran.
fn run_folders(ran: usize) -> String {
    match ran {
        0 => String::new(),
        1 => ", run-1".to_string(),
        n => format!(", run-1 … run-{n}"),
    }
}

/// An experiment's exit status: the worst of its `runs`' ((folder, run, status)), or
/// [`crate::INTERRUPTED`] when a signal stopped it.
pub(crate) fn exit_status(runs: &[(String, Judged, i32)], interrupted: bool) -> i32 {
    match interrupted {
        true => crate::INTERRUPTED,
        false => runs.iter().map(|r| r.2).max().unwrap_or(0),
    }
}

/// Removes the `run-K` folders an earlier `--runs` left in `out` (real folders with a run's
/// artifacts, nothing else): a `--runs 5` folder overwritten by `--runs 3` kept `run-4` and
/// `run-5`, and a report of the folder mixed them in.
fn remove_earlier_runs(out: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(());
    };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let numbered = name
            .strip_prefix("run-")
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
        let folder = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        let artifacts = ["records.jsonl", "summary.json"]
            .iter()
            .any(|f| path.join(f).exists());
        if numbered && folder && artifacts {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

/// Writes `summary.json` and `repeats.csv` into `out`.
pub(crate) fn write(out: &Path, summary: &RepeatsSummary) -> Result<()> {
    let path: PathBuf = out.join("summary.json");
    let json = serde_json::to_vec_pretty(&RepeatsFile::new(summary))?;
    canary_files::write_whole(&path, &json).with_context(|| path.display().to_string())?;
    let path = out.join("repeats.csv");
    canary_files::write_whole(&path, summary.csv().as_bytes())
        .with_context(|| path.display().to_string())?;
    Ok(())
}
