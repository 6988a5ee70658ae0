//! Service-level objectives in aiperf's goodput syntax, and the per-request verdict.
//!
//! `"time_to_first_token:400 inter_token_latency:40"`: each term names a metric and a
//! threshold in the metric's unit (ms for latencies, tokens/s for throughput). A request is
//! *good* when it completed and meets every term; goodput is good requests per second.
//!
//! A completed request can lack a value for a term: one output token has no ITL, no TTST and
//! no per-user token rate (they need two tokens), no output token has no TTFT. aiperf's rule
//! is that such a request is not good (`GoodRequestCountMetric._is_good` returns false on
//! `NoMetricValue`, which `InterTokenLatencyMetric` raises for an output sequence length
//! under 2; ai-dynamo/aiperf, `src/aiperf/metrics/types/good_request_count_metric.py` and
//! `inter_token_latency_metric.py`). canaryd follows it, but counts such a request apart
//! ([`Shortfall::NoValue`]), as "no ITL (1 output token)", never as an ITL miss.
//!
//! A response whose token events all came in one read shares one kernel stamp: its ITL and
//! TTST read 0 ms and it has no measured per-user rate, yet it is not without a value. Its
//! tokens came after the send and by its end, so its ITL is at most e2e / (n − 1), its TTST
//! at most its TTFT (the shared stamp, from the send) and its per-user rate at least
//! (n − 1) / e2e. Such a term is judged on that bound ([`Reading::Bound`]): met when the
//! bound meets the threshold, else not known ([`OutputTokens::OneRead`]), never a miss and
//! never a 0 ms that meets any threshold.
//!
//! A measured value is itself exact only when its times were stamped `kernel` (see
//! [`SloMetric::doubt`]): a first token read late makes TTFT an upper bound and ITL a lower
//! one. A judgement on such a value can go the other way ([`Uncertain`]): a TTFT miss on an
//! upper bound may be a meet, an ITL meet on a lower bound may be a miss. The counts stay
//! exact as counts of judgements; those that rest on a bound are counted apart.

use crate::record::{RequestRecord, RxSource};
use serde::{Deserialize, Serialize};

/// A metric an SLO can constrain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// TTFT, ms, lower is better.
    TimeToFirstToken,
    /// TTST, ms, lower is better.
    TimeToSecondToken,
    /// TTFO, ms, lower is better.
    TimeToFirstOutputToken,
    /// ITL, ms, lower is better.
    InterTokenLatency,
    /// End-to-end latency, ms, lower is better.
    RequestLatency,
    /// Output tokens/s per user, higher is better.
    OutputTokenThroughputPerUser,
}

impl SloMetric {
    const NAMES: [(&'static str, SloMetric); 6] = [
        ("time_to_first_token", SloMetric::TimeToFirstToken),
        ("time_to_second_token", SloMetric::TimeToSecondToken),
        (
            "time_to_first_output_token",
            SloMetric::TimeToFirstOutputToken,
        ),
        ("inter_token_latency", SloMetric::InterTokenLatency),
        ("request_latency", SloMetric::RequestLatency),
        (
            "output_token_throughput_per_user",
            SloMetric::OutputTokenThroughputPerUser,
        ),
    ];

    /// The metric's short name in printed text (`TTFT`, `ITL`, …).
    pub fn short_name(self) -> &'static str {
        match self {
            SloMetric::TimeToFirstToken => "TTFT",
            SloMetric::TimeToSecondToken => "TTST",
            SloMetric::TimeToFirstOutputToken => "TTFO",
            SloMetric::InterTokenLatency => "ITL",
            SloMetric::RequestLatency => "e2e",
            SloMetric::OutputTokenThroughputPerUser => "output tokens/s per user",
        }
    }

