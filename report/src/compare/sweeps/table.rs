//! The points' table (throughput, TTFT p99 and e2e p99 of both sweeps at each point, a side's
//! figure marked `*` where it is not exact), for a terminal and as a page, with the findings
//! under it.

use super::super::text::{self, verdict};
use super::super::{Row, Verdict};
use super::SweepComparison;
use crate::html::{esc, page, table};
use crate::sections::section;

/// The rows of the points' table: label, then A, B, change and verdict of throughput, TTFT
/// p99 and e2e p99.
fn point_rows(c: &SweepComparison) -> Vec<Vec<String>> {
    c.points
        .iter()
        .map(|p| {
            let mut cells = vec![p.label.clone()];
            for metric in ["throughput", "TTFT p99", "e2e p99"] {
                let Some(r) = p.comparison.rows.iter().find(|r| r.metric == metric) else {
                    cells.extend(["–".into(), "–".into(), "–".into()]);
                    continue;
                };
                cells.push(marked(text::value(r, r.a), &p.a_bounds, metric));
                cells.push(marked(text::value(r, r.b), &p.b_bounds, metric));
                cells.push(text::change(r));
                if metric != "throughput" {
                    cells.push(if too_few_for_its_tail(r) {
                        "too few to judge".into()
                    } else {
                        verdict(&r.verdict)
                    });
                }
            }
            cells
        })
        .collect()
}

/// `cell` with `*` after it when its side's `metric` at the point is not exact (its
/// `bounds`), as `canaryd sweep`'s table marks it; the note under the table says what `*` is.
fn marked(cell: String, bounds: &[&str], metric: &str) -> String {
    match super::super::bounds::name_of(metric).is_some_and(|m| bounds.contains(&m)) && cell != "–"
    {
        true => format!("{cell}*"),
        false => cell,
    }
}

const HEAD: [&str; 12] = [
    "point",
    "req/s A",
    "req/s B",
    "B vs A",
    "TTFT p99 A",
    "TTFT p99 B",
    "B vs A",
    "real?",
    "e2e p99 A",
    "e2e p99 B",
    "B vs A",
    "real?",
];

/// A percentile row left unjudged because a side had too few requests beyond it.
pub(super) fn too_few_for_its_tail(r: &Row) -> bool {
    matches!(&r.verdict, Verdict::NotJudged { why } if why.starts_with("too few requests"))
}

impl SweepComparison {
    /// The comparison as aligned text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "A: {} ({}, {} points)\nB: {} ({}, {} points)\nsweep over {}\n\n",
            self.a.name,
            self.a.dir,
            self.a.points,
            self.b.name,
            self.b.dir,
            self.b.points,
            self.axis
        );
        for w in self.request_warnings() {
            out.push_str(&format!("{w}\n\n"));
        }
        let rows = point_rows(self);
        let mut width = HEAD.map(str::len);
        for r in &rows {
            for (w, s) in width.iter_mut().zip(r) {
                *w = (*w).max(s.chars().count());
            }
        }
        let line = |cells: &[&str]| {
            let mut l = String::new();
            for (i, (c, w)) in cells.iter().zip(width).enumerate() {
                let pad = " ".repeat(w.saturating_sub(c.chars().count()));
                // Labels and verdicts left, figures right.
                if i == 0 || i == 7 || i == 11 {
                    l.push_str(&format!("{c}{pad}  "));
                } else {
                    l.push_str(&format!("{pad}{c}  "));
                }
            }
            l.trim_end().to_string() + "\n"
        };
        out.push_str(&line(&HEAD));
        for r in &rows {
            out.push_str(&line(&r.iter().map(String::as_str).collect::<Vec<_>>()));
        }
        out.push('\n');
        for f in self.findings() {
            out.push_str(&f);
            out.push('\n');
        }
        out
    }

    /// The comparison as one HTML page.
    pub fn to_html(&self) -> String {
        let title = format!("canaryd compare: sweep {} → {}", self.a.name, self.b.name);
        let rows: Vec<Vec<String>> = point_rows(self)
            .into_iter()
            .map(|r| r.iter().map(|c| esc(c)).collect())
            .collect();
        let mut body = format!(
            "<h1>{}</h1>\n<p class=\"lead\">A: {} ({} points) · B: {} ({} points) · over {}</p>\n",
            esc(&title),
            esc(&self.a.dir),
            self.a.points,
            esc(&self.b.dir),
            self.b.points,
            esc(&self.axis)
        );
        for w in self.request_warnings() {
            body.push_str(&format!("<p class=\"warn\">{}</p>\n", esc(&w)));
        }
        let mut t = table("compare", &HEAD, &rows);
        for f in self.findings() {
            t.push_str(&format!("<p class=\"note\">{}</p>\n", esc(&f)));
        }
        body.push_str(&section("compare", "B against A, point by point", &t));
        page(&title, "compare", &body)
    }
}
