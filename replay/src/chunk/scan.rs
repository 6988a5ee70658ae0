//! A scanner for the few keys of a chunk canaryd reads, walking past the rest without building
//! anything: most of a chunk is `id`, `model`, `created`, `system_fingerprint`, … which the
//! serde_json path decodes only to throw away.
//!
//! It answers only when it is sure: `Some` means serde_json's parse (`super::parse_serde`) gives
//! `Ok` with the same [`ChunkInfo`]; anything it does not follow (an `error` object, a
//! `finish_reason` that is a failed finish ([`super::FAILED_FINISHES`]) or not a plain string or
//! `null`, a key with
//! an escape, a duplicate known key, a number that is not a plain `u32`, an array where a struct
//! is expected, a lone surrogate, nesting past [`MAX_DEPTH`], any grammar it doubts) gives
//! `None` and the caller asks serde_json, whose answer (and error) then stands. So it is stricter
//! than JSON, never looser: it validates the whole document the way serde_json does (no control
//! characters in strings, exact escapes, number grammar, nothing after the value but
//! whitespace) because serde_json rejects a chunk for a fault in a field nobody reads.
//!
//! Bounded: no allocation at all, recursion only for nested values and capped at [`MAX_DEPTH`];
//! anything deeper is serde_json's to judge (its limit is 128 levels for what it decodes, none
//! for what it skips).

use super::ChunkInfo;

/// Deepest nesting of arrays and objects the scanner follows (the chunk itself is level 1).
pub(crate) const MAX_DEPTH: u32 = 64;

/// The chunk's [`ChunkInfo`] when the scanner is sure of it; `None` to ask serde_json.
pub fn scan(data: &str) -> Option<ChunkInfo> {
    let mut s = Scanner {
        b: data.as_bytes(),
        i: 0,
        depth: 0,
    };
    let mut info = ChunkInfo::default();
    s.ws();
    s.top(&mut info)?;
    s.ws();
    (s.i == s.b.len()).then_some(info)
}

/// A string value: its decoded length in bytes, or JSON `null`.
type Text = Option<usize>;

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// serde_json's whitespace: space, tab, `\n`, `\r`.
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// Walks an object at `{`, handing each key to `member`, which must consume the value. A
    /// key is its raw bytes, or `None` when it holds an escape: decoded, it could be a known
    /// key, so the walkers of known objects give up on it.
    fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, Option<&'a [u8]>) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        self.enter()?;
        self.ws();
        if self.eat(b'}').is_some() {
            self.depth -= 1;
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let start = self.i;
            let len = self.string_rest()?;
            let key = &self.b[start..self.i - 1];
            // Every escape decodes shorter than it is written.
            let key = (len == key.len()).then_some(key);
            self.ws();
            self.eat(b':')?;
            self.ws();
            member(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Walks an array at `[`, `element` consuming each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.enter()?;
        self.ws();
        if self.eat(b']').is_some() {
            self.depth -= 1;
            return Some(());
        }
        loop {
            element(self)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b']' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Consumes `null` if it is next.
    fn null(&mut self) -> bool {
        self.literal(b"null")
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        let hit = self.b[self.i..].starts_with(word);
        if hit {
            self.i += word.len();
        }
        hit
    }

    /// Any value, checked and thrown away.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(|s, _| s.skip()),
            b'[' => self.array(Self::skip),
            b'"' => {
                self.i += 1;
                self.string_rest().map(drop)
            }
            b't' => self.literal(b"true").then_some(()),
            b'f' => self.literal(b"false").then_some(()),
            b'n' => self.null().then_some(()),
            _ => self.number().map(drop),
        }
    }

    /// The rest of a string whose `"` was consumed: its decoded length in UTF-8 bytes.
    fn string_rest(&mut self) -> Option<usize> {
        let mut len = 0;
        loop {
            let start = self.i;
            self.skip_plain();
            len += self.i - start;
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(len);
                }
                b'\\' => {
                    self.i += 1;
                    len += self.escape()?;
                }
                _ => return None, // a control character: serde_json refuses it
            }
        }
    }

    /// Moves to the next `"`, `\` or control character (or the end), eight bytes at a time
    /// as serde_json does: a byte's high bit in `hits` is set for the first such byte (later
    /// ones may be missed or false, which does not matter: only the first is used).
    fn skip_plain(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        while let Some(word) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            let ctrl = w.wrapping_sub(ONES * 0x20) & !w;
            let q = w ^ (ONES * u64::from(b'"'));
            let quote = q.wrapping_sub(ONES) & !q;
            let bs = w ^ (ONES * u64::from(b'\\'));
            let backslash = bs.wrapping_sub(ONES) & !bs;
            let hits = (ctrl | quote | backslash) & (ONES << 7);
            if hits != 0 {
                self.i += hits.trailing_zeros() as usize / 8;
                return;
            }
            self.i += 8;
        }
        while let Some(&c) = self.b.get(self.i) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                return;
            }
            self.i += 1;
        }
    }

    /// An escape after its `\`: the bytes it decodes to. Surrogates must pair (serde_json
    /// refuses a lone one in a string it decodes; this scanner gives up on one anywhere).
    fn escape(&mut self) -> Option<usize> {
        let c = self.peek()?;
        self.i += 1;
        match c {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(1),
            b'u' => match self.hex4()? {
                0xD800..=0xDBFF => {
                    self.eat(b'\\')?;
                    self.eat(b'u')?;
                    matches!(self.hex4()?, 0xDC00..=0xDFFF).then_some(4)
                }
                0xDC00..=0xDFFF => None,
                cp => Some(char::from_u32(cp.into())?.len_utf8()),
            },
            _ => None,
        }
    }

    fn hex4(&mut self) -> Option<u16> {
        let digits = self.b.get(self.i..self.i + 4)?;
        let mut v = 0u16;
        for &d in digits {
            v = v << 4 | (d as char).to_digit(16)? as u16;
        }
        self.i += 4;
        Some(v)
    }

    /// A number by JSON's grammar: its text.
    fn number(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek()?.is_ascii_digit().then_some(())?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.peek()?.is_ascii_digit().then_some(())?;
            self.digits();
        }
        Some(&self.b[start..self.i])
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    /// `null` or a string; anything else gives up (serde_json: invalid type).
    fn text(&mut self) -> Option<Text> {
        if self.null() {
            return Some(None);
        }
        self.eat(b'"')?;
        self.string_rest().map(Some)
    }

    /// `null` or a plain non-negative integer within `u32`. A sign, a fraction or an exponent
    /// gives up: serde_json's verdict on `-0`, `1.0` or `1e3` for a `u32` is its own.
    fn count(&mut self) -> Option<Option<u32>> {
        if self.null() {
            return Some(None);
        }
        let n = self.number()?;
        if n.len() > 10 || !n.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = n.iter().fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'));
        u32::try_from(v).ok().map(Some)
    }

    /// `null` or a number read as serde_json reads an `f64` (its rounding, its range errors).
    fn millis(&mut self) -> Option<Option<f64>> {
        if self.null() {
            return Some(None);
        }
        let n = std::str::from_utf8(self.number()?).ok()?;
        serde_json::from_str::<f64>(n).ok().map(Some)
    }

    /// `null` (absent) or an object walked by `walk`; anything else gives up.
    fn nullable_object(&mut self, walk: impl FnOnce(&mut Self) -> Option<()>) -> Option<bool> {
        if self.null() {
            return Some(false);
        }
        if self.peek()? != b'{' {
            return None;
        }
        walk(self).map(|()| true)
    }
}

mod keys;

#[cfg(test)]
mod tests;
