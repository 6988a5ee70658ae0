//! A series of runs at increasing load (a sweep): where it saturates (the knee) and which
//! runs trade per-user speed against throughput best (the Pareto front). One definition,
//! used by `canaryd sweep` and by the report of a series alike.
//!
//! The knee: walking the runs that are evidence in series order (increasing offered load), the
//! first step between two adjacent ones whose completed-request throughput grows by less than
//! the step's gain floor while TTFT p99 rises by more than [`KNEE_RISE`] marks saturation; the
//! knee is the run before that step, the last one that still scaled. A run left out (its
//! figures not positive finite numbers) is stepped over, not a break in the series: the runs
//! either side of it are compared with each other. A series that never takes such a step has
//! no knee (it did not saturate, saturated at its first run, or too few of its runs are
//! evidence).
//!
//! The gain floor ([`gain_floor`]) weighs the throughput gain against the step in offered load
//! (a point's request rate, its users for a closed loop, a trace's speedup): [`KNEE_GAIN`], or
//! [`KNEE_LOAD_SHARE`] (half) of the step's relative load increase when that is smaller. A
//! server with room to spare passes a load step through (throughput gains about as much as the
//! load: exactly, for an open loop replaying one schedule faster) and a saturated one gains
//! about nothing; half lies midway, so a small step is a knee only when throughput clearly
//! fell behind the load. A fixed 10 % floor was met by every step under 10 % — +2.6 % for a
//! +2.5 % step at 41 % of capacity — and the knee then rested on TTFT p99's noise alone.
//! Steps of 20 % or more are judged as with the fixed floor (half of 20 % is 10 %: the floor is
//! continuous). Where a step's loads are unknown (runs named together in `canaryd report`), or
//! do not increase, the floor is [`KNEE_GAIN`] as before, and small steps there stay at the
//! mercy of noise.
//!
//! The Pareto front: a run is on it when no other run has at least as many output tokens/s
//! per GPU and per user, and more of one.

/// Below this relative throughput gain per step, more load no longer buys throughput (the
/// gain floor of a step of 20 % or more in load, or of unknown load: [`gain_floor`]).
pub const KNEE_GAIN: f64 = 0.10;
/// A step smaller than 20 % in load saturates below this share of its relative load increase
/// ([`gain_floor`]): midway between a server that passes the step through and one that gains
/// nothing.
pub const KNEE_LOAD_SHARE: f64 = 0.5;
/// Above this relative TTFT p99 rise per step, latency pays for the load.
pub const KNEE_RISE: f64 = 0.20;

/// What the knee reads of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadStep {
    /// Completed requests per second.
    pub throughput: f64,
    /// TTFT p99, ms.
    pub ttft_p99_ms: f64,
    /// The load offered (requests/s, users, a trace's speedup: the series' axis, any unit
    /// proportional to it), when known: the knee weighs the throughput gain against its step.
    pub offered_load: Option<f64>,
}

/// What the Pareto front reads of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenRates {
    /// Output tokens/s per GPU (or in all, when every run of the series ran on the same,
    /// unknown, number of GPUs: the order of the runs is the same).
    pub per_gpu: f64,
    /// Output tokens/s of one user (the median request's).
    pub per_user: f64,
}

impl LoadStep {
    /// Whether the knee reads this step: both figures positive finite numbers.
    pub fn is_evidence(&self) -> bool {
        self.throughput.is_finite()
            && self.throughput > 0.0
            && self.ttft_p99_ms.is_finite()
            && self.ttft_p99_ms > 0.0
    }
}

/// The relative throughput gain below which the step from `a` to `b` (the next evidence run)
/// saturates, if TTFT p99 rises over [`KNEE_RISE`] too: [`KNEE_GAIN`], or [`KNEE_LOAD_SHARE`]
/// of the relative increase in offered load when that is smaller. [`KNEE_GAIN`] when either
/// load is unknown (or not a positive finite number), or the load does not increase.
pub fn gain_floor(a: &LoadStep, b: &LoadStep) -> f64 {
    let known = |l: Option<f64>| l.filter(|l| l.is_finite() && *l > 0.0);
    match (known(a.offered_load), known(b.offered_load)) {
        (Some(la), Some(lb)) if lb > la => KNEE_GAIN.min(KNEE_LOAD_SHARE * (lb / la - 1.0)),
        _ => KNEE_GAIN,
    }
}

