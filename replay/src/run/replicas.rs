//! The servers one run spreads its requests over (`--url` repeated): one connection pool per
//! URL, and a [`Balance`] rule picking the URL of each request as it is prepared.

use crate::connection::{ConnectError, Connector};
use crate::target::Target;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// How requests are spread over several URLs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Balance {
    /// In turn: request *k* goes to URL *k mod n*.
    #[default]
    RoundRobin,
    /// To the URL with the fewest requests in flight (the first such, in the order given).
    LeastInFlight,
}

impl Balance {
    /// Its name, as `--url-strategy` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round-robin",
            Balance::LeastInFlight => "least-in-flight",
        }
    }
}

impl fmt::Display for Balance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Balance {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "round-robin" | "round_robin" => Ok(Balance::RoundRobin),
            "least-in-flight" | "least_in_flight" => Ok(Balance::LeastInFlight),
            _ => Err(format!(
                "expected round-robin or least-in-flight, found {s:?}"
            )),
        }
    }
}

/// One URL of a run: its settings, its connection pool, its requests in flight.
pub(super) struct Replica {
    pub target: Arc<Target>,
    pub connector: Connector,
    /// The URL records name.
    pub url: Arc<str>,
    in_flight: AtomicUsize,
}

/// The URLs of a run and the rule that picks one per request.
pub(super) struct Replicas {
    all: Vec<Replica>,
    balance: Balance,
    turn: AtomicU64,
}

/// A request's claim on its URL: counted in flight until dropped.
pub(super) struct Pick<'a> {
    pub replica: &'a Replica,
}

impl Drop for Pick<'_> {
    fn drop(&mut self) {
        self.replica.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Replicas {
    /// One pool per target, each built by `connect`.
    pub fn new(
        targets: impl IntoIterator<Item = Target>,
        balance: Balance,
        connect: impl Fn(&Target) -> Result<Connector, ConnectError>,
    ) -> Result<Replicas, ConnectError> {
        let all = targets
            .into_iter()
            .map(|t| {
                Ok(Replica {
                    connector: connect(&t)?,
                    url: t.url().into(),
                    target: Arc::new(t),
                    in_flight: AtomicUsize::new(0),
                })
            })
            .collect::<Result<Vec<_>, ConnectError>>()?;
        Ok(Replicas {
            all,
            balance,
            turn: AtomicU64::new(0),
        })
    }

    /// Whether the connections read with kernel receive timestamps: the first URL's state
    /// that is not `on` (a kernel's refusal shows), else `on` or `off` as asked.
    pub fn rx_state(&self) -> (&'static str, Option<String>) {
        let states = self.all.iter().map(|r| r.connector.rx_state());
        let mut first = None;
        for (state, reason) in states {
            if state == "refused" {
                return (state, reason);
            }
            first.get_or_insert((state, reason));
        }
        first.unwrap_or(("off", None))
    }

    /// The URL for the next request.
    pub fn pick(&self) -> Pick<'_> {
        let n = self.all.len();
        let i = match self.balance {
            _ if n == 1 => 0,
            Balance::RoundRobin => (self.turn.fetch_add(1, Ordering::Relaxed) % n as u64) as usize,
            Balance::LeastInFlight => (0..n)
                .min_by_key(|&i| self.all[i].in_flight.load(Ordering::Relaxed))
                .unwrap_or(0),
        };
        let replica = &self.all[i];
        replica.in_flight.fetch_add(1, Ordering::Relaxed);
        Pick { replica }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Endpoint;

    fn replicas(balance: Balance) -> Replicas {
        let targets = [
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
            "http://127.0.0.1:3",
        ]
        .map(|u| Target::new(u, Endpoint::Chat, "m").unwrap());
        Replicas::new(targets, balance, |t| {
            Connector::new(&t.host, t.port, None, t.connect_timeout, 1024, false)
        })
        .unwrap()
    }

    #[test]
    fn round_robin_takes_each_url_in_turn() {
        let r = replicas(Balance::RoundRobin);
        let urls: Vec<_> = (0..6).map(|_| r.pick().replica.url.to_string()).collect();
        assert_eq!(urls[0], urls[3]);
        assert_ne!(urls[0], urls[1]);
        assert_ne!(urls[1], urls[2]);
        assert_ne!(urls[0], urls[2]);
    }

    #[test]
    fn least_in_flight_avoids_busy_urls_until_they_free() {
        let r = replicas(Balance::LeastInFlight);
        let a = r.pick();
        let b = r.pick();
        let c = r.pick();
        let urls = [&a.replica.url, &b.replica.url, &c.replica.url];
        assert!(urls[0] != urls[1] && urls[1] != urls[2] && urls[0] != urls[2]);
        let freed = b.replica.url.clone();
        drop(b);
        assert_eq!(
            r.pick().replica.url,
            freed,
            "the only URL with nothing in flight"
        );
    }
}
