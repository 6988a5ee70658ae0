//! [`ErrorCauses`]: the most frequent causes of a run's failed requests (kind, HTTP status
//! and message), so the printed table can say *why* requests failed (`connect: … Connection
//! refused`, `http_status 429: …`), not only how many, without reading `records.jsonl`. The
//! status is part of the cause: a 429 (rate limit), a 503 (overload) and a 500 call for
//! different actions, and their bodies may read the same.
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
    counts: HashMap<(ErrorKind, Option<u16>, String), u64>,
    /// Failures whose cause was new once the tally was full.
    untallied: u64,
}

/// One cause of failed requests, as `summary.json`'s `error_causes` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCause {
    /// The error class.
    pub kind: ErrorKind,
    /// The HTTP status, for `http_status` errors (absent in summaries written before it was
    /// kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// The message (the same for every request counted here), at most
    /// [`ErrorCauses::MESSAGE_CHARS`] characters.
    pub message: String,
    /// Failed requests with this kind, status and message: exact.
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
        let key = (e.kind, e.http_status, message);
        if let Some(n) = self.counts.get_mut(&key) {
            *n += 1;
        } else if self.counts.len() < Self::DISTINCT {
            self.counts.insert(key, 1);
        } else {
            self.untallied += 1;
        }
    }

    /// The [`LISTED`](Self::LISTED) most frequent causes, most frequent first (ties by kind,
    /// then status, then message, so the order is stable).
    pub fn top(&self) -> Vec<ErrorCause> {
        let mut all: Vec<ErrorCause> = self
            .counts
            .iter()
            .map(|((kind, http_status, message), &requests)| ErrorCause {
                kind: *kind,
                http_status: *http_status,
                message: message.clone(),
                requests,
            })
            .collect();
        all.sort_by(|a, b| {
            b.requests
                .cmp(&a.requests)
                .then(a.kind.cmp(&b.kind))
                .then(a.http_status.cmp(&b.http_status))
                .then_with(|| a.message.cmp(&b.message))
        });
        all.truncate(Self::LISTED);
        all
    }
}

impl std::fmt::Display for ErrorCause {
    /// `4 × connect: connect to 127.0.0.1:9: Connection refused (os error 111)`, or
    /// `4 × http_status 429: …` with the status.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} × {}", self.requests, self.kind.as_str())?;
        if let Some(status) = self.http_status {
            write!(f, " {status}")?;
        }
        write!(f, ": {}", self.message)
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

    fn status(code: u16, message: &str) -> RequestError {
        RequestError {
            kind: ErrorKind::HttpStatus,
            http_status: Some(code),
            message: message.into(),
        }
    }

    #[test]
    fn the_status_code_tells_causes_with_the_same_body_apart() {
        let mut c = ErrorCauses::default();
        for _ in 0..3 {
            c.add(&status(503, "injected fault"));
        }
        c.add(&status(429, "injected fault"));
        c.add(&status(429, "injected fault"));
        let top = c.top();
        assert_eq!(top.len(), 2, "{top:?}");
        assert_eq!(top[0].to_string(), "3 × http_status 503: injected fault");
        assert_eq!(top[1].to_string(), "2 × http_status 429: injected fault");
        let json = serde_json::to_value(&top[1]).unwrap();
        assert_eq!(json["http_status"], 429, "{json}");
        // Without a status (not an HTTP error), the entry has none.
        c.add(&err(ErrorKind::Connect, "Connection refused"));
        let connect = serde_json::to_value(&c.top()[2]).unwrap();
        assert!(connect.get("http_status").is_none(), "{connect}");
    }

    #[test]
    fn a_summary_written_before_the_status_was_kept_still_reads() {
        let old = r#"{"kind": "http_status", "message": "Not Found", "requests": 4}"#;
        let cause: ErrorCause = serde_json::from_str(old).unwrap();
        assert_eq!(cause.http_status, None);
        assert_eq!(cause.to_string(), "4 × http_status: Not Found");
    }
}
