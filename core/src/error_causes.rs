//! [`ErrorCauses`]: the most frequent causes of a run's failed requests (kind, HTTP status
//! and message), so the printed table can say *why* requests failed (`connect: … Connection
//! refused`, `http_status 429: …`), not only how many, without reading `records.jsonl`. The
//! status is part of the cause: a 429 (rate limit), a 503 (overload) and a 500 call for
//! different actions, and their bodies may read the same.
//!
//! Messages that differ only in their numbers are one cause (`no complete response within
//! 20000 ms` and `… 19992 ms`: the time a late send left; `over 144 token chunks for
//! max_tokens 10` and `over 88 … 3`): the first such message is shown, marked when others
//! had other numbers, so one cause does not fill the list three times.
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
    /// By kind, status and the message's shape (its numbers blanked): the count, the first
    /// message of that shape, and whether another one differed from it.
    counts: HashMap<(ErrorKind, Option<u16>, String), Tally>,
    /// Failures whose cause was new once the tally was full.
    untallied: u64,
}

#[derive(Debug, Clone)]
struct Tally {
    requests: u64,
    message: String,
    numbers_vary: bool,
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
    /// The message (the first one counted here; the others read the same but for their
    /// numbers when [`numbers_vary`](Self::numbers_vary)), at most
    /// [`ErrorCauses::MESSAGE_CHARS`] characters.
    pub message: String,
    /// Failed requests with this kind, status and message: exact.
    pub requests: u64,
    /// Some of them had other numbers in their message (a timeout's budget, a limit).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub numbers_vary: bool,
}

impl ErrorCauses {
    /// Distinct causes kept; later new ones are only counted.
    pub const DISTINCT: usize = 64;
    /// Characters of a message kept (a server's error body can be long): room for canaryd's
    /// own hints after an error chain (the mTLS one names four flags in about 370
    /// characters; at 200 it lost `--client-key`), bounded all the same.
    pub const MESSAGE_CHARS: usize = 512;
    /// Causes listed in the summary, most frequent first.
    pub const LISTED: usize = 3;

