//! A run's verdict: `pass`, `fail` (an SLO, the goodput floor or the error budget missed, and
//! which), `error` (the run could not be carried out: target down, trace unreadable) or
//! `interrupted` (a signal stopped it: a deploy or a restart, neither a pass nor an error).

use crate::config::Workload;
use canary_core::RunSummary;
use serde::{Deserialize, Serialize};

/// The four outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Every criterion met.
    Pass,
    /// The server answered, but not well enough.
    Fail,
    /// No judgement possible.
    Error,
    /// A signal (a deploy, a restart) stopped the run: its figures are partial, nothing is
    /// judged, and it is kept out of baselines. Written as `error: interrupted` before it
    /// was a kind of its own ([`Verdict::read`]).
    Interrupted,
}

impl VerdictKind {
    /// Every kind, in report order.
    pub const ALL: [VerdictKind; 4] = [
        VerdictKind::Pass,
        VerdictKind::Fail,
        VerdictKind::Error,
        VerdictKind::Interrupted,
    ];

    /// `pass`, `fail`, `error` or `interrupted`.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Pass => "pass",
            VerdictKind::Fail => "fail",
            VerdictKind::Error => "error",
            VerdictKind::Interrupted => "interrupted",
        }
    }

    /// Parses [`as_str`](Self::as_str)'s output.
    pub fn parse(s: &str) -> Option<VerdictKind> {
        VerdictKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A verdict and the reasons for it (empty for `pass`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The outcome.
    pub kind: VerdictKind,
    /// Why: each missed criterion, or what made the run impossible.
    pub reasons: Vec<String>,
}

/// The first reasons an older canaryd (before `interrupted` was a verdict kind of its own,
/// ae4749e) wrote for an interrupted run's `error` verdict, and the reason each reads as:
/// the judge's `Verdict::error("interrupted")`, and the daemon's trace load stopped by a
/// signal (`interrupted while loading the trace`, cdc41ac).
const OLD_INTERRUPTED: [(&str, Option<&str>); 2] = [
    ("interrupted", None),
    (
        "interrupted while loading the trace",
        Some("while loading the trace"),
    ),
];

impl Verdict {
    /// The run could not be carried out.
    pub fn error(reason: impl Into<String>) -> Verdict {
        Verdict {
            kind: VerdictKind::Error,
            reasons: vec![reason.into()],
        }
    }

    /// A signal stopped the run: `interrupted`.
    pub fn interrupted() -> Verdict {
        Verdict {
            kind: VerdictKind::Interrupted,
            reasons: Vec::new(),
        }
    }

    /// A verdict as stored (a history row, a `verdict.json`): its kind and reasons, with an
    /// interrupted run as an older canaryd wrote it read as `interrupted`: kind `error` and a
    /// first reason that is exactly one of the two texts it wrote ([`OLD_INTERRUPTED`]:
    /// `interrupted`, and `interrupted while loading the trace` from the daemon's trace
    /// load). Any other error stays an error, even one starting with the word (the CLI
    /// sweep's `interrupted before anything was sent` is an error verdict, and `/metrics`
    /// counts it as one).
    pub fn read(kind: VerdictKind, reasons: Vec<String>) -> Verdict {
        if kind != VerdictKind::Error {
            return Verdict { kind, reasons };
        }
        let Some((first, rest)) = reasons.split_first() else {
            return Verdict { kind, reasons };
        };
        let why = match OLD_INTERRUPTED.iter().find(|(old, _)| first == old) {
            Some((_, why)) => why,
            None => return Verdict { kind, reasons },
        };
        Verdict {
            kind: VerdictKind::Interrupted,
            reasons: why
                .iter()
                .map(|w| w.to_string())
                .chain(rest.iter().cloned())
                .collect(),
        }
    }

    /// The verdict of a run that ended with `summary`, judged by the workload's criteria.
    pub fn judge(w: &Workload, summary: &RunSummary, interrupted: bool) -> Verdict {
        Verdict::judge_by(&Criteria::of(w), summary, interrupted)
    }

    /// The verdict of a run that ended with `summary`, judged by `c`.
    pub fn judge_by(c: &Criteria, summary: &RunSummary, interrupted: bool) -> Verdict {
        if interrupted {
            // Neither a pass nor an error: partial figures judge nothing, and a deploy or a
            // restart is no fault of the target's.
            return Verdict::interrupted();
        }
        if summary.requests == 0 {
            return Verdict::error("no request was sent");
        }
        // Requests canaryd could not send for lack of its own resources say nothing of the
        // target; too many of them, and the run measured canaryd instead.
        let client = summary.client_errors;
        let client_share = client as f64 / summary.requests as f64;
        if client > 0 && (client_share > c.max_error_rate || summary.completed == 0) {
            return Verdict::error(format!(
                "canaryd was the bottleneck: {client} of {} requests failed for lack of its own \
                 resources (client_resources), not judged against the target",
                summary.requests
            ));
        }
        if summary.completed == 0 && summary.errors == 0 {
            // Every request cancelled on purpose: the target did nothing wrong, nor right.
            return Verdict::error(format!(
                "nothing to judge: all {} requests were cancelled on purpose \
                 (--request-cancellation-rate)",
                summary.requests
            ));
        }
        if summary.completed == 0 {
            // With their statuses: `http_status: 7 (429 ×4, 503 ×3)`.
            let kinds = canary_core::error_kinds_text(summary, ": ");
            // The commonest cause, so the verdict says why (`Connection refused`), not only how.
            let cause = summary
                .error_causes
                .first()
                .map(|c| format!("; top cause: {c}"))
                .unwrap_or_default();
            return Verdict::error(format!(
                "target unusable: none of {} requests completed ({kinds}){cause}",
                summary.requests,
            ));
        }
        let mut reasons = Vec::new();
        // A null share (no request judged) neither passes nor fails by itself: every run
        // that has one completed nothing and was given its error above.
        if let Some(rate) = summary.error_rate.filter(|&r| r > c.max_error_rate) {
            // Which errors, so a 429 (slow down) reads apart from a 503 (overloaded).
            reasons.push(format!(
                "error rate {rate:.3} above max_error_rate {} ({})",
                c.max_error_rate,
                canary_core::error_kinds_text(summary, ": ")
            ));
        }
        // Said on a pass that could be a fail within the bounds; the pass stands.
        let mut caveats = Vec::new();
        if let Some(g) = &summary.goodput {
            let range = GoodRange::of(summary);
            let passed = g
                .good_request_fraction
                .is_none_or(|f| f >= c.min_good_fraction);
            let flip = match passed {
                true => range.and_then(|r| r.could_flip(true, c.min_good_fraction)),
                false => None,
            };
            if let Some(words) = flip {
                caveats.push(format!(
                    "good-request fraction {} meets min_good_fraction {}, which {words}",
                    share(g.good_request_fraction),
                    c.min_good_fraction
                ));
            }
            if let Some(good) = g.good_request_fraction.filter(|&f| f < c.min_good_fraction) {
                // A one-token output is not good (aiperf's rule), but it has no ITL to miss.
                let misses: Vec<String> = g
                    .misses_by_metric
                    .iter()
                    .map(|(m, n)| format!("{m}: {n} missed"))
                    .chain(g.no_value.iter().map(|v| v.to_string()))
                    .collect();
                // A fail the bounds could turn into a pass says so: the decision stands (the
                // run is judged on what it judged), but it is not established.
                let flips = range
                    .and_then(|r| r.could_flip(false, c.min_good_fraction))
                    .map_or(String::new(), |w| format!(", which {w}"));
                reasons.push(format!(
                    "good-request fraction {good:.3} below min_good_fraction {} ({}){flips}",
                    c.min_good_fraction,
                    misses.join(", ")
                ));
            }
        }
        let kind = if reasons.is_empty() {
            VerdictKind::Pass
        } else {
            VerdictKind::Fail
        };
        if kind == VerdictKind::Pass {
            reasons = caveats;
        }
        Verdict { kind, reasons }
    }
}

/// The words every verdict, capacity line and table uses for a goodput decision that the
/// bounds could turn ([`GoodRange::could_flip`]); a probe's verdict carrying them is a
/// bracket end not established ([`crate::capacity::Capacity::note_bounds`]).
pub const ON_BOUNDS: &str = "rests on bounds";

/// A run's good count with the range its judgements on a bound leave it in (`summary.json`'s
/// `good_requests`, `good_requests_at_least`, `good_requests_at_most`, `uncertain_misses`,
/// `uncertain_meets`), over the requests judged (`requests − client_errors − cancelled`, the
/// good fraction's denominator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GoodRange {
    /// Requests judged.
    pub judged: u64,
    /// Judged good.
    pub good: u64,
    /// Truly good at least.
    pub at_least: u64,
    /// Truly good at most.
    pub at_most: u64,
    /// Judgements that rest on a bound (uncertain misses and meets).
    pub on_bound: u64,
}

