//! Timeslices (issue 18): the run's figures in consecutive slices of a fixed duration from its
//! start, so warm-up effects and drift show (`--slice-duration`).
//!
//! A request belongs to the slice in which it was sent (its dispatch time after the run's
//! start): its latencies, and whether it completed or failed, are that slice's. Throughput is
//! what *finished* in a slice (completed requests and their output tokens by end time) over
//! the slice's duration, as a server's own counters would show it. The last slice usually
//! ends with the run, short of its full duration: it is marked `partial` and its rates are
//! over the part it covers.
//!
//! Memory is bounded: at most [`Timeslices::MAX_SLICES`] slices are kept; a run that
//! outgrows them has its slices merged in pairs (their duration doubles, and the report says
//! so), as the diagnosis timeline does. Each slice's latencies keep two significant digits
//! (percentiles within 1 % or 0.5 µs, whichever is larger: values are stored to 1 µs; a
//! histogram takes 2 kB empty, 14 kB with values up to 1 s, 18 kB up to 10 s), so the slices
//! of a run take at most about 14 MB however long it is, where three-digit histograms (16, 90
//! and 123 kB) would take 94 MB.
//!
//! A slice's latencies follow the run's rule for bounds ([`RxBounds`]): where a completed
//! request of the slice had a time taken at canaryd's read or from a later segment's stamp,
//! the slice's TTFT or e2e are upper bounds and its ITL exact in neither direction, and
//! [`SliceStats::bound`] says so. A response whose token events came in one read enters ITL
//! as 0 ms, as in the run's own `inter_token_latency`: a bound, so marked.

use crate::record::RequestRecord;
use crate::stats::Distribution;
use crate::summary::RxBounds;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The accumulating slices of one run.
#[derive(Debug, Clone)]
pub struct Timeslices {
    requested_ms: f64,
    width_ms: f64,
    slices: Vec<SliceAcc>,
}

#[derive(Debug, Clone)]
struct SliceAcc {
    sent: u64,
    completed: u64,
    errors: u64,
    cancelled: u64,
    ttft: Distribution,
    itl: Distribution,
    e2e: Distribution,
    finished: u64,
    finished_output_tokens: u64,
    /// Which of its completed requests' times were not exact.
    bounds: RxBounds,
}

impl SliceAcc {
    fn new() -> SliceAcc {
        SliceAcc {
            sent: 0,
            completed: 0,
            errors: 0,
            cancelled: 0,
            ttft: Distribution::with_digits(2),
            itl: Distribution::with_digits(2),
            e2e: Distribution::with_digits(2),
            finished: 0,
            finished_output_tokens: 0,
            bounds: RxBounds::NONE,
        }
    }

    fn merge(&mut self, o: &SliceAcc) {
        self.sent += o.sent;
        self.completed += o.completed;
        self.errors += o.errors;
        self.cancelled += o.cancelled;
        self.ttft.merge(&o.ttft);
        self.itl.merge(&o.itl);
        self.e2e.merge(&o.e2e);
        self.finished += o.finished;
        self.finished_output_tokens += o.finished_output_tokens;
        self.bounds = self.bounds.or(o.bounds);
    }
}

impl Timeslices {
    /// The most slices kept (each holds three histograms of 2–18 kB).
    pub const MAX_SLICES: usize = 256;

    /// The narrowest slice asked for that is taken (`--slice-duration`, `slice_duration`):
    /// a narrower one holds a request or none, and its rates are extrapolated a thousand-fold.
    pub const MIN_WIDTH: Duration = Duration::from_millis(1);

    /// Slices of `width` (positive).
    pub fn new(width: Duration) -> Timeslices {
        let ms = (width.as_secs_f64() * 1e3).max(1e-3);
        Timeslices {
            requested_ms: ms,
            width_ms: ms,
            slices: Vec::new(),
        }
    }

    fn slot(&mut self, at_ms: f64) -> &mut SliceAcc {
        let mut i = (at_ms.max(0.0) / self.width_ms) as usize;
        while i >= Self::MAX_SLICES {
            self.widen();
            i = (at_ms.max(0.0) / self.width_ms) as usize;
        }
        if self.slices.len() <= i {
            self.slices.resize_with(i + 1, SliceAcc::new);
        }
        &mut self.slices[i]
    }

