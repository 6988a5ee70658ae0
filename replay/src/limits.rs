//! How much of one response canaryd holds at most. A canary is pointed at servers that
//! misbehave: a `data:` line that never ends, a 4 GB `Content-Length`, headers that never end
//! or a stream that never stops must each cost one classified error
//! (`response_too_large`, `response_too_long`), never the process.

use crate::plan::{Setting, SettingError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Caps on what one response may make canaryd hold, per target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResponseLimits {
    /// The response head: status line and headers, in bytes (hyper's `max_header_size`; at
    /// most 100 headers besides).
    pub header_bytes: usize,
    /// One SSE event, its unfinished line included, in bytes.
    pub event_bytes: usize,
    /// A non-streaming (`--no-streaming`) response body, in bytes.
    pub body_bytes: usize,
    /// Token-bearing chunks read per request, as a multiple of the `max_tokens` it asked for
    /// (plus [`ResponseLimits::OUTPUT_SLACK`]); past it the request is `response_too_long`.
    pub output_ratio: f64,
    /// Bytes held at once by every response in flight together (their unfinished events
    /// and bodies): each cap above is per response, and thousands in flight, each just under
    /// its cap, add up past any machine's memory. Past it, the response that would grow is
    /// `response_too_large`.
    pub held_bytes: usize,
}

impl ResponseLimits {
    /// Default [`ResponseLimits::header_bytes`]: 64 KiB. LLM servers send a few hundred bytes
    /// of headers; common proxies refuse more than 8–16 KiB.
    pub const HEADER_BYTES: usize = 64 << 10;
    /// Default [`ResponseLimits::event_bytes`]: 1 MiB. A chunk is a few hundred bytes; with
    /// `logprobs` and top-20 alternatives a few tens of KiB.
    pub const EVENT_BYTES: usize = 1 << 20;
    /// Default [`ResponseLimits::body_bytes`]: 16 MiB. A 128k-token completion is about
    /// 0.5 MiB of text.
    pub const BODY_BYTES: usize = 16 << 20;
    /// Default [`ResponseLimits::output_ratio`]: 8. Servers send at most one chunk per token,
    /// proxies that re-chunk text about one per character (4 per token on average).
    pub const OUTPUT_RATIO: f64 = 8.0;
    /// Default [`ResponseLimits::held_bytes`]: 1 GiB, a thousand responses at the event cap;
    /// real ones hold a few KiB each.
    pub const HELD_BYTES: usize = 1 << 30;
    /// Chunks allowed beyond `max_tokens` × ratio, for tiny `max_tokens`.
    pub const OUTPUT_SLACK: u64 = 64;
    /// Chunks read at most when a request sets no `max_tokens` (the server picks the length):
    /// 8 Mi, more than any model generates in one response.
    pub const OUTPUT_UNBOUNDED: u64 = 8 << 20;

    /// SSE lines without data a stream may send beyond four times its token chunk cap
    /// ([`ResponseLimits::max_bare_lines`]): keep-alive comments through a long prefill.
    pub const BARE_LINE_SLACK: u64 = 4096;

    /// SSE lines without data ([`crate::SseParser::bare_lines`]: events' ends, comments,
    /// fields) read at most for a stream of at most `max_chunks` token chunks: every event
    /// ends with one, and a stream of events that carry no token (role-only, empty content,
    /// `choices: []`, `: ping`) holds nothing, so only this count bounds it short of the
    /// request timeout. Four per chunk leaves room for servers that send `id:` and `event:`
    /// with each (three such lines per token at `max_output_ratio = 1`), and for role, finish
    /// and usage events.
    pub fn max_bare_lines(max_chunks: u64) -> u64 {
        max_chunks
            .saturating_mul(4)
            .saturating_add(Self::BARE_LINE_SLACK)
    }

    /// Token-bearing chunks read at most for a request asking for `max_tokens` (`None` when it
    /// sends no length field).
    pub fn max_output_chunks(&self, max_tokens: Option<u32>) -> u64 {
        match max_tokens {
            Some(n) if n > 0 => {
                (f64::from(n) * self.output_ratio).min(Self::OUTPUT_UNBOUNDED as f64) as u64
                    + Self::OUTPUT_SLACK
            }
            _ => Self::OUTPUT_UNBOUNDED,
        }
    }

    /// Checks every cap is usable; the error names the setting (as its config key).
    pub fn validate(&self) -> Result<(), SettingError> {
        for (setting, v) in [
            (Setting::MaxHeaderBytes, self.header_bytes),
            (Setting::MaxEventBytes, self.event_bytes),
            (Setting::MaxBodyBytes, self.body_bytes),
            (Setting::MaxHeldBytes, self.held_bytes),
        ] {
            Self::check_bytes(setting, v)?;
        }
        Self::check_output_ratio(self.output_ratio)
    }

    /// Checks a byte cap is at least 1 KiB (a front end may check a flag's value with it
    /// before building a plan).
    pub fn check_bytes(setting: Setting, v: usize) -> Result<(), SettingError> {
        if v < 1024 {
            return Err(SettingError::new(
                setting,
                format!("expected at least 1 KiB, found {v} bytes"),
            ));
        }
        Ok(())
    }

    /// Checks an output ratio is a number of 1 or more.
    pub fn check_output_ratio(ratio: f64) -> Result<(), SettingError> {
        if !(ratio >= 1.0 && ratio.is_finite()) {
            return Err(SettingError::new(
                Setting::MaxOutputRatio,
                format!(
                    "expected a number of 1 or more, found {}",
                    canary_core::rate_text::number(ratio)
                ),
            ));
        }
        Ok(())
    }
}

impl Default for ResponseLimits {
    fn default() -> ResponseLimits {
        ResponseLimits {
            header_bytes: Self::HEADER_BYTES,
            event_bytes: Self::EVENT_BYTES,
            body_bytes: Self::BODY_BYTES,
            output_ratio: Self::OUTPUT_RATIO,
            held_bytes: Self::HELD_BYTES,
        }
    }
}

/// The bytes every response in flight holds, against [`ResponseLimits::held_bytes`]: one per
/// run, shared by its requests.
#[derive(Debug)]
pub struct HeldBytes {
    used: AtomicUsize,
    limit: usize,
}

impl HeldBytes {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<HeldBytes> {
        Arc::new(HeldBytes {
            used: AtomicUsize::new(0),
            limit,
        })
    }

    /// Its limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// One response's share, none yet; given back when dropped.
    pub fn hold(self: &Arc<Self>) -> Hold {
        Hold {
            budget: self.clone(),
            bytes: 0,
        }
    }
}

/// What one response holds of a [`HeldBytes`] budget.
#[derive(Debug)]
pub struct Hold {
    budget: Arc<HeldBytes>,
    bytes: usize,
}

impl Hold {
    /// Now holding `bytes`: false, the share unchanged, when growing to it would take every
    /// response together past the budget (at most one atomic update: this runs on every
    /// read).
    pub fn set(&mut self, bytes: usize) -> bool {
        if bytes == self.bytes {
            // The common case (nothing held between whole events): no shared write.
            return true;
        }
        let (used, limit) = (&self.budget.used, self.budget.limit);
        if bytes > self.bytes {
            let more = bytes - self.bytes;
            // Committed only when it fits: a grow that fails never counts, even briefly,
            // against another response's.
            let grown = used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(more).filter(|&t| t <= limit)
            });
            if grown.is_err() {
                return false;
            }
        } else {
            used.fetch_sub(self.bytes - bytes, Ordering::Relaxed);
        }
        self.bytes = bytes;
        true
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// `n` bytes as people read them: `64 KiB`, `1 MiB`, `1500 bytes`.
pub fn show_bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_cap_follows_max_tokens_with_a_margin() {
        let l = ResponseLimits::default();
        assert_eq!(l.max_output_chunks(Some(100)), 864);
        assert_eq!(
            l.max_output_chunks(Some(0)),
            ResponseLimits::OUTPUT_UNBOUNDED
        );
        assert_eq!(l.max_output_chunks(None), ResponseLimits::OUTPUT_UNBOUNDED);
        assert_eq!(
            l.max_output_chunks(Some(u32::MAX)),
            ResponseLimits::OUTPUT_UNBOUNDED + ResponseLimits::OUTPUT_SLACK
        );
        assert_eq!(l.validate().ok(), Some(()));
        // Quoted compactly, not as 301 digits (audit L4).
        let e = ResponseLimits::check_output_ratio(-1e300).unwrap_err();
        assert_eq!(e.reason, "expected a number of 1 or more, found -1e300");
        let tiny = ResponseLimits {
            event_bytes: 10,
            ..l
        };
        assert_eq!(
            tiny.validate().unwrap_err().setting.name(),
            "max_event_bytes"
        );
        let ratio = ResponseLimits {
            output_ratio: 0.5,
            ..l
        };
        assert_eq!(
            ratio.validate().unwrap_err().setting.name(),
            "max_output_ratio"
        );
        assert_eq!(show_bytes(64 << 10), "64 KiB");
        // Responses together: one that would take the sum past the budget is refused, and
        // what a finished one held is given back.
        let budget = HeldBytes::new(100);
        let (mut a, mut b) = (budget.hold(), budget.hold());
        assert!(a.set(60));
        assert!(!b.set(50), "60 + 50 > 100");
        assert!(b.set(40));
        assert!(a.set(10), "shrinking always fits");
        assert!(b.set(90));
        drop(a);
        assert!(b.set(100));
        drop(b);
        assert!(budget.hold().set(100));
        assert_eq!(show_bytes(1500), "1500 bytes");
    }
}