    /// aiperf's name for the metric.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, m)| *m == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    fn higher_is_better(self) -> bool {
        self == SloMetric::OutputTokenThroughputPerUser
    }

    /// Which way the request's measured value for the metric may be off the truth, by where
    /// its times came from (`rx`; none: canaryd's reads, upper bounds): a time not stamped
    /// `kernel` is late, so a latency from the send over it is an upper bound, and a gap that
    /// starts at it a lower one (the per-user rate, 1000 / ITL, the other way round).
    pub fn doubt(self, r: &RequestRecord) -> Doubt {
        let (first, end, events) = match &r.rx {
            Some(rx) => (
                rx.first_token != Some(RxSource::Kernel),
                rx.end != Some(RxSource::Kernel),
                rx.token_events_bound > 0,
            ),
            None => (true, true, true),
        };
        let late = |late: bool| if late { Doubt::Upper } else { Doubt::Exact };
        let gap = match (first, end) {
            (false, false) => Doubt::Exact,
            (true, false) => Doubt::Lower,
            (false, true) => Doubt::Upper,
            (true, true) => Doubt::Either,
        };
        match self {
            SloMetric::TimeToFirstToken => late(first),
            SloMetric::TimeToFirstOutputToken => late(first || events),
            SloMetric::RequestLatency => late(end),
            // Between two token events, either of which may be late.
            SloMetric::TimeToSecondToken if first || events => Doubt::Either,
            SloMetric::TimeToSecondToken => Doubt::Exact,
            SloMetric::InterTokenLatency => gap,
            SloMetric::OutputTokenThroughputPerUser => match gap {
                Doubt::Lower => Doubt::Upper,
                Doubt::Upper => Doubt::Lower,
                d => d,
            },
        }
    }

    /// The request's value for the metric: measured, only a bound (its token events shared
    /// one stamp, so the gap between them read 0), or none.
    pub fn reading(self, r: &RequestRecord) -> Reading {
        let measured = |v: Option<f64>| v.map_or(Reading::None, Reading::Measured);
        // ITL reads exactly 0 only when its first token and its end share one stamp.
        let one_read = r.itl_ms == Some(0.0);
        let n = r.output_token_count();
        let span = r.e2e_ms.filter(|&e| e > 0.0 && n > 1);
        match self {
            SloMetric::TimeToFirstToken => measured(r.ttft_ms),
            SloMetric::TimeToSecondToken => match (r.ttst_ms, r.ttft_ms) {
                // Both tokens after the send, the second by the shared stamp.
                (Some(0.0), Some(ttft)) => Reading::Bound(ttft),
                (t, _) => measured(t),
            },
            SloMetric::TimeToFirstOutputToken => measured(r.ttfo_ms),
            SloMetric::InterTokenLatency => match span {
                Some(e2e) if one_read => Reading::Bound(e2e / (n - 1) as f64),
                _ => measured(r.itl_ms),
            },
            SloMetric::RequestLatency => measured(r.e2e_ms),
            SloMetric::OutputTokenThroughputPerUser => match span {
                Some(e2e) if one_read && r.output_tokens_per_s.is_none() => {
                    Reading::Bound((n - 1) as f64 * 1000.0 / e2e)
                }
                _ => measured(r.output_tokens_per_s),
            },
        }
    }
}

/// A request's value for one SLO metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// Measured (exact or as the record's times are, see `rx`).
    Measured(f64),
    /// Only a bound on the side that can fail the SLO: an upper bound of a latency, a lower
    /// bound of the per-user rate. The request's token events shared one stamp.
    Bound(f64),
    /// No value (one output token has no ITL).
    None,
}

/// How a measured value may differ from the truth ([`SloMetric::doubt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doubt {
    /// Exact: every time it is over was stamped `kernel`.
    Exact,
    /// An upper bound: the truth is at most the value.
    Upper,
    /// A lower bound: the truth is at least the value.
    Lower,
    /// A bound in neither direction (a gap between two times either of which may be late).
    Either,
}

/// A judgement of one term on a measured value that is only a bound on the side that could
/// turn it: the truth may lie on the other side of the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncertain {
    /// Counted a miss, but the truth may meet the term (a TTFT miss on an upper bound).
    Miss,
    /// Counted met, but the truth may miss the term (an ITL meet on a lower bound).
    Meet,
}

