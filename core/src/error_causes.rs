//! [`ErrorCauses`]: the most frequent causes of a run's failed requests (kind and message),
//! so the printed table can say *why* requests failed (`connect: … Connection refused`), not
//! only how many, without reading `records.jsonl`.
//!
//! Messages can be unique per request (a body snippet, a position in a stream): the tally
//! keeps at most [`ErrorCauses::DISTINCT`] distinct causes and counts the rest apart, so a
//! hostile server costs bounded memory.

use crate::record::{ErrorKind, RequestError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A tally of error causes over a run.
#[derive(Debug, Clone, Default)]
pub struct ErrorCauses {
    counts: HashMap<(ErrorKind, String), u64>,
    /// Failures whose cause was new once the tally was full.
    untallied: u64,
}

/// One cause of failed requests, as `summary.json`'s `error_causes` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCause {
    /// The error class.
    pub kind: ErrorKind,
    /// The message (the same for every request counted here), at most
    /// [`ErrorCauses::MESSAGE_CHARS`] characters.
    pub message: String,
    /// Failed requests with this kind and message: exact.
    pub requests: u64,
}

impl ErrorCauses {
    /// Distinct causes kept; later new ones are only counted.
    pub const DISTINCT: usize = 64;
    /// Characters of a message kept (a server's error body can be long).
    pub const MESSAGE_CHARS: usize = 200;
    /// Causes listed in the summary, most frequent first.
    pub const LISTED: usize = 3;

    /// Counts one failed request.
    pub fn add(&mut self, e: &RequestError) {
        // Printable whatever the records say (a merge reads them from files): the top cause
        // is printed and logged.
        let message: String = e.message.chars().take(Self::MESSAGE_CHARS).collect();
        let message = crate::printable(&message).into_owned();
        let key = (e.kind, message);
        if let Some(n) = self.counts.get_mut(&key) {
            *n += 1;
        } else if self.counts.len() < Self::DISTINCT {
            self.counts.insert(key, 1);
        } else {
            self.untallied += 1;
        }
    }

    /// The [`LISTED`](Self::LISTED) most frequent causes, most frequent first (ties by kind,
    /// then message, so the order is stable).
    pub fn top(&self) -> Vec<ErrorCause> {
        let mut all: Vec<ErrorCause> = self
            .counts
            .iter()
            .map(|((kind, message), &requests)| ErrorCause {
                kind: *kind,
                message: message.clone(),
                requests,
            })
            .collect();
        all.sort_by(|a, b| {
            b.requests
                .cmp(&a.requests)
                .then(a.kind.cmp(&b.kind))
                .then_with(|| a.message.cmp(&b.message))
        });
        all.truncate(Self::LISTED);
        all
    }
}

impl std::fmt::Display for ErrorCause {
    /// `4 × connect: connect to 127.0.0.1:9: Connection refused (os error 111)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} × {}: {}",
            self.requests,
            self.kind.as_str(),
            self.message
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(kind: ErrorKind, message: &str) -> RequestError {
        RequestError {
            kind,
            http_status: None,
            message: message.into(),
        }
    }

    #[test]
    fn most_frequent_first_and_bounded() {
        let mut c = ErrorCauses::default();
        c.add(&err(ErrorKind::HttpStatus, "401 Unauthorized"));
        for _ in 0..3 {
            c.add(&err(ErrorKind::Connect, "Connection refused"));
        }
        c.add(&err(ErrorKind::Timeout, "after 10 s"));
        c.add(&err(ErrorKind::Timeout, "after 10 s"));
        let top = c.top();
        assert_eq!(top.len(), 3);
        assert_eq!(
            top[0].to_string(),
            "3 × connect: Connection refused",
            "{top:?}"
        );
        assert_eq!((top[1].kind, top[1].requests), (ErrorKind::Timeout, 2));
        // Unique messages past the cap are counted, never kept.
        for i in 0..1000 {
            c.add(&err(ErrorKind::StreamCut, &format!("cut at byte {i}")));
        }
        assert_eq!(c.counts.len(), ErrorCauses::DISTINCT);
        assert_eq!(c.untallied, 1000 - (ErrorCauses::DISTINCT as u64 - 3));
        let long = "x".repeat(5000);
        let mut c = ErrorCauses::default();
        c.add(&err(ErrorKind::ServerError, &long));
        assert_eq!(c.top()[0].message.len(), ErrorCauses::MESSAGE_CHARS);
    }
}
