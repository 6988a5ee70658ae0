//! The per-URL breakdown of a run spread over several URLs (`--url` repeated), so an
//! unbalanced or slow replica shows: requests, errors and the latencies that tell replicas
//! apart, each URL apart.

use crate::record::RequestRecord;
use crate::stats::{Distribution, Stats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Tallies of each URL, by URL.
#[derive(Debug, Default)]
pub struct ByUrl {
    urls: BTreeMap<String, Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    requests: u64,
    completed: u64,
    cancelled: u64,
    ttft: Distribution,
    e2e: Distribution,
}

/// One URL's share of a run. Counts are exact; percentiles come from the same histograms as
/// the run's own (0.1% relative error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UrlSummary {
    /// Measured requests sent to it.
    pub requests: u64,
    /// Of those, completed.
    pub completed: u64,
    /// Of those, failed.
    pub errors: u64,
    /// Of those, cancelled on purpose by the client.
    #[serde(default)]
    pub cancelled: u64,
    /// Time to first token of its completed requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_token: Option<Stats>,
    /// Request latency of its completed requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_latency: Option<Stats>,
}

impl ByUrl {
    /// URLs tallied apart at most: a run has one per replica it was given, but records read
    /// back from files (a merge, a recovery) may name any number, each costing two
    /// histograms. Past these, requests count under [`ByUrl::OTHER`].
    pub const DISTINCT: usize = 64;
    /// Where requests to URLs past [`ByUrl::DISTINCT`] are tallied.
    pub const OTHER: &'static str = "(other)";

    /// Adds one measured (not warm-up) request, under the URL it names; one naming none
    /// (a run below the plan) is left out.
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(url) = &r.url else { return };
        let key = if self.urls.len() < Self::DISTINCT || self.urls.contains_key(url) {
            url.as_str()
        } else {
            Self::OTHER
        };
        let t = match self.urls.get_mut(key) {
            Some(t) => t,
            None => self.urls.entry(key.to_owned()).or_default(),
        };
        t.requests += 1;
        t.cancelled += r.is_cancelled() as u64;
        if r.is_ok() {
            t.completed += 1;
            if let Some(v) = r.ttft_ms {
                t.ttft.record(v);
            }
            if let Some(v) = r.e2e_ms {
                t.e2e.record(v);
            }
        }
    }

    /// The breakdown.
    pub fn summary(&self) -> BTreeMap<String, UrlSummary> {
        self.urls
            .iter()
            .map(|(url, t)| {
                let s = UrlSummary {
                    requests: t.requests,
                    completed: t.completed,
                    errors: t.requests - t.completed - t.cancelled,
                    cancelled: t.cancelled,
                    time_to_first_token: t.ttft.stats_in("ms"),
                    request_latency: t.e2e.stats_in("ms"),
                };
                (url.clone(), s)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_url_counts_its_own_requests() {
        let mut by = ByUrl::default();
        use crate::record::Status;
        for (url, status) in [
            ("a", Status::Ok),
            ("b", Status::Ok),
            ("a", Status::Error),
            ("a", Status::Ok),
            ("b", Status::Cancelled),
        ] {
            let mut r = RequestRecord {
                url: Some(url.into()),
                ttft_ms: Some(10.0),
                e2e_ms: Some(20.0),
                ..Default::default()
            };
            r.status = status;
            by.add(&r);
        }
        by.add(&RequestRecord::default()); // names no URL
        let s = by.summary();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s["a"].requests, s["a"].completed, s["a"].errors),
            (3, 2, 1)
        );
        assert_eq!(
            (
                s["b"].requests,
                s["b"].completed,
                s["b"].errors,
                s["b"].cancelled
            ),
            (2, 1, 0, 1)
        );
        assert_eq!(s["b"].time_to_first_token.as_ref().unwrap().count, 1);
        assert_eq!(s["a"].time_to_first_token.as_ref().unwrap().count, 2);
    }

    #[test]
    fn urls_past_the_cap_are_counted_together() {
        // Records read back from a file may name any number of URLs, two histograms each.
        let mut by = ByUrl::default();
        for i in 0..1000 {
            by.add(&RequestRecord {
                url: Some(format!("http://h{i}:8000")),
                ..Default::default()
            });
        }
        let s = by.summary();
        assert_eq!(s.len(), ByUrl::DISTINCT + 1);
        assert_eq!(s[ByUrl::OTHER].requests, 1000 - ByUrl::DISTINCT as u64);
        assert_eq!(s.values().map(|u| u.requests).sum::<u64>(), 1000);
    }
}
