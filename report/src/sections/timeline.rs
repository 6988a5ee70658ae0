//! TTFT over the run's time, with errors marked, and schedule lag on the same time axis.

use super::{num, time_range, BUCKETS, POINTS_MAX};
use crate::artifacts::Run;
use crate::plot::{Axis, Colour, Mark, Plot, WIDE};
use crate::sample::buckets;
use crate::ReportError;

/// The TTFT and schedule-lag timelines of one run.
pub fn render(run: &Run, prefix: &str) -> Result<String, ReportError> {
    let (t0, t1) = time_range(run);
    let ttft: Vec<(f64, f64)> = run
        .measured()
        .filter(|r| r.ok)
        .filter_map(|r| Some((r.sent_ms / 1000.0, r.ttft_ms?)))
        .filter(|p| p.1.is_finite())
        .collect();
    let errors: Vec<f64> = run
        .measured()
        .filter(|r| r.is_error())
        .map(|r| r.ended_ms / 1000.0)
        .collect();
    let lag: Vec<(f64, f64)> = run
        .measured()
        .map(|r| (r.scheduled_ms / 1000.0, r.lag_ms))
        .collect();
    let mut html = String::new();
    if !ttft.is_empty() || !errors.is_empty() {
        let top = ttft.iter().map(|p| p.1).fold(0.0_f64, f64::max);
        let top = if top > 0.0 { top * 1.05 } else { 1.0 };
        let mut plot = Plot::new(
            &format!("{prefix}ttft-time"),
            "TTFT over the run",
            Axis::linear("time since the run's start (s)").range(t0, t1),
            Axis::linear("TTFT (ms)").range(0.0, top * 1.04),
            WIDE,
        );
        // Where the diagnosis held, under the data: a burst is seen where it happened.
        let band = super::diagnosis::band(run)
            .map(|(a, b, name)| (a.max(t0), b.min(t1), name))
            .filter(|(a, b, _)| b > a);
        if let Some((a, b, name)) = &band {
            plot.layer(name, Colour::SPAN, Mark::Span(*a, *b));
        }
        let note = series(&mut plot, "TTFT", &ttft, t0, t1, 0);
        // Few errors: a cross each. Many: a cross per time bucket that had any, so a run
        // that failed throughout still draws in bounded size.
        let (crosses, per): (Vec<(f64, f64)>, &str) = if errors.len() <= POINTS_MAX {
            (errors.iter().map(|&t| (t, top)).collect(), "")
        } else {
            let pts: Vec<(f64, f64)> = errors.iter().map(|&t| (t, 1.0)).collect();
            let b = buckets(&pts, t0, t1, BUCKETS);
            (
                b.iter().map(|b| ((b.t0 + b.t1) / 2.0, top)).collect(),
                ", a cross per time bucket with any",
            )
        };
        plot.layer(
            &format!("errors ({}) at their end{per}", num(errors.len() as f64)),
            Colour::ERROR,
            Mark::Crosses(crosses),
        );
        let shaded = band.map_or(String::new(), |(.., name)| {
            format!(" Shaded: {name}, the diagnosis's interval (from its telemetry).")
        });
        plot.note(format!("x: when each request was sent. {note}{shaded}"));
        html.push_str(&plot.to_html()?);
    }
    if !lag.is_empty() {
        let mut plot = Plot::new(
            &format!("{prefix}lag-time"),
            "Schedule lag (sent − scheduled)",
            Axis::linear("time since the run's start (s)").range(t0, t1),
            Axis::linear("lag (ms)"),
            WIDE,
        );
        let note = series(&mut plot, "lag", &lag, t0, t1, 1);
        plot.note(format!(
            "x: when each request was scheduled. Lag includes holds on purpose (session order, \
             the concurrency ceiling). {note}"
        ));
        html.push_str(&plot.to_html()?);
    }
    Ok(html)
}

/// Values a bucket needs for its p99 to be drawn: with fewer, the nearest-rank p99 is the
/// maximum, already the band's top.
const P99_MIN: usize = 100;

/// Adds `points` as dots when few, else as per-bucket bands (minimum to maximum) with the
/// median and p99 lines; returns a sentence saying which.
pub fn series(
    plot: &mut Plot,
    name: &str,
    points: &[(f64, f64)],
    t0: f64,
    t1: f64,
    colour: usize,
) -> String {
    if points.len() <= POINTS_MAX {
        plot.layer(name, Colour::nth(colour), Mark::Points(points.to_vec()));
        return format!("Every request drawn ({}).", num(points.len() as f64));
    }
    let b = buckets(points, t0, t1, BUCKETS);
    let mid = |b: &crate::sample::Bucket| (b.t0 + b.t1) / 2.0;
    plot.layer(
        &format!("{name} min–max"),
        Colour::nth(colour),
        Mark::Band(b.iter().map(|b| (mid(b), b.min, b.max)).collect()),
    );
    plot.layer(
        &format!("{name} p50"),
        Colour::nth(colour),
        Mark::Line(b.iter().map(|b| (mid(b), b.p50)).collect()),
    );
    // A nearest-rank p99 of under 100 values is the bucket's maximum: not drawn as a p99.
    let p99: Vec<(f64, f64)> = b
        .iter()
        .filter(|b| b.count >= P99_MIN)
        .map(|b| (mid(b), b.p99))
        .collect();
    let p99_said = match p99.len() {
        0 => format!("no bucket holds {P99_MIN} requests, so no p99 line"),
        n if n == b.len() => "the p99 line each bucket's p99".to_string(),
        n => format!(
            "the p99 line each bucket's p99 where it holds {P99_MIN} requests or more ({n} of \
             {})",
            b.len()
        ),
    };
    if !p99.is_empty() {
        plot.layer(
            &format!("{name} p99"),
            Colour::nth(colour + 1),
            Mark::Line(p99),
        );
    }
    format!(
        "{} requests folded into {} time buckets of {} s: the band spans each bucket's \
         minimum to maximum (exact), the line through it its median; {p99_said} (below 100 \
         values a p99 is the maximum).",
        num(points.len() as f64),
        BUCKETS,
        num((t1 - t0) / BUCKETS as f64)
    )
}
