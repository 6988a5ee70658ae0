//! The walkers of the objects whose keys canaryd reads: the chunk, a choice, a delta (or
//! message), usage and its details, llama.cpp's timings. Each known key may appear once
//! (serde_json refuses a duplicate); a key written with escapes gives up.

use super::{ChunkInfo, Scanner};
use crate::chunk::is_failed_finish;
use canary_core::{ServerTimings, Usage};

/// Marks `bit` seen; a second sighting gives up (serde_json: duplicate field).
fn once(seen: &mut u8, bit: u8) -> Option<()> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    Some(())
}

impl Scanner<'_> {
    pub(super) fn top(&mut self, info: &mut ChunkInfo) -> Option<()> {
        let mut seen = 0u8;
        self.object(|s, key| match key? {
            b"choices" => {
                once(&mut seen, 1)?;
                s.array(|s| s.choice(info))
            }
            b"usage" => {
                once(&mut seen, 2)?;
                let mut u = Usage::default();
                let present = s.nullable_object(|s| s.usage(&mut u))?;
                info.usage = present.then_some(u);
                Some(())
            }
            b"timings" => {
                once(&mut seen, 4)?;
                let mut t = ServerTimings::default();
                let present = s.nullable_object(|s| s.timings(&mut t))?;
                info.timings = present.then_some(t);
                Some(())
            }
            // Rare, and its message is whatever shape the server chose: serde_json's.
            b"error" => {
                once(&mut seen, 8)?;
                s.null().then_some(())
            }
            _ => s.skip(),
        })
    }

    fn choice(&mut self, info: &mut ChunkInfo) -> Option<()> {
        let mut seen = 0u8;
        self.object(|s, key| {
            let (bit, is_text) = match key? {
                b"delta" => (1, false),
                b"message" => (2, false),
                b"text" => (4, true),
                b"finish_reason" => {
                    once(&mut seen, 8)?;
                    return s.finish_reason();
                }
                _ => return s.skip(),
            };
            once(&mut seen, bit)?;
            if is_text {
                info.content_bytes += s.text()?.unwrap_or(0);
                return Some(());
            }
            s.nullable_object(|s| s.delta(info)).map(drop)
        })
    }

    /// `null`, or a string written plainly that is no failed finish
    /// ([`crate::chunk::FAILED_FINISHES`]); anything else (a failed finish, which the record
    /// quotes, an escape, a value that is not a string) is serde_json's.
    fn finish_reason(&mut self) -> Option<()> {
        if self.null() {
            return Some(());
        }
        self.eat(b'"')?;
        let start = self.i;
        let len = self.string_rest()?;
        let raw = &self.b[start..self.i - 1];
        (len == raw.len() && !is_failed_finish(raw)).then_some(())
    }

    fn delta(&mut self, info: &mut ChunkInfo) -> Option<()> {
        let mut seen = 0u8;
        self.object(|s, key| {
            let bit = match key? {
                b"content" => 1,
                b"reasoning_content" => 2,
                b"reasoning" => 4,
                _ => return s.skip(),
            };
            once(&mut seen, bit)?;
            let n = s.text()?.unwrap_or(0);
            match bit {
                1 => info.content_bytes += n,
                _ => info.reasoning_bytes += n,
            }
            Some(())
        })
    }

    fn usage(&mut self, u: &mut Usage) -> Option<()> {
        let mut seen = 0u8;
        self.object(|s, key| match key? {
            b"prompt_tokens" => {
                once(&mut seen, 1)?;
                u.prompt_tokens = s.count()?;
                Some(())
            }
            b"completion_tokens" => {
                once(&mut seen, 2)?;
                u.completion_tokens = s.count()?;
                Some(())
            }
            b"prompt_tokens_details" => {
                once(&mut seen, 4)?;
                s.detail(b"cached_tokens", &mut u.cached_tokens)
            }
            b"completion_tokens_details" => {
                once(&mut seen, 8)?;
                s.detail(b"reasoning_tokens", &mut u.reasoning_tokens)
            }
            _ => s.skip(),
        })
    }

    /// `null` or an object whose one known key is `name`, a count.
    fn detail(&mut self, name: &[u8], out: &mut Option<u32>) -> Option<()> {
        let mut seen = 0u8;
        self.nullable_object(|s| {
            s.object(|s, key| {
                if key? != name {
                    return s.skip();
                }
                once(&mut seen, 1)?;
                *out = s.count()?;
                Some(())
            })
        })
        .map(drop)
    }

    fn timings(&mut self, t: &mut ServerTimings) -> Option<()> {
        let mut seen = 0u8;
        self.object(|s, key| {
            let bit = match key? {
                b"prompt_ms" => 1,
                b"predicted_ms" => 2,
                b"prompt_n" => 4,
                b"predicted_n" => 8,
                b"cache_n" => 16,
                _ => return s.skip(),
            };
            once(&mut seen, bit)?;
            match bit {
                1 => t.prompt_ms = s.millis()?,
                2 => t.predicted_ms = s.millis()?,
                4 => t.prompt_n = s.count()?,
                8 => t.predicted_n = s.count()?,
                _ => t.cache_n = s.count()?,
            }
            Some(())
        })
    }
}
