//! [`Comparison`]: the client's figures against the server's own, made only over the same
//! requests.
//!
//! A server's histograms count whatever it served in the scrape window: warm-up requests
//! that finished late, other clients' traffic, and requests canaryd gave up on (a timeout
//! closes the connection; the server still finishes, or aborts, and counts them). A
//! difference of means over two different sets explains nothing: a replay against an
//! overloaded simulator once printed a TTFT "gap" of −8 s. So the client and server are
//! compared only when the server's `_count` deltas over the window equal canaryd's completed,
//! measured requests; otherwise the comparison is withheld, with both counts.

use crate::summary::RunSummary;
use crate::telemetry::server::{BucketQuantile, LatencyEstimate, RunServerSummary};
use serde::Serialize;
use std::collections::BTreeMap;

/// The client against the server over one run's window.
// One per run, never in a collection or a hot path: boxing the matched side saves nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Comparison {
    /// The server's request counts over the window equal canaryd's completed, measured
    /// requests (equal counts, not proof of the same requests: see the README).
    Matched {
        /// Requests on each side.
        requests: u64,
        /// Client TTFT minus server TTFT, when the server has a TTFT histogram.
        #[serde(skip_serializing_if = "Option::is_none")]
        ttft_ms: Option<ClientMinusServer>,
        /// Client request latency minus the server's e2e, when it has that histogram.
        #[serde(skip_serializing_if = "Option::is_none")]
        e2e_ms: Option<ClientMinusServer>,
    },
    /// The counts differ: no difference is computed.
    Withheld {
        /// Which counts differ, by how many, and what may account for it.
        reason: String,
        /// canaryd's count (completed, measured requests; warm-up excluded).
        client_n: u64,
        /// The server's count over the window (a histogram's `_count` delta).
        server_n: u64,
    },
}

/// Client minus server for one latency, ms, over the same number of requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClientMinusServer {
    /// Of the means: exact when the client's times are (the server's mean is exact over its
    /// requests), else an upper bound. Negative means the server's interval is longer than
    /// the client's: they time different things.
    pub mean: f64,
    /// `exact`, or `upper_bound` when any compared client time is only an upper bound.
    pub mean_kind: GapKind,
    /// Where the compared requests' client times came from (TTFT: their first tokens; e2e:
    /// their ends); absent in a summary written before they were counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_times: Option<ClientTimes>,
    /// Of the medians: a range, since the server's median is known only to its bucket.
    pub p50: Option<GapRange>,
    /// Of the 99th percentiles: a range.
    pub p99: Option<GapRange>,
}

/// How exact a client − server mean is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GapKind {
    /// Every compared client time is exact.
    Exact,
    /// Some compared client times are upper bounds (a later segment's stamp or canaryd's
    /// read, never before the truth), so the gap is at most this.
    UpperBound,
}

/// The compared requests' first tokens (TTFT) or ends (e2e) by how their time was taken
/// (`summary.json`'s `receive_timestamps.first_token` or `.end`). Only `kernel` is exact: a
/// time is exact only on positive evidence, so those the run did not count (receive
/// timestamps off or refused: no `rx`) are bounds too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClientTimes {
    /// What was timed, for the printed line (`first tokens`, `ends`).
    #[serde(skip)]
    pub what: &'static str,
    /// Times compared: the client's TTFT (or request latency) count.
    pub of: u64,
    /// Stamped by the kernel on the segment that completed them: exact.
    pub kernel: u64,
    /// A later segment's stamp (the read carried more): an upper bound.
    pub kernel_bound: u64,
    /// canaryd's read, no stamp: an upper bound.
    pub userspace: u64,
    /// Not counted by source (receive timestamps off or refused): canaryd's read, an upper
    /// bound.
    pub none: u64,
}

impl ClientTimes {
    /// Over the `of` times (of `what`) the client's mean is over, `counted` by source.
    fn of(what: &'static str, of: u64, counted: &BTreeMap<String, u64>) -> ClientTimes {
        let n = |k: &str| counted.get(k).copied().unwrap_or(0).min(of);
        let kernel = n("kernel");
        let kernel_bound = n("kernel_bound").min(of - kernel);
        let userspace = n("userspace").min(of - kernel - kernel_bound);
        ClientTimes {
            what,
            of,
            kernel,
            kernel_bound,
            userspace,
            none: of - kernel - kernel_bound - userspace,
        }
    }