    /// Counts one failed request.
    pub fn add(&mut self, e: &RequestError) {
        // Printable whatever the records say (a merge reads them from files): the top cause
        // is printed and logged.
        let message = cut(&e.message, Self::MESSAGE_CHARS);
        let message = crate::printable(&message).into_owned();
        let key = (e.kind, e.http_status, shape(&message));
        if let Some(t) = self.counts.get_mut(&key) {
            t.requests += 1;
            t.numbers_vary |= t.message != message;
        } else if self.counts.len() < Self::DISTINCT {
            let tally = Tally {
                requests: 1,
                message,
                numbers_vary: false,
            };
            self.counts.insert(key, tally);
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
            .map(|((kind, http_status, _), t)| ErrorCause {
                kind: *kind,
                http_status: *http_status,
                message: t.message.clone(),
                requests: t.requests,
                numbers_vary: t.numbers_vary,
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

/// Characters back from the limit within which a cut looks for whitespace to end on.
const WORD_CUT_CHARS: usize = 40;

/// `message` as it fits in `limit` characters: whole, or cut and marked `…` (the mark counted
/// in the limit), at the last whitespace when one lies within [`WORD_CUT_CHARS`] of the cut,
/// so a word (`--client-…`) is not cut in half; else mid-word. Cut on a character
/// boundary: valid UTF-8.
fn cut(message: &str, limit: usize) -> String {
    // The byte where the `limit`th character starts: none, the message fits.
    let Some((over, _)) = message.char_indices().nth(limit) else {
        return message.to_string();
    };
    // Room for the mark.
    let end = message[..over]
        .char_indices()
        .nth_back(0)
        .map_or(0, |(i, _)| i);
    let head = &message[..end];
    // Ends on a whole word when the next character is whitespace or one lies close before.
    let next_is_space = message[end..].starts_with(char::is_whitespace);
    let head = if next_is_space {
        head
    } else {
        match head.rfind(char::is_whitespace) {
            Some(i) if head[i..].chars().count() <= WORD_CUT_CHARS => &head[..i],
            _ => head,
        }
    };
    format!("{}…", head.trim_end())
}

/// `message` with each run of digits (and a decimal point inside one) as `#`: the key that
/// tells causes apart whatever numbers they carry.
fn shape(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        if !c.is_ascii_digit() {
            out.push(c);
            continue;
        }
        while let Some(&n) = chars.peek() {
            let decimal = n == '.' && {
                let mut ahead = chars.clone();
                ahead.next();
                ahead.peek().is_some_and(char::is_ascii_digit)
            };
            if !(n.is_ascii_digit() || decimal) {
                break;
            }
            chars.next();
        }
        out.push('#');
    }
    out
}

impl std::fmt::Display for ErrorCause {
    /// `4 × connect: connect to 127.0.0.1:9: Connection refused (os error 111)`, or
    /// `4 × http_status 429: …` with the status; `(numbers vary)` after a message whose
    /// requests had other numbers in theirs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} × {}", self.requests, self.kind.as_str())?;
        if let Some(status) = self.http_status {
            write!(f, " {status}")?;
        }
        write!(f, ": {}", self.message)?;
        if self.numbers_vary {
            f.write_str(" (numbers vary)")?;
        }
        Ok(())
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
        // (In letters: messages that differ only in numbers are one cause.)
        let letters = |i: usize| -> String {
            [i / 676, i / 26 % 26, i % 26]
                .iter()
                .map(|&d| char::from(b'a' + d as u8))
                .collect()
        };
        for i in 0..1000 {
            c.add(&err(
                ErrorKind::StreamCut,
                &format!("cut at {}", letters(i)),
            ));
        }
        assert_eq!(c.counts.len(), ErrorCauses::DISTINCT);
        assert_eq!(c.untallied, 1000 - (ErrorCauses::DISTINCT as u64 - 3));
        let long = "x".repeat(5000);
        let mut c = ErrorCauses::default();
        c.add(&err(ErrorKind::ServerError, &long));
        let kept = &c.top()[0].message;
        assert_eq!(kept.chars().count(), ErrorCauses::MESSAGE_CHARS);
        assert!(kept.ends_with("x…"), "{kept}");
    }

    // Audit: a long cause was cut mid-word (`… --client-`) with nothing saying it was cut.
    // It ends on the last whole word before the limit, marked `…`, within the limit, and a
    // cut among multi-byte characters stays valid UTF-8.
    #[test]
    fn a_long_cause_is_cut_at_a_word_and_marked() {
        let limit = ErrorCauses::MESSAGE_CHARS;
        // A flag straddles the limit.
        let mut message = "a".repeat(limit - 20);
        message.push_str(" see --client-timeout and --retries for more");
        let mut c = ErrorCauses::default();
        c.add(&err(ErrorKind::ServerError, &message));
        let kept = &c.top()[0].message;
        assert_eq!(
            kept,
            &format!("{}…", "a".repeat(limit - 20) + " see"),
            "{kept}"
        );
        assert!(kept.chars().count() <= limit);
        // No whitespace near the limit: cut mid-word, still marked and within it; multi-byte
        // characters are never split (a `String` could not hold the half).
        let wide = "é".repeat(limit * 2);
        c = ErrorCauses::default();
        c.add(&err(ErrorKind::ServerError, &wide));
        let kept = &c.top()[0].message;
        assert_eq!(kept, &format!("{}…", "é".repeat(limit - 1)));
        // Whitespace right after the limit: the last word is whole already.
        let exact = format!("{} tail", "b".repeat(limit - 1));
        assert_eq!(cut(&exact, limit), format!("{}…", "b".repeat(limit - 1)));
        // One that fits is kept whole, unmarked.
        assert_eq!(cut("short message", limit), "short message");
        let full = "c".repeat(limit);
        assert_eq!(cut(&full, limit), full);
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

    // A hostile-server audit: 1,496 timeouts "within 20000 ms", 2 "within 19999 ms" and one
    // "19992 ms" (the budget a late send left) filled all three listed causes with one.
    #[test]
    fn messages_that_differ_only_in_their_numbers_are_one_cause() {
        let mut c = ErrorCauses::default();
        let timeout =
            |ms: &str| format!("no complete response within {ms} ms of sending (request timeout)");
        for ms in ["20000", "20000", "19999", "19992", "20000"] {
            c.add(&err(ErrorKind::Timeout, &timeout(ms)));
        }
        c.add(&err(ErrorKind::Timeout, &timeout("20000.5")));
        c.add(&err(
            ErrorKind::Connect,
            "Connection refused (os error 111)",
        ));
        c.add(&err(
            ErrorKind::Connect,
            "Connection refused (os error 111)",
        ));
        let top = c.top();
        assert_eq!(top.len(), 2, "{top:?}");
        assert_eq!(
            top[0].to_string(),
            format!("6 × timeout: {} (numbers vary)", timeout("20000"))
        );
        // The same message throughout is not marked, and the mark is in summary.json.
        assert_eq!(
            top[1].to_string(),
            "2 × connect: Connection refused (os error 111)"
        );
        assert_eq!(serde_json::to_value(&top[0]).unwrap()["numbers_vary"], true);
        assert!(serde_json::to_value(&top[1])
            .unwrap()
            .get("numbers_vary")
            .is_none());
        // Words still tell causes apart, and a number is not a word.
        assert_eq!(
            shape("over 144 token chunks for max_tokens 10"),
            "over # token chunks for max_tokens #"
        );
        assert_eq!(shape("HTTP/1.1 v2. 3.x"), "HTTP/# v#. #.x");
    }

    #[test]
    fn a_summary_written_before_the_status_was_kept_still_reads() {
        let old = r#"{"kind": "http_status", "message": "Not Found", "requests": 4}"#;
        let cause: ErrorCause = serde_json::from_str(old).unwrap();
        assert_eq!(cause.http_status, None);
        assert_eq!(cause.to_string(), "4 × http_status: Not Found");
    }
}
