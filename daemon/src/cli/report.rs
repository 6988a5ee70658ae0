//! What a person sees: live progress while a run goes on and the summary table after it.
// Every line goes through `outln!`: a closed stdout (`| head -1`) ends the table quietly, where
// `println!` panics.
#![deny(clippy::print_stdout)]

use canary_core::RunOutcome;
use canary_replay::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The bar's style, `count` saying how many are done (`{pos} done`, `{pos}/{len} done`).
fn bar_style(count: &str) -> ProgressStyle {
    ProgressStyle::with_template(&format!("{{elapsed_precise}} [{{bar:40}}] {count} {{msg}}"))
        .expect("valid template")
        .progress_chars("=> ")
}

/// The plain progress line: `done/total` only when the planned count is known (not 0). A run
/// bounded by its duration has none: `2643/0 done` read as past a plan of nothing. A rate run
/// bounded by time has an expected count (`estimated`), not a cap: `65 done (~100 expected)`.
fn progress_line(done: u64, total: u64, estimated: bool, sent: u64, errors: u64) -> String {
    let count = match total {
        0 => format!("{done} done"),
        total if estimated => format!("{done} done (~{total} expected)"),
        total => format!("{done}/{total} done"),
    };
    format!("progress: {count}, {sent} sent, {errors} errors")
}

