//! `canaryd compare A B` of two sweeps (`canaryd sweep` folders, issue 18: did the change move
//! the knee, the capacity at the SLO, the latency at each load?).
//!
//! Points are matched by their axis value (`c8` with `c8`); each pair is compared as two runs
//! are ([`super::compare`], one run a side: the baseline rule on every request's TTFT and e2e),
//! or, when both sweeps ran each point `--runs N` times, as two experiments are (Welch's test
//! on the runs' figures).
//! The knee is a point of each sweep's grid, found once per sweep, so its move is reported, not
//! judged against noise. A capacity search's answer is a bracket (at least the highest passing
//! rate, below the lowest failing one): two brackets that do not overlap tell the capacities
//! apart, as bounds; overlapping ones do not at that precision.

use super::first_token::SideTimes;
use super::{text::verdict, Comparison};
use crate::error::{io, ReportError};
use crate::html::{esc, page, table};
use crate::sections::{num, section};
use crate::Experiment;
use canary_core::compare::ShiftRules;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A sweep's folder, loaded: its `sweep.json` and each point's run.
#[derive(Debug)]
pub struct Sweep {
    /// The folder.
    pub dir: PathBuf,
    /// Its name.
    pub name: String,
    /// What varies (`concurrency`, `request_rate`, `speedup`).
    pub axis: String,
    /// Each point: its label, axis value and run, in order of increasing load.
    pub points: Vec<(String, f64, Experiment)>,
    /// What `sweep.json` says of each point beyond its figures, by label.
    pub said: Vec<(String, PointSaid)>,
    /// The knee, when the sweep found one.
    pub knee: Option<KneeAt>,
    /// The capacity search's bracket (`--find-max-rate`).
    pub capacity: Option<Bracket>,
}

/// What a sweep's `sweep.json` says of a point beyond its figures: that the open-file limit
/// held it under its load, that it errored, and its notes (why the sweep left it out of the
/// knee and the Pareto front). A comparison of the point is over figures these qualify.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PointSaid {
    /// Held under its nominal load by the open-file limit (`capped`).
    pub capped: bool,
    /// Its verdict, when an error (`error: …`, or a run's `point-03/run-2: error: …` with
    /// `--runs N`: nothing completed, canaryd the bottleneck, a signal); not a failed gate
    /// (`fail: error rate …`).
    pub error: Option<String>,
    /// Its notes.
    pub notes: Vec<String>,
}

