//! What the folders named on a command line hold: one run, a `--runs N` experiment, a sweep
//! (`sweep.json`), or a series of runs; loaded, with a note for what could not be.

use super::records::RecordBudget;
use super::{folder_name, Repeats, Run, SweepFile};
use crate::error::{io, ReportError};
use std::path::{Path, PathBuf};

/// What a report was given, loaded.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every run, in page order: a sweep's in order of increasing load, an experiment's in
    /// its own, runs of one repeated point consecutive.
    pub runs: Vec<Run>,
    /// The experiment, when the one folder given is a `--runs N` experiment's: its runs
    /// repeat one load, so its page shows its estimates, with no knee and no front.
    pub experiment: Option<Repeats>,
    /// `sweep.json`, when the one folder given is a sweep's: the knee, the front and the
    /// points left out of them are its.
    pub sweep: Option<SweepFile>,
    /// Sentences about what the folders list that is not on the page.
    pub notes: Vec<String>,
}

/// Loads the folders named on a command line. A folder with `records.jsonl` is one run. One
/// folder whose `summary.json` has `repeats.per_run` is an experiment (`--runs N`), shown as
/// one; one folder with `sweep.json` is a sweep, with its verdict. Otherwise each folder
/// without `records.jsonl` is a series: each subfolder holding a run, in name order, or in
/// order of increasing load when it is a sweep's (whose capacity search runs its points out of
/// order); a subfolder that is an experiment (a sweep point run `--runs N` times) is one point,
/// the mean of the runs its estimates are over. Several folders make a series in the order
/// given.
pub fn load(paths: &[PathBuf]) -> Result<Loaded, ReportError> {
    named_once(paths)?;
    // One page's records, over all its runs: each run's share is what the ones before left.
    let budget = &mut RecordBudget::default();
    if let [path] = paths {
        if !path.join("records.jsonl").is_file() {
            if let Some(repeats) = Repeats::read(path)? {
                return experiment(path, repeats, budget);
            }
        }
    }
    let mut loaded = Loaded::default();
    for path in paths {
        if path.join("records.jsonl").is_file() {
            loaded.runs.push(Run::load_within(path, budget)?);
            continue;
        }
        if Repeats::read(path)?.is_some() {
            point(path, &mut loaded, budget)?;
            continue;
        }
        let sweep = SweepFile::read(path)?;
        let before = loaded.runs.len();
        let dirs = series_folders(path, sweep.as_ref())?;
        for dir in &dirs {
            if dir.join("records.jsonl").is_file() {
                loaded.runs.push(Run::load_within(dir, budget)?);
            } else {
                point(dir, &mut loaded, budget)?;
            }
        }
        if let Some(sweep) = &sweep {
            missing_points(path, sweep, &dirs, &mut loaded.notes);
        }
        if loaded.runs.len() == before {
            return Err(ReportError::NoRun { path: path.clone() });
        }
        if paths.len() == 1 {
            loaded.sweep = sweep;
        }
    }
    Ok(loaded)
}

/// Refuses a folder named twice (`report a a`, `report a ./a`): its runs would be drawn as two
/// points of a series. Folders are compared as resolved, or as given when they do not resolve
/// (their loading then says why).
fn named_once(paths: &[PathBuf]) -> Result<(), ReportError> {
    let resolved: Vec<PathBuf> = paths
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    for (again, path) in resolved.iter().enumerate() {
        if let Some(first) = resolved[..again].iter().position(|p| p == path) {
            return Err(ReportError::Twice {
                path: paths[again].clone(),
                first: first + 1,
                again: again + 1,
            });
        }
    }
    Ok(())
}

/// An experiment's folder: every run it lists that has its records, those its estimates leave
/// out included (named as such on the page).
fn experiment(
    path: &Path,
    repeats: Repeats,
    budget: &mut RecordBudget,
) -> Result<Loaded, ReportError> {
    let mut loaded = Loaded::default();
    for r in &repeats.per_run {
        let dir = path.join(&r.dir);
        if dir.join("records.jsonl").is_file() {
            let mut run = Run::load_within(&dir, budget)?;
            run.label = r.dir.clone();
            loaded.runs.push(run);
        } else {
            loaded.notes.push(format!(
                "{}: summary.json lists this run but it has no records.jsonl: it is not on \
                 this page",
                dir.display()
            ));
        }
    }
    loaded.notes.extend(repeats.summary.newer_schema(path));
    loaded.experiment = Some(repeats);
    Ok(loaded)
}

/// An experiment among a series' runs (a sweep's point run `--runs N` times, or a folder
/// named beside others): one point, its runs marked with it; the runs its estimates leave out
/// are left out here too, and named.
fn point(dir: &Path, loaded: &mut Loaded, budget: &mut RecordBudget) -> Result<(), ReportError> {
    let name = folder_name(dir);
    let exp = crate::Experiment::load_point(dir, budget)?;
    let kept: Vec<String> = exp.runs.iter().map(|r| r.label.clone()).collect();
    if let Some(repeats) = Repeats::read(dir)? {
        for r in &repeats.per_run {
            if let (Some(why), false) = (&r.left_out, kept.contains(&r.dir)) {
                loaded.notes.push(format!(
                    "{name}/{}: left out of the point's figures, as its experiment's \
                     estimates leave it out: {why}",
                    r.dir
                ));
            }
        }
    }
    for mut run in exp.runs {
        run.label = format!("{name}/{}", run.label);
        run.point = Some(name.clone());
        loaded.runs.push(run);
    }
    Ok(())
}

/// A note for each point `sweep.json` lists whose folder holds no run (`loaded`: the folders
/// that do): it is not on the page, though the sweep's knee and front may have weighed it.
fn missing_points(series: &Path, sweep: &SweepFile, loaded: &[PathBuf], notes: &mut Vec<String>) {
    for p in &sweep.points {
        let dir = series.join(&p.dir);
        if !loaded.contains(&dir) {
            notes.push(format!(
                "{} ({}): sweep.json lists this point but its folder has no records.jsonl \
                 (verdict: {}): it is not on this page",
                dir.display(),
                p.label,
                if p.verdict.is_empty() {
                    "none"
                } else {
                    &p.verdict
                }
            ));
        }
    }
}

/// The subfolders of `series` holding a run (`records.jsonl`) or an experiment
/// (`summary.json` with `repeats.per_run`), in name order, or in order of increasing load when
/// `series` is a sweep's folder. Other subfolders are not runs, whatever they hold.
fn series_folders(series: &Path, sweep: Option<&SweepFile>) -> Result<Vec<PathBuf>, ReportError> {
    let entries = std::fs::read_dir(series).map_err(io(series))?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("records.jsonl").is_file() || lists_runs(p))
        .collect();
    dirs.sort();
    if let Some(sweep) = sweep {
        // A folder `sweep.json` does not name keeps its place after those it does.
        let load = |d: &PathBuf| sweep.load_of(d.file_name()?.to_str()?);
        dirs.sort_by(|a, b| {
            let (a, b) = (load(a), load(b));
            b.is_some()
                .cmp(&a.is_some())
                .then(a.unwrap_or(0.0).total_cmp(&b.unwrap_or(0.0)))
        });
    }
    Ok(dirs)
}

/// Whether `dir`'s `summary.json` has `repeats.per_run`, of whatever type: an experiment's
/// folder, read as one (and refused, naming the field, when it is damaged), not passed over.
fn lists_runs(dir: &Path) -> bool {
    matches!(
        super::Summary::read(&dir.join("summary.json")),
        Ok(Some(s)) if s.at(&["repeats", "per_run"]).is_some()
    )
}