/// A progress bar on a terminal, a plain line every few seconds otherwise.
pub struct ProgressDisplay {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressDisplay {
    /// Starts showing `progress`.
    pub fn start(progress: Arc<Progress>) -> ProgressDisplay {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tty = std::io::stderr().is_terminal();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Until a planned count is known (never, for a run bounded by its duration):
                // requests done, without a denominator.
                let bar = tty.then(|| ProgressBar::no_length().with_style(bar_style("{pos} done")));
                let mut ticks = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                    ticks += 1;
                    let estimated = progress.total_estimated.load(Ordering::Relaxed);
                    let (total, sent, done, errors) = (
                        progress.total.load(Ordering::Relaxed),
                        progress.sent.load(Ordering::Relaxed),
                        progress.done.load(Ordering::Relaxed),
                        progress.errors.load(Ordering::Relaxed),
                    );
                    match &bar {
                        Some(bar) => {
                            if total > 0 && bar.length() != Some(total) {
                                bar.set_style(bar_style(if estimated {
                                    "{pos} done (~{len} expected)"
                                } else {
                                    "{pos}/{len} done"
                                }));
                                bar.set_length(total);
                            }
                            bar.set_position(done);
                            bar.set_message(format!("sent {sent}, errors {errors}"));
                        }
                        None if ticks % 25 == 0 => {
                            // A closed stderr is no reason to panic.
                            let line = progress_line(done, total, estimated, sent, errors);
                            let _ = writeln!(std::io::stderr(), "{line}");
                        }
                        None => {}
                    }
                }
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                }
            })
        };
        ProgressDisplay {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the display.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The label column's least width: a table's is its longest label's, at least this.
pub(super) const LABEL_WIDTH: usize = 34;

/// One metric's row of the table, its label in a column `w` wide: times to the µs, token
/// counts whole (the mean to one decimal). The merge's table prints its rows with it too.
pub(super) fn print_metric_row(
    label: &str,
    st: &canary_core::Stats,
    w: usize,
) -> std::io::Result<()> {
    if st.unit == "tokens" {
        let n = |v: f64| format!("{:.0}", v);
        outln!(
            "{label:<w$} {:>10.1} {:>10} {:>10} {:>10} {:>10} {:>10}",
            st.avg,
            n(st.min),
            n(st.p50),
            n(st.p90),
            n(st.p99),
            n(st.max)
        )
    } else {
        outln!(
            "{label:<w$} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
            st.avg,
            st.min,
            st.p50,
            st.p90,
            st.p99,
            st.max
        )
    }
}

/// The table's error kinds after its error count (a merged run's too): `: http_status 7 (429
/// ×4, 503 ×3), connect 2`, or nothing without errors.
pub(super) fn errors_by_kind(s: &canary_core::RunSummary) -> String {
    match canary_core::error_kinds_text(s, " ") {
        k if k.is_empty() => String::new(),
        k => format!(": {k}"),
    }
}

/// The table's throughput line (a merged run's too): the rates over the run's duration, or
/// why it has none.
pub(super) fn throughput_line(s: &canary_core::RunSummary) -> String {
    match (s.request_throughput, s.output_token_throughput) {
        (Some(req), Some(tok)) => format!(
            "throughput {req:.2} req/s, {tok:.1} output tokens/s (lower bounds: exact counts \
             over the duration); cached prompt tokens {}",
            s.total_cached_tokens
        ),
        _ => format!(
            "throughput unavailable ({}); cached prompt tokens {}",
            s.rate_unavailable.as_deref().unwrap_or("no rate"),
            s.total_cached_tokens
        ),
    }
}

/// Prints the run summary as a table; `concurrency` is the in-flight ceiling the run asked
/// for (`--concurrency`), to say when the open-file limit held it lower.
pub fn print_table(
    outcome: &RunOutcome,
    token_counts: bool,
    concurrency: Option<usize>,
) -> std::io::Result<()> {
    let s = &outcome.summary;
    let server = outcome.telemetry.server.as_ref();
    // Each server row sits under the client figure it compares with: its ITL under the
    // client's inter-chunk gaps when both are one value per token gap, under per-request ITL
    // when the engine records one mean per request (TGI, TensorRT-LLM).
    let rows = [
        // The response head: an upper bound where it shared its read with later bytes
        // (receive_timestamps.head), as the report's TTFB chart marks it.
        ("time_to_first_byte", "TTFB (ms)"),
        ("time_to_first_token", "TTFT (ms)"),
        (
            "time_to_first_token_userspace",
            "  TTFT at canaryd's read (ms)",
        ),
        ("client_read_delay", "  canaryd's read delay (ms)"),
        ("time_to_second_token", "TTST (ms)"),
        ("time_to_first_output_token", "TTFO (ms)"),
        ("inter_token_latency", "ITL (ms, mean per request)"),
        ("inter_chunk_latency", "inter-chunk gap (ms)"),
        ("request_latency", "request latency (ms)"),
        (
            "output_token_throughput_per_user",
            "output tokens/s per user",
        ),
        ("input_sequence_length", "input length (tokens)"),
        ("output_sequence_length", "output length (tokens)"),
        ("schedule_lag", "schedule lag (ms)"),
        ("dispatch_lag", "  of which dispatch (ms)"),
        ("schedule_hold", "  of which held (ms)"),
        ("connect_wait", "  of which connecting (ms)"),
        (
            "ttft_minus_server_prompt_time",
            "TTFT - server prompt time (ms)",
        ),
    ];
    let bounds = TableBounds::of(&s.receive_timestamps);
    // The label column as wide as its longest label (a bound's suffix lengthens one).
    let server_labels = server.map_or(Vec::new(), |server| {
        vec![
            "  server TTFT (ms, /metrics)".to_string(),
            server.itl_label().to_string(),
            "  server e2e (ms, /metrics)".to_string(),
            "server queue time (ms, /metrics)".to_string(),
        ]
    });
    let w = rows
        .iter()
        .filter(|(key, _)| s.metrics.contains_key(*key))
        .map(|(key, label)| bounds.label(key, label))
        .chain(server_labels)
        .map(|l| l.chars().count())
        .fold(LABEL_WIDTH, usize::max);
    outln!()?;
    outln!(
        "{:<w$} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "metric",
        "avg",
        "min",
        "p50",
        "p90",
        "p99",
        "max",
        w = w
    )?;
    for (key, label) in rows {
        let label = bounds.label(key, label);
        if let Some(st) = s.metrics.get(key) {
            print_metric_row(&label, st, w)?;
        }
        // The rows are over the requests that have the figure; the per-user rate's leave out
        // some completed ones, which the row alone would not say.
        if key == "output_token_throughput_per_user" {
            if let Some(note) =
                canary_core::per_user_note(s.per_user_unmeasured, s.per_user_requests)
            {
                outln!("  note: {note}")?;
            }
        }
        if let Some(server) = server {
            let beside = match key {
                "time_to_first_token" => Some((&server.ttft_s, "  server TTFT (ms, /metrics)")),
                k if k == server.itl_client_metric() => Some((&server.itl_s, server.itl_label())),
                "request_latency" => Some((&server.e2e_s, "  server e2e (ms, /metrics)")),
                _ => None,
            };
            if let Some((est, label)) = beside {
                print_server_row(est, label, w)?;
            }
        }
    }
    if let Some(server) = server {
        print_server_row(&server.queue_time_s, "server queue time (ms, /metrics)", w)?;
    }
    // The aggregates are exact over the values recorded; a value itself is exact only where
    // the kernel stamped the segment that completed it, else an upper bound, and the rows say
    // which, as the report's headline does.
    let rx = &s.receive_timestamps;
    if rx.requests > 0 {
        let n =
            |m: &std::collections::BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
        outln!(
            "first tokens timed: {} by the kernel's stamp (exact), {} by a later segment's \
             (upper bounds), {} by canaryd's read (upper bounds)",
            n(&rx.first_token, "kernel"),
            n(&rx.first_token, "kernel_bound"),
            n(&rx.first_token, "userspace")
        )?;
        if !rx.end.is_empty() {
            outln!(
                "ends timed: {} by the kernel's stamp (exact), {} by a later segment's \
                 (upper bounds), {} by canaryd's read (upper bounds)",
                n(&rx.end, "kernel"),
                n(&rx.end, "kernel_bound"),
                n(&rx.end, "userspace")
            )?;
        }
        if !rx.head.is_empty() {
            outln!(
                "response heads timed: {} by the kernel's stamp (exact), {} read with later \
                 bytes or by a later segment's stamp (upper bounds), {} by canaryd's read \
                 (upper bounds)",
                n(&rx.head, "kernel"),
                n(&rx.head, "kernel_bound"),
                n(&rx.head, "userspace")
            )?;
        }
        if rx.token_events_bound > 0 {
            outln!(
                "token events: {} of {} are upper bounds (several in one read){}",
                rx.token_events_bound,
                rx.token_events,
                match rx.token_events_bound_requests {
                    0 => String::new(),
                    r => format!(", in {r} of {} requests", rx.requests),
                }
            )?;
        }
        // ITL is over the first token and the end alone (canary_core::itl_is_bound).
        if let (Some(of), Some(bound @ 1..)) = (rx.itl_requests, rx.itl_bound_requests) {
            outln!("ITL: a bound for {bound} of {of} requests (first token or end not exact)")?;
        }
    } else if s.completed > 0 {
        outln!(
            "receive timestamps {}: every client time is canaryd's read (upper bounds)",
            match (rx.state.as_deref(), rx.reason.as_deref()) {
                (Some("refused"), Some(why)) => format!("refused ({why})"),
                (Some(state), _) => state.to_string(),
                (None, _) => "not recorded".to_string(),
            }
        )?;
    }
    outln!(
        "(client: avg, min, max exact over the times recorded{}, percentiles within 0.1% or \
         0.5 µs{}; lengths: mean to 0.1 token, the rest whole tokens)",
        if bounds.any() || bounds.head() {
            ", except in a row marked bound: some of its times are a later segment's stamp or \
             canaryd's read, so TTFB, TTFT, TTFO and latency are upper bounds and the gaps between \
             such times (TTST, inter-chunk) are exact in neither direction; ITL, (e2e - TTFT) \
             / (n - 1), and tokens/s per user (1000 / ITL) are bounds where some request's \
             first token or end is"
        } else {
            ""
        },
        if server.is_some() {
            "; server: mean exact over the requests it counted, percentiles only known to their \
             bucket: lo–hi ms means above lo and at most hi (bounds)"
        } else {
            ""
        }
    )?;
    if let Some(c) = server.and_then(|s| s.comparison.as_ref()) {
        outln!("{c}")?;
    }
    outln!()?;
    outln!(
        "requests {} (completed {}, {}errors {}{}), duration {:.3} s (an upper bound: to the \
         last end as canaryd read it)",
        s.requests,
        s.completed,
        match s.cancelled {
            0 => String::new(),
            n => format!("cancelled {n}, "),
        },
        s.errors,
        errors_by_kind(s),
        s.duration_s
    )?;
    // Why requests failed, not only how many: the most frequent cause, as records.jsonl has it.
    if let Some(top) = s.error_causes.first() {
        let more = s.error_causes.len() - 1;
        outln!(
            "top error cause: {top}{}",
            if more > 0 {
                format!(" (the next {more} in summary.json's error_causes)")
            } else {
                String::new()
            }
        )?;
    }
    if let Some(line) = in_flight_line(&outcome.in_flight_cap, concurrency) {
        outln!("{line}")?;
    }
    outln!("{}", throughput_line(s))?;
    if let Some(g) = &s.goodput {
        // The fraction's own denominator: requests canaryd failed itself or cancelled on
        // purpose say nothing of the target ("90 of 100 (100.0%)" used to read as a slip).
        outln!(
            "{}",
            goodput_line(g, s.requests, s.client_errors + s.cancelled)
        )?;
    }
    if token_counts {
        let a = &s.token_agreement;
        // Each mean over the requests that gave that count.
        let mean = |sum: i64, n: u64| sum as f64 / n.max(1) as f64;
        outln!(
            "server token counts ({} requests with usage): prompt exact {}, mean delta {:+.1}; completion exact {}, mean delta {:+.1}{}",
            a.requests_with_usage,
            a.prompt_exact,
            mean(a.prompt_delta_sum, a.prompt_compared),
            a.completion_exact,
            mean(a.completion_delta_sum, a.completion_compared),
            if a.completion_implausible > 0 {
                format!(
                    "; {} implausible completion counts (chunks counted instead)",
                    a.completion_implausible
                )
            } else {
                String::new()
            }
        )?;
    }
    // Times the server reported that cannot be the request's are left out of the row above;
    // without this line its count fell short of the completed requests unexplained.
    let refused = &s.server_prompt_time_refused;
    if !refused.is_empty() {
        let each: Vec<String> = refused
            .iter()
            .map(|(why, n)| {
                let why = match why {
                    canary_core::ServerTimeRefused::Negative => "negative",
                    canary_core::ServerTimeRefused::LongerThanRequest => "longer than the request",
                };
                format!("{why} {n}")
            })
            .collect();
        outln!(
            "server prompt times (timings.prompt_ms) refused: {} (exact counts; left out of \
             TTFT - server prompt time)",
            each.join(", ")
        )?;
    }
    if let Some(gpu) = &outcome.telemetry.gpu {
        let f =
            |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        // How the energy was had, over which GPUs: counters are exact at their samples and
        // read as a straight line between them at the run's edges, power integrated is an
        // estimate; it is all the GPUs' traffic, over the tokens canaryd completed.
        let how = gpu.energy.map_or(String::new(), |e| {
            let method = match e.method {
                canary_core::EnergyMethod::Counter => {
                    "energy counters, read between samples at the run's edges"
                }
                canary_core::EnergyMethod::PowerIntegral => "power integrated: an estimate",
                canary_core::EnergyMethod::Mixed => {
                    "counters for some GPUs, power for the rest: an estimate"
                }
            };
            format!(" ({method}; {} GPUs)", e.gpus)
        });
        outln!(
            "GPU: util avg {}% max {}%, power avg {} W; energy {} J{how}, {} J per output token",
            f(gpu.util_avg_pct, 1),
            f(gpu.util_max_pct, 1),
            f(gpu.power_avg_w, 1),
            f(gpu.energy.map(|e| e.joules), 1),
            f(gpu.energy_per_output_token_j, 4),
        )?;
        if let Some(line) = gpu_clock_line(gpu) {
            outln!("{line}")?;
        }
    }
    let sources = &outcome.telemetry.sources;
    if !sources.is_empty() {
        let states: Vec<String> = sources
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.name()))
            .collect();
        outln!("telemetry: {}", states.join(", "))?;
    }
    for line in outcome.diagnosis.lines() {
        outln!("{line}")?;
    }
    if let Some(b) = &outcome.client_bottleneck {
        outln!("{b}")?;
    }
    if outcome.interrupted {
        match (outcome.unsent, &outcome.unsent_unknown) {
            (Some(n), _) => {
                let about = if outcome.unsent_estimated {
                    " (an estimate: the rate times the time left)"
                } else {
                    ""
                };
                outln!("interrupted: {n} scheduled requests were not sent{about}")?;
            }
            (None, why) => outln!(
                "interrupted: how many requests were not sent is unknown: {}",
                why.as_deref().unwrap_or("not counted")
            )?,
        }
    }
    Ok(())
}

