//! The knee and the front found on a series' points.

use super::*;

fn p(throughput: f64, ttft_p99: f64, per_user: f64) -> Point {
    Point {
        label: format!("{throughput}"),
        throughput,
        tokens_per_s: throughput * 10.0,
        tokens_per_user: per_user,
        ttft_p50: ttft_p99 / 2.0,
        ttft_p99,
        e2e_p99: ttft_p99 * 4.0,
        error_rate: Some(0.0),
        gpus: None,
        left_out: None,
        notes: Vec::new(),
        bounds: Vec::new(),
        passed: None,
        good_fraction: None,
        good_on_bound: 0,
        good_range: None,
    }
}

#[test]
fn the_knee_is_the_last_run_that_still_scaled() {
    // Linear, then a plateau with latency climbing.
    let s = [
        p(10.0, 50.0, 90.0),
        p(20.0, 52.0, 80.0),
        p(40.0, 60.0, 70.0),
        p(42.0, 200.0, 30.0),
        p(43.0, 900.0, 10.0),
    ];
    assert_eq!(knee(&s), Some(2));
    // Still scaling: no knee.
    assert_eq!(knee(&s[..3]), None);
    // Latency up but throughput still growing: not a knee.
    assert_eq!(knee(&[p(10.0, 50.0, 1.0), p(20.0, 100.0, 1.0)]), None);
    // The plateau's first run cut short by a signal: its partial figures are not the
    // knee's evidence (as sweep.json leaves such a point out), nor on the front.
    let mut cut = s[..4].to_vec();
    cut[3].left_out = Some(LeftOut::CutShort);
    assert_eq!(knee(&cut), None);
    assert!(!pareto(&cut).contains(&3));
}

// A run that judged no request has no error rate: the point's mean is over the runs that
// have one, and a point of such runs only has none.
#[test]
fn a_repeated_points_error_rate_skips_runs_that_judged_nothing() {
    let with = |rate| Point {
        error_rate: rate,
        ..p(10.0, 50.0, 90.0)
    };
    let m = Point::mean("c1".into(), &[with(None), with(Some(0.2)), with(Some(0.1))]);
    assert!((m.error_rate.unwrap() - 0.15).abs() < 1e-12, "{m:?}");
    assert_eq!(Point::mean("c1".into(), &[with(None)]).error_rate, None);
}

#[test]
fn the_pareto_front_drops_dominated_runs() {
    let s = [
        p(10.0, 50.0, 90.0),
        p(20.0, 52.0, 80.0),
        p(15.0, 60.0, 70.0),
        p(40.0, 60.0, 70.0),
    ];
    // Run 2 (150 tok/s, 70 per user) is dominated by run 1 (200, 80) and run 3 (400, 70).
    assert_eq!(pareto(&s), vec![0, 1, 3]);
    // On 1 and 4 GPUs: run 3's 400 tok/s are 100 per GPU, under run 1's 200 on one GPU.
    let mut gpus = s.to_vec();
    for (p, n) in gpus.iter_mut().zip([1, 1, 1, 4]) {
        p.gpus = Some(n);
    }
    assert_eq!(pareto(&gpus), vec![0, 1]);
    // Drawn where the front was found: per GPU.
    let (per_gpu, at) = front_axes(&gpus);
    assert!(per_gpu);
    assert_eq!((at[1].1, at[3].1), (200.0, 100.0));
    let (per_gpu, at) = front_axes(&s);
    assert!(!per_gpu);
    assert_eq!(at[3].1, 400.0);
}

// Audit finding 2: the note under the table said "Exact" whatever the cells were. It does only
// when no cell is a bound; else it says what each mark is.
#[test]
fn the_table_is_called_exact_only_when_no_cell_is_a_bound() {
    let exact = [p(10.0, 50.0, 90.0), p(20.0, 52.0, 80.0)];
    assert!(exactness(&exact, false, true).contains("Exact: each figure"));
    assert!(exactness(&exact, true, true).contains("each exact from that run's records"));
    let mut bound = exact.to_vec();
    bound[1].bounds = vec![TTFT, PER_USER];
    for repeated in [false, true] {
        let note = exactness(&bound, repeated, true);
        assert!(
            !note.contains("Exact") && !note.contains("each exact"),
            "{note}"
        );
        assert!(
            note.contains("a latency marked ≤ is an upper bound"),
            "{note}"
        );
        assert!(
            note.contains("a tok/s per user marked * is exact in neither"),
            "{note}"
        );
    }
    assert_eq!(marked(&bound[1], TTFT, 52.0, ms), "≤ 52 ms");
    assert_eq!(marked(&bound[1], E2E, 208.0, ms), "208 ms");
    assert_eq!(marked(&bound[1], PER_USER, 80.0, num), "80*");
    assert_eq!(marked(&bound[0], TTFT, 50.0, ms), "50 ms");
}

// Audit finding 14, for runs named together (no sweep.json): with fewer than two runs as
// evidence the knee rule is not the reason there is no knee.
#[test]
fn no_knee_among_too_few_runs_says_which_were_left_out() {
    let mut s = vec![
        p(10.0, 50.0, 90.0),
        p(20.0, 52.0, 80.0),
        p(30.0, 60.0, 70.0),
    ];
    assert!(no_knee(&s, None, "").contains("no step gained under 10 %"));
    s[0].left_out = Some(LeftOut::Errors(0.3));
    let said = no_knee(&s, None, "");
    assert!(
        said.starts_with("No knee among the 2 points that are evidence"),
        "{said}"
    );
    s[2].throughput = f64::NAN;
    let said = no_knee(&s, None, "");
    assert_eq!(
        said,
        "No knee: 1 of the 3 points is evidence, and a knee is a step between two; left out: \
         10 (errors over 5 %), 30 (no request throughput or TTFT p99)."
    );
}

// Runs named together carry no load the knee could weigh a step against (audit F12): the
// page says the fixed floor was used and why, where a sweep's knee was weighed.
#[test]
fn runs_named_together_say_their_loads_were_unknown() {
    let s = vec![p(10.0, 50.0, 90.0), p(20.0, 52.0, 80.0)];
    let said = no_knee(&s, None, "");
    assert!(
        said.contains("no step gained under 10 % throughput while TTFT p99 rose over 20 % (the runs' loads unknown"),
        "{said}"
    );
    assert!(rule_words(true).contains("min(10 %, 50 % of its load increase)"));
    assert!(!rule_words(true).contains("unknown"));
}