/// The step rule in words, after "the next step" or "no step": `gained in throughput under
/// min(10%, 50% of its load increase) while TTFT p99 rose over 20%` where the loads are known,
/// `gained under 10% throughput while TTFT p99 rose over 20%` where they are not; `pct` is
/// the per-cent sign as the caller's page writes it (`%` or ` %`).
pub fn step_words(loads_known: bool, pct: &str) -> String {
    let (gain, rise) = (KNEE_GAIN * 100.0, KNEE_RISE * 100.0);
    match loads_known {
        true => format!(
            "gained in throughput under min({gain:.0}{pct}, {:.0}{pct} of its load increase) \
             while TTFT p99 rose over {rise:.0}{pct}",
            KNEE_LOAD_SHARE * 100.0
        ),
        false => format!(
            "gained under {gain:.0}{pct} throughput while TTFT p99 rose over {rise:.0}{pct}"
        ),
    }
}

/// The index of the knee in `steps` (series order), if the series saturates. Only steps that
/// are evidence ([`LoadStep::is_evidence`]) are walked, each compared with the evidence step
/// before it: a step left out between two does not hide the step across it.
pub fn knee(steps: &[LoadStep]) -> Option<usize> {
    let evidence: Vec<usize> = (0..steps.len())
        .filter(|&i| steps[i].is_evidence())
        .collect();
    evidence.windows(2).find_map(|pair| {
        let (a, b) = (&steps[pair[0]], &steps[pair[1]]);
        let gain = b.throughput / a.throughput - 1.0;
        let rise = b.ttft_p99_ms / a.ttft_p99_ms - 1.0;
        (gain < gain_floor(a, b) && rise > KNEE_RISE).then_some(pair[0])
    })
}