/// How many output tokens a completed request without a value for a term produced: the
/// reason it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputTokens {
    /// No output token: no TTFT, nothing after it.
    None,
    /// One output token: no ITL, TTST or per-user token rate, which need two.
    One,
    /// Two or more whose token events came in one read (one kernel stamp): ITL, TTST and the
    /// per-user rate are only bounds, and this one's bound does not settle the term.
    OneRead,
    /// Two or more, yet no value (TTFO of a response that was all reasoning, say).
    Several,
}

impl OutputTokens {
    fn of(n: u32) -> OutputTokens {
        match n {
            0 => OutputTokens::None,
            1 => OutputTokens::One,
            _ => OutputTokens::Several,
        }
    }

    /// The reason in printed text: `1 output token`.
    pub fn describe(self) -> &'static str {
        match self {
            OutputTokens::None => "no output token",
            OutputTokens::One => "1 output token",
            OutputTokens::OneRead => "only a bound, which falls short: its tokens came in one read",
            OutputTokens::Several => "not measured",
        }
    }
}

/// Why a request is not good on one term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    /// It failed, or its value is past the threshold: a miss.
    Missed,
    /// It completed without a value for the metric (one output token has no ITL): not good,
    /// as in aiperf, but not a miss either.
    NoValue(OutputTokens),
}

/// One SLO term.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// The metric.
    pub metric: SloMetric,
    /// The threshold, in the metric's unit.
    pub threshold: f64,
}

/// A set of SLO terms that all must hold for a request to be good.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    /// The terms.
    pub slos: Vec<Slo>,
}

/// A goodput specification that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid goodput term {term:?}: {reason}")]
pub struct GoodputParseError {
    /// The offending `name:value` term.
    pub term: String,
    /// What is wrong with it.
    pub reason: String,
}

impl std::str::FromStr for Goodput {
    type Err = GoodputParseError;

    fn from_str(s: &str) -> Result<Goodput, GoodputParseError> {
        let mut slos = Vec::new();
        for term in s.split_whitespace() {
            let err = |reason: String| GoodputParseError {
                term: term.to_string(),
                reason,
            };
            let (name, value) = term
                .split_once(':')
                .ok_or_else(|| err("expected metric:threshold".into()))?;
            let metric = SloMetric::NAMES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, m)| *m)
                .ok_or_else(|| {
                    let known: Vec<_> = SloMetric::NAMES.iter().map(|(n, _)| *n).collect();
                    err(format!(
                        "unknown metric, expected one of {}",
                        known.join(", ")
                    ))
                })?;
            let threshold: f64 = value
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| err(format!("threshold {value:?} is not a non-negative number")))?;
            // Two thresholds for one metric would both be applied (the stricter wins) and
            // stored: almost surely a typo, refused as sweep lists refuse a value twice.
            if let Some(first) = slos.iter().find(|s: &&Slo| s.metric == metric) {
                return Err(err(format!(
                    "{name} is given twice (first as {name}:{}): give each metric one threshold",
                    crate::rate_text::number(first.threshold)
                )));
            }
            slos.push(Slo { metric, threshold });
        }
        Ok(Goodput { slos })
    }
}

impl Goodput {
    /// True when no SLO is set.
    pub fn is_empty(&self) -> bool {
        self.slos.is_empty()
    }

