//! The lines said with the points' table: the request warnings above it, and under it the
//! knees, the capacity, each point's own word and notes, what was not matched, too few to
//! judge, what the table's `*` means, and the rule with how exact the figures are.

use super::super::first_token::{self, SideTimes};
use super::table::too_few_for_its_tail;
use super::{knee, Bracket, KneeAt, LeftOutOfKnee, PointComparison, SweepComparison};
use crate::compare::Comparison;
use crate::sections::num;

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
    pub(super) fn request_warnings(&self) -> Vec<String> {
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
    pub(super) fn findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let knee_of = |k: &Option<KneeAt>, points: usize, left: &[LeftOutOfKnee]| match k {
            Some(k) => format!(
                "{} ({} req/s)",
                k.label,
                k.request_throughput.map_or("–".into(), num)
            ),
            // In the sweep's own words: no knee is no step that met the rule, or too few
            // points to take one, not a series that did not saturate.
            None => knee::none_said(points, left),
        };
        let (ka, kb) = (
            knee_of(&self.knee.a, self.a.points, &self.knee.a_left_out),
            knee_of(&self.knee.b, self.b.points, &self.knee.b_left_out),
        );
        let moved = match self.knee.moved {
            "earlier" => "B saturates at a lower load",
            "later" => "B saturates at a higher load",
            "same_point" => "the same point",
            _ => "not compared",
        };
        out.push(match ka == kb && self.knee.a.is_none() {
            true => format!("knee: A and B {ka}: {moved}"),
            false => format!("knee: A {ka}, B {kb}: {moved}"),
        });
        let (runs_a, runs_b) = (self.runs_of(|c| c.a.runs), self.runs_of(|c| c.b.runs));
        out.push(match (runs_a, runs_b) {
            (Runs::Repeated(..), Runs::Repeated(..)) => {
                "(each sweep's knee is one point of its grid, found on its points' means: its \
                 move is reported, not judged; the points' own figures are judged run against \
                 run above)"
                    .into()
            }
            (Runs::Once, Runs::Once) => {
                "(each sweep ran once: a knee is a point of its grid, so its move is reported, \
                 not judged against run-to-run noise; repeat the sweeps, or let the daemon's \
                 sweep canary judge it against its baseline)"
                    .into()
            }
            (a, b) => format!(
                "(A {}, B {}: a knee is a point of its grid (a repeated sweep's found on its \
                 points' means), so its move is reported, not judged against run-to-run noise; \
                 the points' throughputs are judged only when both sweeps ran them --runs N)",
                a.said(),
                b.said()
            ),
        });
        if let Some(c) = &self.capacity {
            // A verdict resting on an end whose probe the bounds could turn says so.
            let unsettled = match c.rests_on_bounds.is_empty() {
                true => String::new(),
                false => format!("; not established: {}", c.rests_on_bounds.join("; ")),
            };
            out.push(format!(
                "capacity at SLO: A {}, B {}: {}{unsettled}",
                c.a.said(),
                c.b.said(),
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
        // What `*` in the table means, when a cell has one: the counts are in the rule line.
        let shown = [super::super::bounds::TTFT, super::super::bounds::E2E];
        if self.points.iter().any(|p| {
            p.a_bounds
                .iter()
                .chain(&p.b_bounds)
                .any(|m| shown.contains(m))
        }) {
            out.push(
                "*: not exact: some of that side's first tokens (TTFT) or ends (e2e) at that \
                 point were a later segment's stamp or canaryd's read (summary.json's \
                 receive_timestamps), or its summary does not say how they were taken (an older \
                 one), so the figure is an upper bound and its change compares bounds; the last \
                 line counts them (a_bounds and b_bounds in --json)"
                    .into(),
            );
        }
        // Over every point: how many first tokens of each sweep are bounds.
        let sum = |of: &dyn Fn(&Comparison) -> SideTimes| {
            self.points
                .iter()
                .fold(SideTimes::default(), |t, p| t.plus(of(&p.comparison)))
        };
        let (repeated, mixed) = match (runs_a, runs_b) {
            (Runs::Repeated(..), Runs::Repeated(..)) => (true, false),
            (Runs::Once, Runs::Once) => (false, false),
            _ => (false, true),
        };
        // The cells of a side with runs are their means: estimates, whatever each run's.
        let means = match (runs_a, runs_b) {
            (Runs::Once, Runs::Once) => None,
            _ if repeated => Some("The cells are the means of each point's runs, estimates"),
            (Runs::Once, _) => Some("B's cells are the means of each point's runs, estimates"),
            (_, Runs::Once) => Some("A's cells are the means of each point's runs, estimates"),
            _ => Some("A cell of a point with several runs is their mean, an estimate"),
        };
        let exact = first_token::exactness(
            &sum(&|c| c.a.times),
            &sum(&|c| c.b.times),
            &match means {
                Some(m) => format!("{m}; each run's figures are exact, from its records"),
                None => "Figures are exact, from the points' records".into(),
            },
        );
        match self.points.first() {
            Some(p) if repeated => out.push(format!(
                "Each point: its two experiments (--runs) compared. {} {exact}",
                p.comparison.rule()
            )),
            _ => out.push(format!(
                "Each point: its two {} compared request by request: a p99 on its own tail \
                 (Mood's quantile test, p < 0.001, and a move beyond 5 % and 1 ms), a p50 by \
                 the daemon's baseline rule (Mann-Whitney p < 0.001 and a median shift beyond \
                 5 % and 1 ms{}){}. These tests take a run's requests as independent, which \
                 they are not (they share its batches), so with one run on a side a difference \
                 they find is `unconfirmed`, not real: run-to-run variation is not measured \
                 (--runs N on both sweeps judges on the runs' figures). {exact}",
                match mixed {
                    true => "sides (a side's runs pooled)",
                    false => "runs",
                },
                match mixed {
                    true => {
                        ", and beyond 3 MADs of A's run medians where A has 3 runs or more; \
                         against 2, whose MAD is half their one difference, a p50's difference \
                         is `unconfirmed` too"
                    }
                    false => "",
                },
                match mixed {
                    true => "; throughputs not judged: they need several runs on both sides",
                    false => "",
                },
            )),
        }
        out
    }
}

/// How many runs a sweep's points have: one each, or several (the fewest and most).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Runs {
    /// One run at every point.
    Once,
    /// At least two at every point: the fewest and the most.
    Repeated(u64, u64),
    /// One at some points, several at others (the most).
    Mixed(u64),
}

impl Runs {
    /// `has one run at each point`, `has 3 runs at each point`, …
    fn said(self) -> String {
        match self {
            Runs::Once => "has one run at each point".into(),
            Runs::Repeated(n, m) if n == m => format!("has {n} runs at each point"),
            Runs::Repeated(n, m) => format!("has {n} to {m} runs at each point"),
            Runs::Mixed(m) => format!("has 1 to {m} runs at each point"),
        }
    }
}

impl SweepComparison {
    /// How many runs one side's points have (`of`: a point comparison's count of that side).
    fn runs_of(&self, of: impl Fn(&Comparison) -> u64) -> Runs {
        let counts = self.points.iter().map(|p| of(&p.comparison));
        let (low, high) = counts.fold((u64::MAX, 0), |(l, h), n| (l.min(n), h.max(n)));
        match (low, high) {
            (_, 0 | 1) => Runs::Once,
            (2.., _) => Runs::Repeated(low, high),
            _ => Runs::Mixed(high),
        }
    }
}