/// The GPU's clocks and memory utilization over the run, beside the throttle reasons seen (a
/// lowest SM clock far below its mean is a GPU pulled down); `None` when no source read them.
fn gpu_clock_line(gpu: &canary_core::RunGpuSummary) -> Option<String> {
    let figures = [
        gpu.sm_clock_min_mhz,
        gpu.sm_clock_avg_mhz,
        gpu.mem_clock_avg_mhz,
        gpu.util_mem_avg_pct,
        gpu.util_mem_max_pct,
    ];
    if figures.iter().all(Option::is_none) {
        return None;
    }
    let f = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let reasons = match gpu.throttle_reasons.as_deref() {
        Some([]) => "; throttle reasons: none seen".to_string(),
        Some(r) => format!("; throttle reasons: {}", r.join(", ")),
        None => String::new(),
    };
    Some(format!(
        "GPU clocks (readings at sample instants: means estimates, lowest and highest bounds): \
         SM lowest {} avg {} MHz, memory clock avg {} MHz, memory busy avg {}% highest {}%{reasons}",
        f(gpu.sm_clock_min_mhz, 0),
        f(gpu.sm_clock_avg_mhz, 0),
        f(gpu.mem_clock_avg_mhz, 0),
        f(gpu.util_mem_avg_pct, 1),
        f(gpu.util_mem_max_pct, 1),
    ))
}

