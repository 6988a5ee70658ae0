//! The comparison as a self-contained HTML page.

use super::text::{change, side, value_with_interval, verdict, Side};
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
            "<h1>{}</h1>\n<p class=\"lead\">A: {} · B: {}</p>\n",
            esc(&title),
            esc(&side(&self.a)),
            esc(&side(&self.b))
        );
        if let Some(d) = &self.different_requests {
            body.push_str(&format!("<p class=\"warn\">{}</p>\n", esc(&d.note)));
        }
        if let Some(d) = &self.different_slos {
            body.push_str(&format!(
                "<p class=\"warn\">{}</p>\n",
                esc(&super::slos::note(d))
            ));
        }
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                let (class, how) = match &r.verdict {
                    Verdict::Judged { trend, how, .. } => (trend.as_str(), how.clone()),
                    Verdict::NotJudged { why } => ("insufficient", why.clone()),
                    Verdict::NotComparable { why } => ("insufficient", why.clone()),
                    Verdict::Unconfirmed { how, why, .. } => {
                        // Styled as a change, not as a regression or an improvement.
                        ("changed", format!("{how}; unconfirmed: {why}"))
                    }
                };
                vec![
                    esc(&self.metric_shown(r)),
                    esc(&value_with_interval(r, r.a, Side::A)),
                    esc(&value_with_interval(r, r.b, Side::B)),
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
                let said = self.shift_said(s);
                let class = match said.starts_with("unconfirmed") {
                    true => "changed",
                    false => s.trend.as_str(),
                };
                how.push_str(&format!(
                    "<li>{}: <span class=\"{class}\">{}</span>: Mann-Whitney p {:.2e}, median {} \
                     ({}), rank-biserial {:+.2}</li>",
                    esc(metric),
                    esc(&said),
                    s.p_value,
                    super::median_shift_text(s),
                    super::mads_text(s),
                    s.rank_biserial
                ));
            }
        }
        how.push_str("</ul>\n");
        t.push_str(&how);
        t.push_str(&format!(
            "<p class=\"note\">{}</p>\n",
            esc(&self.rule_text())
        ));
        t.push_str(&format!("<p>{}</p>\n", esc(&self.diagnosis.to_text())));
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
                    (pooled_label("A", &self.a), va.as_slice()),
                    (pooled_label("B", &self.b), vb.as_slice()),
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
        if !self.notes.is_empty() {
            let items: String = self
                .notes
                .iter()
                .map(|n| format!("<li>{}</li>", esc(n)))
                .collect();
            body.push_str(&section(
                "notes",
                "Notes on the artifacts",
                &format!("<ul>{items}</ul>"),
            ));
        }
        Ok(page(&title, "compare", &body))
    }
}

/// A CDF's legend: the side's name, and that its runs are pooled when it has several.
fn pooled_label(which: &str, s: &super::Side) -> String {
    if s.runs > 1 {
        format!("{which}: {} ({} runs pooled)", s.name, s.runs)
    } else {
        format!("{which}: {}", s.name)
    }
}