    /// Doubles the width, merging neighbours.
    fn widen(&mut self) {
        let old = std::mem::take(&mut self.slices);
        for pair in old.chunks(2) {
            let mut s = pair[0].clone();
            if let Some(b) = pair.get(1) {
                s.merge(b);
            }
            self.slices.push(s);
        }
        self.width_ms *= 2.0;
    }

    /// Adds one measured request (the caller leaves warm-up out). `output_tokens`: the output
    /// tokens the run counts for it when it completed.
    pub fn add(&mut self, r: &RequestRecord, output_tokens: u64) {
        let slice = self.slot(r.sent_at_ms);
        slice.sent += 1;
        if r.is_cancelled() {
            slice.cancelled += 1;
            return;
        }
        if !r.is_ok() {
            slice.errors += 1;
            return;
        }
        slice.completed += 1;
        slice.bounds = slice.bounds.or(RxBounds::of_record(r));
        if let Some(v) = r.ttft_ms {
            slice.ttft.record(v);
        }
        if let Some(v) = r.itl_ms {
            slice.itl.record(v);
        }
        if let Some(v) = r.e2e_ms {
            slice.e2e.record(v);
        }
        let end = self.slot(r.ended_at_ms);
        end.finished += 1;
        end.finished_output_tokens += output_tokens;
    }

    /// The slices from the run's start to `run_end_ms` (the last response's end).
    pub fn report(&self, run_end_ms: f64) -> TimesliceReport {
        let run_end_ms = if run_end_ms.is_finite() {
            run_end_ms.max(0.0)
        } else {
            0.0
        };
        if run_end_ms / self.width_ms >= Self::MAX_SLICES as f64 {
            // The run ended past the slices its completed requests reached (an error or a
            // cancel at the end does not widen them): widen a copy, or 1 µs slices of a
            // 10 s tail would be ten million.
            let mut wider = self.clone();
            wider.slot(run_end_ms);
            return wider.report(run_end_ms);
        }
        let w = self.width_ms;
        // Every slice up to the one the run ended in, even empty ones: a gap is news.
        let needed = ((run_end_ms / w).ceil() as usize).max(self.slices.len());
        let empty = SliceAcc::new();
        let slices = (0..needed)
            .map(|i| {
                let acc = self.slices.get(i).unwrap_or(&empty);
                let start = i as f64 * w;
                let end = start + w;
                let covered = (run_end_ms.min(end) - start).max(0.0);
                let partial = covered < w;
                let per_s = |n: u64| {
                    (covered / 1e3 >= crate::MIN_RATE_SPAN_S).then(|| n as f64 / (covered / 1e3))
                };
                Timeslice {
                    index: i as u64,
                    start_s: start / 1e3,
                    end_s: end / 1e3,
                    covered_s: covered / 1e3,
                    partial,
                    requests: acc.sent,
                    completed: acc.completed,
                    errors: acc.errors,
                    cancelled: acc.cancelled,
                    request_throughput: per_s(acc.finished),
                    output_token_throughput: per_s(acc.finished_output_tokens),
                    time_to_first_token: SliceStats::of(&acc.ttft, acc.bounds.first_token),
                    inter_token_latency: SliceStats::of(
                        &acc.itl,
                        acc.bounds.is_bound("inter_token_latency"),
                    ),
                    request_latency: SliceStats::of(&acc.e2e, acc.bounds.end),
                }
            })
            .collect();
        TimesliceReport {
            slice_duration_s: w / 1e3,
            requested_slice_duration_s: self.requested_ms / 1e3,
            slices,
        }
    }
}

/// `summary.json`'s `timeslices`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimesliceReport {
    /// The slices' duration, seconds: `requested_slice_duration_s`, doubled as often as a
    /// run longer than [`Timeslices::MAX_SLICES`] of them needed.
    pub slice_duration_s: f64,
    /// The duration asked for (`--slice-duration`), seconds.
    pub requested_slice_duration_s: f64,
    /// The slices, from the run's start.
    pub slices: Vec<Timeslice>,
}