impl PointSaid {
    fn of(p: &Value) -> PointSaid {
        PointSaid {
            capped: p.get("capped").and_then(Value::as_bool) == Some(true),
            error: p
                .get("verdict")
                .and_then(Value::as_str)
                .filter(|v| crate::artifacts::verdict_error(v).is_some())
                .map(String::from),
            notes: p
                .get("notes")
                .and_then(Value::as_array)
                .map(|n| {
                    n.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    fn is_empty(&self) -> bool {
        *self == PointSaid::default()
    }

    /// `c16, B [capped]: its notes` (`None` when there is nothing to say).
    fn line(&self, label: &str, side: &str) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut tags = Vec::new();
        if self.capped {
            tags.push("capped");
        }
        if self.error.is_some() {
            tags.push("errored");
        }
        let tags = if tags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", tags.join(", "))
        };
        let said: Vec<&str> = self
            .error
            .iter()
            .chain(&self.notes)
            .map(String::as_str)
            .collect();
        Some(if said.is_empty() {
            format!("{label}, {side}{tags}")
        } else {
            format!("{label}, {side}{tags}: {}", said.join("; "))
        })
    }
}

/// Where a sweep's knee is.
#[derive(Debug, Clone, Serialize)]
pub struct KneeAt {
    /// The point's label (`c8`).
    pub label: String,
    /// Its axis value.
    pub value: f64,
    /// Its completed requests per second.
    pub request_throughput: Option<f64>,
}

/// A capacity search's answer: at least `passed`, below `failed` (bounds).
#[derive(Debug, Clone, Serialize)]
pub struct Bracket {
    /// The highest rate that passed.
    pub passed: Option<f64>,
    /// The lowest rate above it that failed.
    pub failed: Option<f64>,
    /// The SLOs it was searched under (aiperf's syntax), as its `sweep.json` says.
    pub slo: Option<String>,
    /// The share of requests that had to meet them.
    pub min_good_fraction: Option<f64>,
}

impl Sweep {
    /// Loads `path` when it holds a `sweep.json`; `None` when it does not.
    pub fn load(path: &Path) -> Result<Option<Sweep>, ReportError> {
        let file = path.join("sweep.json");
        let text = match crate::artifacts::read_json_file(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&file)(e)),
        };
        let bad = |what: String| ReportError::Summary {
            path: file.clone(),
            what,
        };
        let doc: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let text_at = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(String::from);
        let axis = text_at(&doc, "axis").ok_or_else(|| bad("field \"axis\": missing".into()))?;
        let listed = doc
            .get("points")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("field \"points\": missing".into()))?;
        let mut points = Vec::new();
        let mut said = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // One side's records, over all its points.
        let budget = &mut crate::artifacts::records::RecordBudget::default();
        for (i, p) in listed.iter().enumerate() {
            let field = |key: &str| bad(format!("points[{i}].{key}: missing or of the wrong type"));
            let label = text_at(p, "label").ok_or_else(|| field("label"))?;
            let value = p
                .get("value")
                .and_then(Value::as_f64)
                .ok_or_else(|| field("value"))?;
            // A plain folder name beside sweep.json, never the sweep's own folder or above.
            let dir = text_at(p, "dir")
                .filter(|d| !d.is_empty() && !d.contains(['/', '\\']) && d != ".." && d != ".")
                .ok_or_else(|| field("dir"))?;
            // Once each: a folder listed twice would load twice and count twice.
            if !seen.insert(dir.clone()) {
                return Err(bad(format!("points[{i}].dir: {dir:?} is listed twice")));
            }
            // A point's folder is its run's, or with `canaryd sweep --runs N` its experiment's.
            points.push((
                label.clone(),
                value,
                Experiment::load_point(&path.join(dir), budget)?,
            ));
            said.push((label, PointSaid::of(p)));
        }
        points.sort_by(|a, b| a.1.total_cmp(&b.1));
        let knee = match doc.get("knee").filter(|k| !k.is_null()) {
            None => None,
            Some(k) => Some(KneeAt {
                label: text_at(k, "label").unwrap_or_default(),
                value: k
                    .get("value")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| bad("knee.value: missing or not a number".into()))?,
                request_throughput: k.get("request_throughput").and_then(Value::as_f64),
            }),
        };
        let capacity = doc
            .get("capacity")
            .filter(|c| !c.is_null())
            .map(|c| Bracket {
                passed: c.get("max_passing_rate").and_then(Value::as_f64),
                failed: c.get("min_failing_rate").and_then(Value::as_f64),
                slo: c.get("slo").and_then(Value::as_str).map(str::to_owned),
                min_good_fraction: c.get("min_good_fraction").and_then(Value::as_f64),
            });
        let name = crate::artifacts::folder_name(path);
        Ok(Some(Sweep {
            dir: path.to_path_buf(),
            name,
            axis,
            points,
            said,
            knee,
            capacity,
        }))
    }
}

/// Two sweeps compared.
#[derive(Debug, Serialize)]
pub struct SweepComparison {
    /// Sweep A (the reference): name, folder, points.
    pub a: SweepSide,
    /// Sweep B.
    pub b: SweepSide,
    /// What varies in both.
    pub axis: String,
    /// Each axis value both sweeps ran, in order of increasing load: B's point against A's.
    pub points: Vec<PointComparison>,
    /// Axis values only one sweep ran (`A` or `B`, label).
    pub unmatched: Vec<(String, String)>,
    /// The knees, and how B's moved.
    pub knee: KneeComparison,
    /// The capacity brackets, when both sweeps searched for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityComparison>,
}