/// The in-flight line: when the open-file limit set a run's ceiling below its
/// `concurrency`, or held requests for a slot, how far and how many; `None` otherwise (the
/// ceiling asked for was the one used, or held nothing).
fn in_flight_line(cap: &canary_core::InFlightCap, concurrency: Option<usize>) -> Option<String> {
    if cap.source != canary_core::CapSource::OpenFiles {
        return None;
    }
    let limit = cap.limit?;
    let below = concurrency.filter(|&c| c > limit);
    if below.is_none() && cap.waited == 0 {
        return None;
    }
    let below = below.map_or(String::new(), |c| {
        format!(
            ", below {} {c}",
            crate::cli::replay::flag(canary_replay::Setting::Concurrency)
        )
    });
    let waited = match cap.waited {
        0 => "no request waited for a slot".to_string(),
        1 => "1 request waited for a slot (exact)".to_string(),
        n => format!("{n} requests waited for a slot (exact)"),
    };
    Some(format!(
        "in flight: at most {limit} (open-file limit){below}; {waited}"
    ))
}

/// One server latency row: the mean (exact over the requests the server counted) and each
/// percentile as the bucket holding it.
fn print_server_row(
    est: &Option<canary_core::LatencyEstimate>,
    label: &str,
    w: usize,
) -> std::io::Result<()> {
    let Some(est) = est else { return Ok(()) };
    let bucket =
        |q: Option<canary_core::BucketQuantile>| q.map_or("-".to_string(), |q| q.range_ms());
    outln!(
        "{label:<w$} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        est.mean
            .map_or("-".to_string(), |v| format!("{:.3}", v * 1e3)),
        "-",
        bucket(est.p50),
        bucket(est.p90),
        bucket(est.p99),
        "-"
    )
}

