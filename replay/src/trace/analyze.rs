//! What a trace asks of a server: rates, bursts, length distributions, sessions and the prefix
//! reuse its hash ids imply. Backs `canaryd analyze-trace FILE [--json]`.
//!
//! Times are when each request is sent at the earliest: its timestamp, or for a later turn
//! that carries a Mooncake `delay`, its previous turn's time plus the delay, server time not
//! counted (the loader gives such a turn its previous turn's timestamp; counted there, every
//! turn of a session with delays seemed sent at its start, and the rate and bursts were
//! overstated). Without delay turns these are the timestamps, exactly.
//!
//! Percentiles are exact (nearest rank over the sorted lengths: the smallest value with at
//! least p% of the requests at or below it). Prefix reuse is the ideal prefix-cache hit rate: a
//! block counts as reused when its id appeared earlier in the trace (in replay order), as an
//! unbounded cache that never evicts would see it.

use std::collections::HashMap;
use std::fmt;

use canary_core::TraceRows;
use serde::Serialize;

use super::id_set::IdSet;
use super::{LoadReport, Trace, TraceFormat};

/// Summary of a trace (see [`analyze`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceAnalysis {
    /// The trace file.
    pub path: String,
    /// Its format.
    pub format: TraceFormat,
    /// Number of requests.
    pub requests: u64,
    /// First timestamp, seconds in the trace's own clock.
    pub first_timestamp_s: f64,
    /// Last timestamp, seconds in the trace's own clock.
    pub last_timestamp_s: f64,
    /// From the first to the last send, seconds (see the module's docs: with delay turns, a
    /// lower bound, server time not counted; else last minus first timestamp, exact).
    pub duration_s: f64,
    /// One over the mean gap between sends, `(requests - 1) / duration_s`, as
    /// `context.workload.load.offered_rate_per_s` (`None` when all are sent at one time). It
    /// was `requests / duration_s`, without saying which: 2.0 for 4 requests over 2 s, where
    /// their 3 gaps make 1.5.
    pub mean_rate_rps: Option<f64>,
    /// What `duration_s` is: `exact` (the timestamps' span), or `lower_bound` with delay
    /// turns (the server's time before each is not counted).
    pub duration_kind: &'static str,
    /// What `mean_rate_rps` and the peaks are: `exact`, or with delay turns `upper_bound`
    /// for the rate and the peaks `estimate`s (each delay turn placed at its earliest).
    pub rate_kind: &'static str,
    /// The most requests sent at one time.
    pub peak_burst: Burst,
    /// The most requests sent within any 1-second window `[t, t+1s)`.
    pub peak_1s: Burst,
    /// Later turns timed by a Mooncake `delay` after their previous turn: their send times
    /// above do not count the server's time.
    pub delay_turns: u64,
    /// Input (prompt) lengths, tokens.
    pub input_tokens: LengthStats,
    /// Output lengths, tokens.
    pub output_tokens: LengthStats,
    /// Multi-turn structure.
    pub sessions: SessionStats,
    /// Prefix reuse implied by hash ids (`None` when no request has any).
    pub prefix_reuse: Option<PrefixReuse>,
    /// What loading skipped or noticed.
    pub load: LoadReport,
}

/// A number of requests at a point of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Burst {
    /// How many requests.
    pub requests: u64,
    /// Where (the earliest such place): seconds after the first timestamp.
    pub at_s: f64,
}

/// Exact distribution of one length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[allow(missing_docs)] // the names are the statistics
pub struct LengthStats {
    pub min: u32,
    pub p50: u32,
    pub p90: u32,
    pub p99: u32,
    pub max: u32,
    pub mean: f64,
    /// Sum over all requests.
    pub total: u64,
}

/// Sessions and turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SessionStats {
    /// Distinct sessions.
    pub sessions: u64,
    /// Requests that belong to a session.
    pub requests_in_sessions: u64,
    /// Sessions with more than one turn.
    pub multi_turn_sessions: u64,
    /// Most requests in one session.
    pub max_turns: u64,
    /// Requests per session, on average.
    pub mean_turns: f64,
}

/// Ideal prefix-cache reuse implied by hash ids: a cache that never evicts and holds every
/// block, so its hit rates are upper bounds on any real cache's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PrefixReuse {
    /// `upper_bound`: what the hit rates below are of a real cache's.
    pub kind: &'static str,
    /// Blocks over all requests.
    pub blocks: u64,
    /// Blocks whose id appeared earlier in the trace.
    pub reused_blocks: u64,
    /// Distinct block ids.
    pub distinct_blocks: u64,
    /// `reused_blocks / blocks`.
    pub block_hit_rate: f64,
    /// Prompt tokens covered by blocks (the last block of a request may be partial).
    pub tokens: u64,
    /// Tokens in reused blocks.
    pub reused_tokens: u64,
    /// `reused_tokens / tokens`.
    pub token_hit_rate: f64,
}