/// One side of a sweep comparison.
#[derive(Debug, Serialize)]
pub struct SweepSide {
    /// The folder's name.
    pub name: String,
    /// The folder.
    pub dir: String,
    /// Its points.
    pub points: usize,
}

/// One axis value of both sweeps.
#[derive(Debug, Serialize)]
pub struct PointComparison {
    /// Its label (`c8`, `r100`).
    pub label: String,
    /// Its axis value.
    pub value: f64,
    /// The two points' runs compared, as `canaryd compare` compares two runs.
    pub comparison: Comparison,
    /// What A's `sweep.json` says of its point (capped, errored, its notes).
    pub a_said: PointSaid,
    /// B's.
    pub b_said: PointSaid,
}

/// The two knees.
#[derive(Debug, Serialize)]
pub struct KneeComparison {
    /// A's knee.
    pub a: Option<KneeAt>,
    /// B's knee.
    pub b: Option<KneeAt>,
    /// `earlier` (B's knee at a lower load), `later`, `same_point`, or `unknown` (a sweep
    /// without a knee).
    pub moved: &'static str,
}

/// The two capacity brackets.
#[derive(Debug, Serialize)]
pub struct CapacityComparison {
    /// A's bracket.
    pub a: Bracket,
    /// B's bracket.
    pub b: Bracket,
    /// `higher` (B's passing rate at or above A's failing one), `lower`, `not_told_apart`
    /// (the brackets overlap, or a bound is missing), or `not_comparable` (searched under
    /// different SLOs or good fractions).
    pub verdict: &'static str,
}

/// Compares sweep `b` against sweep `a`; refused when they vary different things.
pub fn compare_sweeps(
    a: &Sweep,
    b: &Sweep,
    rules: &ShiftRules,
) -> Result<SweepComparison, ReportError> {
    if a.axis != b.axis {
        return Err(ReportError::NotComparable {
            path: b.dir.clone(),
            why: format!(
                "its sweep varies {}, {}'s varies {}: compare sweeps over one axis",
                b.axis,
                a.dir.display(),
                a.axis
            ),
        });
    }
    let mut points = Vec::new();
    let mut unmatched = Vec::new();
    let said = |s: &Sweep, label: &str| {
        s.said
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, said)| said.clone())
            .unwrap_or_default()
    };
    for (label, value, run) in &a.points {
        match b.points.iter().find(|p| p.1 == *value) {
            Some((b_label, _, other)) => points.push(PointComparison {
                label: label.clone(),
                value: *value,
                comparison: super::compare(run, other, rules),
                a_said: said(a, label),
                b_said: said(b, b_label),
            }),
            None => unmatched.push(("A".to_string(), label.clone())),
        }
    }
    for (label, value, _) in &b.points {
        if !a.points.iter().any(|p| p.1 == *value) {
            unmatched.push(("B".to_string(), label.clone()));
        }
    }
    let moved = match (&a.knee, &b.knee) {
        (Some(x), Some(y)) if y.value < x.value => "earlier",
        (Some(x), Some(y)) if y.value > x.value => "later",
        (Some(_), Some(_)) => "same_point",
        _ => "unknown",
    };
    let capacity = match (a.capacity.clone(), b.capacity.clone()) {
        (Some(x), Some(y)) => Some(CapacityComparison {
            verdict: match (&x, &y) {
                // A capacity is at an SLO: two searched under different ones measure
                // different things.
                _ if (&x.slo, x.min_good_fraction) != (&y.slo, y.min_good_fraction) => {
                    "not_comparable"
                }
                (
                    Bracket {
                        failed: Some(f), ..
                    },
                    Bracket {
                        passed: Some(p), ..
                    },
                ) if p >= f => "higher",
                (
                    Bracket {
                        passed: Some(p), ..
                    },
                    Bracket {
                        failed: Some(f), ..
                    },
                ) if f <= p => "lower",
                _ => "not_told_apart",
            },
            a: x,
            b: y,
        }),
        _ => None,
    };
    let side = |s: &Sweep| SweepSide {
        name: s.name.clone(),
        dir: s.dir.display().to_string(),
        points: s.points.len(),
    };
    Ok(SweepComparison {
        a: side(a),
        b: side(b),
        axis: a.axis.clone(),
        points,
        unmatched,
        knee: KneeComparison {
            a: a.knee.clone(),
            b: b.knee.clone(),
            moved,
        },
        capacity,
    })
}

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
                cells.push(super::text::value(r, r.a));
                cells.push(super::text::value(r, r.b));
                cells.push(super::text::change(r));
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
fn too_few_for_its_tail(r: &super::Row) -> bool {
    matches!(&r.verdict, super::Verdict::NotJudged { why } if why.starts_with("too few requests"))
}

