//! Latency distributions: a CDF and a histogram per metric (TTFT, ITL, e2e); for several runs,
//! their CDFs overlaid.

use super::num;
use crate::artifacts::{Metric, Run};
use crate::plot::{Axis, Colour, Mark, Plot, HALF};
use crate::sample::{cdf_points, histogram, sorted, Cut, FAR};
use crate::ReportError;

/// Ranks kept evenly through a CDF's body, and exactly at its top.
const CDF_BODY: usize = 1000;
const CDF_TAIL: usize = 1000;
const BINS: usize = 60;

/// A CDF and a histogram per metric of one run; `prefix` keeps ids unique in a page.
pub fn render(run: &Run, prefix: &str) -> Result<String, ReportError> {
    let mut html = String::from("<div class=\"grid\">\n");
    let mut any = false;
    for m in Metric::ALL {
        let s = sorted(run.values(m));
        if s.is_empty() {
            continue;
        }
        any = true;
        html.push_str(&cdf(
            &format!("{prefix}{}-cdf", m.id()),
            m,
            &[(m.label().to_string(), s.as_slice())],
        )?);
        html.push_str(&hist(&format!("{prefix}{}-hist", m.id()), m, &s)?);
    }
    html.push_str("</div>\n");
    Ok(if any {
        html
    } else {
        "<p class=\"note\">No completed request: no latency distribution to draw.</p>\n".into()
    })
}

/// One CDF per metric, a layer per run (`runs`: label and its run).
pub fn overlay(runs: &[(String, &Run)], prefix: &str) -> Result<String, ReportError> {
    let mut html = String::from("<div class=\"grid\">\n");
    for m in Metric::ALL {
        let values: Vec<(String, Vec<f64>)> = runs
            .iter()
            .map(|(label, run)| (label.clone(), sorted(run.values(m))))
            .collect();
        let refs: Vec<(String, &[f64])> = values
            .iter()
            .map(|(l, v)| (l.clone(), v.as_slice()))
            .collect();
        if refs.iter().all(|(_, v)| v.is_empty()) {
            continue;
        }
        html.push_str(&cdf(&format!("{prefix}{}-cdf", m.id()), m, &refs)?);
    }
    html.push_str("</div>\n");
    Ok(html)
}

/// The CDF chart of `series` (each sorted). The x axis is logarithmic when values span more
/// than two decades, so body and tail both show.
pub fn cdf(id: &str, m: Metric, series: &[(String, &[f64])]) -> Result<String, ReportError> {
    let (lo, hi) = series
        .iter()
        .filter_map(|(_, s)| Some((*s.iter().find(|v| **v > 0.0)?, *s.last()?)))
        .fold((f64::INFINITY, 0.0_f64), |(a, b), (l, h)| {
            (a.min(l), b.max(h))
        });
    let log = lo.is_finite() && hi / lo > 100.0;
    let x = if log {
        Axis::log(&format!("{} (ms, log scale)", m.label()))
    } else {
        Axis::linear(&format!("{} (ms)", m.label()))
    };
    let mut plot = Plot::new(
        id,
        &format!("{} CDF", m.label()),
        x,
        Axis::linear("fraction of requests").range(0.0, 1.0),
        HALF,
    );
    let (mut drawn, mut total, mut zeros, mut sampled) = (0, 0, 0, false);
    for (i, (label, s)) in series.iter().enumerate() {
        let all = cdf_points(s, CDF_BODY, CDF_TAIL);
        sampled |= all.len() < s.len();
        let pts: Vec<(f64, f64)> = all.into_iter().filter(|p| !log || p.0 > 0.0).collect();
        // Values at or below zero, none of which a log axis can show (ITLs of tokens in one
        // read are 0 ms): every one of them, drawn as a point or not.
        if log {
            zeros += s.iter().filter(|v| **v <= 0.0).count();
        }
        drawn += pts.len();
        total += s.len();
        plot.nth_layer(label, i, Mark::Line(pts));
    }
    let mut note = format!(
        "{} of {} values drawn",
        num(drawn as f64),
        num(total as f64)
    );
    if sampled {
        note.push_str(&format!(
            ": every value of the top {CDF_TAIL} ranks (the tail, up to the maximum) and \
             {CDF_BODY} evenly spaced ranks below; each point is a real value at its rank"
        ));
    }
    if zeros > 0 {
        let (what, verb) = if zeros == 1 {
            ("value is", "its rank is")
        } else {
            ("values are", "their ranks are")
        };
        note.push_str(&format!(
            "; {} zero {what} not drawn on the log scale ({verb} counted)",
            num(zeros as f64)
        ));
    }
    plot.note(format!("{note}."));
    plot.to_html()
}

fn hist(id: &str, m: Metric, s: &[f64]) -> Result<String, ReportError> {
    let h = histogram(s, BINS);
    let mut plot = Plot::new(
        id,
        &format!("{} histogram", m.label()),
        Axis::linear(&format!("{} (ms)", m.label())),
        Axis::linear("requests"),
        HALF,
    );
    let bars = h
        .bins
        .iter()
        .filter(|b| b.2 > 0)
        .map(|&(x0, x1, c)| (x0, x1, 0.0, c as f64))
        .collect();
    plot.layer(m.label(), Colour::nth(0), Mark::Bars(bars));
    let mut note = format!("{} values in {} bins", num(s.len() as f64), h.bins.len());
    if let Some(cut) = h.cut {
        let edge = num(h.top);
        let why = match cut {
            Cut::P999 => format!("above p99.9 ({edge} ms)"),
            Cut::Far => format!(
                "above {edge} ms, far beyond the body (more than {FAR} interquartile ranges \
                 above the upper quartile)"
            ),
        };
        note.push_str(&format!(
            "; {} {why} {} not drawn here, up to {} ms (the CDF and the table show them)",
            num(h.above as f64),
            if h.above == 1 { "is" } else { "are" },
            num(*s.last().unwrap_or(&0.0))
        ));
    }
    plot.note(format!("{note}."));
    plot.to_html()
}
