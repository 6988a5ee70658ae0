//! The comparison as a self-contained HTML page.

use super::text::{change, value, verdict};
use super::{Comparison, Verdict};
use crate::html::{esc, page, table};
use crate::sections::{latency, section};
use crate::ReportError;

impl Comparison {
    /// The comparison as one HTML page: the table, the CDFs of both runs, and the context
    /// that differs.
    pub fn to_html(&self) -> Result<String, ReportError> {
        let title = format!("canaryd compare: {} → {}", self.a.name, self.b.name);
        let mut body = format!(
            "<h1>{}</h1>\n<p class=\"lead\">A: {} ({}, {} requests) · B: {} ({}, {} requests)</p>\n",
            esc(&title),
            esc(&self.a.name),
            esc(&self.a.dir),
            self.a.requests,
            esc(&self.b.name),
            esc(&self.b.dir),
            self.b.requests
        );
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                let (class, how) = match &r.verdict {
                    Verdict::Judged { trend, how, .. } => (trend.as_str(), how.clone()),
                    Verdict::NotJudged { why } => ("insufficient", why.clone()),
                };
                vec![
                    esc(&r.metric),
                    esc(&value(r, r.a)),
                    esc(&value(r, r.b)),
                    esc(&change(r)),
                    format!(
                        "<span class=\"{class}\" title=\"{}\">{}</span>",
                        crate::html::attr(&how),
                        esc(&verdict(&r.verdict))
                    ),
                ]
            })
            .collect();
        let mut t = table("compare", &["metric", "A", "B", "B vs A", "real?"], &rows);
        let mut how = String::from("<ul>");
        for (metric, s) in &self.shifts {
            if let Some(s) = s {
                how.push_str(&format!(
                    "<li>{}: <span class=\"{}\">{}</span>: Mann-Whitney p {:.2e}, median {:+.1} % \
                     ({:+.1} MADs), rank-biserial {:+.2}</li>",
                    esc(metric),
                    s.trend.as_str(),
                    s.trend.as_str(),
                    s.p_value,
                    s.shift_ratio * 100.0,
                    s.shift_in_mads,
                    s.rank_biserial
                ));
            }
        }
        how.push_str("</ul>\n");
        t.push_str(&how);
        t.push_str(&format!(
            "<p class=\"note\">Real means the daemon's baseline rule: Mann-Whitney p &lt; {} on \
             every request's value, and the median shift beyond {} MADs of run medians, {} % and \
             {} ms. With one run per side the MAD is its floor. Rates are judged by the rank \
             test on each request's outcome; throughputs need repeated runs. Figures are exact, \
             from each run's records.</p>\n",
            self.rules.alpha,
            self.rules.k_mad,
            self.rules.min_shift * 100.0,
            self.rules.min_shift_ms
        ));
        body.push_str(&section("compare", "B against A", &t));
        let mut charts = String::from("<div class=\"grid\">\n");
        for (m, va, vb) in &self.values {
            if va.is_empty() && vb.is_empty() {
                continue;
            }
            charts.push_str(&latency::cdf(
                &format!("cmp-{}-cdf", m.id()),
                *m,
                &[
                    (format!("A: {}", self.a.name), va.as_slice()),
                    (format!("B: {}", self.b.name), vb.as_slice()),
                ],
            )?);
        }
        charts.push_str("</div>\n");
        body.push_str(&section("cdfs", "Distributions", &charts));
        if !self.context_diff.is_empty() {
            let rows: Vec<Vec<String>> = self
                .context_diff
                .iter()
                .map(|(k, a, b)| vec![esc(k), esc(a), esc(b)])
                .collect();
            body.push_str(&section(
                "context",
                "Run context that differs",
                &table("kv", &["field", "A", "B"], &rows),
            ));
        }
        Ok(page(&title, "compare", &body))
    }
}