impl SweepComparison {
    /// Each point's own word: what each sweep.json says of it (capped, errored, its notes),
    /// then its comparison's notes (the sides completed different shares, …). The points'
    /// figures are over what these say, so they are printed, not only in `--json`. A note
    /// every point has is told once.
    fn point_notes(&self) -> Vec<String> {
        let notes = |p: &PointComparison| p.comparison.notes.clone();
        let common = self.on_every_point(notes);
        let mut out: Vec<String> = common.iter().map(|n| format!("every point: {n}")).collect();
        for p in &self.points {
            out.extend(p.a_said.line(&p.label, "A"));
            out.extend(p.b_said.line(&p.label, "B"));
            for n in notes(p).iter().filter(|n| !common.contains(n)) {
                out.push(format!("{}: {n}", p.label));
            }
        }
        out
    }

    /// The points whose sides did not send the same requests (another trace, window, load or
    /// seed), said above the table: once when every point says the same.
    fn request_warnings(&self) -> Vec<String> {
        let said = |p: &PointComparison| -> Vec<String> {
            p.comparison
                .different_requests
                .iter()
                .map(|d| d.note.clone())
                .collect()
        };
        let common = self.on_every_point(said);
        let mut out: Vec<String> = common.iter().map(|n| format!("every point: {n}")).collect();
        for p in &self.points {
            for n in said(p).iter().filter(|n| !common.contains(n)) {
                out.push(format!("{}: {n}", p.label));
            }
        }
        out
    }

    /// The lines `of` gives every point (of two or more).
    fn on_every_point(&self, of: impl Fn(&PointComparison) -> Vec<String>) -> Vec<String> {
        let Some(first) = self.points.first().filter(|_| self.points.len() > 1) else {
            return Vec::new();
        };
        of(first)
            .into_iter()
            .filter(|n| self.points.iter().all(|p| of(p).contains(n)))
            .collect()
    }