/// Summarizes a trace. Cost: one pass plus two sorts of the lengths.
pub fn analyze(trace: &Trace) -> TraceAnalysis {
    let reqs = &trace.requests;
    let (sends, delay_turns) = send_times(trace);
    let ts = |i: usize| sends[i];
    let first_ts = if reqs.is_empty() {
        0
    } else {
        reqs.row(0).timestamp_us()
    };
    let last_ts = (0..reqs.len())
        .map(|i| reqs.row(i).timestamp_us())
        .max()
        .unwrap_or(0);
    let first = sends.first().copied().unwrap_or(0);
    let last = sends.last().copied().unwrap_or(0);
    let secs = |us: u64| us as f64 / 1e6;
    let duration_s = secs(last - first);

    // Send times are sorted: equal times are adjacent, and a two-pointer sweep finds the
    // densest 1-second window.
    let mut peak_burst = Burst {
        requests: 0,
        at_s: 0.0,
    };
    let mut peak_1s = peak_burst;
    let (mut run_start, mut window_start) = (0, 0);
    for i in 0..reqs.len() {
        let t = ts(i);
        if t != ts(run_start) {
            run_start = i;
        }
        let run = (i - run_start + 1) as u64;
        if run > peak_burst.requests {
            peak_burst = Burst {
                requests: run,
                at_s: secs(t - first),
            };
        }
        // A window ending past the u64 microsecond range holds everything after its start.
        while ts(window_start)
            .checked_add(1_000_000)
            .is_some_and(|end| end <= t)
        {
            window_start += 1;
        }
        let in_window = (i - window_start + 1) as u64;
        if in_window > peak_1s.requests {
            peak_1s = Burst {
                requests: in_window,
                at_s: secs(ts(window_start) - first),
            };
        }
    }

    let mut per_session: HashMap<u64, u64> = HashMap::new();
    for s in (0..reqs.len()).filter_map(|i| reqs.row(i).session()) {
        *per_session.entry(s).or_default() += 1;
    }
    let in_sessions: u64 = per_session.values().sum();
    let sessions = SessionStats {
        sessions: per_session.len() as u64,
        requests_in_sessions: in_sessions,
        multi_turn_sessions: per_session.values().filter(|&&n| n > 1).count() as u64,
        max_turns: per_session.values().copied().max().unwrap_or(0),
        mean_turns: ratio(in_sessions, per_session.len() as u64),
    };

    TraceAnalysis {
        path: trace.path.display().to_string(),
        format: trace.format,
        requests: reqs.len() as u64,
        first_timestamp_s: secs(first_ts),
        last_timestamp_s: secs(last_ts),
        duration_s,
        delay_turns,
        mean_rate_rps: (duration_s > 0.0).then(|| reqs.len().saturating_sub(1) as f64 / duration_s),
        duration_kind: if delay_turns > 0 {
            "lower_bound"
        } else {
            "exact"
        },
        rate_kind: if delay_turns > 0 {
            "upper_bound"
        } else {
            "exact"
        },
        peak_burst,
        peak_1s,
        input_tokens: length_stats(
            (0..reqs.len())
                .map(|i| reqs.row(i).input_tokens())
                .collect(),
        ),
        output_tokens: length_stats(
            (0..reqs.len())
                .map(|i| reqs.row(i).output_tokens())
                .collect(),
        ),
        sessions,
        prefix_reuse: prefix_reuse(trace),
        load: trace.report.clone(),
    }
}

/// Each request's earliest send (µs, trace clock), sorted, and how many were timed by a
/// `delay`.
fn send_times(trace: &Trace) -> (Vec<u64>, u64) {
    let (mut sends, delay_turns) = earliest_sends(&trace.requests);
    sends.sort_unstable();
    (sends, delay_turns)
}

