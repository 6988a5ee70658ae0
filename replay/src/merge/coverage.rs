//! Do the shards cover the trace exactly once? One trace (the same digest), one shard count,
//! every index once, the same settings, and records whose trace lines are disjoint, each in
//! the shard that owns its session, and together as many as the trace's window holds.
//! Every problem found is listed, each naming its folder.

use super::shard::{first_difference, ShardRun};
use crate::results::read_records;
use crate::trace::Shard;
use std::collections::HashMap;

/// Problems listed one by one before the rest are only counted.
const LISTED: usize = 5;

/// What the shards cover, once they pass.
#[derive(Debug, Clone)]
pub(super) struct Coverage {
    pub count: u32,
    pub digest: String,
    /// Requests in the trace's window (after `--start-offset`/`--end-offset`).
    pub window_requests: u64,
    /// Of those, replayed by some shard (later turns whose first turn fell outside the
    /// window are dropped by every shard).
    pub replayed: u64,
    /// Measured records per shard, in `runs` order.
    pub records: Vec<u64>,
}

/// Checks the summaries; `Err` lists every problem.
pub(super) fn check_summaries(runs: &[ShardRun]) -> Result<(u32, String), Vec<String>> {
    let mut problems = Vec::new();
    let first = &runs[0];
    for r in runs {
        if r.merged {
            problems.push(format!(
                "{}: is a merge's output (canaryd merge), not a shard run: give the shard \
                 folders it was merged from (its summary.json's merged.inputs)",
                r.dir.display()
            ));
        } else if r.shard.is_none() {
            problems.push(format!(
                "{}: not a shard run (its replay had no --shard)",
                r.dir.display()
            ));
        }
    }
    let sharded: Vec<(&ShardRun, Shard)> =
        runs.iter().filter_map(|r| Some((r, r.shard?))).collect();
    let Some(&(base, base_shard)) = sharded.first() else {
        return Err(problems);
    };
    let count = base_shard.count;
    for (r, s) in &sharded {
        if s.count != count {
            problems.push(format!(
                "{}: shard {s}, but {} is shard {base_shard}: the shards of one replay share one \
                 count",
                r.dir.display(),
                base.dir.display()
            ));
        }
    }
    let mut by_index: HashMap<u32, Vec<&ShardRun>> = HashMap::new();
    for (r, s) in &sharded {
        if s.count == count {
            by_index.entry(s.index).or_default().push(r);
        }
    }
    // The count is the file's: a crafted `0/4294967295` must cost a few lines, not four
    // billion. Indices are below the count (`Shard` parses so), so this many are missing.
    let missing = u64::from(count) - by_index.len() as u64;
    let listed: Vec<u32> = (0..count)
        .filter(|i| !by_index.contains_key(i))
        .take(LISTED)
        .collect();
    for i in &listed {
        problems.push(format!(
            "shard {i}/{count} is missing: none of the folders given replayed it"
        ));
    }
    if missing > listed.len() as u64 {
        problems.push(format!(
            "and {} more of the {count} shards are missing",
            missing - listed.len() as u64
        ));
    }
    let mut repeated: Vec<(&u32, &Vec<&ShardRun>)> =
        by_index.iter().filter(|(_, dirs)| dirs.len() > 1).collect();
    repeated.sort_by_key(|(i, _)| **i);
    for (i, dirs) in repeated {
        problems.push(format!(
            "shard {i}/{count} appears more than once: {}",
            dirs.iter()
                .map(|r| r.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let digest = match &first.digest {
        Some(d) => d.clone(),
        None => String::new(),
    };
    let shared = first.shared_settings();
    for r in runs {
        match &r.digest {
            None => problems.push(format!(
                "{}: summary.json has no run.trace.digest (written by an older canaryd): it \
                 cannot be checked to have replayed the same trace",
                r.dir.display()
            )),
            Some(d) if !digest.is_empty() && *d != digest => problems.push(format!(
                "{}: replayed another trace ({}, digest {d}) than {} ({}, digest {digest})",
                r.dir.display(),
                r.trace_path,
                first.dir.display(),
                first.trace_path
            )),
            Some(_) => {
                if let Some(d) = first_difference("run", &r.shared_settings(), &shared) {
                    problems.push(format!(
                        "{}: its settings differ from {}'s at {d}",
                        r.dir.display(),
                        first.dir.display()
                    ));
                }
            }
        }
        if let Some(n) = r.max_requests {
            problems.push(format!(
                "{}: --max-requests {n} caps each shard's own part, so the shards together do \
                 not cover the trace's window exactly once (bound the window with \
                 --end-offset instead)",
                r.dir.display()
            ));
        }
        if r.interrupted || r.unsent > 0 {
            problems.push(format!(
                "{}: the run was interrupted: {} of its {} requests were never sent",
                r.dir.display(),
                r.unsent,
                r.selection.requests_out
            ));
        }
        let (s, b) = (&r.selection, &first.selection);
        if (s.requests_in, s.dropped_outside_window) != (b.requests_in, b.dropped_outside_window) {
            problems.push(format!(
                "{}: its window held {} of {} requests, {}'s {} of {}: not one window of one \
                 trace",
                r.dir.display(),
                s.requests_in - s.dropped_outside_window.min(s.requests_in),
                s.requests_in,
                first.dir.display(),
                b.requests_in - b.dropped_outside_window.min(b.requests_in),
                b.requests_in
            ));
        }
    }
    if problems.is_empty() {
        Ok((count, digest))
    } else {
        Err(problems)
    }
}

/// Reads every shard's records: each trace line once over all shards, in the shard owning
/// its session, and as many as each summary says it replayed.
pub(super) fn check_records(
    runs: &[ShardRun],
    count: u32,
    digest: String,
) -> Result<Coverage, Vec<String>> {
    let mut problems = Vec::new();
    // Trace line -> the run that replayed it first: 4-byte values (a `usize` made the map's
    // slots twice as big, 36 MB for a 1M-row trace), sized once from what the first summary
    // says the window holds (no rehash on the way, where old and new tables coexist), within
    // reason should a summary say more.
    let window = runs[0].selection.requests_in;
    let mut seen: HashMap<u32, u32> = HashMap::with_capacity(window.min(1 << 24) as usize);
    let (mut duplicates, mut misplaced) = (0u64, 0u64);
    let mut records = Vec::with_capacity(runs.len());
    for (k, r) in runs.iter().enumerate() {
        let shard = r.shard.expect("checked: every run is a shard");
        let path = r.dir.join("records.jsonl");
        let mut measured = 0u64;
        let read = read_records(&path, |rec, _| {
            if rec.warmup {
                return;
            }
            measured += 1;
            if !shard.owns_row(rec.session, rec.trace_line) {
                misplaced += 1;
                if misplaced <= LISTED as u64 {
                    problems.push(format!(
                        "{}: trace line {} (session {:?}) belongs to another shard than {shard}",
                        r.dir.display(),
                        rec.trace_line,
                        rec.session
                    ));
                }
            }
            if let Some(&other) = seen.get(&rec.trace_line) {
                duplicates += 1;
                if duplicates <= LISTED as u64 {
                    problems.push(format!(
                        "{}: trace line {} was replayed by {} too",
                        r.dir.display(),
                        rec.trace_line,
                        runs[other as usize].dir.display()
                    ));
                }
            } else {
                seen.insert(rec.trace_line, k as u32);
            }
        });
        match read {
            // The cause too: the error's own words are only the file's path.
            Err(e) => problems.push(format!(
                "{}: {}",
                r.dir.display(),
                canary_core::error_chain(&e)
            )),
            Ok(read) => {
                if let Some((line, why)) = &read.first_skipped {
                    problems.push(match read.skipped_lines {
                        1 => format!(
                            "{}: records.jsonl line {line} is unreadable: {why}",
                            r.dir.display()
                        ),
                        n => format!(
                            "{}: records.jsonl has {n} unreadable lines, the first line {line}: \
                             {why}",
                            r.dir.display()
                        ),
                    });
                }
            }
        }
        if measured != r.selection.requests_out {
            problems.push(format!(
                "{}: records.jsonl holds {measured} measured requests, its summary says it \
                 replayed {}",
                r.dir.display(),
                r.selection.requests_out
            ));
        }
        records.push(measured);
    }
    for (n, what) in [
        (duplicates, "replayed twice"),
        (misplaced, "in the wrong shard"),
    ] {
        if n > LISTED as u64 {
            problems.push(format!("… {} more trace lines {what}", n - LISTED as u64));
        }
    }
    let s = &runs[0].selection;
    let window_requests = s.requests_in - s.dropped_outside_window.min(s.requests_in);
    let orphans: u64 = runs.iter().map(|r| r.selection.dropped_orphan_turns).sum();
    let replayed = seen.len() as u64;
    if problems.is_empty() && replayed + orphans != window_requests {
        problems.push(format!(
            "the shards replayed {replayed} distinct trace lines and dropped {orphans} orphan \
             turns, but the window holds {window_requests} requests"
        ));
    }
    if problems.is_empty() {
        Ok(Coverage {
            count,
            digest,
            window_requests,
            replayed,
            records,
        })
    } else {
        Err(problems)
    }
}