impl GoodRange {
    /// The range of `s`, when it has SLOs and states one (a summary written before the range
    /// was counted has none: nothing is claimed of it).
    pub fn of(s: &RunSummary) -> Option<GoodRange> {
        let g = s.goodput.as_ref()?;
        let judged = s
            .requests
            .saturating_sub(s.client_errors)
            .saturating_sub(s.cancelled);
        Some(GoodRange {
            judged,
            good: g.good_requests,
            at_least: g.good_requests_at_least?,
            at_most: g.good_requests_at_most?,
            on_bound: g.uncertain_misses.values().sum::<u64>()
                + g.uncertain_meets.values().sum::<u64>(),
        })
    }

    /// Whether some judgement rests on a bound: the good count is exact as a count of
    /// judgements, the truth anywhere from `at_least` to `at_most`.
    pub fn uncertain(&self) -> bool {
        self.on_bound > 0 || self.at_least != self.at_most
    }

    /// The ranges of several runs summed (a point's or an experiment's runs).
    pub fn sum(all: impl IntoIterator<Item = GoodRange>) -> GoodRange {
        all.into_iter()
            .fold(GoodRange::default(), |a, r| GoodRange {
                judged: a.judged + r.judged,
                good: a.good + r.good,
                at_least: a.at_least + r.at_least,
                at_most: a.at_most + r.at_most,
                on_bound: a.on_bound + r.on_bound,
            })
    }