/// Indices of the Pareto-optimal runs, in series order: no other run has at least as much
/// of both rates and more of one. Runs with a rate that is not finite are left out.
pub fn pareto(runs: &[TokenRates]) -> Vec<usize> {
    let ok = |p: &TokenRates| p.per_gpu.is_finite() && p.per_user.is_finite();
    (0..runs.len())
        .filter(|&i| ok(&runs[i]))
        .filter(|&i| {
            let p = &runs[i];
            !runs.iter().any(|q| {
                ok(q)
                    && q.per_gpu >= p.per_gpu
                    && q.per_user >= p.per_user
                    && (q.per_gpu > p.per_gpu || q.per_user > p.per_user)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(throughput: f64, ttft_p99_ms: f64) -> LoadStep {
        LoadStep {
            throughput,
            ttft_p99_ms,
            offered_load: None,
        }
    }

    /// A run offered `load`.
    fn at(load: f64, throughput: f64, ttft_p99_ms: f64) -> LoadStep {
        LoadStep {
            offered_load: Some(load),
            ..s(throughput, ttft_p99_ms)
        }
    }

    fn r(per_gpu: f64, per_user: f64) -> TokenRates {
        TokenRates { per_gpu, per_user }
    }

    #[test]
    fn the_knee_is_the_last_run_that_still_scaled() {
        // Linear, then a plateau with latency climbing.
        let steps = [
            s(10.0, 50.0),
            s(20.0, 52.0),
            s(40.0, 60.0),
            s(42.0, 200.0),
            s(43.0, 900.0),
        ];
        assert_eq!(knee(&steps), Some(2));
        // Still scaling: no knee.
        assert_eq!(knee(&steps[..3]), None);
        // Latency up but throughput still growing: not a knee.
        assert_eq!(knee(&[s(10.0, 50.0), s(20.0, 100.0)]), None);
        // Throughput flat but latency flat too: not a knee (yet).
        assert_eq!(knee(&[s(10.0, 50.0), s(10.5, 55.0)]), None);
        // Throughput falling under overload while latency explodes: a knee.
        assert_eq!(knee(&[s(10.0, 50.0), s(8.0, 500.0)]), Some(0));
        // A run that measured nothing is never a knee.
        assert_eq!(knee(&[s(0.0, f64::NAN), s(0.0, 100.0)]), None);
        assert_eq!(knee(&[]), None);
    }

    // A run left out (NaN: capped, errored, cut short) broke the series on both sides: the
    // runs either side were never compared, and a saturating series read "no knee".
    #[test]
    fn a_run_left_out_is_stepped_over_not_a_break() {
        let gap = s(f64::NAN, f64::NAN);
        // c1, c8 scale; c16 left out; c32 gained under 10 % over c8 while TTFT p99 tripled.
        let steps = [s(10.0, 50.0), s(80.0, 55.0), gap, s(82.0, 200.0)];
        assert_eq!(knee(&steps), Some(1));
        // Left out at the start and twice in a row.
        let steps = [gap, s(10.0, 50.0), gap, gap, s(10.5, 90.0)];
        assert_eq!(knee(&steps), Some(1));
        // Still scaling across the gap: no knee.
        assert_eq!(knee(&[s(10.0, 50.0), gap, s(40.0, 70.0)]), None);
        // Fewer than two evidence runs: no step to take.
        assert_eq!(knee(&[gap, s(10.0, 50.0), gap]), None);
        assert!(!gap.is_evidence() && s(1.0, 1.0).is_evidence());
    }

    // The audit's sweep (F12): `--request-rate 40,41,42,43,44,45`, 100 requests a point,
    // against `canaryd sim --profile capacity` (107 req/s): each point's measured throughput
    // and TTFT p99 as its sweep.json gave them. Throughput tracked the load (+2.6 % for the
    // +2.5 % step), TTFT p99 rose 20.8 % by noise: the fixed 10 % floor called r40 the knee.
    #[test]
    fn a_small_load_step_is_a_knee_only_when_throughput_falls_behind_the_load() {
        let rates = [40.0, 41.0, 42.0, 43.0, 44.0, 45.0];
        let throughput = [44.496, 45.651, 46.726, 47.796, 48.946, 50.005];
        let p99 = [11.639, 14.063, 12.495, 11.263, 10.839, 18.383];
        let tracking: Vec<LoadStep> = (0..6)
            .map(|i| at(rates[i], throughput[i], p99[i]))
            .collect();
        assert_eq!(knee(&tracking), None);
        // The step r40 → r41: its floor is half its 2.5 % load increase.
        assert!((gain_floor(&tracking[0], &tracking[1]) - 0.0125).abs() < 1e-12);
        // The same latencies with throughput flat from r40 on: the server served no more of
        // the added load, so the first step whose p99 rose over 20 % is the knee.
        let flat: Vec<LoadStep> = (0..6)
            .map(|i| at(rates[i], throughput[0], p99[i]))
            .collect();
        assert_eq!(knee(&flat), Some(0));
        // Loads unknown (runs named together): the fixed floor, as before.
        let unknown: Vec<LoadStep> = tracking
            .iter()
            .map(|p| s(p.throughput, p.ttft_p99_ms))
            .collect();
        assert_eq!(knee(&unknown), Some(0));
    }

    #[test]
    fn steps_of_20_percent_or_more_keep_the_fixed_floor() {
        // A doubling: throughput +9 % (< 10 %) with TTFT p99 tripled is a knee, +11 % is not.
        assert_eq!(
            knee(&[at(8.0, 100.0, 50.0), at(16.0, 109.0, 150.0)]),
            Some(0)
        );
        assert_eq!(knee(&[at(8.0, 100.0, 50.0), at(16.0, 111.0, 150.0)]), None);
        // 20 % exactly: the floor is 10 % either way (continuous where the two meet).
        let (a, b) = (at(10.0, 1.0, 1.0), at(12.0, 1.0, 1.0));
        assert!((gain_floor(&a, &b) - KNEE_GAIN).abs() < 1e-12);
        // A 10 % step: the floor is 5 %; +6 % scaled, +4 % did not.
        assert_eq!(
            knee(&[at(100.0, 100.0, 50.0), at(110.0, 106.0, 70.0)]),
            None
        );
        assert_eq!(
            knee(&[at(100.0, 100.0, 50.0), at(110.0, 104.0, 70.0)]),
            Some(0)
        );
        // A load that does not increase, or one side's unknown: the fixed floor.
        for b in [
            at(10.0, 1.0, 1.0),
            at(9.0, 1.0, 1.0),
            s(1.0, 1.0),
            at(f64::NAN, 1.0, 1.0),
        ] {
            assert_eq!(gain_floor(&a, &b), KNEE_GAIN, "{b:?}");
        }
        // The walk steps over a run left out, and weighs the step across it.
        let gap = at(11.0, f64::NAN, f64::NAN);
        assert_eq!(
            knee(&[at(10.0, 100.0, 50.0), gap, at(12.0, 119.0, 70.0)]),
            None
        );
        assert_eq!(
            knee(&[at(10.0, 100.0, 50.0), gap, at(12.0, 105.0, 70.0)]),
            Some(0)
        );
    }

    #[test]
    fn the_pareto_front_of_a_known_series() {
        // A sweep's usual shape: per-user speed falls as total throughput grows, then total
        // throughput falls too past saturation (run 4 is worse in both than run 3), and run 2
        // is dominated by run 3 (more of both).
        let runs = [
            r(100.0, 90.0),
            r(200.0, 80.0),
            r(150.0, 70.0),
            r(400.0, 70.0),
            r(390.0, 20.0),
            r(f64::NAN, 500.0),
        ];
        assert_eq!(pareto(&runs), vec![0, 1, 3]);
        // Equal runs do not dominate each other: both stay.
        assert_eq!(pareto(&[r(1.0, 1.0), r(1.0, 1.0)]), vec![0, 1]);
        assert!(pareto(&[]).is_empty());
    }
}
