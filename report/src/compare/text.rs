//! The comparison as a terminal table.

use super::{Comparison, Row, Verdict};
use crate::sections::num;
use canary_core::compare::Trend;

impl Comparison {
    /// The comparison as aligned text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "A: {} ({}, {} requests)\nB: {} ({}, {} requests)\n\n",
            self.a.name, self.a.dir, self.a.requests, self.b.name, self.b.dir, self.b.requests
        );
        let cells: Vec<[String; 5]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.metric.clone(),
                    value(r, r.a),
                    value(r, r.b),
                    change(r),
                    verdict(&r.verdict),
                ]
            })
            .collect();
        let head = ["metric", "A", "B", "B vs A", "real?"];
        let mut width = head.map(str::len);
        for c in &cells {
            for (w, s) in width.iter_mut().zip(c) {
                *w = (*w).max(s.chars().count());
            }
        }
        let line = |c: [&str; 5]| {
            let pad = |s: &str, w: usize, right: bool| {
                let n = w.saturating_sub(s.chars().count());
                if right {
                    format!("{}{s}", " ".repeat(n))
                } else {
                    format!("{s}{}", " ".repeat(n))
                }
            };
            format!(
                "{}  {}  {}  {}  {}\n",
                pad(c[0], width[0], false),
                pad(c[1], width[1], true),
                pad(c[2], width[2], true),
                pad(c[3], width[3], true),
                c[4]
            )
        };
        out.push_str(&line(head));
        for c in &cells {
            out.push_str(&line([&c[0], &c[1], &c[2], &c[3], &c[4]]));
        }
        out.push('\n');
        for (metric, s) in &self.shifts {
            if let Some(s) = s {
                out.push_str(&format!(
                    "{metric}: {} (Mann-Whitney p {:.2e}, median {:+.1} %, {:+.1} MADs, rank-biserial {:+.2})\n",
                    s.trend.as_str(),
                    s.p_value,
                    s.shift_ratio * 100.0,
                    s.shift_in_mads,
                    s.rank_biserial
                ));
            }
        }
        out.push_str(&format!(
            "\nReal means: Mann-Whitney p < {} on every request's value, and the median shift \
             beyond {} MADs, {} % and {} ms (the daemon's baseline rule; one run per side, so \
             the MAD is its floor). Figures are exact, from each run's records.\n",
            self.rules.alpha,
            self.rules.k_mad,
            self.rules.min_shift * 100.0,
            self.rules.min_shift_ms
        ));
        if !self.context_diff.is_empty() {
            out.push_str("\nRun context that differs:\n");
            for (k, a, b) in &self.context_diff {
                out.push_str(&format!("  {k}: {a} → {b}\n"));
            }
        }
        out
    }
}

/// A row's value with its unit.
pub(super) fn value(r: &Row, v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if r.unit == "fraction" => format!("{:.2} %", v * 100.0),
        Some(v) => format!("{} {}", num(v), r.unit),
    }
}

/// B against A: relative, or in percentage points for fractions.
pub(super) fn change(r: &Row) -> String {
    match (r.unit, r.a, r.b, r.change) {
        ("fraction", Some(a), Some(b), _) => format!("{:+.2} pt", (b - a) * 100.0),
        (_, _, _, Some(c)) => format!("{:+.1} %", c * 100.0),
        _ => "–".into(),
    }
}

/// The verdict in a few words.
pub(super) fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Judged {
            trend,
            p_value,
            why_not,
            ..
        } => match trend {
            Trend::Regressed => format!("yes: worse (p {p_value:.1e})"),
            Trend::Improved => format!("yes: better (p {p_value:.1e})"),
            _ => format!(
                "no: {} (p {})",
                why_not.as_deref().unwrap_or("within noise"),
                super::p_text(*p_value)
            ),
        },
        Verdict::NotJudged { why } => format!("not judged: {why}"),
    }
}
