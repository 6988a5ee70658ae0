//! Whether a row's change is real, and the tests that judge it: Welch's t-test on run figures,
//! Mood's quantile test on a tail percentile, the rank test on each request's 0/1 outcome,
//! and the rule's floors and wording shared by them.

use super::row::mean;
use super::RUNS_ALPHA;
use crate::artifacts::Run;
use crate::sample::{quantile, sorted};
use crate::Experiment;
use canary_core::compare::{mann_whitney, MetricShift, ShiftRules, Trend};
use canary_core::WelchTest;
use serde::Serialize;

/// Whether a row's change is real.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Judged: the trend (B against A) and the test's p-value.
    Judged {
        /// `regressed`, `improved`, `steady`.
        trend: Trend,
        /// The test's two-sided p-value.
        p_value: f64,
        /// Why a change is not real: the test or the floor that held it back.
        why_not: Option<String>,
        /// How it was judged.
        how: String,
    },
    /// Not judged, and why.
    NotJudged {
        /// Why.
        why: String,
    },
    /// The sides' figures measure different things (judged against different SLOs): shown,
    /// never judged.
    NotComparable {
        /// Why, as `different SLOs (A: …, B: …)`.
        why: String,
    },
    /// A difference the test found between the sides, not called real: the test cannot tell
    /// it from what else differs between them (`because`), so the row says `unconfirmed`,
    /// never `yes`.
    Unconfirmed {
        /// Which way the figure moved (`regressed`, `improved`): what the test saw, not a
        /// verdict on the change.
        direction: Trend,
        /// The test's two-sided p-value (over requests, for a per-request test: see `because`).
        p_value: f64,
        /// How it was tested.
        how: String,
        /// What the test cannot tell the difference from, in order.
        because: Vec<Caveat>,
        /// The same, in words.
        why: String,
    },
}

/// Why a difference a test found is not a verdict on the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Caveat {
    /// A side has one run and the test is over requests: it takes them as independent, but
    /// requests of one run share its batches and its moment on the server, so run-to-run
    /// variation (two runs of one setup differ by ±14 % in a TTFT median, at p 3e-6 over their
    /// requests) is not measured. `--runs N` on both sides judges on the runs' figures.
    OneRun,
    /// The sides did not send the same requests (another trace, selection, load or seed): a
    /// difference may be the workload's, as the note above the table says.
    DifferentRequests,
    /// Some request of a side was judged good or not on a time that is only a bound, and
    /// could have gone the other way (summary.json's `uncertain_misses`, `uncertain_meets`):
    /// the side's goodput rests on bounds.
    OnBounds,
}

/// The words for [`Caveat::OneRun`] given the sides' run counts: `one run a side`, or on
/// which side when the other has several.
pub(super) fn one_run_said(a_runs: u64, b_runs: u64) -> &'static str {
    match (a_runs, b_runs) {
        (1, 1) => "one run a side",
        (1, _) => "one run on A's side",
        _ => "one run on B's side",
    }
}

impl Verdict {
    /// The trend, when judged.
    pub fn trend(&self) -> Option<Trend> {
        match self {
            Verdict::Judged { trend, .. } => Some(*trend),
            Verdict::NotJudged { .. }
            | Verdict::NotComparable { .. }
            | Verdict::Unconfirmed { .. } => None,
        }
    }