    /// The lines under the table: the knees, the capacity, what was not matched, the rule.
    fn findings(&self) -> Vec<String> {
        let knee = |k: &Option<KneeAt>| match k {
            Some(k) => format!(
                "{} ({} req/s)",
                k.label,
                k.request_throughput.map_or("–".into(), num)
            ),
            None => "none (the series did not saturate)".into(),
        };
        let mut out = vec![format!(
            "knee: A {}, B {}: {}",
            knee(&self.knee.a),
            knee(&self.knee.b),
            match self.knee.moved {
                "earlier" => "B saturates at a lower load",
                "later" => "B saturates at a higher load",
                "same_point" => "the same point",
                _ => "not compared",
            }
        )];
        let repeated =
            !self.points.is_empty() && self.points.iter().all(|p| p.comparison.repeated());
        out.push(if repeated {
            "(each sweep's knee is one point of its grid, found on its points' means: its move is \
             reported, not judged; the points' own figures are judged run against run above)"
                .into()
        } else {
            "(each sweep ran once: a knee is a point of its grid, so its move is reported, not \
             judged against run-to-run noise; repeat the sweeps, or let the daemon's sweep canary \
             judge it against its baseline)"
                .into()
        });
        if let Some(c) = &self.capacity {
            let bracket = |b: &Bracket| {
                format!(
                    "at least {}, below {}",
                    b.passed.map_or("–".into(), num),
                    b.failed.map_or("–".into(), num)
                )
            };
            out.push(format!(
                "capacity at SLO: A {} req/s, B {} req/s: {}",
                bracket(&c.a),
                bracket(&c.b),
                match c.verdict {
                    "higher" => "B higher (the brackets do not overlap: bounds)".to_string(),
                    "lower" => "B lower (the brackets do not overlap: bounds)".to_string(),
                    "not_comparable" => {
                        let at = |b: &Bracket| {
                            format!(
                                "{} for {}",
                                b.slo.as_deref().unwrap_or("–"),
                                b.min_good_fraction.map_or("–".into(), |f| {
                                    format!("{} %", (f * 100.0 * 1e6).round() / 1e6)
                                })
                            )
                        };
                        format!(
                            "not comparable: searched under other SLOs (A {}, B {})",
                            at(&c.a),
                            at(&c.b)
                        )
                    }
                    _ => "not told apart (the brackets overlap, or a bound is missing)".to_string(),
                }
            ));
        }
        out.extend(self.point_notes());
        for (side, label) in &self.unmatched {
            out.push(format!("{label}: only in {side}'s sweep, not compared"));
        }
        let too_few = self
            .points
            .iter()
            .filter(|p| {
                p.comparison
                    .rows
                    .iter()
                    .any(|r| r.metric.ends_with(" p99") && too_few_for_its_tail(r))
            })
            .count();
        if too_few > 0 {
            out.push(format!(
                "too few to judge: {too_few} of {} points had too few requests to judge a p99 on \
                 its own tail (about 500 a side; a longer --benchmark-duration gives more); \
                 their p50 and p90 rows are in --json",
                self.points.len()
            ));
        }
        // Over every point: how many first tokens of each sweep are bounds.
        let sum = |of: &dyn Fn(&Comparison) -> SideTimes| {
            self.points
                .iter()
                .fold(SideTimes::default(), |t, p| t.plus(of(&p.comparison)))
        };
        let exact = super::first_token::exactness(
            &sum(&|c| c.a.times),
            &sum(&|c| c.b.times),
            "Figures are exact, from the points' records",
        );
        match self.points.first() {
            Some(p) if repeated => out.push(format!(
                "Each point: its two experiments (--runs) compared. {} {exact}",
                p.comparison.rule()
            )),
            _ => out.push(format!(
                "Each point: its two runs compared request by request: a p99 on its own tail \
                 (Mood's quantile test, p < 0.001, and a move beyond 5 % and 1 ms), a p50 by \
                 the daemon's baseline rule (Mann-Whitney p < 0.001 and a median shift beyond \
                 5 % and 1 ms). {exact}"
            )),
        }
        out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(axis: &str, passed: Option<f64>, failed: Option<f64>) -> Sweep {
        Sweep {
            dir: PathBuf::from(axis),
            name: axis.into(),
            axis: axis.into(),
            points: Vec::new(),
            said: Vec::new(),
            knee: None,
            capacity: Some(Bracket {
                passed,
                failed,
                slo: Some("time_to_first_token:400".into()),
                min_good_fraction: Some(0.95),
            }),
        }
    }

    /// A sweep at `at` over concurrency 1 and 16: each point's run with `ok` of its 10
    /// requests completed, its `run` block with `seed`, and `point16` as sweep.json's c16.
    fn sweep_dir(at: &Path, ok: usize, seed: u64, point16: Value) {
        for (dir, users) in [("point-01-c1", 1), ("point-02-c16", 16)] {
            let d = at.join(dir);
            std::fs::create_dir_all(&d).unwrap();
            let lines: String = (0..10)
                .map(|i| {
                    let status = if users == 1 || i < ok {
                        "ok"
                    } else {
                        "timeout"
                    };
                    format!(
                        "{{\"sent_at_ms\":{i},\"ended_at_ms\":{},\"status\":\"{status}\",\
                         \"ttft_ms\":5,\"e2e_ms\":9}}\n",
                        i + 9
                    )
                })
                .collect();
            std::fs::write(d.join("records.jsonl"), lines).unwrap();
            let run = serde_json::json!({"run": {"load": {"shape": "closed_loop",
                "users": users, "random_seed": seed}, "speedup": 1.0, "prompt_seed": 0}});
            std::fs::write(d.join("summary.json"), run.to_string()).unwrap();
        }
        let mut c16 = serde_json::json!({"label": "c16", "value": 16, "dir": "point-02-c16",
            "verdict": "pass"});
        c16.as_object_mut()
            .unwrap()
            .extend(point16.as_object().unwrap().clone());
        let doc = serde_json::json!({"axis": "concurrency", "points": [
            {"label": "c1", "value": 1, "dir": "point-01-c1", "verdict": "pass"}, c16]});
        std::fs::write(at.join("sweep.json"), doc.to_string()).unwrap();
    }

    // The audit's SW1 against SW2: at c16 A completed 90 %, B was capped at 15 in flight; the
    // table showed +11.1 % req/s and the notes were only in --json.
    #[test]
    fn each_points_flags_and_notes_are_printed_and_other_requests_said_above_the_table() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let capped = "capped by the open-file limit at 15 requests in flight, below its 16 users";
        sweep_dir(
            &a,
            9,
            0,
            serde_json::json!({"notes": ["10.0% of its requests failed"]}),
        );
        sweep_dir(
            &b,
            10,
            1,
            serde_json::json!({"capped": true, "notes": [capped]}),
        );
        let load = |p: &Path| Sweep::load(p).unwrap().unwrap();
        let c = compare_sweeps(&load(&a), &load(&b), &ShiftRules::default()).unwrap();
        let text = c.to_text();
        assert!(
            text.contains("c16, A: 10.0% of its requests failed\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("c16, B [capped]: {capped}\n")),
            "{text}"
        );
        assert!(
            text.contains("c16: the latency rows are over completed requests only"),
            "{text}"
        );
        assert!(!text.contains("c1, A"), "{text}");
        // Another seed at every point: said once, above the table.
        let warn = "every point: not the same requests: the sides differ in their seed \
                    (load.random_seed 0 → 1)";
        let (at, table) = (text.find(warn), text.find("point "));
        assert!(at.is_some() && at < table, "{text}");
        let page = c.to_html();
        assert!(
            page.contains(&format!("<p class=\"warn\">{warn}")),
            "{page}"
        );
        assert!(page.contains("c16, B [capped]: capped by"), "{page}");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["points"][1]["b_said"]["capped"], true, "{json:#}");
    }

