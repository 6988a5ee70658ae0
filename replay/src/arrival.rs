//! Arrival processes of an open-loop rate: when each generated request is due.
//!
//! Gaps between arrivals are drawn from one seeded generator, so the same seed gives the same
//! schedule on every host. Constant gaps are `1/rate`; Poisson gaps are exponential with mean
//! `1/rate` (coefficient of variation 1); gamma gaps have shape `k` (aiperf's
//! `--arrival-smoothness`) and the same mean, so their coefficient of variation is `1/√k`:
//! `k = 1` is Poisson, larger is smoother, smaller is burstier.

use canary_core::splitmix64;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How the gaps between arrivals are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArrivalPattern {
    /// Every gap is `1/rate`.
    Constant,
    /// Exponential gaps: a Poisson process.
    Poisson,
    /// Gamma gaps of this shape (the smoothness); 1 is Poisson.
    Gamma(f64),
}

impl ArrivalPattern {
    /// The pattern's name, as `--arrival-pattern` takes it.
    pub fn name(self) -> &'static str {
        match self {
            ArrivalPattern::Constant => "constant",
            ArrivalPattern::Poisson => "poisson",
            ArrivalPattern::Gamma(_) => "gamma",
        }
    }

    /// The coefficient of variation of its gaps (standard deviation over mean).
    pub fn cv(self) -> f64 {
        match self {
            ArrivalPattern::Constant => 0.0,
            ArrivalPattern::Poisson => 1.0,
            ArrivalPattern::Gamma(k) => 1.0 / k.sqrt(),
        }
    }
}

impl fmt::Display for ArrivalPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArrivalPattern::Gamma(k) => write!(f, "gamma (smoothness {k})"),
            p => f.write_str(p.name()),
        }
    }
}

/// `constant`, `poisson` or `gamma` (shape 1 until a smoothness is given).
impl FromStr for ArrivalPattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "constant" => Ok(ArrivalPattern::Constant),
            "poisson" => Ok(ArrivalPattern::Poisson),
            "gamma" => Ok(ArrivalPattern::Gamma(1.0)),
            _ => Err(format!("expected constant, poisson or gamma, found {s:?}")),
        }
    }
}

/// A seeded source of uniform and derived random numbers (SplitMix64: portable, so a seed
/// means the same sequence everywhere).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`; `stream` separates independent uses of one seed
    /// (arrival gaps, input lengths, output lengths).
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng {
            state: splitmix64(seed ^ splitmix64(stream)),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix64(self.state)
    }

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Exponential with mean 1.
    pub fn exponential(&mut self) -> f64 {
        -self.uniform().ln()
    }

    /// Gamma with shape `k` and scale 1 (Marsaglia and Tsang; shapes below 1 boosted by
    /// `U^(1/k)`).
    pub fn gamma(&mut self, k: f64) -> f64 {
        if k < 1.0 {
            return self.gamma(k + 1.0) * self.uniform().powf(1.0 / k);
        }
        let d = k - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.uniform();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}

/// Arrival times of an open-loop rate, from 0, in order.
#[derive(Debug, Clone)]
pub struct Arrivals {
    rate: f64,
    pattern: ArrivalPattern,
    rng: Rng,
    /// Seconds from the start to the next arrival.
    next: f64,
}

impl Arrivals {
    /// Arrivals at `rate` per second (positive, finite) drawn with `pattern` from `seed`. The
    /// first is at 0.
    pub fn new(rate: f64, pattern: ArrivalPattern, seed: u64) -> Arrivals {
        Arrivals {
            rate,
            pattern,
            rng: Rng::new(seed, 0x6172_7269_7661_6c73), // "arrivals"
            next: 0.0,
        }
    }

    fn gap(&mut self) -> f64 {
        let mean = 1.0 / self.rate;
        match self.pattern {
            ArrivalPattern::Constant => mean,
            ArrivalPattern::Poisson => mean * self.rng.exponential(),
            ArrivalPattern::Gamma(k) => mean / k * self.rng.gamma(k),
        }
    }
}

impl Iterator for Arrivals {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let at = self.next;
        self.next += self.gap();
        Duration::try_from_secs_f64(at).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cv(gaps: &[f64]) -> (f64, f64) {
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt() / mean)
    }

    fn gaps(pattern: ArrivalPattern, n: usize) -> Vec<f64> {
        let times: Vec<f64> = Arrivals::new(100.0, pattern, 7)
            .take(n + 1)
            .map(|d| d.as_secs_f64())
            .collect();
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[test]
    fn each_pattern_has_the_rate_and_variation_it_promises() {
        for (pattern, want_cv) in [
            (ArrivalPattern::Constant, 0.0),
            (ArrivalPattern::Poisson, 1.0),
            (ArrivalPattern::Gamma(4.0), 0.5),
            (ArrivalPattern::Gamma(0.25), 2.0),
        ] {
            let (mean, got) = cv(&gaps(pattern, 50_000));
            assert!((mean - 0.01).abs() < 0.0005, "{pattern}: mean gap {mean}");
            assert!(
                (got - want_cv).abs() < 0.05 * want_cv.max(1.0),
                "{pattern}: cv {got}, want {want_cv}"
            );
            assert_eq!(pattern.cv(), want_cv);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let a: Vec<_> = Arrivals::new(5.0, ArrivalPattern::Poisson, 1)
            .take(5)
            .collect();
        let b: Vec<_> = Arrivals::new(5.0, ArrivalPattern::Poisson, 1)
            .take(5)
            .collect();
        let c: Vec<_> = Arrivals::new(5.0, ArrivalPattern::Poisson, 2)
            .take(5)
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a[0], Duration::ZERO);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn normal_draws_have_mean_0_and_deviation_1() {
        let mut rng = Rng::new(3, 0);
        let xs: Vec<f64> = (0..50_000).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let sd = (xs.iter().map(|x| x * x).sum::<f64>() / xs.len() as f64).sqrt();
        assert!(mean.abs() < 0.02 && (sd - 1.0).abs() < 0.02, "{mean} {sd}");
    }

    #[test]
    fn patterns_parse_by_name() {
        assert_eq!("Poisson".parse(), Ok(ArrivalPattern::Poisson));
        assert_eq!("constant".parse(), Ok(ArrivalPattern::Constant));
        assert_eq!("gamma".parse(), Ok(ArrivalPattern::Gamma(1.0)));
        assert!("burst".parse::<ArrivalPattern>().is_err());
    }
}
