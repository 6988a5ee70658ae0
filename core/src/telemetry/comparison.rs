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

/// The client against the server over one run's window.
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
    /// Of the means: exact (both means are exact over their requests). Negative means the
    /// server's interval is longer than the client's: they time different things.
    pub mean: f64,
    /// Of the medians: a range, since the server's median is known only to its bucket.
    pub p50: Option<GapRange>,
    /// Of the 99th percentiles: a range.
    pub p99: Option<GapRange>,
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
        let gap = |key: &str, server: Option<&LatencyEstimate>| {
            let (c, s) = (client.metrics.get(key)?, server?);
            Some(ClientMinusServer {
                mean: c.avg - s.mean? * 1e3,
                p50: s.p50.map(|q| GapRange::of(c.p50, q)),
                p99: s.p99.map(|q| GapRange::of(c.p99, q)),
            })
        };
        Some(Comparison::Matched {
            requests: client.completed,
            ttft_ms: gap("time_to_first_token", server.ttft_s.as_ref()),
            e2e_ms: gap("request_latency", server.e2e_s.as_ref()),
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
    /// the server's mean is the larger, says so without calling it a gap.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.mean < 0.0 {
            return write!(
                f,
                "server mean {:.3} ms above the client's (exact): the two time different \
                 intervals, so no gap is given",
                -self.mean
            );
        }
        write!(
            f,
            "client − server mean {:.3} ms (exact; network, canaryd and queueing outside the \
             engine)",
            self.mean
        )?;
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
        let failed = match client.errors {
            0 => String::new(),
            n => format!(
                "canaryd's {n} failed requests (a timeout still runs, or aborts, on the server), "
            ),
        };
        format!("{more} more on the server: {failed}warm-up that finished late, or other clients")
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
    use crate::{Aggregator, ChunkGaps, Goodput, RequestRecord};

    fn client(ttfts: &[f64]) -> RunSummary {
        let mut agg = Aggregator::new(Goodput::default());
        for (i, &t) in ttfts.iter().enumerate() {
            let r = RequestRecord {
                id: i as u32,
                ttft_ms: Some(t),
                e2e_ms: Some(t + 10.0),
                ended_at_ms: t + 10.0,
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
}
