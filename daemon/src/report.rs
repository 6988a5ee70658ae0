//! What a person sees: live progress while a run goes on and the summary table after it.

use canary_core::{RunOutcome, RunServerSummary};
use canary_replay::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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
                let bar = tty.then(|| {
                    let bar = ProgressBar::new(0);
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{elapsed_precise} [{bar:40}] {pos}/{len} done {msg}",
                        )
                        .expect("valid template")
                        .progress_chars("=> "),
                    );
                    bar
                });
                let mut ticks = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                    ticks += 1;
                    let (total, sent, done, errors) = (
                        progress.total.load(Ordering::Relaxed),
                        progress.sent.load(Ordering::Relaxed),
                        progress.done.load(Ordering::Relaxed),
                        progress.errors.load(Ordering::Relaxed),
                    );
                    match &bar {
                        Some(bar) => {
                            bar.set_length(total);
                            bar.set_position(done);
                            bar.set_message(format!("sent {sent}, errors {errors}"));
                        }
                        None if ticks % 25 == 0 => {
                            // A closed stderr is no reason to panic.
                            let _ = writeln!(
                                std::io::stderr(),
                                "progress: {done}/{total} done, {sent} sent, {errors} errors"
                            );
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

/// Prints the run summary as a table.
pub fn print_table(outcome: &RunOutcome, token_counts: bool) -> std::io::Result<()> {
    let s = &outcome.summary;
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
        ("time_to_second_token", "TTST (ms)"),
        ("time_to_first_output_token", "TTFO (ms)"),
        ("inter_token_latency", "ITL (ms)"),
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
        (
            "ttft_minus_server_prompt_time",
            "TTFT - server prompt time (ms)",
        ),
    ];
    for (key, label) in rows {
        if let Some(st) = s.metrics.get(key) {
            outln!(
                "{label:<34} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
                st.avg,
                st.min,
                st.p50,
                st.p90,
                st.p99,
                st.max
            )?;
        }
    }
    if let Some(server) = &outcome.telemetry.server {
        print_server_side(server)?;
    }
    outln!()?;
    outln!(
        "requests {} (completed {}, {}errors {}{}), duration {:.2} s",
        s.requests,
        s.completed,
        match s.cancelled {
            0 => String::new(),
            n => format!("cancelled {n}, "),
        },
        s.errors,
        if s.errors_by_kind.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                s.errors_by_kind
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        s.duration_s
    )?;
    outln!(
        "throughput {:.2} req/s, {:.1} output tokens/s; cached prompt tokens {}",
        s.request_throughput,
        s.output_token_throughput,
        s.total_cached_tokens
    )?;
    if let Some(g) = &s.goodput {
        outln!(
            "goodput {:.2} req/s: {} of {} requests ({:.1}%) met {}",
            g.goodput,
            g.good_requests,
            s.requests,
            g.good_request_fraction * 100.0,
            g.slos
        )?;
    }
    if token_counts {
        let a = &s.token_agreement;
        let n = a.requests_with_usage.max(1) as f64;
        outln!(
            "server token counts ({} requests with usage): prompt exact {}, mean delta {:+.1}; completion exact {}, mean delta {:+.1}",
            a.requests_with_usage,
            a.prompt_exact,
            a.prompt_delta_sum as f64 / n,
            a.completion_exact,
            a.completion_delta_sum as f64 / n
        )?;
    }
    if let Some(gpu) = &outcome.telemetry.gpu {
        let f =
            |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        outln!(
            "GPU: util avg {}% max {}%, power avg {} W; energy {} J, {} J per output token",
            f(gpu.util_avg_pct, 1),
            f(gpu.util_max_pct, 1),
            f(gpu.power_avg_w, 1),
            f(gpu.energy.map(|e| e.joules), 1),
            f(gpu.energy_per_output_token_j, 4),
        )?;
    }
    let sources = &outcome.telemetry.sources;
    if !sources.is_empty() {
        let states: Vec<String> = sources
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.name()))
            .collect();
        outln!("telemetry: {}", states.join(", "))?;
    }
    if let Some(b) = &outcome.client_bottleneck {
        println!("{b}");
    }
    if outcome.interrupted {
        outln!(
            "interrupted: {} scheduled requests were not sent",
            outcome.unsent
        )?;
    }
    Ok(())
}

/// The server's own latency estimates (from its `/metrics` histograms) beside the client's.
fn print_server_side(server: &RunServerSummary) -> std::io::Result<()> {
    let rows = [
        (&server.ttft_s, "server TTFT (ms, /metrics)"),
        (&server.itl_s, "server ITL (ms, /metrics)"),
        (&server.e2e_s, "server e2e (ms, /metrics)"),
        (&server.queue_time_s, "server queue time (ms, /metrics)"),
    ];
    for (est, label) in rows {
        let Some(est) = est else { continue };
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.3}", v * 1e3));
        outln!(
            "{label:<34} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            ms(est.mean),
            "-",
            ms(est.p50),
            ms(est.p90),
            ms(est.p99),
            "-"
        )?;
    }
    if let Some(gap) = server.client_minus_server_ttft_ms.and_then(|g| g.mean) {
        outln!("client TTFT - server TTFT (mean): {gap:.3} ms (network, client, queueing outside the engine)")?;
    }
    Ok(())
}
