//! `canaryd merge DIR…`: the shards of one replay combined into one run's artifacts, and the
//! union's figures printed with what its timing across hosts means.

use anyhow::{Context, Result};
use canary_core::PERCENTILE_PRECISION;
use canary_replay::Merged;
use std::path::PathBuf;

/// Flags of `canaryd merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The shard runs' output folders (`--output-dir` of each `canaryd replay --shard I/N`).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Where to write the merged `summary.json`, `summary.csv`, `histograms.json` and
    /// `records.jsonl`.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output_dir: PathBuf,
    /// Print the merged summary.json instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Replace an earlier run's or merge's artifacts in the output folder.
    #[arg(long)]
    pub overwrite: bool,
}

/// Runs `canaryd merge`; a coverage problem is an error (exit status 1).
pub fn merge(args: &MergeArgs) -> Result<i32> {
    super::one_shot::refuse_earlier_run(&args.output_dir, args.overwrite)?;
    let merged = canary_replay::merge(&args.dirs, &args.output_dir).context("merging shards")?;
    if args.json {
        let path = args.output_dir.join("summary.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        outln!("{text}")?;
    } else {
        print(&merged)?;
        outln!("merged into {}", args.output_dir.display())?;
    }
    Ok(0)
}

fn print(m: &Merged) -> std::io::Result<()> {
    let (s, i) = (&m.summary, &m.info);
    outln!(
        "merged {} shards of trace {}: {} of the window's {} requests replayed, each once \
         (exact)",
        i.shard_count,
        i.trace_digest,
        i.replayed,
        i.window_requests
    )?;
    outln!()?;
    outln!(
        "{:<34} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "metric",
        "avg",
        "min",
        "p50",
        "p90",
        "p99",
        "max"
    )?;
    let rows = [
        ("time_to_first_token", "TTFT (ms)"),
        ("inter_token_latency", "ITL (ms, mean per request)"),
        ("inter_chunk_latency", "inter-chunk gap (ms)"),
        ("request_latency", "request latency (ms)"),
        ("output_sequence_length", "output length (tokens)"),
        ("schedule_lag", "schedule lag, own clocks (ms)"),
    ];
    // As one run's table writes them: lengths in whole tokens, times to the µs.
    let row =
        |label: &str, st| super::report::print_metric_row(label, st, super::report::LABEL_WIDTH);
    // Each shard's times are exact only where its kernel stamped them, as in one run's table.
    let bounds = super::report::TableBounds::of(&s.receive_timestamps);
    for (key, label) in rows {
        if let Some(st) = s.metrics.get(key) {
            row(&bounds.label(key, label), st)?;
        }
    }
    // Across clocks that do not compare, marked as the duration line is (audit L8).
    let unbounded = i.alignment.bound_ms.is_none();
    if let Some(st) = &i.cross_host_schedule_lag {
        let label = if unbounded {
            "lag, one axis (ms, no bound)"
        } else {
            "schedule lag, one axis (ms)"
        };
        row(label, st)?;
    }
    let rows_bound = if bounds.any() {
        ", except that a row marked bound is over times some of which are a later segment's \
         stamp or canaryd's read: TTFT and latency upper bounds, gaps exact in neither direction"
    } else {
        ""
    };
    outln!(
        "{}",
        if i.metrics_from == "histograms" {
            format!(
                "(the shards' histograms summed: percentiles within {PERCENTILE_PRECISION}, \
                 as in one run; avg, min, max exact{rows_bound})"
            )
        } else {
            format!(
                "(folded from the shards' records: percentiles within {PERCENTILE_PRECISION}; \
                 avg, min, max exact{rows_bound}; see the notes)"
            )
        }
    )?;
    outln!()?;
    // Cancellations where one run's table has them: counted from the union's records.
    outln!(
        "requests {} (completed {}, {}errors {}{}), input tokens {}, output tokens {} (exact)",
        s.requests,
        s.completed,
        match s.cancelled {
            0 => String::new(),
            n => format!("cancelled {n}, "),
        },
        s.errors,
        super::report::errors_by_kind(s),
        s.total_input_tokens,
        s.total_output_tokens
    )?;
    // One run's duration and rates, over the union's span on the merged time axis: as one
    // run's, an upper bound (its last end is canaryd's read of it), and where the shards do
    // not share a clock, as good as the alignment besides.
    let a = &i.alignment;
    outln!(
        "duration {:.3} s ({}), from the first send to the last end on the merged time axis",
        s.duration_s,
        match a.bound_ms {
            Some(0.0) => "an upper bound: to the last end as canaryd read it".to_string(),
            Some(b) => format!(
                "an upper bound: to the last end as canaryd read it, the shards aligned within \
                 ±{b:.3} ms"
            ),
            None => "no bound: the shards' clocks do not compare".to_string(),
        }
    )?;
    // The counts are exact; a duration with no bound leaves the rates none either.
    let rate_mark = |line: String| {
        if unbounded {
            line.replacen(" req/s", " req/s (no bound)", 1).replacen(
                "over the duration)",
                "over a duration with no bound)",
                1,
            )
        } else {
            line
        }
    };
    outln!("{}", rate_mark(super::report::throughput_line(s)))?;
    // Judged against the shards' SLOs: good requests counted from the union's records (exact),
    // over the union's duration as the throughput is.
    if let Some(g) = &s.goodput {
        outln!(
            "{}",
            rate_mark(super::report::goodput_line(
                g,
                s.requests,
                s.client_errors + s.cancelled
            ))
        )?;
    }
    // Shards run one after another: the span holds time no shard was sending, and the rates
    // above are over it, said beside them rather than only among the notes.
    let sending = i
        .no_shard_sending_s
        .map(|idle| canary_replay::sending_note(idle, s.duration_s));
    if let Some(n) = &sending {
        outln!("note: {n}")?;
    }
    outln!("shard  t0 offset (ms)  basis       wall-clock error  records  folder")?;
    for input in &i.inputs {
        let c = &input.clock;
        let err = match (c.wall_clock_error_ms, c.synchronized) {
            (Some(e), _) => format!("±{e:.3} ms"),
            (None, Some(false)) => "unsynchronized".to_string(),
            (None, _) => "unknown".to_string(),
        };
        outln!(
            "{:<6} {:>15.3}  {:<11} {:>16}  {:>7}  {}",
            input.shard,
            c.t0_offset_ms,
            c.offset_basis,
            err,
            input.records,
            input.dir.display()
        )?;
    }
    outln!(
        "alignment: {}; start spread {:.3} ms (as measured){}; {}",
        a.basis,
        a.start_spread_ms,
        a.common_start
            .as_ref()
            .map_or(String::new(), |s| format!(", common start {s}")),
        match (a.bound_ms, &a.unbounded_because) {
            (Some(b), _) => format!("shards placed on one time axis within ±{b:.3} ms (a bound)"),
            (None, Some(why)) => format!("no bound on the cross-host alignment: {why}"),
            (None, None) => "no bound on the cross-host alignment".to_string(),
        }
    )?;
    outln!(
        "(schedule lag, own clocks: each request on its shard's monotonic clock, exact; one \
         axis: plus its shard's t0 offset, {})",
        if unbounded {
            "with no bound: the shards' clocks do not compare"
        } else {
            "within the alignment bound"
        }
    )?;
    // The union's slices, on the merged axis (a note below says so).
    if let Some(t) = &s.timeslices {
        super::timeslices::print(t)?;
    }
    for n in i.notes.iter().filter(|n| Some(*n) != sending.as_ref()) {
        outln!("note: {n}")?;
    }
    Ok(())
}