    /// How many are upper bounds.
    pub fn bound(&self) -> u64 {
        self.of - self.kernel
    }
}

impl std::fmt::Display for ClientTimes {
    /// `2 of 2 first tokens are upper bounds (2 kernel_bound)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            ("kernel_bound", self.kernel_bound),
            ("userspace", self.userspace),
            ("without receive timestamps", self.none),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
        write!(
            f,
            "{} of {} {} are upper bounds ({})",
            self.bound(),
            self.of,
            self.what,
            parts.join(", ")
        )
    }
}

/// Bounds on a client percentile minus the server's: at least `lower_bound`, at most
/// `upper_bound`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GapRange {
    /// Client percentile minus the bucket's upper edge; `None` for the `+Inf` bucket.
    pub lower_bound: Option<f64>,
    /// Client percentile minus the bucket's lower edge.
    pub upper_bound: f64,
}

impl GapRange {
    fn of(client_ms: f64, server: BucketQuantile) -> GapRange {
        GapRange {
            lower_bound: server.upper_bound.map(|u| client_ms - u * 1e3),
            upper_bound: client_ms - server.lower_bound * 1e3,
        }
    }
}

/// One count the two sides must agree on.
struct Pair<'a> {
    what: &'static str,
    client: u64,
    server: &'a LatencyEstimate,
}