    /// The good fraction's ends, `at_least / judged` and `at_most / judged`; `None` when
    /// nothing was judged.
    pub fn fractions(&self) -> Option<(f64, f64)> {
        (self.judged > 0).then(|| {
            let n = self.judged as f64;
            (self.at_least as f64 / n, self.at_most as f64 / n)
        })
    }

    /// `rests on bounds: up to 98.8 % may be good (276 judgements rest on a bound)` when a
    /// decision against `min` (`passed` or failed) could go the other way within the range: a
    /// fail while `at_most / judged ≥ min`, a pass while `at_least / judged < min`. `None`
    /// when the decision holds at both ends.
    pub fn could_flip(&self, passed: bool, min: f64) -> Option<String> {
        let (low, high) = self.fractions()?;
        let n = self.on_bound;
        let judgements = format!(
            "{n} judgement{} rest{} on a bound",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" }
        );
        match passed {
            false if high >= min => Some(format!(
                "{ON_BOUNDS}: up to {} % may be good ({judgements}; truly good {} to {} of {})",
                percent(high),
                self.at_least,
                self.at_most,
                self.judged
            )),
            true if low < min => Some(format!(
                "{ON_BOUNDS}: as few as {} % may be good ({judgements}; truly good {} to {} of \
                 {})",
                percent(low),
                self.at_least,
                self.at_most,
                self.judged
            )),
            _ => None,
        }
    }
}

/// A share as a percentage to one decimal (two near 0 and 100 %, so a share short of all
/// or above none does not read as either so soon).
pub fn percent(f: f64) -> String {
    let p = f * 100.0;
    if (p > 99.95 && p < 100.0) || (p > 0.0 && p < 0.05) {
        format!("{p:.2}")
    } else {
        format!("{p:.1}")
    }
}

/// What a run must show to pass: the daemon's `max_error_rate` and `min_good_fraction`
/// (the latter over the run's SLOs, when it has any). Any run in which no request completed is
/// an `error`, whatever they say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Criteria {
    /// The most of the target's errors over the requests it was sent.
    pub max_error_rate: f64,
    /// The least share of good requests, when the run has SLOs.
    pub min_good_fraction: f64,
}

