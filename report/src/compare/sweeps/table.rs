//! The points' table (throughput, TTFT p99 and e2e p99 of both sweeps at each point, a side's
//! figure marked `*` where it is not exact), for a terminal and as a page, with the findings
//! under it.

use super::super::text::{self, verdict_brief};
use super::super::{Row, Verdict};
use super::SweepComparison;
use crate::html::{esc, page, table};
use crate::sections::section;

/// The rows of the points' table: label, then A, B, change and verdict of throughput, TTFT
/// p99 and e2e p99; throughput's verdict only when `judged` (both sides repeated at every
/// point: one run a side gives one figure each, nothing to judge).
fn point_rows(c: &SweepComparison, judged: bool) -> Vec<Vec<String>> {
    c.points
        .iter()
        .map(|p| {
            let mut cells = vec![p.label.clone()];
            for metric in ["throughput", "TTFT p99", "e2e p99"] {
                let verdict_shown = metric != "throughput" || judged;
                let Some(r) = p.comparison.rows.iter().find(|r| r.metric == metric) else {
                    cells.extend(["–".into(), "–".into(), "–".into()]);
                    if verdict_shown {
                        cells.push("–".into());
                    }
                    continue;
                };
                cells.push(marked(text::value(r, r.a), &p.a_bounds, metric));
                cells.push(marked(text::value(r, r.b), &p.b_bounds, metric));
                cells.push(text::change(r));
                if verdict_shown {
                    cells.push(if too_few_for_its_tail(r) {
                        "too few to judge".into()
                    } else {
                        verdict_brief(&r.verdict)
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

/// The table's head: a `real?` after req/s when its verdicts are shown (`judged`).
fn head(judged: bool) -> Vec<&'static str> {
    let mut head = vec!["point", "req/s A", "req/s B", "B vs A"];
    if judged {
        head.push("real?");
    }
    head.extend([
        "TTFT p99 A",
        "TTFT p99 B",
        "B vs A",
        "real?",
        "e2e p99 A",
        "e2e p99 B",
        "B vs A",
        "real?",
    ]);
    head
}

/// A percentile row left unjudged because a side had too few requests beyond it.
pub(super) fn too_few_for_its_tail(r: &Row) -> bool {
    matches!(&r.verdict, Verdict::NotJudged { why } if why.starts_with("too few requests"))
}

impl SweepComparison {
    /// Whether the table judges throughput: every point repeated (`--runs N`) on both sides,
    /// so each has a figure per run to test (`--json` has the verdict either way).
    fn throughput_judged(&self) -> bool {
        !self.points.is_empty() && self.points.iter().all(|p| p.comparison.repeated())
    }

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
        let judged = self.throughput_judged();
        let (head, rows) = (head(judged), point_rows(self, judged));
        let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
        for r in &rows {
            for (w, s) in width.iter_mut().zip(r) {
                *w = (*w).max(s.chars().count());
            }
        }
        let line = |cells: &[&str]| {
            let mut l = String::new();
            for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
                let pad = " ".repeat(w.saturating_sub(c.chars().count()));
                // Labels and verdicts left, figures right.
                if i == 0 || head[i] == "real?" {
                    l.push_str(&format!("{c}{pad}  "));
                } else {
                    l.push_str(&format!("{pad}{c}  "));
                }
            }
            l.trim_end().to_string() + "\n"
        };
        out.push_str(&line(&head));
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
        let judged = self.throughput_judged();
        let rows: Vec<Vec<String>> = point_rows(self, judged)
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
        let mut t = table("compare", &head(judged), &rows);
        for f in self.findings() {
            t.push_str(&format!("<p class=\"note\">{}</p>\n", esc(&f)));
        }
        body.push_str(&section("compare", "B against A, point by point", &t));
        page(&title, "compare", &body)
    }
}
