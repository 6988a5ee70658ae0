//! [`Secrets`]: the values a request carried that must not be shown (an API key, the values
//! of headers that carry a credential, `cuts::is_credential`) in every form a server or a collector may quote them back, and the scrub that takes
//! them out of its text before a record, a summary, an export or a log line shows it. The
//! replay scrubs a server's error bodies of the target's key and headers; the OTLP exporter
//! scrubs a collector's answers of its configured headers. One set of rules for both.
//!
//! What is looked for (`forms`, `cuts`): each secret by its bytes read as UTF-8 and as
//! Latin-1, as written and as JSON, HTML and URLs escape it, in base64 and in hex; a header's
//! value whole and by the credentials in it (after a scheme word, a `Basic` pair and its
//! password, a cookie's values, the piece after a prefix such as `token=`).
//!
//! How the text is read: as written, and, where it holds a `%XX` escape, as a URL decoder reads
//! it (`%XX` in either case is the byte it stands for, wherever it stands, `%41` for `A`
//! included; `+` a space too where a secret holds one). What is replaced is the text the match
//! came from, encoded or not. A secret of [`FOLD_MIN`] bytes or more is found whatever the
//! case of its ASCII letters.
//!
//! A text is cut in several places (an error body's first 4 KiB, a JSON parser's complaint at
//! 200 bytes), and a cut may fall inside a secret. Two rules keep the start of a cut secret
//! out: every place that quotes a text scrubs it before it cuts it or adds words after it
//! ([`Secrets::cut`], [`Secrets::clean`]), and the scrub redacts a secret's start of
//! 4 bytes or more ([`START_MIN`]) wherever a cut can leave one: at the end of the text, before an
//! ellipsis (`…`, how canaryd marks a cut), before the replacement character a lossy decode
//! leaves of a character cut in two, and before ` (` (how canaryd adds why a text is short,
//! `… (error body cut short: …)`).

mod cuts;
mod forms;

pub use cuts::Words;

use std::borrow::Cow;

/// What a secret is replaced by.
const REDACTED: &str = "<redacted>";

/// The shortest start of a secret redacted where a text is cut (bytes): 3 characters say
/// nothing, and would redact every `Bea` before a cut.
const START_MIN: usize = 4;

/// A secret this long or longer (bytes) is found whatever the case of its ASCII letters
/// (`sk-zq1x…` for `sk-ZQ1x…`: servers and collectors that lower- or upper-case what they
/// quote); a shorter one only in its own case, as its letters could be a word.
pub const FOLD_MIN: usize = 8;

/// What follows a secret cut short, besides the end of the text.
const CUT_MARKS: [&str; 3] = ["…", "\u{FFFD}", " ("];

/// What holds secrets: a replay's target (its key, its headers).
pub trait HoldsSecrets {
    /// Adds each of its secrets to `secrets`.
    fn add_secrets(&self, secrets: &mut Secrets);
}

/// Secrets in every form they may be quoted in, each ready to be searched for. Never printed:
/// `Debug` counts the forms.
#[derive(Clone, Default)]
pub struct Secrets {
    /// No two alike.
    forms: Vec<Form>,
    /// Some form holds a space: a text is read a second time with `+` as a space.
    any_space: bool,
    /// Some form is found whatever its case: a reading is searched lower-cased too.
    any_folded: bool,
    /// The longest form, bytes.
    longest: usize,
}

/// One form of a secret.
#[derive(Clone)]
struct Form {
    /// Its bytes, in ASCII lower case when `folded`.
    bytes: Vec<u8>,
    /// Found whatever the case of its ASCII letters.
    folded: bool,
    /// Finds its first [`START_MIN`] bytes (all, if shorter): where every span redacted for it
    /// starts, so a text without them is passed over at memchr's speed.
    head: memchr::memmem::Finder<'static>,
    /// Knuth-Morris-Pratt's failure function of `bytes`: how long a match may still be after
    /// a mismatch, so a text is read once per form.
    fail: Vec<usize>,
    /// The shortest start of it redacted where a text is cut (bytes).
    start_min: usize,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets(<{} forms redacted>)", self.forms.len())
    }
}

impl Secrets {
    /// The secrets `holders` hold (a target and its replicas, say).
    pub fn of<'a, H: HoldsSecrets + ?Sized + 'a>(
        holders: impl IntoIterator<Item = &'a H>,
    ) -> Secrets {
        let mut secrets = Secrets::default();
        for holder in holders {
            holder.add_secrets(&mut secrets);
        }
        secrets
    }

    /// Adds `secret` whole (an API key), in every form; nothing if it is empty.
    pub fn add_secret(&mut self, secret: &[u8]) {
        self.add(secret, &[]);
    }