impl Criteria {
    /// No bar but that something completed: an error rate up to 1, any good fraction.
    pub const NONE: Criteria = Criteria {
        max_error_rate: 1.0,
        min_good_fraction: 0.0,
    };

    /// A workload's criteria.
    pub fn of(w: &Workload) -> Criteria {
        Criteria {
            max_error_rate: w.max_error_rate,
            min_good_fraction: w.min_good_fraction,
        }
    }

    /// The figures a verdict rests on, each beside its bar, for a log line:
    /// `20 requests, 20 completed; error rate 0.000 (max 0.05); good 0.950 (min 0.9) over
    /// time_to_first_token:100; TTFT p50 12.100 ms, p99 40.300 ms`.
    /// Requests the run's own stop cut when its grace period ran out (`cancelled` errors)
    /// are said as such and left out of the error rate shown: they are no failure of the
    /// target (`error rate 1.000` read as one).
    pub fn figures(&self, s: &RunSummary) -> String {
        let stopped = s.errors_by_kind.get("cancelled").copied().unwrap_or(0);
        let (requests, error_rate) = match stopped {
            0 => (
                format!("{} requests, {} completed", s.requests, s.completed),
                share(s.error_rate),
            ),
            _ => {
                let judged = s
                    .requests
                    .saturating_sub(s.client_errors + s.cancelled + stopped);
                let errors = s.errors.saturating_sub(s.client_errors + stopped);
                let rate = (judged > 0).then(|| errors as f64 / judged as f64);
                (
                    format!(
                        "{} requests, {} completed, {stopped} cut by the stop",
                        s.requests, s.completed
                    ),
                    format!("{} without them", share(rate)),
                )
            }
        };
        let mut parts = vec![
            requests,
            format!("error rate {error_rate} (max {})", self.max_error_rate),
        ];
        match &s.goodput {
            Some(g) => parts.push(format!(
                "good {} (min {}) over {}",
                share(g.good_request_fraction),
                self.min_good_fraction,
                g.slos
            )),
            None => parts.push("no SLOs".into()),
        }
        if let Some(t) = s.metrics.get("time_to_first_token") {
            parts.push(format!("TTFT p50 {:.3} ms, p99 {:.3} ms", t.p50, t.p99));
        }
        parts.join("; ")
    }
}

/// A share to three decimals, or `no share` when nothing was judged (the printed table's
/// words).
fn share(v: Option<f64>) -> String {
    v.map_or_else(|| "no share".to_string(), |v| format!("{v:.3}"))
}