    /// The terms this request does not meet, and why. A failed request misses every term;
    /// a completed one without the metric's value (one output token has no ITL) falls short
    /// of it with [`Shortfall::NoValue`]. A request canaryd failed itself
    /// (`client_resources`) never reached the target and is not judged: none, as it is left
    /// out of `good_request_fraction` and `error_rate` (it is not good either).
    pub fn shortfalls(&self, r: &RequestRecord) -> Vec<(SloMetric, Shortfall)> {
        if r.error.as_ref().is_some_and(|e| e.kind.is_client_side()) {
            return Vec::new();
        }
        self.slos
            .iter()
            .filter_map(|slo| {
                if !r.is_ok() {
                    return Some((slo.metric, Shortfall::Missed));
                }
                let (v, bound) = match slo.metric.reading(r) {
                    Reading::None => {
                        let n = OutputTokens::of(r.output_token_count());
                        return Some((slo.metric, Shortfall::NoValue(n)));
                    }
                    Reading::Measured(v) => (v, false),
                    Reading::Bound(v) => (v, true),
                };
                let past = if slo.metric.higher_is_better() {
                    v < slo.threshold
                } else {
                    v > slo.threshold
                };
                match (past, bound) {
                    (false, _) => None,
                    (true, false) => Some((slo.metric, Shortfall::Missed)),
                    // The truth lies on the good side of the bound: it may meet the term.
                    (true, true) => Some((slo.metric, Shortfall::NoValue(OutputTokens::OneRead))),
                }
            })
            .collect()
    }

    /// The terms a completed request meets only on a bound (its token events shared one stamp,
    /// see [`Reading::Bound`]): judged good on them, and counted so.
    pub fn met_on_bound(&self, r: &RequestRecord) -> Vec<SloMetric> {
        if !r.is_ok() {
            return Vec::new();
        }
        self.slos
            .iter()
            .filter(|slo| match slo.metric.reading(r) {
                Reading::Bound(v) if slo.metric.higher_is_better() => v >= slo.threshold,
                Reading::Bound(v) => v <= slo.threshold,
                _ => false,
            })
            .map(|slo| slo.metric)
            .collect()
    }

    /// The terms of a completed request judged on a measured value that is a bound on the side
    /// that could turn the judgement ([`SloMetric::doubt`]), and which way they were judged.
    /// Failed requests miss for sure, and a one-read bound ([`Reading::Bound`]) is on the
    /// safe side when met (see [`Goodput::met_on_bound`]) and not a miss when short: none.
    pub fn uncertain(&self, r: &RequestRecord) -> Vec<(SloMetric, Uncertain)> {
        if !r.is_ok() {
            return Vec::new();
        }
        self.slos
            .iter()
            .filter_map(|slo| {
                let Reading::Measured(v) = slo.metric.reading(r) else {
                    return None;
                };
                // For a rate, "past" is below the threshold, and an upper bound hides a miss.
                let (past, hides_meet, hides_miss) = if slo.metric.higher_is_better() {
                    (v < slo.threshold, Doubt::Lower, Doubt::Upper)
                } else {
                    (v > slo.threshold, Doubt::Upper, Doubt::Lower)
                };
                let doubt = slo.metric.doubt(r);
                let turns = |side: Doubt| doubt == side || doubt == Doubt::Either;
                match past {
                    true if turns(hides_meet) => Some((slo.metric, Uncertain::Miss)),
                    false if turns(hides_miss) => Some((slo.metric, Uncertain::Meet)),
                    _ => None,
                }
            })
            .collect()
    }

    /// The terms this request misses: it failed, or its value is past the threshold. A term
    /// it has no value for is not among them (see [`Goodput::shortfalls`]).
    pub fn misses(&self, r: &RequestRecord) -> Vec<SloMetric> {
        self.shortfalls(r)
            .into_iter()
            .filter(|(_, s)| *s == Shortfall::Missed)
            .map(|(m, _)| m)
            .collect()
    }

    /// True when the request completed and meets every term (a term it has no value for is
    /// not met: aiperf's rule).
    pub fn is_good(&self, r: &RequestRecord) -> bool {
        r.is_ok() && self.shortfalls(r).is_empty()
    }
}