    #[test]
    fn a_knee_without_a_value_or_a_point_in_the_sweeps_own_folder_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |doc: &str| {
            std::fs::write(dir.path().join("sweep.json"), doc).unwrap();
            Sweep::load(dir.path()).unwrap_err().to_string()
        };
        let e = refused(r#"{"axis":"concurrency","points":[],"knee":{"label":"c8"}}"#);
        assert!(
            e.ends_with("sweep.json: knee.value: missing or not a number"),
            "{e}"
        );
        let e = refused(r#"{"axis":"concurrency","points":[],"knee":{"label":"c8","value":"8"}}"#);
        assert!(e.ends_with("knee.value: missing or not a number"), "{e}");
        let e = refused(r#"{"axis":"concurrency","points":[{"label":"c1","value":1,"dir":"."}]}"#);
        assert!(
            e.ends_with("points[0].dir: missing or of the wrong type"),
            "{e}"
        );
        // A point's folder listed twice would load (and count) twice.
        std::fs::create_dir_all(dir.path().join("p1")).unwrap();
        std::fs::write(dir.path().join("p1/records.jsonl"), "").unwrap();
        let e = refused(
            r#"{"axis":"concurrency","points":[{"label":"c1","value":1,"dir":"p1"},
                {"label":"c2","value":2,"dir":"p1"}]}"#,
        );
        assert!(e.ends_with("points[1].dir: \"p1\" is listed twice"), "{e}");
        // No knee at all is a sweep without one, not an error.
        std::fs::write(
            dir.path().join("sweep.json"),
            r#"{"axis":"concurrency","points":[],"knee":null}"#,
        )
        .unwrap();
        assert!(Sweep::load(dir.path()).unwrap().unwrap().knee.is_none());
    }