/// One slice of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeslice {
    /// 0 for the first slice.
    pub index: u64,
    /// Its start, seconds after the run's start.
    pub start_s: f64,
    /// Its end (start + the slice duration), seconds after the run's start.
    pub end_s: f64,
    /// The part of it the run covered, seconds: the slice duration, less for the last slice.
    pub covered_s: f64,
    /// True when the run ended before the slice did (the last slice): its counts are of a
    /// shorter span, its rates over `covered_s`.
    pub partial: bool,
    /// Requests sent in the slice (exact).
    pub requests: u64,
    /// Of those, requests that completed (exact).
    pub completed: u64,
    /// Of those, requests that failed (exact).
    pub errors: u64,
    /// Of those, requests cancelled on purpose (exact).
    pub cancelled: u64,
    /// Requests that finished in the slice, per second of `covered_s`; `None` when it covers
    /// under 100 ms.
    pub request_throughput: Option<f64>,
    /// Output tokens of the requests that finished in the slice, per second of `covered_s`.
    pub output_token_throughput: Option<f64>,
    /// TTFT of the completed requests sent in the slice, ms.
    pub time_to_first_token: Option<SliceStats>,
    /// Inter-token latency of those requests, ms.
    pub inter_token_latency: Option<SliceStats>,
    /// Their end-to-end latency, ms.
    pub request_latency: Option<SliceStats>,
}

/// A latency's statistics within one slice: count exact; mean and max exact over the values;
/// percentiles within 1 % or 0.5 µs, whichever is larger. The values themselves are exact
/// unless `bound`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SliceStats {
    /// True when some of the values are not exact, by the run's rule ([`RxBounds::is_bound`]):
    /// a completed request of the slice had its first token's (TTFT), its end's (e2e) or a
    /// token event's time (ITL) taken at canaryd's read or from a later segment's stamp, so
    /// TTFT and e2e are upper bounds and ITL exact in neither direction (a response in one
    /// read enters it as 0 ms). Summaries written before it was added lack it: read as true,
    /// not known to be exact.
    #[serde(default = "not_known_exact")]
    pub bound: bool,
    /// Values.
    pub count: u64,
    /// Their mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

fn not_known_exact() -> bool {
    true
}

impl SliceStats {
    fn of(d: &Distribution, bound: bool) -> Option<SliceStats> {
        let s = d.stats()?;
        Some(SliceStats {
            bound,
            count: s.count,
            avg: s.avg,
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
            max: s.max,
        })
    }
}