/// The goodput line: the rate, good requests of those judged (`requests` less
/// `not_judged`, canaryd's own failures and cancels), the terms met only on a bound, and why
/// the rest were not good.
pub(crate) fn goodput_line(
    g: &canary_core::GoodputSummary,
    requests: u64,
    not_judged: u64,
) -> String {
    let rate = g.goodput.map_or("goodput unavailable".to_string(), |r| {
        format!("goodput {r:.2} req/s")
    });
    let mut not_good: Vec<String> = g
        .misses_by_metric
        .iter()
        .map(|(m, n)| format!("{m} missed {n}"))
        .collect();
    not_good.extend(g.no_value.iter().map(|v| v.to_string()));
    let judged = requests - not_judged;
    let left_out = match not_judged {
        0 => String::new(),
        n => format!(" ({n} of canaryd's own failures or cancels left out)"),
    };
    // 0 of 0 is no share at all (summary.json's null).
    let share = g
        .good_request_fraction
        .map_or_else(|| "no share".to_string(), |f| format!("{:.1}%", f * 100.0));
    // Terms a request met only on a bound (its tokens came in one read) count toward good,
    // unmeasured: say how many per term, as summary.json's met_on_bound does.
    let on_bound: Vec<String> = g
        .met_on_bound
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(m, n)| format!("{m} {n}"))
        .collect();
    let on_bound = match on_bound.is_empty() {
        true => String::new(),
        false => format!(
            "; met on a bound (tokens in one read): {}",
            on_bound.join(", ")
        ),
    };
    format!(
        "{rate}: {} of {judged} requests{left_out} ({share}) met {}{on_bound}{}{}",
        g.good_requests,
        g.slos,
        if not_good.is_empty() {
            String::new()
        } else {
            format!("; not good: {}", not_good.join(", "))
        },
        uncertain_judgements(g)
    )
}