impl std::fmt::Display for Verdict {
    /// `pass`, `fail: …; …`, `error: …` or `interrupted`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind.as_str())?;
        if !self.reasons.is_empty() {
            write!(f, ": {}", self.reasons.join("; "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::{Aggregator, ErrorKind, RequestError, RequestRecord, Status};

    fn workload() -> Workload {
        let text = "[targets.t]\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n\
                    [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1m\"\n\
                    slos = \"time_to_first_token:100\"\nmin_good_fraction = 0.9\n";
        let c = crate::config::Config::parse(
            text,
            std::path::Path::new("c.toml"),
            std::path::Path::new("/"),
        )
        .unwrap();
        c.workloads[0].clone()
    }

    fn rec(ttft: Option<f64>) -> RequestRecord {
        let mut r = RequestRecord {
            ttft_ms: ttft,
            e2e_ms: ttft.map(|t| t + 50.0),
            ..Default::default()
        };
        if ttft.is_none() {
            r.status = Status::Error;
            r.error = Some(RequestError {
                kind: ErrorKind::Timeout,
                http_status: None,
                message: String::new(),
            });
        }
        r
    }

    fn judge(ttfts: &[Option<f64>], interrupted: bool) -> Verdict {
        let w = workload();
        let mut agg = Aggregator::new(w.slos.clone());
        for t in ttfts {
            agg.add(&rec(*t), &Default::default());
        }
        Verdict::judge(&w, &agg.summary(), interrupted)
    }

    #[test]
    fn pass_fail_and_error_say_why() {
        assert_eq!(judge(&[Some(10.0); 20], false).to_string(), "pass");

        let mut slow = vec![Some(10.0); 17];
        slow.extend([Some(500.0); 3]);
        let v = judge(&slow, false);
        assert_eq!(v.kind, VerdictKind::Fail);
        assert!(v.to_string().contains("good-request fraction 0.850"), "{v}");
        assert!(
            v.to_string().contains("time_to_first_token: 3 missed"),
            "{v}"
        );

        let mut failing = vec![Some(10.0); 18];
        failing.extend([None; 2]);
        let v = judge(&failing, false);
        assert!(v.to_string().contains("error rate 0.100"), "{v}");

        let v = judge(&[None; 5], false);
        assert_eq!(v.kind, VerdictKind::Error);
        assert!(
            v.to_string()
                .contains("none of 5 requests completed (timeout: 5)"),
            "{v}"
        );

        assert_eq!(judge(&[], false).kind, VerdictKind::Error);
    }

    /// A run a signal stopped (a deploy, a restart) is `interrupted`, neither an error (it
    /// raised the error alerts at every deploy) nor a pass, whatever its partial figures say.
    #[test]
    fn an_interrupted_run_is_its_own_verdict_never_a_pass_or_an_error() {
        let c = Criteria::of(&workload());
        for (ttfts, why) in [
            (vec![Some(10.0); 20], "figures that would pass"),
            (vec![Some(500.0); 20], "figures that would fail"),
            (vec![None; 5], "nothing completed"),
        ] {
            let w = workload();
            let mut agg = Aggregator::new(w.slos.clone());
            for t in &ttfts {
                agg.add(&rec(*t), &Default::default());
            }
            assert_ne!(
                Verdict::judge_by(&c, &agg.summary(), false).kind,
                VerdictKind::Interrupted
            );
            let v = Verdict::judge_by(&c, &agg.summary(), true);
            assert_eq!(v.kind, VerdictKind::Interrupted, "{why}: {v}");
            assert_eq!(v.to_string(), "interrupted", "{why}");
        }
        assert_eq!(judge(&[Some(10.0); 3], true), Verdict::interrupted());
        // Its own series: `canaryd_last_run_verdict{verdict="interrupted"}`.
        assert_eq!(
            VerdictKind::parse("interrupted"),
            Some(VerdictKind::Interrupted)
        );
        assert!(VerdictKind::ALL.contains(&VerdictKind::Interrupted));
        let json = serde_json::to_value(VerdictKind::Interrupted).unwrap();
        assert_eq!(json, "interrupted");
    }

    /// A history row or a `verdict.json` an older canaryd wrote for an interrupted run (kind
    /// `error`, reasons `["interrupted"]`: `error: interrupted`) reads as `interrupted`; an
    /// error whose reason only mentions the word stays an error.
    #[test]
    fn an_interrupted_run_written_as_an_error_reads_as_interrupted() {
        let old = |reasons: &[&str]| {
            Verdict::read(
                VerdictKind::parse("error").unwrap(),
                reasons.iter().map(|r| r.to_string()).collect(),
            )
        };
        assert_eq!(old(&["interrupted"]), Verdict::interrupted());
        assert_eq!(old(&["interrupted"]).to_string(), "interrupted");
        let v = old(&["interrupted while loading the trace"]);
        assert_eq!(v.kind, VerdictKind::Interrupted);
        assert_eq!(v.to_string(), "interrupted: while loading the trace");
        // verdict.json's fields, as the old code wrote them.
        let file: serde_json::Value = serde_json::from_str(
            r#"{"verdict": "error: interrupted", "verdict_kind": "error", "reasons": ["interrupted"]}"#,
        )
        .unwrap();
        let v = Verdict::read(
            serde_json::from_value(file["verdict_kind"].clone()).unwrap(),
            serde_json::from_value(file["reasons"].clone()).unwrap(),
        );
        assert_eq!(v, Verdict::interrupted());
        for error in [
            "target unusable: none of 5 requests completed (http_status: 5); top cause: \
             interrupted",
            "interruptedness",
            "no verdict.json: the process died or its results could not be written",
            // The CLI sweep's own error verdicts (cli/sweep/point.rs): errors, not
            // interrupted runs an old binary wrote.
            "interrupted before anything was sent",
            "interrupted after 2 of 5 runs",
            "interrupted while loading the trace: and more",
            " interrupted",
        ] {
            assert_eq!(old(&[error]).kind, VerdictKind::Error, "{error}");
        }
        assert_eq!(old(&[]).kind, VerdictKind::Error);
        let fail = Verdict::read(VerdictKind::Fail, vec!["interrupted".into()]);
        assert_eq!(fail.kind, VerdictKind::Fail);
    }

    // Issue 16, item 6: an unreachable target's verdict named the error kind, not its cause.
    #[test]
    fn a_target_that_refuses_every_connection_says_so() {
        let w = workload();
        let mut agg = Aggregator::new(w.slos.clone());
        let mut r = rec(None);
        r.error = Some(RequestError {
            kind: ErrorKind::Connect,
            http_status: None,
            message: "connect to 127.0.0.1:9: Connection refused (os error 111)".into(),
        });
        for _ in 0..3 {
            agg.add(&r, &Default::default());
        }
        let v = Verdict::judge(&w, &agg.summary(), false).to_string();
        assert!(
            v.ends_with(
                "(connect: 3); top cause: 3 × connect: connect to 127.0.0.1:9: Connection \
                 refused (os error 111)"
            ),
            "{v}"
        );
    }

    // Issue 16, item 4: one-token outputs were reported as ITL misses.
    #[test]
    fn one_token_outputs_are_named_apart_from_itl_misses() {
        let mut w = workload();
        w.slos = "time_to_first_token:100 inter_token_latency:40"
            .parse()
            .unwrap();
        let mut agg = Aggregator::new(w.slos.clone());
        let mut r = rec(Some(10.0));
        r.itl_ms = Some(5.0);
        r.chunks = 4;
        for _ in 0..8 {
            agg.add(&r, &Default::default());
        }
        r.itl_ms = None;
        r.chunks = 1;
        agg.add(&r, &Default::default());
        agg.add(&r, &Default::default());
        let v = Verdict::judge(&w, &agg.summary(), false);
        assert_eq!(v.kind, VerdictKind::Fail);
        let text = v.to_string();
        assert!(text.contains("no ITL (1 output token): 2"), "{text}");
        assert!(!text.contains("inter_token_latency: 2 missed"), "{text}");
    }

    // Issue 14, item 7: canaryd out of file descriptors failed the target's verdict.
    #[test]
    fn the_clients_own_failures_never_fail_the_target() {
        let w = workload();
        let judge = |ok: usize, client: usize| {
            let mut agg = Aggregator::new(w.slos.clone());
            for _ in 0..ok {
                agg.add(&rec(Some(10.0)), &Default::default());
            }
            for _ in 0..client {
                let mut r = rec(None);
                r.error.as_mut().unwrap().kind = ErrorKind::ClientResources;
                agg.add(&r, &Default::default());
            }
            Verdict::judge(&w, &agg.summary(), false)
        };
        // 1 in 50 is within max_error_rate (0.05): judged on the other 49, which pass.
        assert_eq!(judge(49, 1).to_string(), "pass");
        // 10 in 50: the run measured canaryd, not the target.
        let v = judge(40, 10);
        assert_eq!(v.kind, VerdictKind::Error);
        assert!(
            v.to_string()
                .contains("canaryd was the bottleneck: 10 of 50 requests"),
            "{v}"
        );
        let v = judge(0, 3);
        assert!(v.to_string().contains("canaryd was the bottleneck"), "{v}");
        assert!(!v.to_string().contains("target unusable"), "{v}");
    }

    /// Requests the daemon's own stop cut (its grace period over) showed as `error rate
    /// 1.000 (max 0.05)` in the run's log line, as if the target had failed them.
    #[test]
    fn requests_cut_by_the_stop_are_not_shown_as_target_errors() {
        let w = workload();
        let mut agg = Aggregator::new(w.slos.clone());
        for i in 0..6 {
            let mut r = rec(Some(10.0));
            if i >= 2 {
                r.status = Status::Error;
                r.error = Some(RequestError {
                    kind: ErrorKind::Cancelled,
                    http_status: None,
                    message: "run stopped; grace period over".into(),
                });
            }
            if i == 5 {
                r.error.as_mut().unwrap().kind = ErrorKind::Timeout;
            }
            agg.add(&r, &Default::default());
        }
        let s = agg.summary();
        let figures = Criteria::of(&w).figures(&s);
        assert!(
            figures.starts_with(
                "6 requests, 2 completed, 3 cut by the stop; error rate 0.333 without them \
                 (max 0.05);"
            ),
            "{figures}"
        );
        // Every request cut: no rate, not 1.000.
        let mut agg = Aggregator::new(w.slos.clone());
        for _ in 0..4 {
            let mut r = rec(None);
            r.error.as_mut().unwrap().kind = ErrorKind::Cancelled;
            agg.add(&r, &Default::default());
        }
        let figures = Criteria::of(&w).figures(&agg.summary());
        assert!(
            figures.starts_with(
                "4 requests, 0 completed, 4 cut by the stop; error rate no share without them"
            ),
            "{figures}"
        );
    }

    // Audit 2b: a fail (or pass) against min_good_fraction that judgements made on bounds
    // could turn said nothing of it. The decision stands; its reason says it rests on bounds.
    #[test]
    fn a_decision_the_bounds_could_turn_says_so() {
        let w = workload();
        let s = |good: u64, at_least: u64, at_most: u64| {
            let mut agg = Aggregator::new(w.slos.clone());
            for _ in 0..20 {
                agg.add(&rec(Some(10.0)), &Default::default());
            }
            let mut s = agg.summary();
            let g = s.goodput.as_mut().unwrap();
            g.good_requests = good;
            g.good_request_fraction = Some(good as f64 / 20.0);
            g.good_requests_at_least = Some(at_least);
            g.good_requests_at_most = Some(at_most);
            g.uncertain_misses
                .insert("time_to_first_token".into(), at_most - good);
            g.uncertain_meets
                .insert("inter_token_latency".into(), good - at_least);
            s
        };
        // 15 of 20 judged good, up to 19: a fail the truth could pass.
        let v = Verdict::judge(&w, &s(15, 15, 19), false);
        assert_eq!(v.kind, VerdictKind::Fail);
        assert!(
            v.to_string().ends_with(
                ", which rests on bounds: up to 95.0 % may be good (4 judgements rest on a \
                 bound; truly good 15 to 19 of 20)"
            ),
            "{v}"
        );
        // Up to 17 of 20: the fail holds at both ends.
        let v = Verdict::judge(&w, &s(15, 15, 17), false);
        assert!(!v.to_string().contains(ON_BOUNDS), "{v}");
        // 19 judged good, as few as 16: a pass the truth could fail.
        let v = Verdict::judge(&w, &s(19, 16, 19), false);
        assert_eq!(v.kind, VerdictKind::Pass);
        assert!(
            v.to_string()
                .starts_with("pass: good-request fraction 0.950 meets min_good_fraction 0.9, which rests on bounds: as few as 80.0 % may be good"),
            "{v}"
        );
        assert_eq!(
            Verdict::judge(&w, &s(20, 20, 20), false).to_string(),
            "pass"
        );
    }

    // A share of no judged request is null: it neither passes nor fails a run by itself, and
    // the figures say there is none rather than 0.000.
    #[test]
    fn a_null_share_neither_passes_nor_fails_by_itself() {
        let w = workload();
        let mut agg = Aggregator::new(w.slos.clone());
        for _ in 0..4 {
            let mut r = rec(Some(10.0));
            r.status = Status::Cancelled;
            agg.add(&r, &Default::default());
        }
        let s = agg.summary();
        assert_eq!(s.error_rate, None);
        let v = Verdict::judge(&w, &s, false);
        assert_eq!(v.kind, VerdictKind::Error);
        assert!(v.to_string().contains("nothing to judge"), "{v}");
        let figures = Criteria::of(&w).figures(&s);
        assert!(
            figures.contains("error rate no share (max 0.05); good no share (min 0.9)"),
            "{figures}"
        );

        // A summary with completions but null shares (as a hand-edited file could have):
        // the run is judged on what else it shows.
        let mut agg = Aggregator::new(w.slos.clone());
        agg.add(&rec(Some(10.0)), &Default::default());
        let mut s = agg.summary();
        s.error_rate = None;
        s.goodput.as_mut().unwrap().good_request_fraction = None;
        assert_eq!(Verdict::judge(&w, &s, false).to_string(), "pass");
    }
}