    /// Adds header `name`'s `value` (by its bytes: a value may hold any byte from 0x80 up) and
    /// each credential in it (the module's docs) when it is a credential: its name says so
    /// (`Authorization`, `Proxy-Authorization`, `Cookie`, a name holding `auth`, `key`,
    /// `token`, `secret`, `password`, …, in any case), or it is a scheme word and a credential
    /// (`Bearer abc123`). Any other header's value is text, no secret. `words` says which
    /// words of a credential may be secrets on their own.
    pub fn add_header(&mut self, name: &str, value: &[u8], words: Words) {
        let scheme = cuts::scheme(value);
        for cut in cuts::cuts(name, value, words) {
            self.add(&cut, scheme);
        }
    }

    /// Adds every form of `secret`; where one starts with `scheme` (a header value's leading
    /// word), its start redacted at a cut must reach past it.
    fn add(&mut self, secret: &[u8], scheme: &[u8]) {
        if secret.is_empty() {
            return;
        }
        let folded = secret.len() >= FOLD_MIN;
        for bytes in forms::forms(secret) {
            let start_min = start_min(&bytes, scheme);
            let bytes = match folded {
                true => bytes.to_ascii_lowercase(),
                false => bytes,
            };
            if let Some(same) = self
                .forms
                .iter_mut()
                .find(|f| f.bytes == bytes && f.folded == folded)
            {
                same.start_min = same.start_min.min(start_min);
                continue;
            }
            self.any_space |= bytes.contains(&b' ');
            self.longest = self.longest.max(bytes.len());
            let fail = failure(&bytes);
            let head =
                memchr::memmem::Finder::new(&bytes[..bytes.len().min(START_MIN)]).into_owned();
            self.any_folded |= folded;
            self.forms.push(Form {
                bytes,
                folded,
                head,
                fail,
                start_min,
            });
        }
    }

    /// `text` with every secret in it replaced by `<redacted>`; `None` when it holds none. A
    /// secret counts whole wherever it is, and by its start of 4 bytes or more
    /// where a cut can leave one (the module's docs).
    ///
    /// Linear in the text: O(n·k) for n bytes of text and k forms (k is fixed by the secrets,
    /// a few dozen forms each), at most three readings of the text; a form whose first bytes
    /// are not in a reading costs a memchr search of it.
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

    /// `text` cut to at most `limit` bytes (where a character starts), scrubbed before the
    /// cut: a secret the cut would fall inside is redacted whole, however little of it the
    /// cut keeps.
    pub fn cut(&self, text: &str, limit: usize) -> String {
        // A secret that starts before the cut ends within the longest form after it.
        let window = crate::prefix_within(text, limit.saturating_add(self.longest));
        Secrets::within(&self.clean(window), limit).to_string()
    }

    /// A scrubbed `text` cut to at most `limit` bytes (where a character starts), before a
    /// `<redacted>` marker the cut would fall inside: `…xxxx<redacted` read as a key's start.
    pub fn within(text: &str, limit: usize) -> &str {
        let cut = crate::prefix_within(text, limit);
        // A marker the cut falls inside starts within its length before the cut.
        let from = cut.len().saturating_sub(REDACTED.len() - 1);
        let inside = (from..cut.len())
            .find(|&i| text.as_bytes()[i] == b'<' && text[i..].starts_with(REDACTED));
        match inside {
            Some(i) => &text[..i],
            None => cut,
        }
    }

    /// Where the secrets are in `text`: sorted byte ranges at characters' starts, none
    /// overlapping or touching.
    fn spans(&self, text: &str) -> Vec<(usize, usize)> {
        if self.forms.is_empty() {
            return Vec::new();
        }
        let raw = text.as_bytes();
        let mut spans = Vec::new();
        // As written: each byte where it stands.
        let identity: Vec<usize> = (0..=raw.len()).collect();
        self.find_all(raw, raw, &identity, &mut spans);
        // As a URL decoder reads it, where that differs: a text without `%` or `+` (most of
        // a server's) is read once.
        let plus = self.any_space && memchr::memchr(b'+', raw).is_some();
        if !plus && memchr::memchr(b'%', raw).is_none() {
            return merge(text, spans);
        }
        let decoded = Reading::of(raw);
        if decoded.bytes.len() < raw.len() {
            self.find_all(&decoded.bytes, raw, &decoded.start, &mut spans);
        }
        if plus {
            let plus = decoded.plus_as_space(raw);
            self.find_all(&plus, raw, &decoded.start, &mut spans);
        }
        merge(text, spans)
    }

    /// Every form in `reading`, a reading of `raw` whose i-th byte's source starts at
    /// `start[i]` in `raw` (one more entry: `raw`'s length), as byte ranges of `raw`.
    fn find_all(
        &self,
        reading: &[u8],
        raw: &[u8],
        start: &[usize],
        spans: &mut Vec<(usize, usize)>,
    ) {
        // ASCII lower case keeps every byte where it was: a range in one is a range in both.
        let lowered = self.any_folded.then(|| reading.to_ascii_lowercase());
        // Where a cut may have ended the text: before its end, or a mark. Found once some
        // form's head is in the text.
        let mut cut: Option<Vec<bool>> = None;
        for form in &self.forms {
            let text = match (&lowered, form.folded) {
                (Some(lowered), true) => lowered.as_slice(),
                _ => reading,
            };
            // Every span starts with the head: from the first one on, read byte by byte.
            let Some(from) = form.head.find(text) else {
                continue;
            };
            let cut = cut.get_or_insert_with(|| start.iter().map(|&at| cut_at(raw, at)).collect());
            form.find(&text[from..], &cut[from..], |first, end| {
                spans.push((start[from + first], start[from + end]))
            });
        }
    }
}

