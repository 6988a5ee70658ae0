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