/// Each row's earliest send (µs, trace clock), in the rows' order: its timestamp, or for a
/// later turn that carries a `delay`, its previous turn's send plus the delay (server time not
/// counted); and how many were timed by a `delay`. Rows are in timestamp order, and a
/// session's turns in turn order among them (its timestamps never go backwards, and a delay
/// turn has its previous turn's), so one pass with each session's last send is enough.
/// [`Trace::select`](super::Trace::select) windows by these times.
pub(super) fn earliest_sends(reqs: &TraceRows) -> (Vec<u64>, u64) {
    let mut last_send: HashMap<u64, u64> = HashMap::new();
    let mut delay_turns = 0;
    let sends = (0..reqs.len())
        .map(|i| {
            let r = reqs.row(i);
            let ts = r.timestamp_us();
            let Some(session) = r.session() else {
                return ts;
            };
            let send = match (last_send.get(&session), r.delay_us()) {
                (Some(&prev), Some(d)) => {
                    delay_turns += 1;
                    prev.saturating_add(d)
                }
                (Some(&prev), None) => prev.max(ts),
                (None, _) => ts,
            };
            last_send.insert(session, send);
            send
        })
        .collect();
    (sends, delay_turns)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn length_stats(mut v: Vec<u32>) -> LengthStats {
    if v.is_empty() {
        return LengthStats::default();
    }
    v.sort_unstable();
    let total: u64 = v.iter().map(|&x| x as u64).sum();
    LengthStats {
        min: v[0],
        p50: nearest_rank(&v, 50),
        p90: nearest_rank(&v, 90),
        p99: nearest_rank(&v, 99),
        max: v[v.len() - 1],
        mean: ratio(total, v.len() as u64),
        total,
    }
}

/// The smallest value with at least `p`% of `sorted` at or below it.
fn nearest_rank(sorted: &[u32], p: usize) -> u32 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

fn prefix_reuse(trace: &Trace) -> Option<PrefixReuse> {
    let mut seen = IdSet::default();
    let mut p = PrefixReuse {
        kind: "upper_bound",
        ..PrefixReuse::default()
    };
    for r in &trace.requests {
        let n = r.hash_ids.len();
        for (j, id) in r.hash_ids.iter().enumerate() {
            let bs = r.block_size as u64;
            let tokens = if j + 1 < n {
                bs
            } else {
                r.input_tokens as u64 - (n as u64 - 1) * bs
            };
            p.blocks += 1;
            p.tokens += tokens;
            if !seen.insert(id) {
                p.reused_blocks += 1;
                p.reused_tokens += tokens;
            }
        }
    }
    if p.blocks == 0 {
        return None;
    }
    p.distinct_blocks = seen.len();
    p.block_hit_rate = ratio(p.reused_blocks, p.blocks);
    p.token_hit_rate = ratio(p.reused_tokens, p.tokens);
    Some(p)
}

impl fmt::Display for TraceAnalysis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "trace      {} ({})", self.path, self.format)?;
        // Exact unless delay turns are placed at their earliest (said on the next line).
        let exact = if self.delay_turns > 0 { "" } else { ", exact" };
        writeln!(
            f,
            "requests   {} over {:.1} s (timestamps {:.3} .. {:.3} s{exact})",
            self.requests, self.duration_s, self.first_timestamp_s, self.last_timestamp_s
        )?;
        if self.delay_turns > 0 {
            writeln!(
                f,
                "           {} turns are timed by their delay: each counted at its previous \
                 turn's send plus the delay, server time not counted (the span a lower bound, \
                 the rate below an upper one)",
                self.delay_turns
            )?;
        }
        match self.mean_rate_rps {
            Some(r) => writeln!(
                f,
                "rate       mean {r:.2} req/s (one over the mean gap between sends{exact})"
            )?,
            None => writeln!(f, "rate       all requests at one time")?,
        }
        writeln!(
            f,
            "peaks      {} requests at one time (at +{:.3} s), {} in 1 s (from +{:.3} s)",
            self.peak_burst.requests,
            self.peak_burst.at_s,
            self.peak_1s.requests,
            self.peak_1s.at_s
        )?;
        for (name, s) in [
            ("input", &self.input_tokens),
            ("output", &self.output_tokens),
        ] {
            writeln!(
                f,
                "{name:<10} tokens min {} p50 {} p90 {} p99 {} max {} mean {:.1} (total {}; exact)",
                s.min, s.p50, s.p90, s.p99, s.max, s.mean, s.total
            )?;
        }
        let s = &self.sessions;
        if s.sessions == 0 {
            writeln!(f, "sessions   none (every request is a single turn)")?;
        } else {
            writeln!(
                f,
                "sessions   {} ({} multi-turn), {} requests, turns per session max {} mean {:.2}",
                s.sessions,
                s.multi_turn_sessions,
                s.requests_in_sessions,
                s.max_turns,
                s.mean_turns
            )?;
        }
        match &self.prefix_reuse {
            Some(p) => writeln!(
                f,
                "prefix     {:.1}% of blocks and {:.1}% of tokens reuse an earlier block ({} blocks, {} distinct; an ideal cache that never evicts: an upper bound on a real one's hits)",
                100.0 * p.block_hit_rate,
                100.0 * p.token_hit_rate,
                p.blocks,
                p.distinct_blocks
            )?,
            None => writeln!(f, "prefix     no hash ids (every prompt unique)")?,
        }
        let l = &self.load;
        write!(
            f,
            "load       {} rows, {} invalid skipped, {} failed skipped, {} failed kept",
            l.rows, l.invalid_skipped, l.failed_skipped, l.failed_kept
        )?;
        if l.orphans_rerooted + l.turn_mismatches > 0 {
            write!(
                f,
                ", {} orphans rerooted, {} turn mismatches",
                l.orphans_rerooted, l.turn_mismatches
            )?;
        }
        writeln!(f)?;
        if !l.categories.is_empty() {
            let cats: Vec<String> = l
                .categories
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            writeln!(f, "categories {}", cats.join(", "))?;
        }
        for w in &l.warnings {
            writeln!(f, "warning    {w}")?;
        }
        if l.warnings_omitted > 0 {
            writeln!(f, "warning    … and {} more", l.warnings_omitted)?;
        }
        Ok(())
    }
}
