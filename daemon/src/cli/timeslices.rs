//! The table of a run's timeslices (`--slice-duration`), printed under its summary.

use canary_core::{SliceStats, TimesliceReport};

/// Prints one line per slice: what was sent in it and how fast it was served.
pub fn print(t: &TimesliceReport) -> std::io::Result<()> {
    outln!()?;
    let widened = if t.slice_duration_s != t.requested_slice_duration_s {
        format!(
            " (widened from {} s: a run over {} slices has them merged in pairs)",
            t.requested_slice_duration_s,
            canary_core::Timeslices::MAX_SLICES
        )
    } else {
        String::new()
    };
    outln!(
        "timeslices of {} s{widened}: requests and latencies by send time, rates by completion \
         time; counts exact, percentiles within 1% or 0.5 µs, whichever is larger",
        t.slice_duration_s
    )?;
    outln!(
        "{:>16} {:>8} {:>7} {:>13} {:>13} {:>13} {:>9} {:>10}",
        "slice (s)",
        "sent",
        "errors",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "req/s",
        "tokens/s"
    )?;
    // A cell over times that are not all exact says so, as the run's table marks its row.
    let ms = |s: Option<SliceStats>, p: fn(&SliceStats) -> f64| {
        s.map_or("-".to_string(), |s| {
            format!("{:.1} ms{}", p(&s), if s.bound { " b" } else { "" })
        })
    };
    let bound = |s: Option<SliceStats>| s.is_some_and(|s| s.bound);
    let rate = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    // Enough decimals to write the width exactly (0.25 s slices read 0.25-0.50, not
    // 0.2-0.5), at most three: widths are whole milliseconds.
    let decimals: usize = (1..=3)
        .find(|&d| {
            let scaled = t.slice_duration_s * 10f64.powi(d as i32);
            (scaled - scaled.round()).abs() < 1e-6
        })
        .unwrap_or(3);
    for s in &t.slices {
        let span = format!(
            "{:.decimals$}-{:.decimals$}{}",
            s.start_s,
            s.start_s + s.covered_s,
            if s.partial { "*" } else { "" }
        );
        outln!(
            "{span:>16} {:>8} {:>7} {:>13} {:>13} {:>13} {:>9} {:>10}",
            s.requests,
            s.errors,
            ms(s.time_to_first_token, |s| s.p50),
            ms(s.time_to_first_token, |s| s.p99),
            ms(s.inter_token_latency, |s| s.p50),
            rate(s.request_throughput),
            rate(s.output_token_throughput),
        )?;
    }
    if t.slices.iter().any(|s| {
        bound(s.time_to_first_token) || bound(s.inter_token_latency) || bound(s.request_latency)
    }) {
        outln!(
            "b: a bound, not exact: some of the slice's times were a later segment's stamp or \
             canaryd's read, so TTFT is an upper bound and ITL exact in neither direction (a \
             response whose tokens came in one read enters ITL as 0 ms)"
        )?;
    }
    if t.slices.last().is_some_and(|s| s.partial) {
        outln!(
            "* partial: the run ended inside the slice; its rates are over the part it covered"
        )?;
    }
    if let Some(line) = no_rate_line(t) {
        outln!("{line}")?;
    }
    Ok(())
}

/// Why some slices' rate cells read `-`, when they do: a slice, or the part of the last one
/// the run covered, shorter than [`canary_core::MIN_RATE_SPAN_S`] has no rate. Widths of
/// 1–100 ms are kept for their counts and latencies; every rate cell read `-` unexplained.
fn no_rate_line(t: &TimesliceReport) -> Option<String> {
    let without = t
        .slices
        .iter()
        .filter(|s| s.request_throughput.is_none())
        .count();
    (without > 0).then(|| {
        format!(
            "-: no rate in {without} of {} slices: a slice (or the part of the last one the \
             run covered) shorter than {} ms has none, as a rate over it would be extrapolated \
             more than ten-fold to a second; its counts and latencies stand",
            t.slices.len(),
            canary_core::MIN_RATE_SPAN_S * 1e3
        )
    })
}

#[cfg(test)]
mod tests {
    use canary_core::{Aggregator, ChunkGaps, Goodput, RequestRecord};

    fn report(width_ms: u64) -> canary_core::TimesliceReport {
        let mut agg = Aggregator::new(Goodput::default())
            .with_timeslices(std::time::Duration::from_millis(width_ms));
        for i in 0..20 {
            let sent = i as f64 * 20.0;
            let r = RequestRecord {
                id: i,
                sent_at_ms: sent,
                ended_at_ms: sent + 15.0,
                ttft_ms: Some(5.0),
                e2e_ms: Some(15.0),
                chunks: 2,
                ..Default::default()
            };
            agg.add(&r, &ChunkGaps::default());
        }
        agg.summary().timeslices.unwrap()
    }

    // Audit F8: 50 ms slices were accepted, then every rate cell read `-` with nothing
    // under the table saying why.
    #[test]
    fn slices_too_short_for_a_rate_say_so_under_the_table() {
        let short = report(50);
        assert!(short.slices.iter().all(|s| s.request_throughput.is_none()));
        let line = super::no_rate_line(&short).unwrap();
        assert!(
            line.starts_with(&format!(
                "-: no rate in {0} of {0} slices",
                short.slices.len()
            )),
            "{line}"
        );
        assert!(line.contains("shorter than 100 ms"), "{line}");
        // 200 ms slices over 0.4 s: each has its rate; nothing to say.
        let long = report(200);
        assert!(
            long.slices.iter().all(|s| s.request_throughput.is_some()),
            "{long:?}"
        );
        assert_eq!(super::no_rate_line(&long), None);
    }
}