    /// This verdict when the test behind it cannot tell a difference from `because` (`one`:
    /// the sides' words for [`Caveat::OneRun`], as `one run a side`): a `yes` becomes
    /// [`Verdict::Unconfirmed`]; a `no` or `not judged` stays (a test that takes requests as
    /// independent finds differences too easily, so its `no` holds the more).
    pub(super) fn unless(self, because: &[Caveat], one: &str) -> Verdict {
        match self {
            Verdict::Judged {
                trend: direction @ (Trend::Regressed | Trend::Improved),
                p_value,
                how,
                ..
            } if !because.is_empty() => Verdict::Unconfirmed {
                direction,
                p_value,
                how,
                because: because.to_vec(),
                why: because
                    .iter()
                    .map(|c| match c {
                        Caveat::OneRun => format!("{one}: run-to-run variation not measured"),
                        Caveat::DifferentRequests => {
                            "not the same requests: may be the workload's".to_string()
                        }
                        Caveat::OnBounds => "goodput rests on bounds".to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            },
            other => other,
        }
    }

    /// This verdict when the figure rests on bounds (`words`: which side's requests were
    /// judged on a bound): a `yes` becomes [`Verdict::Unconfirmed`], an unconfirmed one adds
    /// [`Caveat::OnBounds`]; a `no` or `not judged` stays (the row's metric says `(bound)`).
    pub(super) fn on_bounds(self, words: &str) -> Verdict {
        match self {
            Verdict::Judged {
                trend: direction @ (Trend::Regressed | Trend::Improved),
                p_value,
                how,
                ..
            } => Verdict::Unconfirmed {
                direction,
                p_value,
                how,
                because: vec![Caveat::OnBounds],
                why: words.to_string(),
            },
            Verdict::Unconfirmed {
                direction,
                p_value,
                how,
                mut because,
                why,
            } => {
                because.push(Caveat::OnBounds);
                Verdict::Unconfirmed {
                    direction,
                    p_value,
                    how,
                    because,
                    why: format!("{why}; {words}"),
                }
            }
            other => other,
        }
    }
}

/// Welch's t-test on the runs' figures: real when p < [`RUNS_ALPHA`] and the change of the
/// means passes the rule's floors (5 % of A's mean, and 1 ms for a latency; a fraction has
/// no floor, as the per-request rank test on it has none).
pub(super) fn runs_verdict(
    fa: &[f64],
    fb: &[f64],
    unit: &str,
    higher_is_better: bool,
    rules: &ShiftRules,
) -> Verdict {
    let Some(w) = WelchTest::of(fa, fb) else {
        return Verdict::NotJudged {
            why: "fewer than 2 runs with this figure on one side".into(),
        };
    };
    let finite = |f: &[f64]| f.iter().filter(|x| x.is_finite()).count();
    let (na, nb) = (finite(fa), finite(fb));
    // Each side's figures all one value (compared as values: the float mean of three 0.99s
    // is not 0.99, so a variance came out 1e-32 and p about 0).
    let flat = |f: &[f64]| {
        let mut v = f.iter().filter(|x| x.is_finite());
        let first = v.next();
        v.all(|x| Some(x) == first)
    };
    if flat(fa) && flat(fb) && mean(fa) != mean(fb) {
        // Neither side's runs vary: there is no spread to judge a difference against (three
        // runs with one error each are not certain evidence against three with none).
        return Verdict::NotJudged {
            why: format!(
                "the runs' figures do not vary on either side ({na} and {nb} runs): no spread \
                 to test against"
            ),
        };
    }
    let (ma, mb) = (mean(fa), mean(fb));
    let delta = mb - ma;
    let ratio = if ma != 0.0 { delta / ma } else { f64::INFINITY };
    let why_not = if w.p_value >= RUNS_ALPHA || delta == 0.0 {
        Some("not significant".to_string())
    } else {
        let relative = (unit != "fraction").then_some(ratio);
        under_floors("change", relative, (unit == "ms").then_some(delta), rules)
    };
    let trend = match why_not {
        Some(_) => Trend::Steady,
        None if (delta > 0.0) == higher_is_better => Trend::Improved,
        None => Trend::Regressed,
    };
    Verdict::Judged {
        trend,
        p_value: w.p_value,
        why_not,
        how: format!(
            "Welch's t-test on the runs' figures ({na} and {nb} runs): t {:+.2}, {:.1} df, p {}",
            w.t,
            w.df,
            p_text(w.p_value)
        ),
    }
}

/// Which of the rule's floors holds a change (`what`) back: under `min_shift` of A's figure
/// (`ratio`, when the relative floor applies), or under `min_shift_ms` (`delta_ms`, for a
/// latency); `None` when it passes both.
fn under_floors(
    what: &str,
    ratio: Option<f64>,
    delta_ms: Option<f64>,
    rules: &ShiftRules,
) -> Option<String> {
    if let Some(r) = ratio.filter(|r| r.abs() < rules.min_shift) {
        return Some(format!(
            "{what} {:.1} % under {} %",
            r.abs() * 100.0,
            rules.min_shift * 100.0
        ));
    }
    delta_ms
        .filter(|d| d.abs() < rules.min_shift_ms)
        .map(|d| format!("{what} {:.3} ms under {} ms", d.abs(), rules.min_shift_ms))
}

/// Values each side needs beyond a percentile, and within it, for [`quantile_verdict`]'s
/// normal approximation to hold.
const QUANTILE_TEST_MIN_CELL: f64 = 5.0;

/// A tail percentile (`q`, named `name`) judged on its own, not by the median's rule: Mood's
/// quantile test. Both sides' values (`a`, `b`, sorted) are pooled, and the fractions of each
/// side above the pooled percentile compared by a two-proportion z-test. Real when p < alpha
/// and the percentile moved past the rule's floors (5 % of A's, 1 ms). Not judged when a side
/// expects fewer than 5 values beyond it (a p99 needs about 500 requests a side).
pub(super) fn quantile_verdict(
    a: &[f64],
    b: &[f64],
    name: &str,
    q: f64,
    rules: &ShiftRules,
) -> Verdict {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let pooled = sorted([a, b].concat());
    let cut = quantile(&pooled, q);
    // Values tied at the cut go to whichever side of it leaves the pooled share beyond it
    // nearest 1 − q, among the splits the test can use (ties are rare at 1 µs, but a plateau
    // must not hide a tail).
    let beyond = |v: &[f64], with_ties: bool| {
        let within = v.partition_point(|x| if with_ties { *x < cut } else { *x <= cut });
        (v.len() - within) as f64
    };
    let split = |with_ties: bool| {
        let (ka, kb) = (beyond(a, with_ties), beyond(b, with_ties));
        let p = (ka + kb) / (na + nb);
        let cells = [na * p, na * (1.0 - p), nb * p, nb * (1.0 - p)];
        let usable = cells.iter().all(|c| *c >= QUANTILE_TEST_MIN_CELL);
        (usable, (p - (1.0 - q)).abs(), with_ties, ka, kb, p)
    };
    let best = [split(false), split(true)]
        .into_iter()
        .filter(|s| s.0)
        .min_by(|x, y| x.1.total_cmp(&y.1));
    let (true, Some((_, _, with_ties, ka, kb, p))) = (cut.is_finite(), best) else {
        return Verdict::NotJudged {
            why: format!(
                "too few requests for a {name} test (about {:.0} a side; A has {na}, B has \
                 {nb})",
                (QUANTILE_TEST_MIN_CELL / (1.0 - q)).round()
            ),
        };
    };
    let se = (p * (1.0 - p) * (1.0 / na + 1.0 / nb)).sqrt();
    let z = (kb / nb - ka / na) / se;
    let p_value = canary_core::compare::erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0);
    let (qa, qb) = (quantile(a, q), quantile(b, q));
    let delta = qb - qa;
    let ratio = if qa != 0.0 { delta / qa } else { f64::INFINITY };
    let why_not = if p_value >= rules.alpha {
        Some("not significant".to_string())
    } else if delta == 0.0 || (delta > 0.0) != (z > 0.0) {
        Some(format!("the {name} itself did not move that way"))
    } else {
        under_floors(&format!("{name} shift"), Some(ratio), Some(delta), rules)
    };
    let trend = match why_not {
        Some(_) => Trend::Steady,
        None if delta > 0.0 => Trend::Regressed,
        None => Trend::Improved,
    };
    Verdict::Judged {
        trend,
        p_value,
        why_not,
        how: format!(
            "Mood's quantile test: {:.2} % of A and {:.2} % of B {} the pooled {name} \
             ({cut:.3} ms), p {}",
            ka / na * 100.0,
            kb / nb * 100.0,
            if with_ties { "at or above" } else { "above" },
            p_text(p_value)
        ),
    }
}

/// Each measured request of every run that the target was sent and answered for (canaryd's
/// own failures and its cancels left out) as 1 when `hit`, else 0.
pub(super) fn outcomes(
    e: &Experiment,
    hit: impl Fn(&crate::artifacts::Request) -> bool,
) -> Vec<f64> {
    e.runs
        .iter()
        .flat_map(Run::measured)
        .filter(|r| r.error_kind.as_deref() != Some("client_resources") && !r.cancelled)
        .map(|r| f64::from(u8::from(hit(r))))
        .collect()
}

/// A rate judged by the rank test on per-request 0/1 outcomes: real when p < alpha.
pub(super) fn rate_verdict(
    a: &[f64],
    b: &[f64],
    rules: &ShiftRules,
    higher_is_better: bool,
) -> Verdict {
    if a.is_empty() || b.is_empty() {
        return Verdict::NotJudged {
            why: "no requests on one side".into(),
        };
    }
    let (_, p) = mann_whitney(b, a);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let up = mean(b) > mean(a);
    let trend = if p >= rules.alpha || mean(b) == mean(a) {
        Trend::Steady
    } else if up == higher_is_better {
        Trend::Improved
    } else {
        Trend::Regressed
    };
    Verdict::Judged {
        trend,
        p_value: p,
        why_not: (trend == Trend::Steady).then(|| "not significant".to_string()),
        how: format!(
            "Mann-Whitney on each request's 0/1 outcome, p {}",
            p_text(p)
        ),
    }
}

/// For a steady latency metric, which part of the rule held the change back.
pub(super) fn why_not(s: &MetricShift, rules: &ShiftRules) -> Option<String> {
    if s.trend != Trend::Steady {
        return None;
    }
    let delta = (s.median - s.baseline_median).abs();
    Some(if s.p_value >= rules.alpha {
        "not significant".into()
    } else if let Some(r) = s.shift_ratio.filter(|r| r.abs() < rules.min_shift) {
        format!(
            "median shift {:.1} % under {} %",
            r.abs() * 100.0,
            rules.min_shift * 100.0
        )
    } else if delta < rules.min_shift_ms {
        format!("median shift {delta:.3} ms under {} ms", rules.min_shift_ms)
    } else {
        format!("median shift within {} MADs", rules.k_mad)
    })
}

/// A median's move as a percentage of A's, or, from a zero median (which no percentage
/// measures), the move itself: `+12.3 %`, `from 0 ms (+8.560 ms)`.
pub(super) fn median_shift_text(s: &MetricShift) -> String {
    match s.shift_ratio {
        Some(r) => format!("{:+.1} %", r * 100.0),
        None => format!(
            "from {} ms ({:+.3} ms)",
            s.baseline_median,
            s.median - s.baseline_median
        ),
    }
}

/// The median shift in MADs of the reference runs' medians, or why there is no such figure.
pub(super) fn mads_text(s: &MetricShift) -> String {
    match s.shift_in_mads {
        Some(m) => format!("{m:+.1} MADs"),
        None => "no MADs: the reference medians do not spread and their median is 0".into(),
    }
}

pub(super) fn p_text(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::compare::shift;

    #[test]
    fn a_median_that_moved_from_zero_is_shown_as_the_move_not_as_zero_percent() {
        let rules = ShiftRules::default();
        let (zero, eight) = (vec![0.0; 400], vec![8.56; 400]);
        let s = shift(&eight, &[&zero], &rules).unwrap();
        assert_eq!(median_shift_text(&s), "from 0 ms (+8.560 ms)");
        assert_eq!((s.trend, why_not(&s, &rules)), (Trend::Regressed, None));
        let s = shift(&[11.0; 10], &[&[10.0; 10]], &rules).unwrap();
        assert_eq!(median_shift_text(&s), "+10.0 %");
    }

    fn trend_of(v: &Verdict) -> Option<Trend> {
        v.trend()
    }

    #[test]
    fn a_tail_percentile_is_judged_on_its_tail_not_on_the_median() {
        let rules = ShiftRules::default();
        let repeat = |v: f64, n: usize| vec![v; n];
        // A's tail is slow (2 % at 500 ms), B's is not, while B's median is 20 % slower.
        let a = sorted([repeat(10.0, 980), repeat(500.0, 20)].concat());
        let b = repeat(12.0, 1000);
        let tail = quantile_verdict(&a, &b, "p99", 0.99, &rules);
        assert_eq!(trend_of(&tail), Some(Trend::Improved), "{tail:?}");
        // A steady median over a tail 200 times slower: the p99 row says so.
        let a = repeat(10.0, 1000);
        let b = sorted([repeat(10.0, 970), repeat(2000.0, 30)].concat());
        let tail = quantile_verdict(&a, &b, "p99", 0.99, &rules);
        assert_eq!(trend_of(&tail), Some(Trend::Regressed), "{tail:?}");
        // The same values on both sides: nothing real.
        let same = quantile_verdict(&b, &b, "p99", 0.99, &rules);
        assert_eq!(trend_of(&same), Some(Trend::Steady), "{same:?}");
        // 100 requests a side cannot bound a p99 (all 100 fall under it 37 % of the time).
        let few = quantile_verdict(&a[..100], &b[..100], "p99", 0.99, &rules);
        match few {
            Verdict::NotJudged { why } => assert!(why.contains("about 500 a side"), "{why}"),
            judged => panic!("{judged:?}"),
        }
    }

    /// A test over requests with one run a side, or a test of sides that sent other requests:
    /// its `yes` is unconfirmed, saying why; its `no` and `not judged` stand.
    #[test]
    fn a_yes_the_test_cannot_tell_from_run_to_run_variation_is_unconfirmed() {
        let rules = ShiftRules::default();
        let base: Vec<f64> = (0..200).map(|i| 100.0 + f64::from(i % 10)).collect();
        let slower: Vec<f64> = base.iter().map(|v| v * 1.3).collect();
        let s = shift(&slower, &[&base], &rules).unwrap();
        let judged = Verdict::Judged {
            trend: s.trend,
            p_value: s.p_value,
            why_not: why_not(&s, &rules),
            how: "rank".into(),
        };
        assert_eq!(judged.trend(), Some(Trend::Regressed));
        let both = [Caveat::OneRun, Caveat::DifferentRequests];
        match judged.clone().unless(&both, "one run a side") {
            Verdict::Unconfirmed {
                direction,
                because,
                why,
                ..
            } => {
                assert_eq!(direction, Trend::Regressed);
                assert_eq!(because, both);
                assert!(
                    why.starts_with("one run a side: run-to-run variation not measured; ")
                        && why.ends_with("; not the same requests: may be the workload's"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Nothing to doubt: the verdict stands.
        assert_eq!(
            judged.clone().unless(&[], "").trend(),
            Some(Trend::Regressed)
        );
        let steady = runs_verdict(&[1.0, 1.1, 1.2], &[1.0, 1.1, 1.2], "ms", false, &rules);
        assert_eq!(steady.unless(&both, "").trend(), Some(Trend::Steady));
        let json = serde_json::to_value(judged.unless(&[Caveat::OneRun], "x")).unwrap();
        assert_eq!(json["kind"], "unconfirmed");
        assert_eq!(json["because"], serde_json::json!(["one_run"]));
        assert!(json.get("trend").is_none(), "{json}");
    }

    #[test]
    fn runs_that_do_not_vary_are_not_certain_evidence() {
        let rules = ShiftRules::default();
        // One error in 100 in each of B's three runs, none in A's: no spread, no verdict.
        for (a, b) in [(0.0, 0.01), (1.0, 0.99), (0.9, 0.95)] {
            match runs_verdict(&[a; 3], &[b; 3], "fraction", false, &rules) {
                Verdict::NotJudged { why } => assert!(why.contains("do not vary"), "{why}"),
                judged => panic!("{a} against {b}: {judged:?}"),
            }
        }
        // The test's run counts are those with a value.
        let v = runs_verdict(&[1.0, f64::NAN, 1.2], &[2.0, 2.2, 2.1], "ms", false, &rules);
        match v {
            Verdict::Judged { how, .. } => assert!(how.contains("(2 and 3 runs)"), "{how}"),
            other => panic!("{other:?}"),
        }
    }
}