impl Form {
    /// Calls `found(first, end)` with the range in `text` (lower-cased when the form is
    /// `folded`) of each match, and of each start of `start_min` bytes or more that ends where
    /// `cut` says a cut may have ended the text.
    fn find(&self, text: &[u8], cut: &[bool], mut found: impl FnMut(usize, usize)) {
        let mut matched = 0;
        for (i, &b) in text.iter().enumerate() {
            // `matched` is the longest start of the form that ends here.
            if matched >= self.start_min && cut[i] {
                found(i - matched, i);
            }
            while matched > 0 && self.bytes[matched] != b {
                matched = self.fail[matched - 1];
            }
            if self.bytes[matched] == b {
                matched += 1;
            }
            if matched == self.bytes.len() {
                found(i + 1 - matched, i + 1);
                matched = self.fail[matched - 1];
            }
        }
        if matched >= self.start_min && cut[text.len()] {
            found(text.len() - matched, text.len());
        }
    }
}

/// The shortest start of `form` redacted at a cut: [`START_MIN`] bytes, and past `scheme` and
/// the white space after it, however written (`Bearer `, `Bearer+`, `Bearer%20`), when the
/// form starts with it: `… Bearer` at a cut says nothing of the credential.
fn start_min(form: &[u8], scheme: &[u8]) -> usize {
    let starts = !scheme.is_empty()
        && form
            .get(..scheme.len())
            .is_some_and(|f| f.eq_ignore_ascii_case(scheme));
    if !starts {
        return START_MIN;
    }
    let mut at = scheme.len();
    loop {
        match &form[at..] {
            [b' ' | b'\t' | b'+', ..] => at += 1,
            [b'%', b'2', b'0', ..] | [b'%', b'0', b'9', ..] => at += 3,
            [b'\\', b't', ..] => at += 2,
            _ => break,
        }
    }
    START_MIN.max(at + 1)
}

/// `fail[i]`: the length of the longest proper prefix of `p[..=i]` that is also its suffix.
fn failure(p: &[u8]) -> Vec<usize> {
    let mut fail = vec![0; p.len()];
    let mut k = 0;
    for i in 1..p.len() {
        while k > 0 && p[i] != p[k] {
            k = fail[k - 1];
        }
        if p[i] == p[k] {
            k += 1;
        }
        fail[i] = k;
    }
    fail
}

/// True when a text cut at `at` would end there or go on with a cut's mark.
fn cut_at(text: &[u8], at: usize) -> bool {
    at == text.len()
        || CUT_MARKS
            .iter()
            .any(|m| text[at..].starts_with(m.as_bytes()))
}

/// A text as a URL decoder reads it: one byte per `%XX` escape or plain byte, and where each
/// starts in the text.
struct Reading {
    bytes: Vec<u8>,
    /// `start[i]`: where the i-th byte's source starts; one more entry, the text's length.
    start: Vec<usize>,
}

impl Reading {
    fn of(raw: &[u8]) -> Reading {
        let mut r = Reading {
            bytes: Vec::with_capacity(raw.len()),
            start: Vec::with_capacity(raw.len() + 1),
        };
        let mut i = 0;
        while i < raw.len() {
            r.start.push(i);
            let escaped = match raw.get(i..i + 3) {
                Some([b'%', h, l]) => hex(*h).zip(hex(*l)).map(|(h, l)| h << 4 | l),
                _ => None,
            };
            match escaped {
                Some(b) => {
                    r.bytes.push(b);
                    i += 3;
                }
                None => {
                    r.bytes.push(raw[i]);
                    i += 1;
                }
            }
        }
        r.start.push(raw.len());
        r
    }

    /// The decoded bytes with a plain `+` (not `%2B`) read as a space, as form encoding
    /// writes one.
    fn plus_as_space(&self, raw: &[u8]) -> Vec<u8> {
        self.bytes
            .iter()
            .zip(&self.start)
            .map(|(&b, &at)| if raw[at] == b'+' { b' ' } else { b })
            .collect()
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `spans` widened to whole characters (a form's bytes may start or end inside one of the
/// text's: a `Basic` password that is not UTF-8, a byte a decoder read out of an escape),
/// sorted, those that overlap or touch made one.
fn merge(text: &str, mut spans: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    for (start, end) in &mut spans {
        while !text.is_char_boundary(*start) {
            *start -= 1;
        }
        while !text.is_char_boundary(*end) {
            *end += 1;
        }
    }
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