/// The judgements that rest on a time that is only a bound (summary.json's
/// `uncertain_misses`, `uncertain_meets`) and the range they leave the good count in; empty
/// when every judgement was on exact times.
fn uncertain_judgements(g: &canary_core::GoodputSummary) -> String {
    let judged = |counts: &std::collections::BTreeMap<String, u64>, how: &str| {
        counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(m, n)| format!("{m} {how} {n}"))
            .collect::<Vec<_>>()
    };
    let mut on_bound = judged(&g.uncertain_misses, "missed");
    on_bound.extend(judged(&g.uncertain_meets, "met"));
    if on_bound.is_empty() {
        return String::new();
    }
    let range = match (g.good_requests_at_least, g.good_requests_at_most) {
        (Some(low), Some(high)) => format!(" (truly good: {low} to {high})"),
        _ => String::new(),
    };
    format!(
        "; judged on a bound, may go the other way: {}{range}",
        on_bound.join(", ")
    )
}

/// Which rows of the table hold upper bounds: a time taken at canaryd's read or from a later
/// segment's stamp is never before the event, so the figures over it are bounds too.
pub(super) struct TableBounds(canary_core::RxBounds);

impl TableBounds {
    pub(super) fn of(rx: &canary_core::RxSummary) -> TableBounds {
        TableBounds(rx.bounds())
    }

    pub(super) fn any(&self) -> bool {
        self.0.any()
    }

    /// Whether the TTFB row is marked: some response head shared its read with later bytes
    /// or was read by canaryd (left out of [`canary_core::RxBounds::any`]).
    pub(super) fn head(&self) -> bool {
        self.0.is_bound("time_to_first_byte")
    }

