//! [`Secrets`]: a target's API key and extra header values in the forms a server may quote
//! them back, found once per run, and the scrub that takes them out of the server's words
//! before they reach a record, a summary or an export.
//!
//! A server's text is cut in several places (an error body's first 4 KiB, a JSON parser's
//! complaint at 200 bytes, a message at 4 KiB), and a cut may fall inside a secret. Two rules
//! keep the start of a cut secret out: every place that quotes a server's text scrubs it
//! before it cuts it or adds words after it ([`Secrets::cut`], [`Secrets::clean`]), and the
//! scrub redacts a secret's start of 4 bytes or more wherever a cut can leave one: at the end
//! of the text, before an ellipsis (`…`, how canaryd marks a cut), before the replacement
//! character a lossy decode leaves of a character cut in two, and before ` (` (how canaryd
//! adds why a text is short, `… (error body cut short: …)`).

use crate::target::{ApiKey, Target};
use std::borrow::Cow;

/// What a secret is replaced by.
const REDACTED: &str = "<redacted>";

/// The shortest start of a secret redacted where a text is cut (bytes): 3 characters say
/// nothing, and would redact every `Bea` before a cut.
const CUT_MIN: usize = 4;

/// What follows a secret cut short, besides the end of the text.
const CUT_MARKS: [&str; 3] = ["…", "\u{FFFD}", " ("];

/// A target's secrets in every form a server may quote them: the API key and each extra
/// header's value whole (4 bytes or more) and by the credentials in it ([`credentials`], 6
/// bytes or more), each by its bytes read as UTF-8 and as Latin-1 ([`decodings`]), as
/// written and as JSON encoders escape it. Never printed: `Debug` counts the forms.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Longest first, no two alike.
    forms: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets(<{} forms redacted>)", self.forms.len())
    }
}

impl Secrets {
    /// The secrets of `targets` (a target and its replicas).
    pub fn of<'a>(targets: impl IntoIterator<Item = &'a Target>) -> Secrets {
        let mut forms: Vec<String> = Vec::new();
        let mut add = |secret: &[u8]| {
            for text in decodings(secret) {
                for form in json_forms(&text) {
                    if !forms.contains(&form) {
                        forms.push(form);
                    }
                }
            }
        };
        for target in targets {
            for key in target.api_key.iter().map(ApiKey::expose) {
                if !key.is_empty() {
                    add(key.as_bytes());
                }
            }
            // By their bytes: a value may hold any byte from 0x80 up (`-H 'X-Key: é'`).
            for (name, value) in &target.headers {
                let value = value.as_bytes();
                if value.trim_ascii().len() >= 4 {
                    add(value.trim_ascii());
                }
                credentials(name.as_str(), value)
                    .filter(|c| c.len() >= 6)
                    .for_each(&mut add);
            }
        }
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        Secrets { forms }
    }

    /// The longest form, bytes.
    fn longest(&self) -> usize {
        self.forms.first().map_or(0, String::len)
    }

    /// `text` with every secret in it replaced by `<redacted>`; `None` when it holds none. A
    /// secret counts whole wherever it is, and by its start of 4 bytes or more where a cut can
    /// leave one (the module's docs).
    pub fn scrub(&self, text: &str) -> Option<String> {
        let spans = self.spans(text);
        if spans.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end) in spans {
            out.push_str(&text[at..start]);
            out.push_str(REDACTED);
            at = end;
        }
        out.push_str(&text[at..]);
        Some(out)
    }

    /// [`Secrets::scrub`], `text` itself when it holds no secret.
    pub fn clean<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.scrub(text) {
            Some(s) => Cow::Owned(s),
            None => Cow::Borrowed(text),
        }
    }

    /// A server's `text` cut to at most `limit` bytes (where a character starts), scrubbed
    /// before the cut: a secret the cut would fall inside is redacted whole, however little
    /// of it the cut keeps.
    pub fn cut(&self, text: &str, limit: usize) -> String {
        // A secret that starts before the cut ends within the longest form after it.
        let window = canary_core::prefix_within(text, limit.saturating_add(self.longest()));
        canary_core::prefix_within(&self.clean(window), limit).to_string()
    }

    /// Where the secrets are in `text`: sorted byte ranges, none overlapping.
    fn spans(&self, text: &str) -> Vec<(usize, usize)> {
        let bytes = text.as_bytes();
        let mut spans = Vec::new();
        for form in &self.forms {
            let f = form.as_bytes();
            // Found by its first bytes, then followed as far as it goes: all of it, or a
            // start a cut ends. Every start is looked at (a secret can begin inside another
            // start of itself: `abab-key` in `ababab-key`).
            let finder = memchr::memmem::Finder::new(&f[..f.len().min(CUT_MIN)]);
            let mut from = 0;
            while let Some(i) = finder.find(&bytes[from..]) {
                let start = from + i;
                let same = common_prefix(&bytes[start..], f);
                if same == f.len() || (same >= CUT_MIN && cut_at(bytes, start + same)) {
                    spans.push((start, start + same));
                }
                from = start + 1;
            }
        }
        merge(spans)
    }
}

