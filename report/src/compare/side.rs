//! One side of a comparison: what it measured (runs, requests, completed, left out, how exact
//! its times are), and the notes said when the sides' coverage differs (other completed
//! shares, runs left out), since every row is over what each side kept.

use super::first_token;
use crate::artifacts::Run;
use crate::Experiment;
use serde::Serialize;

/// One side of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// The run's id, or the experiment folder's name.
    pub name: String,
    /// Its folder.
    pub dir: String,
    /// Requests measured, over all its runs.
    pub requests: u64,
    /// Its runs (1 for a run's folder).
    pub runs: u64,
    /// Of those, completed (the latency rows are over these alone).
    pub completed: u64,
    /// Runs a signal cut short (an experiment leaves them out; a single run is compared as
    /// it is, and said to be cut short).
    pub interrupted: u64,
    /// The experiment's runs left out of this side (not counted in `runs` or `requests`):
    /// errored (its summary's `left_out`) or cut short by a signal, as its own estimates
    /// leave them out. A note says so.
    pub left_out: Vec<crate::experiment::LeftOutRun>,
    /// Its first tokens, ends and token events by how their time was taken (summed over its
    /// runs' summaries; `first_tokens`, `ends`, `token_events` in JSON): `bound` of `of` are
    /// upper bounds, and TTFT, e2e or ITL is said to be one when any are.
    #[serde(flatten)]
    pub times: first_token::SideTimes,
}

impl Side {
    /// Side `e`: its name, folder, counts and times.
    pub(super) fn of(e: &Experiment) -> Side {
        let cut_short = |r: &&Run| {
            r.summary
                .as_ref()
                .and_then(|s| s.doc.get("interrupted"))
                .and_then(serde_json::Value::as_bool)
                == Some(true)
        };
        Side {
            name: e.name.clone(),
            dir: e.dir.display().to_string(),
            requests: e.requests(),
            runs: e.runs.len() as u64,
            completed: e.runs.iter().map(|r| r.figures().completed).sum(),
            interrupted: e.runs.iter().filter(cut_short).count() as u64,
            left_out: e.left_out.clone(),
            times: timed(&e.runs),
        }
    }
}

/// How the side's times were taken, over its runs that sent a request: a run of no request
/// read nothing, so it says nothing of how times were taken (not that they were canaryd's
/// reads, with receive timestamps off; nor that it does not say, without a summary).
fn timed(runs: &[Run]) -> first_token::SideTimes {
    runs.iter()
        .filter(|r| r.figures().requests > 0)
        .map(|r| first_token::SideTimes::of(std::slice::from_ref(r)))
        .fold(
            first_token::SideTimes::default(),
            first_token::SideTimes::plus,
        )
}

/// The gap in completed shares past which the latency rows are said to be over different
/// requests: a point, so a stray timeout or two does not raise it.
const COMPLETION_GAP: f64 = 0.01;

/// When the sides completed different shares of their requests, the latency rows (over
/// completed requests only) compare different requests: a B whose slowest requests timed out
/// reads as faster. Said, with both shares (exact counts).
pub(super) fn completion_note(a: &Side, b: &Side) -> Option<String> {
    let share = |s: &Side| (s.requests > 0).then(|| s.completed as f64 / s.requests as f64);
    let (sa, sb) = (share(a)?, share(b)?);
    ((sa - sb).abs() > COMPLETION_GAP).then(|| {
        let (fewer, more) = if sa < sb { ("A", "B") } else { ("B", "A") };
        format!(
            "the latency rows are over completed requests only, and the sides completed \
             different shares (A {:.1} %, {} of {}; B {:.1} %, {} of {}): {fewer}'s figures \
             leave out more of its requests than {more}'s, and the ones that failed or timed \
             out are often the slowest, so {fewer} may read faster than it was",
            sa * 100.0,
            a.completed,
            a.requests,
            sb * 100.0,
            b.completed,
            b.requests
        )
    })
}

/// When an experiment's side leaves runs out (an errored run, one cut short), every row of
/// that side is over its other runs: an error rate over the runs that worked is not the
/// experiment's. Said, naming each run and why.
pub(super) fn left_out_note(which: &str, s: &Side) -> Option<String> {
    if s.left_out.is_empty() {
        return None;
    }
    let n = s.left_out.len();
    let named: Vec<String> = s
        .left_out
        .iter()
        .map(|l| format!("{} ({})", l.dir, l.why))
        .collect();
    Some(format!(
        "{which} leaves out {n} of its {} runs, as its own estimates do, so every {which} \
         figure (the error rate too) is over the other {} and none of {}: {}",
        s.runs + n as u64,
        s.runs,
        if n == 1 {
            "that run's requests"
        } else {
            "those runs' requests"
        },
        named.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_that_completed_different_shares_are_said_to_compare_different_requests() {
        let side = |requests, completed| Side {
            name: "x".into(),
            dir: "x".into(),
            requests,
            runs: 1,
            completed,
            interrupted: 0,
            left_out: Vec::new(),
            times: Default::default(),
        };
        // B lost a fifth of its requests (its slowest, say): its latencies are not A's peers.
        let note = completion_note(&side(1000, 1000), &side(1000, 800)).expect("a note");
        assert!(
            note.contains("(A 100.0 %, 1000 of 1000; B 80.0 %, 800 of 1000)")
                && note.contains("B's figures leave out more of its requests than A's")
                && note.contains("so B may read faster"),
            "{note}"
        );
        let note = completion_note(&side(500, 450), &side(1000, 1000)).expect("a note");
        assert!(note.contains("so A may read faster"), "{note}");
        // A stray timeout is not a different set of requests.
        assert_eq!(completion_note(&side(1000, 1000), &side(1000, 995)), None);
        assert_eq!(completion_note(&side(0, 0), &side(10, 5)), None);
    }
}
