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

mod forms;

/// What a secret is replaced by.
const REDACTED: &str = "<redacted>";

/// The shortest start of a secret redacted where a text is cut (bytes): 3 characters say
/// nothing, and would redact every `Bea` before a cut.
const CUT_MIN: usize = 4;

/// What follows a secret cut short, besides the end of the text.
const CUT_MARKS: [&str; 3] = ["…", "\u{FFFD}", " ("];

/// A target's secrets in every form a server may quote them: the API key and each extra
/// header's value whole (4 bytes or more) and by the credentials in it (6 bytes or more: a
/// bearer token, a cookie's values, a `Basic` pair and its password), each by its bytes read
/// as UTF-8 and as Latin-1, as written and as JSON, HTML and URLs escape it, and in base64;
/// those of 8 characters or more whatever the case of their ASCII letters. Never printed:
/// `Debug` counts the forms.
#[derive(Clone, Default)]
pub struct Secrets {
    /// No two alike.
    forms: Vec<Form>,
    /// Some are found whatever their case: the scrub then looks at a lower-cased copy too.
    any_folded: bool,
    /// The longest form, bytes.
    longest: usize,
}

/// One form of a secret.
#[derive(Clone, PartialEq, Eq)]
struct Form {
    /// As written, or in ASCII lower case when `folded`.
    text: String,
    /// Found whatever the case of its ASCII letters.
    folded: bool,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets(<{} forms redacted>)", self.forms.len())
    }
}

impl Secrets {
    /// The secrets of `targets` (a target and its replicas).
    pub fn of<'a>(targets: impl IntoIterator<Item = &'a Target>) -> Secrets {
        let mut secrets = Secrets::default();
        for target in targets {
            for key in target.api_key.iter().map(ApiKey::expose) {
                if !key.is_empty() {
                    secrets.add(key.as_bytes());
                }
            }
            // By their bytes: a value may hold any byte from 0x80 up (`-H 'X-Key: é'`).
            for (name, value) in &target.headers {
                let value = value.as_bytes();
                if value.trim_ascii().len() >= 4 {
                    secrets.add(value.trim_ascii());
                }
                for credential in forms::credentials(name.as_str(), value) {
                    if credential.len() >= 6 {
                        secrets.add(&credential);
                    }
                }
            }
        }
        secrets
    }

    /// Adds every form of `secret`.
    fn add(&mut self, secret: &[u8]) {
        let folded = String::from_utf8_lossy(secret).chars().count() >= forms::FOLD_MIN;
        let texts = forms::decodings(secret);
        let escaped = texts.iter().flat_map(|t| forms::escaped(t));
        let encoded = forms::base64_forms(secret)
            .into_iter()
            .chain(forms::hex_forms(secret));
        for text in escaped.chain(encoded) {
            // Hex is found whatever its case, as the secret's bytes are 8 or more.
            let folded = folded || text.len() >= 2 * forms::FOLD_MIN && is_hex(&text);
            let form = Form {
                text: match folded {
                    true => text.to_ascii_lowercase(),
                    false => text,
                },
                folded,
            };
            if !self.forms.contains(&form) {
                self.longest = self.longest.max(form.text.len());
                self.any_folded |= folded;
                self.forms.push(form);
            }
        }
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
        let window = canary_core::prefix_within(text, limit.saturating_add(self.longest));
        within(&self.clean(window), limit).to_string()
    }

    /// Where the secrets are in `text`: sorted byte ranges, none overlapping.
    fn spans(&self, text: &str) -> Vec<(usize, usize)> {
        // ASCII lower case keeps every byte where it was: a range in one is a range in both.
        let lowered = self.any_folded.then(|| text.to_ascii_lowercase());
        let mut spans = Vec::new();
        for form in &self.forms {
            let bytes = match (&lowered, form.folded) {
                (Some(lowered), true) => lowered.as_bytes(),
                _ => text.as_bytes(),
            };
            let f = form.text.as_bytes();
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

/// A scrubbed `text` cut to at most `limit` bytes (where a character starts), before a
/// `<redacted>` marker the cut would fall inside: `…xxxx<redacted` read as a key's start.
pub fn within(text: &str, limit: usize) -> &str {
    let cut = canary_core::prefix_within(text, limit);
    // A marker the cut falls inside starts within its length before the cut.
    let from = cut.len().saturating_sub(REDACTED.len() - 1);
    let inside =
        (from..cut.len()).find(|&i| text.as_bytes()[i] == b'<' && text[i..].starts_with(REDACTED));
    match inside {
        Some(i) => &text[..i],
        None => cut,
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

#[cfg(test)]
mod tests;

/// Whether `text` is all hexadecimal digits.
fn is_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_hexdigit())
}