/// How many bytes `a` and `b` begin with alike.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// True when a text cut at `at` would end there or go on with a cut's mark.
fn cut_at(text: &[u8], at: usize) -> bool {
    at == text.len()
        || CUT_MARKS
            .iter()
            .any(|m| text[at..].starts_with(m.as_bytes()))
}

/// `spans` sorted, those that overlap or touch made one.
fn merge(mut spans: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The secrets inside header `name`'s value: an authorization's credential after its scheme
/// (`Bearer TOKEN`, `Basic B64`), and a cookie's values (`Cookie: a=1; b=2`). Other headers'
/// values count whole only (a `User-Agent`'s words are no secret).
fn credentials<'a>(name: &str, value: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    let split_once = |s: &'a [u8], at: u8| {
        let i = s.iter().position(|&b| b == at)?;
        Some((&s[..i], &s[i + 1..]))
    };
    let auth = matches!(name, "authorization" | "proxy-authorization");
    let after_scheme = split_once(value, b' ')
        .filter(|_| auth)
        .map(|(_, c)| c.trim_ascii());
    let cookie = name == "cookie";
    let pairs = value
        .split(|&b| b == b';')
        .filter(move |_| cookie)
        .filter_map(move |p| split_once(p, b'=').map(|(_, v)| v.trim_ascii()));
    after_scheme.into_iter().chain(pairs)
}

/// The texts a server may make of a secret's bytes: read as UTF-8 (as sent: `-H` and a
/// config's `headers` are text), and read as Latin-1, byte by byte, as HTTP/1.1 servers
/// often read header bytes from 0x80 up (Python's `http.server`) before they write them back
/// in UTF-8. One text for ASCII.
fn decodings(secret: &[u8]) -> Vec<String> {
    let utf8 = String::from_utf8_lossy(secret).into_owned();
    if secret.is_ascii() {
        return vec![utf8];
    }
    let latin1 = secret.iter().map(|&b| char::from(b)).collect();
    vec![utf8, latin1]
}

/// `secret` as written and as JSON encoders write it inside a string: serde's escapes (`\"`,
/// `\\`, control characters), with `/` as `\/` (PHP's default), `<`, `>`, `&` as `\u003c`,
/// `\u003e`, `\u0026` (Go's), and every character past ASCII as `\u00e9` (Python's
/// `ensure_ascii`, its default).
fn json_forms(secret: &str) -> Vec<String> {
    let quoted = serde_json::to_string(secret).unwrap_or_default();
    let json = quoted
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or(secret)
        .to_string();
    let slashed = json.replace('/', "\\/");
    let html = |s: &str| {
        s.replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
    };
    let ascii = |s: &str| {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            match c.is_ascii() {
                true => out.push(c),
                false => c
                    .encode_utf16(&mut [0; 2])
                    .iter()
                    .for_each(|u| out.push_str(&format!("\\u{u:04x}"))),
            }
        }
        out
    };
    let mut forms = vec![secret.to_string()];
    for f in [
        html(&slashed),
        html(&json),
        ascii(&slashed),
        ascii(&json),
        slashed,
        json,
    ] {
        if !forms.contains(&f) {
            forms.push(f);
        }
    }
    forms
}

#[cfg(test)]
mod tests;