impl std::fmt::Display for Goodput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let terms: Vec<_> = self
            .slos
            .iter()
            .map(|s| format!("{}:{}", s.metric.name(), s.threshold))
            .collect();
        f.write_str(&terms.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Status;

    fn rec(ttft: f64, itl: f64) -> RequestRecord {
        RequestRecord {
            ttft_ms: Some(ttft),
            itl_ms: Some(itl),
            output_tokens_per_s: Some(1000.0 / itl),
            ..Default::default()
        }
    }

    #[test]
    fn parses_aiperf_syntax_and_judges() {
        let g: Goodput = "time_to_first_token:400 inter_token_latency:40"
            .parse()
            .unwrap();
        assert_eq!(g.slos.len(), 2);
        assert!(g.is_good(&rec(399.0, 40.0)));
        assert_eq!(
            g.misses(&rec(401.0, 10.0)),
            vec![SloMetric::TimeToFirstToken]
        );
        assert_eq!(
            g.to_string(),
            "time_to_first_token:400 inter_token_latency:40"
        );
        let mut failed = rec(1.0, 1.0);
        failed.status = Status::Error;
        assert!(!g.is_good(&failed));
    }

    // Two thresholds for one metric were both kept and applied (audit L3).
    #[test]
    fn a_metric_given_twice_is_refused_naming_it() {
        let e = "time_to_first_token:100 inter_token_latency:40 time_to_first_token:200"
            .parse::<Goodput>()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid goodput term \"time_to_first_token:200\": time_to_first_token is given \
             twice (first as time_to_first_token:100): give each metric one threshold"
        );
        assert!("time_to_first_token:100 time_to_first_token:100"
            .parse::<Goodput>()
            .is_err());
    }

    // Issue 16, item 4: a one-token output has no ITL; it was counted as an ITL miss.
    #[test]
    fn one_output_token_is_not_good_and_not_an_itl_miss() {
        let g: Goodput = "time_to_first_token:400 inter_token_latency:40"
            .parse()
            .unwrap();
        let one = RequestRecord {
            ttft_ms: Some(10.0),
            e2e_ms: Some(10.0),
            chunks: 1,
            ..Default::default()
        };
        assert!(!g.is_good(&one), "aiperf: no ITL value, not good");
        assert!(g.misses(&one).is_empty());
        assert_eq!(
            g.shortfalls(&one),
            vec![(
                SloMetric::InterTokenLatency,
                Shortfall::NoValue(OutputTokens::One)
            )]
        );
        // Past the TTFT threshold as well: that one is a miss.
        let slow = RequestRecord {
            ttft_ms: Some(500.0),
            ..one.clone()
        };
        assert_eq!(g.misses(&slow), vec![SloMetric::TimeToFirstToken]);
        // A TTFT-only SLO judges it on TTFT alone.
        let ttft: Goodput = "time_to_first_token:400".parse().unwrap();
        assert!(ttft.is_good(&one));
    }

    // A whole response in one read: its token events share one stamp, ITL and TTST read 0 and
    // the per-user rate was null, so "output_token_throughput_per_user:1000" counted the
    // fastest requests not good ("no output tokens/s per user (not measured)").
    #[test]
    fn one_read_is_judged_on_its_bound() {
        let one_read = RequestRecord {
            ttft_ms: Some(0.3),
            ttst_ms: Some(0.0),
            itl_ms: Some(0.0),
            e2e_ms: Some(0.3),
            output_tokens_per_s: None,
            chunks: 30,
            ..Default::default()
        };
        // At least 29 tokens over 0.3 ms: ≥ 96,667 tokens/s.
        let rate: Goodput = "output_token_throughput_per_user:1000".parse().unwrap();
        assert_eq!(
            SloMetric::OutputTokenThroughputPerUser.reading(&one_read),
            Reading::Bound(29.0 * 1000.0 / 0.3)
        );
        assert!(rate.is_good(&one_read));
        assert_eq!(
            rate.met_on_bound(&one_read),
            vec![SloMetric::OutputTokenThroughputPerUser]
        );
        // A bound short of the threshold settles nothing: not known, not a miss.
        let fast: Goodput = "output_token_throughput_per_user:200000".parse().unwrap();
        assert!(!fast.is_good(&one_read));
        assert!(fast.misses(&one_read).is_empty());
        assert_eq!(
            fast.shortfalls(&one_read),
            vec![(
                SloMetric::OutputTokenThroughputPerUser,
                Shortfall::NoValue(OutputTokens::OneRead)
            )]
        );
        // ITL read 0 ms, which met any threshold; it is at most 0.3 / 29 ms.
        let itl: Goodput = "inter_token_latency:0.001".parse().unwrap();
        assert!(!itl.is_good(&one_read), "0 ms is not a measured ITL");
        assert!(itl.misses(&one_read).is_empty());
        let itl: Goodput = "inter_token_latency:0.05 time_to_second_token:1"
            .parse()
            .unwrap();
        assert!(itl.is_good(&one_read));
        assert_eq!(itl.met_on_bound(&one_read).len(), 2);
        // TTST is at most the shared stamp's time from the send.
        let ttst: Goodput = "time_to_second_token:0.1".parse().unwrap();
        assert!(!ttst.is_good(&one_read));
        // A measured rate is judged as before.
        assert!(rate.met_on_bound(&rec(1.0, 10.0)).is_empty());
    }

    // Audit F5: a judgement on a late time can go the other way; which way depends on the
    // metric (a late first token lengthens TTFT, shortens ITL, raises the per-user rate).
    #[test]
    fn judgements_on_a_bound_are_uncertain_on_the_side_the_bound_can_turn() {
        use crate::record::RxTiming;
        let late_first = |mut r: RequestRecord| {
            r.rx = Some(RxTiming {
                first_token: Some(RxSource::KernelBound),
                end: Some(RxSource::Kernel),
                ..Default::default()
            });
            r
        };
        let g: Goodput = "time_to_first_token:10 inter_token_latency:5 \
                          output_token_throughput_per_user:100"
            .parse()
            .unwrap();
        // TTFT 12 (upper bound) missed, ITL 4 (lower bound) and 250 tok/s (upper) met.
        assert_eq!(
            g.uncertain(&late_first(rec(12.0, 4.0))),
            vec![
                (SloMetric::TimeToFirstToken, Uncertain::Miss),
                (SloMetric::InterTokenLatency, Uncertain::Meet),
                (SloMetric::OutputTokenThroughputPerUser, Uncertain::Meet),
            ]
        );
        // TTFT met on an upper bound is met; ITL 20 missed on a lower bound is missed.
        assert_eq!(g.uncertain(&late_first(rec(8.0, 20.0))), vec![]);
        // Every time stamped `kernel`: nothing uncertain.
        let mut exact = rec(12.0, 4.0);
        exact.rx = Some(RxTiming {
            first_token: Some(RxSource::Kernel),
            end: Some(RxSource::Kernel),
            ..Default::default()
        });
        assert_eq!(g.uncertain(&exact), vec![]);
        // No stamps at all (canaryd's reads): both ends late, ITL a bound either way.
        assert_eq!(
            SloMetric::InterTokenLatency.doubt(&rec(1.0, 1.0)),
            Doubt::Either
        );
        // A failed request misses for sure.
        let mut failed = late_first(rec(12.0, 4.0));
        failed.status = Status::Error;
        assert!(g.uncertain(&failed).is_empty());
    }

    #[test]
    fn throughput_is_higher_is_better() {
        let g: Goodput = "output_token_throughput_per_user:50".parse().unwrap();
        assert!(g.is_good(&rec(1.0, 10.0))); // 100 tok/s
        assert!(!g.is_good(&rec(1.0, 40.0))); // 25 tok/s
    }

    #[test]
    fn rejects_bad_terms_with_the_term_named() {
        let e = "ttft:400".parse::<Goodput>().unwrap_err();
        assert_eq!(e.term, "ttft:400");
        assert!(e.to_string().contains("time_to_first_token"), "{e}");
        let e = "request_latency:-1".parse::<Goodput>().unwrap_err();
        assert!(e.reason.contains("non-negative"), "{e}");
        assert!("request_latency".parse::<Goodput>().is_err());
        assert!("".parse::<Goodput>().unwrap().is_empty());
    }
}