    // A capacity is at least its passing rate and below its failing one: two brackets tell
    // the capacities apart only when they do not overlap.
    #[test]
    fn capacity_brackets_are_told_apart_only_when_they_do_not_overlap() {
        let verdict = |a: Sweep, b: Sweep| {
            compare_sweeps(&a, &b, &ShiftRules::default())
                .unwrap()
                .capacity
                .unwrap()
                .verdict
        };
        let r = |p, f| sweep("request_rate", p, f);
        assert_eq!(
            verdict(r(Some(100.0), Some(110.0)), r(Some(110.0), Some(120.0))),
            "higher"
        );
        assert_eq!(
            verdict(r(Some(100.0), Some(110.0)), r(Some(50.0), Some(100.0))),
            "lower"
        );
        assert_eq!(
            verdict(r(Some(100.0), Some(110.0)), r(Some(105.0), Some(115.0))),
            "not_told_apart"
        );
        // Capacities at other SLOs, or other good fractions, are not compared.
        let at = |slo: &str, fraction: f64| {
            let mut s = r(Some(200.0), Some(210.0));
            let c = s.capacity.as_mut().unwrap();
            (c.slo, c.min_good_fraction) = (Some(slo.into()), Some(fraction));
            s
        };
        let low = || r(Some(100.0), Some(110.0));
        assert_eq!(
            verdict(low(), at("time_to_first_token:800", 0.95)),
            "not_comparable"
        );
        assert_eq!(
            verdict(low(), at("time_to_first_token:400", 0.9)),
            "not_comparable"
        );
        assert_eq!(
            verdict(low(), at("time_to_first_token:400", 0.95)),
            "higher"
        );
        // A search that never failed has no upper bound: nothing is known to lie above it.
        assert_eq!(
            verdict(r(Some(100.0), None), r(Some(120.0), None)),
            "not_told_apart"
        );
        assert_eq!(
            verdict(r(Some(100.0), None), r(Some(90.0), Some(95.0))),
            "lower"
        );
        assert_eq!(verdict(r(None, Some(50.0)), r(Some(50.0), None)), "higher");
        let e = compare_sweeps(
            &sweep("concurrency", None, None),
            &r(None, None),
            &ShiftRules::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("varies request_rate"), "{e}");
    }
}

#[cfg(test)]
mod said {
    use super::PointSaid;

    // A run's error with `--runs N` (`point-03/run-2: error: …`) went untagged; a failed gate
    // is no error.
    #[test]
    fn an_error_verdict_is_tagged_after_a_runs_folder_and_a_failed_gate_is_not() {
        let of = |v: &str| PointSaid::of(&serde_json::json!({"verdict": v})).error;
        let run = "point-03/run-2: error: nothing completed";
        assert_eq!(of(run).as_deref(), Some(run));
        assert_eq!(
            of("error: interrupted").as_deref(),
            Some("error: interrupted")
        );
        assert_eq!(of("fail: error rate 0.020 above max_error_rate 0.01"), None);
        assert_eq!(
            of("point-03/run-2: fail: error rate 0.020 above max_error_rate 0.01"),
            None
        );
    }
}
