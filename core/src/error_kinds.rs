//! How a run's failed requests read by kind, as the table, the verdict and the merged table
//! print them: `http_status 7 (429 ×4, 503 ×3), connect 2`. A 429 (rate limit), a 503
//! (overload) and a 500 call for different actions, so an `http_status` count says its
//! statuses. [`StatusCounts`] tallies them over the run (`summary.json`'s
//! `errors_by_http_status`), at most [`StatusCounts::DISTINCT`] statuses, the rest counted
//! only in `errors_by_kind`.

use crate::record::{ErrorKind, RequestError};
use crate::RunSummary;
use std::collections::BTreeMap;

/// A run's `http_status` errors by status code.
#[derive(Debug, Clone, Default)]
pub struct StatusCounts {
    counts: BTreeMap<u16, u64>,
}

impl StatusCounts {
    /// Distinct statuses kept; later new ones are left to `errors_by_kind`'s count (a
    /// hostile server can answer with any of 900 codes).
    pub const DISTINCT: usize = 16;

    /// Counts one failed request, when it failed on an HTTP status.
    pub fn add(&mut self, e: &RequestError) {
        let (ErrorKind::HttpStatus, Some(status)) = (e.kind, e.http_status) else {
            return;
        };
        if let Some(n) = self.counts.get_mut(&status) {
            *n += 1;
        } else if self.counts.len() < Self::DISTINCT {
            self.counts.insert(status, 1);
        }
    }

    /// Failed requests by status: exact for each status kept.
    pub fn counts(&self) -> &BTreeMap<u16, u64> {
        &self.counts
    }
}

/// `429 ×4, 503 ×3` for `http_errors` requests failed on an HTTP status, `by_status` the
/// statuses kept; `other ×N` for those whose status was not kept (past
/// [`StatusCounts::DISTINCT`], or in records written before statuses were). `None` without
/// a status to say.
pub fn statuses_text(by_status: &BTreeMap<u16, u64>, http_errors: u64) -> Option<String> {
    if by_status.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = by_status
        .iter()
        .map(|(status, n)| format!("{status} ×{n}"))
        .collect();
    let kept: u64 = by_status.values().sum();
    if http_errors > kept {
        parts.push(format!("other ×{}", http_errors - kept));
    }
    Some(parts.join(", "))
}

/// Each error kind with its count, `sep` between kind and count (`http_status: 7` in the
/// verdict, `http_status 7` in the table), `http_status` with its statuses:
/// `http_status 7 (429 ×4, 503 ×3), connect 2`. Empty without errors.
pub fn error_kinds_text(s: &RunSummary, sep: &str) -> String {
    s.errors_by_kind
        .iter()
        .map(|(kind, &n)| {
            let statuses = (kind == ErrorKind::HttpStatus.as_str())
                .then(|| statuses_text(&s.errors_by_http_status, n))
                .flatten();
            match statuses {
                Some(st) => format!("{kind}{sep}{n} ({st})"),
                None => format!("{kind}{sep}{n}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> RequestError {
        RequestError {
            kind: ErrorKind::HttpStatus,
            http_status: Some(code),
            message: "injected fault".into(),
        }
    }

    #[test]
    fn statuses_are_counted_apart_and_bounded() {
        let mut c = StatusCounts::default();
        for code in [503, 429, 503, 429, 429] {
            c.add(&status(code));
        }
        // Not an HTTP status error: not counted here.
        c.add(&RequestError {
            kind: ErrorKind::Connect,
            http_status: None,
            message: "Connection refused".into(),
        });
        assert_eq!(
            statuses_text(c.counts(), 5).as_deref(),
            Some("429 ×3, 503 ×2")
        );
        for code in 400..600 {
            c.add(&status(code));
        }
        assert_eq!(c.counts().len(), StatusCounts::DISTINCT);
        // What was not kept is still said, as a remainder.
        assert_eq!(
            statuses_text(&BTreeMap::from([(429, 3)]), 5).as_deref(),
            Some("429 ×3, other ×2")
        );
        assert_eq!(statuses_text(&BTreeMap::new(), 5), None);
    }
}