impl Comparison {
    /// Compares `client` with `server` over the window, or says why not. `None` when the
    /// server has neither a TTFT nor an e2e histogram.
    pub fn of(client: &RunSummary, server: &RunServerSummary) -> Option<Comparison> {
        let client_count = |key: &str| client.metrics.get(key).map_or(0, |s| s.count);
        let pairs: Vec<Pair> = [
            server.e2e_s.as_ref().map(|server| Pair {
                what: "request latency (e2e)",
                client: client.completed,
                server,
            }),
            server.ttft_s.as_ref().map(|server| Pair {
                what: "TTFT",
                client: client_count("time_to_first_token"),
                server,
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        if pairs.is_empty() {
            return None;
        }
        for p in &pairs {
            let server_n = p.server.count.max(0.0).round() as u64;
            if server_n != p.client || p.server.count.fract() != 0.0 {
                return Some(Comparison::Withheld {
                    reason: withheld_reason(p.what, p.client, server_n, client),
                    client_n: p.client,
                    server_n,
                });
            }
        }
        let gap = |key: &str, server: Option<&LatencyEstimate>, times: ClientTimes| {
            let (c, s) = (client.metrics.get(key)?, server?);
            let exact = times.bound() == 0;
            // A client percentile over upper bounds is itself at most that: the gap's upper
            // end still holds, its lower end does not.
            let range = |client_ms: f64, q: BucketQuantile| {
                let r = GapRange::of(client_ms, q);
                match exact {
                    true => r,
                    false => GapRange {
                        lower_bound: None,
                        ..r
                    },
                }
            };
            Some(ClientMinusServer {
                mean: c.avg - s.mean? * 1e3,
                mean_kind: if exact {
                    GapKind::Exact
                } else {
                    GapKind::UpperBound
                },
                client_times: Some(times),
                p50: s.p50.map(|q| range(c.p50, q)),
                p99: s.p99.map(|q| range(c.p99, q)),
            })
        };
        let rx = &client.receive_timestamps;
        let first_tokens = ClientTimes::of(
            "first tokens",
            client_count("time_to_first_token"),
            &rx.first_token,
        );
        let ends = ClientTimes::of("ends", client_count("request_latency"), &rx.end);
        Some(Comparison::Matched {
            requests: client.completed,
            ttft_ms: gap("time_to_first_token", server.ttft_s.as_ref(), first_tokens),
            e2e_ms: gap("request_latency", server.e2e_s.as_ref(), ends),
        })
    }

    /// True when the two sides were compared.
    pub fn is_matched(&self) -> bool {
        matches!(self, Comparison::Matched { .. })
    }
}

impl std::fmt::Display for Comparison {
    /// One line for the printed table; every figure says whether it is exact or a bound.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Comparison::Withheld { reason, .. } => {
                write!(f, "client vs server not compared: {reason}")
            }
            Comparison::Matched {
                requests,
                ttft_ms,
                e2e_ms,
            } => {
                write!(
                    f,
                    "client vs server over {requests} requests on each side (equal counts):"
                )?;
                let mut first = true;
                for (what, gap) in [("TTFT", ttft_ms), ("e2e", e2e_ms)] {
                    let Some(gap) = gap else { continue };
                    f.write_str(if first { " " } else { "; " })?;
                    first = false;
                    write!(f, "{what} {gap}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::fmt::Display for ClientMinusServer {
    /// `client − server mean 0.512 ms (exact), p50 in [0.2, 5.2) ms, p99 in [...) ms`, or, when
    /// the server's mean is the larger, says so without calling it a gap. Exact only when every
    /// compared client time is: else an upper bound, saying how many are bounds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bounds = match (self.mean_kind, self.client_times) {
            (GapKind::Exact, _) => None,
            (GapKind::UpperBound, Some(t)) => Some(t.to_string()),
            (GapKind::UpperBound, None) => Some("some client times are upper bounds".into()),
        };
        if self.mean < 0.0 {
            // Over upper bounds the client's true mean is lower still: the server's is above
            // it by at least this much.
            return match bounds {
                None => write!(
                    f,
                    "server mean {:.3} ms above the client's (exact): the two time different \
                     intervals, so no gap is given",
                    -self.mean
                ),
                Some(b) => write!(
                    f,
                    "server mean at least {:.3} ms above the client's (bound: {b}): the two \
                     time different intervals, so no gap is given",
                    -self.mean
                ),
            };
        }
        match bounds {
            None => write!(f, "client − server mean {:.3} ms (exact", self.mean)?,
            Some(b) => write!(
                f,
                "client − server mean at most {:.3} ms (upper bound: {b}",
                self.mean
            )?,
        }
        f.write_str("; network, canaryd and queueing outside the engine)")?;
        for (name, range) in [("p50", self.p50), ("p99", self.p99)] {
            if let Some(r) = range {
                write!(f, ", {name} {r}")?;
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for GapRange {
    /// `in [0.2, 5.2] ms (bound)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.lower_bound {
            Some(lo) => write!(f, "in [{lo:.3}, {:.3}] ms (bound)", self.upper_bound),
            None => write!(f, "at most {:.3} ms (bound)", self.upper_bound),
        }
    }
}

fn withheld_reason(what: &str, client_n: u64, server_n: u64, client: &RunSummary) -> String {
    let head = format!(
        "the server's {what} histogram counted {server_n} requests in the window, canaryd \
         completed {client_n} measured ones"
    );
    let why = if server_n > client_n {
        let more = server_n - client_n;
        // canaryd's own requests that it did not complete come first: a timeout, or a
        // cancellation on purpose, closes the connection, and the server still counts the
        // request it finished or aborted.
        let mut ours = String::new();
        if client.errors > 0 {
            ours += &format!(
                "canaryd's {} failed requests (a timeout still runs, or aborts, on the server), ",
                client.errors
            );
        }
        if client.cancelled > 0 {
            ours += &format!(
                "the {} requests canaryd cancelled (--request-cancellation-rate: the server \
                 still counts one it had begun), ",
                client.cancelled
            );
        }
        format!("{more} more on the server: {ours}warm-up that finished late, or other clients")
    } else {
        let fewer = client_n - server_n;
        format!(
            "{fewer} fewer on the server: requests it had not counted by the last scrape, a \
             restart, or a scrape that failed"
        )
    };
    format!("{head}: {why}; the two are not compared")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Aggregator, ChunkGaps, Goodput, RequestRecord, RxSource, RxTiming, Status};

    fn client(ttfts: &[f64]) -> RunSummary {
        stamped(ttfts, Some(RxSource::Kernel))
    }

    /// Completed requests whose first tokens were timed by `first_token` (`None`: receive
    /// timestamps off, no `rx`).
    fn stamped(ttfts: &[f64], first_token: Option<RxSource>) -> RunSummary {
        let mut agg = Aggregator::new(Goodput::default());
        for (i, &t) in ttfts.iter().enumerate() {
            let r = RequestRecord {
                id: i as u32,
                ttft_ms: Some(t),
                e2e_ms: Some(t + 10.0),
                ended_at_ms: t + 10.0,
                rx: first_token.map(|s| RxTiming {
                    first_token: Some(s),
                    end: Some(s),
                    ..Default::default()
                }),
                ..Default::default()
            };
            agg.add(&r, &ChunkGaps::new());
        }
        agg.summary()
    }

    fn est(count: f64, mean: f64, p50: (f64, Option<f64>)) -> LatencyEstimate {
        let q = BucketQuantile {
            lower_bound: p50.0,
            upper_bound: p50.1,
            estimate: p50.0,
        };
        LatencyEstimate {
            count,
            mean: Some(mean),
            p50: Some(q),
            p90: Some(q),
            p95: Some(q),
            p99: Some(q),
        }
    }

    #[test]
    fn equal_counts_compare_means_exactly_and_percentiles_as_ranges() {
        let c = client(&[10.0, 12.0, 14.0]);
        let server = RunServerSummary {
            ttft_s: Some(est(3.0, 0.008, (0.005, Some(0.01)))),
            ..Default::default()
        };
        let Some(Comparison::Matched {
            requests, ttft_ms, ..
        }) = Comparison::of(&c, &server)
        else {
            panic!("equal counts compare");
        };
        assert_eq!(requests, 3);
        let g = ttft_ms.unwrap();
        assert!((g.mean - 4.0).abs() < 1e-9, "{g:?}");
        // Client median 12 ms, server's in (5, 10] ms: the gap is in [2, 7).
        let p50 = g.p50.unwrap();
        assert!((p50.lower_bound.unwrap() - 2.0).abs() < 0.05, "{p50:?}");
        assert!((p50.upper_bound - 7.0).abs() < 0.05, "{p50:?}");
        let line = Comparison::of(&c, &server).unwrap().to_string();
        assert!(line.contains("over 3 requests on each side"), "{line}");
        assert!(line.contains("mean 4.000 ms (exact"), "{line}");
        assert!(line.contains("p50 in [2.0"), "{line}");
        // A server mean above the client's is no gap, and is not explained as one.
        let slower = RunServerSummary {
            ttft_s: Some(est(3.0, 0.020, (0.01, Some(0.025)))),
            ..Default::default()
        };
        let line = Comparison::of(&c, &slower).unwrap().to_string();
        assert!(
            line.contains("server mean 8.000 ms above the client's"),
            "{line}"
        );
        assert!(!line.contains("network") && !line.contains('-'), "{line}");
    }

    #[test]
    fn different_counts_withhold_the_comparison_and_say_by_how_many() {
        let c = client(&[10.0, 12.0]);
        let server = RunServerSummary {
            ttft_s: Some(est(5.0, 0.5, (0.25, None))),
            ..Default::default()
        };
        let cmp = Comparison::of(&c, &server).unwrap();
        let Comparison::Withheld {
            reason,
            client_n,
            server_n,
        } = &cmp
        else {
            panic!("{cmp:?}");
        };
        assert_eq!((*client_n, *server_n), (2, 5));
        assert!(reason.contains("3 more on the server"), "{reason}");
        let json = serde_json::to_value(&cmp).unwrap();
        assert_eq!(json["state"], "withheld");
        assert_eq!(json["server_n"], 5);
        // No server histogram to compare with: no comparison at all.
        assert_eq!(Comparison::of(&c, &RunServerSummary::default()), None);
    }

    // The audit: two requests whose first tokens were kernel_bound (~5.3 ms, the truth 0.05–
    // 0.16 ms) printed `client − server mean 5.190 ms (exact; …)`.
    #[test]
    fn a_gap_over_first_tokens_that_are_bounds_is_an_upper_bound() {
        let server = RunServerSummary {
            ttft_s: Some(est(3.0, 0.008, (0.005, Some(0.01)))),
            e2e_s: Some(est(3.0, 0.018, (0.015, Some(0.02)))),
            ..Default::default()
        };
        for (first_token, said) in [
            (Some(RxSource::KernelBound), "3 kernel_bound"),
            (Some(RxSource::Userspace), "3 userspace"),
            (None, "3 without receive timestamps"),
        ] {
            let c = stamped(&[10.0, 12.0, 14.0], first_token);
            let cmp = Comparison::of(&c, &server).unwrap();
            let Comparison::Matched {
                ttft_ms: Some(g), ..
            } = &cmp
            else {
                panic!("{cmp:?}");
            };
            assert_eq!(g.mean_kind, GapKind::UpperBound);
            assert_eq!(g.client_times.unwrap().bound(), 3);
            // Only the upper end of a percentile's range still holds.
            assert_eq!(g.p50.unwrap().lower_bound, None);
            let line = cmp.to_string();
            assert!(!line.contains("exact"), "{line}");
            assert!(
                line.contains(&format!(
                    "mean at most 4.000 ms (upper bound: 3 of 3 first tokens are upper \
                     bounds ({said})"
                )),
                "{line}"
            );
            // The ends too: e2e is exact only when each was stamped `kernel`.
            assert!(
                line.contains(&format!(
                    "e2e client − server mean at most 4.000 ms (upper bound: 3 of 3 ends are \
                     upper bounds ({said})"
                )),
                "{line}"
            );
            let json = serde_json::to_value(&cmp).unwrap();
            assert_eq!(json["ttft_ms"]["mean_kind"], "upper_bound", "{json}");
            assert_eq!(json["e2e_ms"]["mean_kind"], "upper_bound", "{json}");
        }
        // Every first token stamped by the kernel: exact, and said so.
        let cmp = Comparison::of(&client(&[10.0, 12.0, 14.0]), &server).unwrap();
        let json = serde_json::to_value(&cmp).unwrap();
        assert_eq!(json["ttft_ms"]["mean_kind"], "exact", "{json}");
        assert_eq!(json["ttft_ms"]["client_times"]["kernel"], 3, "{json}");
        assert_eq!(json["e2e_ms"]["mean_kind"], "exact", "{json}");
        assert!(cmp
            .to_string()
            .contains("e2e client − server mean 4.000 ms (exact"));
        // A server mean above a client's bound is above the truth by at least as much.
        let slower = RunServerSummary {
            ttft_s: Some(est(3.0, 0.020, (0.01, Some(0.025)))),
            ..Default::default()
        };
        let c = stamped(&[10.0, 12.0, 14.0], Some(RxSource::KernelBound));
        let line = Comparison::of(&c, &slower).unwrap().to_string();
        assert!(
            line.contains("server mean at least 8.000 ms above the client's (bound"),
            "{line}"
        );
        assert!(!line.contains("exact"), "{line}");
    }

    // The audit: 20 requests canaryd cancelled (`--request-cancellation-rate`) were left out
    // of the causes: `20 more on the server: warm-up that finished late, or other clients`.
    #[test]
    fn a_withheld_comparison_names_canaryds_own_cancellations() {
        let mut agg = Aggregator::new(Goodput::default());
        for i in 0..4u32 {
            let r = RequestRecord {
                id: i,
                ttft_ms: Some(10.0),
                e2e_ms: Some(20.0),
                ended_at_ms: 20.0,
                status: if i < 2 { Status::Cancelled } else { Status::Ok },
                ..Default::default()
            };
            agg.add(&r, &ChunkGaps::new());
        }
        let c = agg.summary();
        assert_eq!(c.cancelled, 2);
        let server = RunServerSummary {
            ttft_s: Some(est(4.0, 0.008, (0.005, Some(0.01)))),
            ..Default::default()
        };
        let Some(Comparison::Withheld { reason, .. }) = Comparison::of(&c, &server) else {
            panic!("different counts are withheld");
        };
        assert!(
            reason.contains("2 more on the server: the 2 requests canaryd cancelled"),
            "{reason}"
        );
    }
}