impl TimesliceReport {
    /// `timeslices.csv`: tidy, one row per slice × metric × statistic
    /// (`slice,start_s,end_s,partial,metric,statistic,unit,value,covered_s,bound`); a latency
    /// with no value in a slice has no rows there. `end_s` is the slice's nominal end;
    /// `covered_s` the span it covered, over which its rates are (a partial last slice covers
    /// less), so rate × `covered_s` gives back the count. `bound` is true on a latency's
    /// `avg`, percentile and `max` rows when its values are not exact ([`SliceStats::bound`]),
    /// false on every count and rate. The later columns come last so the columns before them
    /// keep their places.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "slice,start_s,end_s,partial,metric,statistic,unit,value,covered_s,bound\n",
        );
        for s in &self.slices {
            let mut row = |metric: &str, stat: &str, unit: &str, v: String, bound: bool| {
                out.push_str(&format!(
                    "{},{:.3},{:.3},{},{metric},{stat},{unit},{v},{:.6},{bound}\n",
                    s.index, s.start_s, s.end_s, s.partial, s.covered_s
                ));
            };
            row(
                "requests",
                "count",
                "requests",
                s.requests.to_string(),
                false,
            );
            row(
                "completed",
                "count",
                "requests",
                s.completed.to_string(),
                false,
            );
            row("errors", "count", "requests", s.errors.to_string(), false);
            row(
                "cancelled",
                "count",
                "requests",
                s.cancelled.to_string(),
                false,
            );
            if let Some(v) = s.request_throughput {
                let v = format!("{v:.4}");
                row("request_throughput", "rate", "requests/s", v, false);
            }
            if let Some(v) = s.output_token_throughput {
                let v = format!("{v:.4}");
                row("output_token_throughput", "rate", "tokens/s", v, false);
            }
            for (metric, st) in [
                ("time_to_first_token", s.time_to_first_token),
                ("inter_token_latency", s.inter_token_latency),
                ("request_latency", s.request_latency),
            ] {
                let Some(st) = st else { continue };
                row(metric, "count", "requests", st.count.to_string(), false);
                for (stat, v) in [
                    ("avg", st.avg),
                    ("p50", st.p50),
                    ("p90", st.p90),
                    ("p99", st.p99),
                    ("max", st.max),
                ] {
                    row(metric, stat, "ms", format!("{v:.4}"), st.bound);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ErrorKind, RequestError, Status};

    fn rec(sent: f64, ttft: f64, e2e: f64) -> RequestRecord {
        RequestRecord {
            sent_at_ms: sent,
            ended_at_ms: sent + e2e,
            ttft_ms: Some(ttft),
            e2e_ms: Some(e2e),
            ..Default::default()
        }
    }

    #[test]
    fn requests_fall_in_the_slice_they_were_sent_in_and_the_last_is_partial() {
        let mut t = Timeslices::new(Duration::from_secs(1));
        // Slice 0: two fast requests; slice 1: one slow and one failed; nothing sent in 2.
        t.add(&rec(100.0, 10.0, 50.0), 16);
        t.add(&rec(900.0, 20.0, 60.0), 16);
        t.add(&rec(1200.0, 400.0, 1400.0), 16);
        let mut failed = rec(1500.0, 0.0, 0.0);
        failed.status = Status::Error;
        failed.error = Some(RequestError {
            kind: ErrorKind::HttpStatus,
            http_status: Some(500),
            message: String::new(),
        });
        t.add(&failed, 0);
        let r = t.report(2600.0);
        assert_eq!(r.slices.len(), 3);
        let (a, b, c) = (&r.slices[0], &r.slices[1], &r.slices[2]);
        assert_eq!((a.requests, a.completed, a.errors), (2, 2, 0));
        assert_eq!((b.requests, b.completed, b.errors), (2, 1, 1));
        assert_eq!((c.requests, c.completed), (0, 0));
        assert_eq!(a.time_to_first_token.unwrap().count, 2);
        assert_eq!(b.time_to_first_token.unwrap().p50, 400.0);
        assert!(!a.partial && !b.partial && c.partial);
        assert!((c.covered_s - 0.6).abs() < 1e-9);
        // Throughput by end time: both slice-0 requests ended in slice 0; the slow one in 2.
        assert_eq!(a.request_throughput, Some(2.0));
        assert_eq!(b.request_throughput, Some(0.0));
        assert!((c.request_throughput.unwrap() - 1.0 / 0.6).abs() < 1e-9);
        assert!((c.output_token_throughput.unwrap() - 16.0 / 0.6).abs() < 1e-9);
        let csv = r.csv();
        assert!(csv
            .contains("\n1,1.000,2.000,false,time_to_first_token,p50,ms,400.0000,1.000000,true\n"));
        assert!(
            csv.contains("\n2,2.000,3.000,true,requests,count,requests,0,0.600000,false\n"),
            "{csv}"
        );
    }

    // The partial last slice's rates are over the 0.6 s it covered, but the file gave only its
    // nominal 1 s: rate × (end − start) read 1.67 completions where 1 finished.
    #[test]
    fn a_partial_slices_rate_times_its_covered_span_gives_back_its_count() {
        let mut t = Timeslices::new(Duration::from_secs(1));
        t.add(&rec(100.0, 10.0, 50.0), 16);
        t.add(&rec(1200.0, 400.0, 1400.0), 16);
        let csv = t.report(2600.0).csv();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let row = csv
            .lines()
            .find(|l| l.starts_with("2,") && l.contains(",request_throughput,"))
            .unwrap();
        let f: Vec<&str> = row.split(',').collect();
        let num = |name: &str| f[col(name)].parse::<f64>().unwrap();
        assert_eq!(f[col("partial")], "true");
        let completions = num("value") * num("covered_s");
        assert!((completions - 1.0).abs() < 1e-3, "{completions}: {row}");
        assert_eq!(num("end_s") - num("start_s"), 1.0, "the nominal span stays");
    }

    // Audit F3: slice latencies never said they were bounds, while the run's table marked its
    // rows from the same receive times; a response in one read entered slice ITL as 0 ms.
    #[test]
    fn a_slice_says_which_latencies_are_bounds_by_the_runs_rule() {
        use crate::record::{RxSource, RxTiming};
        let stamped = |sent: f64, bound_events: u32| {
            let mut r = rec(sent, 10.0, 40.0);
            r.itl_ms = Some(if bound_events > 0 { 0.0 } else { 10.0 });
            r.rx = Some(RxTiming {
                first_token: Some(RxSource::Kernel),
                end: Some(RxSource::Kernel),
                token_events: 4,
                token_events_bound: bound_events,
                ..Default::default()
            });
            r
        };
        let mut t = Timeslices::new(Duration::from_secs(1));
        // Slice 0: every time the kernel's, exact. Slice 1: one response whose four token
        // events came in one read (three of them bounds: ITL 0 ms). Slice 2: no receive
        // timestamps at all (canaryd's reads).
        t.add(&stamped(100.0, 0), 4);
        t.add(&stamped(1100.0, 3), 4);
        t.add(&rec(2100.0, 10.0, 40.0), 4);
        let r = t.report(3000.0);
        let kinds = |i: usize| {
            let s = &r.slices[i];
            (
                s.time_to_first_token.unwrap().bound,
                s.inter_token_latency.map(|x| x.bound),
                s.request_latency.unwrap().bound,
            )
        };
        assert_eq!(kinds(0), (false, Some(false), false));
        assert_eq!(kinds(1), (false, Some(true), false));
        assert_eq!(r.slices[1].inter_token_latency.unwrap().p50, 0.0);
        assert_eq!(kinds(2), (true, None, true));
        // The run's own rule gives the same answers over the same records.
        assert!(RxBounds::of_record(&stamped(0.0, 3)).is_bound("inter_token_latency"));
        assert!(!RxBounds::of_record(&stamped(0.0, 3)).is_bound("time_to_first_token"));

        let csv = r.csv();
        assert!(csv.starts_with(
            "slice,start_s,end_s,partial,metric,statistic,unit,value,covered_s,bound\n"
        ));
        assert!(
            csv.contains("\n1,1.000,2.000,false,inter_token_latency,p50,ms,0.0000,1.000000,true\n"),
            "{csv}"
        );
        assert!(
            csv.contains(
                "\n1,1.000,2.000,false,inter_token_latency,count,requests,1,1.000000,false\n"
            ),
            "{csv}"
        );
        assert!(
            csv.contains(
                "\n0,0.000,1.000,false,time_to_first_token,p99,ms,10.0000,1.000000,false\n"
            ),
            "{csv}"
        );
        assert!(
            csv.contains("\n2,2.000,3.000,false,request_latency,max,ms,40.0000,1.000000,true\n"),
            "{csv}"
        );

        // Widening merges the slices' bounds with their values.
        let mut wide = t.clone();
        wide.widen();
        let r = wide.report(3000.0);
        assert!(r.slices[0].inter_token_latency.unwrap().bound);
        assert!(!r.slices[0].time_to_first_token.unwrap().bound);

        // JSON keeps it; a summary written before it was added reads as not known exact.
        let json = serde_json::to_value(r.slices[0].time_to_first_token.unwrap()).unwrap();
        assert_eq!(json["bound"], false);
        let mut old = json.clone();
        old.as_object_mut().unwrap().remove("bound");
        assert!(serde_json::from_value::<SliceStats>(old).unwrap().bound);
    }

    #[test]
    fn a_run_longer_than_the_cap_widens_its_slices() {
        let mut t = Timeslices::new(Duration::from_millis(10));
        for i in 0..3000 {
            t.add(&rec(i as f64 * 10.0, 5.0, 5.0), 1);
        }
        let r = t.report(30_000.0);
        assert!(r.slices.len() <= Timeslices::MAX_SLICES);
        // 10 ms → 160 ms: 30 s in 188 slices.
        assert_eq!(r.slice_duration_s, 0.16);
        assert_eq!(r.requested_slice_duration_s, 0.01);
        assert_eq!(r.slices.iter().map(|s| s.requests).sum::<u64>(), 3000);
    }

    #[test]
    fn a_tail_past_the_last_completed_request_stays_within_the_cap() {
        // 1 µs slices; the last request, an error, ends 10 s after the others: the report
        // used to hold ten million slices.
        let mut t = Timeslices::new(Duration::from_micros(1));
        t.add(&rec(0.0, 0.01, 0.02), 1);
        let r = t.report(10_000.0);
        assert!(
            r.slices.len() <= Timeslices::MAX_SLICES,
            "{}",
            r.slices.len()
        );
        assert!(r.slices.last().unwrap().end_s >= 10.0);
        assert_eq!(r.slices.iter().map(|s| s.requests).sum::<u64>(), 1);
        // An end that is not a number cannot widen for ever.
        assert_eq!(t.report(f64::INFINITY).slices.len(), 21);
    }
}