    /// `label` with `, bound` in its parentheses (or ` (bound)` after it) when the row's
    /// figures are not exact ([`canary_core::RxBounds::is_bound`]).
    pub(super) fn label(&self, key: &str, label: &str) -> String {
        if !self.0.is_bound(key) {
            return label.to_string();
        }
        // The read less a later segment's stamp is short of canaryd's delay: a lower bound,
        // unlike the upper bounds above it.
        let kind = match key {
            "client_read_delay" => "lower bound",
            _ => "bound",
        };
        match label.strip_suffix(')') {
            Some(head) => format!("{head}, {kind})"),
            None => format!("{label} ({kind})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TableBounds;

    // Audit (hostile servers), finding 9: a run bounded by its duration has no planned
    // count, and printed `progress: 2643/0 done, …`.
    #[test]
    fn the_progress_line_has_a_denominator_only_when_the_count_is_planned() {
        assert_eq!(
            super::progress_line(2643, 0, false, 2644, 0),
            "progress: 2643 done, 2644 sent, 0 errors"
        );
        assert_eq!(
            super::progress_line(12, 100, false, 14, 1),
            "progress: 12/100 done, 14 sent, 1 errors"
        );
        // README audit 13: a rate run bounded by time printed `65/100 done, 109 sent`, its
        // expected count read as a cap it had passed.
        assert_eq!(
            super::progress_line(65, 100, true, 109, 0),
            "progress: 65 done (~100 expected), 109 sent, 0 errors"
        );
    }

    fn bounds(rx: serde_json::Value) -> TableBounds {
        TableBounds::of(&serde_json::from_value(rx).unwrap())
    }

    // The audit's pr4: a response arriving whole in one read gave ITL and TTST `min 0.000`
    // under "exact"; token events that are bounds mark the TTST row. ITL is over each
    // request's first token and end alone (README audit finding 3: token events marked it):
    // its row is marked by the requests whose ITL is a bound.
    #[test]
    fn token_events_that_are_bounds_mark_the_gap_rows() {
        let kernel = serde_json::json!({"kernel": 2});
        let rx = |itl_bound: u64| {
            bounds(serde_json::json!({"state": "on", "requests": 2,
            "first_token": kernel, "end": kernel, "token_events": 20,
            "token_events_bound": 3, "token_events_bound_requests": 1,
            "itl_requests": 2, "itl_bound_requests": itl_bound,
            "clock_map_uncertainty_max_us": 0.1}))
        };
        let b = rx(0);
        assert_eq!(b.label("time_to_first_token", "TTFT (ms)"), "TTFT (ms)");
        assert_eq!(
            b.label("client_read_delay", "  canaryd's read delay (ms)"),
            "  canaryd's read delay (ms)"
        );
        assert_eq!(
            b.label("request_latency", "request latency (ms)"),
            "request latency (ms)"
        );
        assert_eq!(
            b.label("time_to_second_token", "TTST (ms)"),
            "TTST (ms, bound)"
        );
        assert_eq!(
            b.label("inter_token_latency", "ITL (ms, mean per request)"),
            "ITL (ms, mean per request)"
        );
        let b = rx(1);
        assert_eq!(
            b.label("inter_token_latency", "ITL (ms, mean per request)"),
            "ITL (ms, mean per request, bound)"
        );
        // The per-user rate is 1000 / ITL: a bound with it, though its label has no unit.
        assert_eq!(
            b.label(
                "output_token_throughput_per_user",
                "output tokens/s per user"
            ),
            "output tokens/s per user (bound)"
        );
        let off = bounds(
            serde_json::json!({"state": "off", "requests": 0, "first_token": {},
            "token_events": 0, "token_events_bound": 0, "clock_map_uncertainty_max_us": null}),
        );
        assert_eq!(
            off.label("time_to_first_token", "TTFT (ms)"),
            "TTFT (ms, bound)"
        );
        // Audit F14: the read delay of a first token stamped by a later segment is short of
        // canaryd's delay, yet its row was unmarked beside marked ones.
        let late = bounds(serde_json::json!({"state": "on", "requests": 4,
            "first_token": {"kernel": 3, "kernel_bound": 1}, "end": {"kernel": 4},
            "token_events": 20, "token_events_bound": 0, "clock_map_uncertainty_max_us": 0.1}));
        assert_eq!(
            late.label("client_read_delay", "  canaryd's read delay (ms)"),
            "  canaryd's read delay (ms, lower bound)"
        );
        assert_eq!(
            off.label("request_latency", "request latency (ms)"),
            "request latency (ms, bound)"
        );
    }

    // The GPU's clocks and memory utilization were in summary.json only: the table says them
    // with the throttle reasons, and nothing for a source that read none.
    #[test]
    fn the_gpu_clock_line_says_the_lowest_beside_the_mean_and_the_reasons() {
        let mut g = canary_core::RunGpuSummary {
            throttle_reasons: Some(vec!["sw_power_cap".to_owned()]),
            sm_clock_min_mhz: Some(1200.0),
            sm_clock_avg_mhz: Some(1850.0),
            mem_clock_avg_mhz: Some(2619.0),
            util_mem_avg_pct: Some(35.0),
            util_mem_max_pct: Some(50.0),
            ..Default::default()
        };
        assert_eq!(
            super::gpu_clock_line(&g).unwrap(),
            "GPU clocks (readings at sample instants: means estimates, lowest and highest \
             bounds): SM lowest 1200 avg 1850 MHz, memory clock avg 2619 MHz, memory busy avg \
             35.0% highest 50.0%; throttle reasons: sw_power_cap"
        );
        (g.sm_clock_min_mhz, g.sm_clock_avg_mhz, g.mem_clock_avg_mhz) = (None, None, None);
        (g.util_mem_avg_pct, g.util_mem_max_pct) = (None, None);
        assert_eq!(super::gpu_clock_line(&g), None);
    }

    // Audit F5: the line called its counts exact although some judgements rested on a
    // first token read late (TTFT an upper bound, ITL a lower one).
    #[test]
    fn the_goodput_line_says_which_judgements_rest_on_a_bound() {
        let g: canary_core::GoodputSummary = serde_json::from_value(serde_json::json!({
            "slos": "time_to_first_token:10 inter_token_latency:5", "good_requests": 2,
            "good_request_fraction": 0.5, "goodput": 1.0,
            "misses_by_metric": {"time_to_first_token": 2},
            "uncertain_misses": {"time_to_first_token": 1},
            "uncertain_meets": {"inter_token_latency": 2},
            "good_requests_at_least": 1, "good_requests_at_most": 3}))
        .unwrap();
        assert_eq!(
            super::goodput_line(&g, 4, 0),
            "goodput 1.00 req/s: 2 of 4 requests (50.0%) met time_to_first_token:10 \
             inter_token_latency:5; not good: time_to_first_token missed 2; judged on a bound, \
             may go the other way: time_to_first_token missed 1, inter_token_latency met 2 \
             (truly good: 1 to 3)"
        );
    }

    // A term met only on a bound (a whole response in one read) was counted in summary.json
    // but the table's line said nothing of it.
    #[test]
    fn the_goodput_line_counts_terms_met_on_a_bound() {
        let g: canary_core::GoodputSummary = serde_json::from_value(serde_json::json!({
            "slos": "output_token_throughput_per_user:1000", "good_requests": 1,
            "good_request_fraction": 0.5, "goodput": 0.25,
            "misses_by_metric": {"output_token_throughput_per_user": 1},
            "met_on_bound": {"output_token_throughput_per_user": 1}}))
        .unwrap();
        assert_eq!(
            super::goodput_line(&g, 3, 1),
            "goodput 0.25 req/s: 1 of 2 requests (1 of canaryd's own failures or cancels left \
             out) (50.0%) met output_token_throughput_per_user:1000; met on a bound (tokens in \
             one read): output_token_throughput_per_user 1; not good: \
             output_token_throughput_per_user missed 1"
        );
    }
}
