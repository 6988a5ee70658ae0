//! A series of runs at increasing load (a sweep): where it saturates (the knee) and which
//! runs trade per-user speed against throughput best (the Pareto front). One definition,
//! used by `canaryd sweep` and by the report of a series alike.
//!
//! The knee: walking the runs that are evidence in series order (increasing offered load), the
//! first step between two adjacent ones whose completed-request throughput grows by less than
//! [`KNEE_GAIN`] while TTFT p99 rises by more than [`KNEE_RISE`] marks saturation; the knee is
//! the run before that step, the last one that still scaled. A run left out (its figures not
//! positive finite numbers) is stepped over, not a break in the series: the runs either side
//! of it are compared with each other. A series that never takes such a step has no knee (it
//! did not saturate, saturated at its first run, or too few of its runs are evidence).
//!
//! The Pareto front: a run is on it when no other run has at least as many output tokens/s
//! per GPU and per user, and more of one.

/// Below this relative throughput gain per step, more load no longer buys throughput.
pub const KNEE_GAIN: f64 = 0.10;
/// Above this relative TTFT p99 rise per step, latency pays for the load.
pub const KNEE_RISE: f64 = 0.20;

/// What the knee reads of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadStep {
    /// Completed requests per second.
    pub throughput: f64,
    /// TTFT p99, ms.
    pub ttft_p99_ms: f64,
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
        (gain < KNEE_GAIN && rise > KNEE_RISE).then_some(pair[0])
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
