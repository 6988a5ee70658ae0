//! [`Secrets`]: the configured header values in the cuts a collector may quote back, and the
//! scrub that takes them out of its text (a partial success's message, a failure's cause)
//! before a warning shows it.
//!
//! A hostile collector can echo what it was sent in any spelling, so the text is not searched
//! for a list of encodings: it is read as a URL decoder reads it (`%XX` in either case is the
//! byte it stands for, wherever it stands, `%41` for `A` included; `+` is a space too) and
//! each cut is looked for in that reading, its ASCII letters in any case from
//! [`FOLD_MIN`] bytes up. What is replaced is the text the match came from, encoded or not.

/// What a secret is replaced by.
const REDACTED: &str = "<redacted>";

/// The shortest cut looked for (bytes): a value whole, the credential after a scheme word,
/// each of its words, a `Basic` credential's `user:password` and password. Shorter, it would
/// blank out common text and guess little.
const CUT_MIN: usize = 3;

/// The shortest piece of a word after a `=`, `:`, `;` or `,` looked for on its own (bytes): a
/// value given with its prefix and no space (`token=abc123`, `[otlp.headers]`' `prefix =
/// "token="`). Where the secret starts is a guess there, so short pieces are left: the
/// names and words such a value holds (`token`, `key`, `true`, `admin`) are 5 bytes or fewer,
/// and 6 is the replay's own floor for credentials cut out of a header (cookie values).
const PIECE_MIN: usize = 6;

/// A cut this long or longer (bytes) is found whatever the case of its ASCII letters (a
/// collector that upper- or lower-cases the header it quotes); a shorter one only in its own
/// case, as its letters could be a word (the replay's scrub draws the same line).
const FOLD_MIN: usize = 8;

/// The cuts of the configured header values, each ready to be searched for. Never printed:
/// `Debug` counts them.
#[derive(Clone, Default)]
pub(crate) struct Secrets {
    /// No two alike.
    cuts: Vec<Cut>,
    /// Some cut holds a space: the text is read a second time with `+` as a space.
    any_space: bool,
    /// Some cut holds a `%XX` escape (a value given still encoded): the text is read as
    /// written too, where an escape echoed as is stands.
    any_escape: bool,
}

/// One cut of a secret.
#[derive(Clone, PartialEq, Eq)]
struct Cut {
    /// Its bytes, in ASCII lower case when `folded`.
    bytes: Vec<u8>,
    folded: bool,
    /// Knuth-Morris-Pratt's failure function of `bytes`: how long a match may still be after
    /// a mismatch, so the text is read once per cut.
    fail: Vec<usize>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets(<{} cuts redacted>)", self.cuts.len())
    }
}

impl Secrets {
    /// The secrets of these header values.
    pub fn of<'a>(values: impl IntoIterator<Item = &'a str>) -> Secrets {
        let mut secrets = Secrets::default();
        for value in values {
            for cut in cuts(value) {
                // A value a config file gave still encoded is looked for decoded too.
                if let Ok(text) = std::str::from_utf8(&cut) {
                    let decoded = canary_core::percent_decode(text);
                    // `%41%42` alone would leave `AB`: too short to look for.
                    if decoded != text && decoded.len() >= CUT_MIN {
                        secrets.add(decoded.into_bytes());
                    }
                }
                secrets.add(cut);
            }
        }
        secrets
    }

    fn add(&mut self, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let folded = bytes.len() >= FOLD_MIN;
        let bytes = if folded {
            bytes.to_ascii_lowercase()
        } else {
            bytes
        };
        if self
            .cuts
            .iter()
            .any(|c| c.bytes == bytes && c.folded == folded)
        {
            return;
        }
        self.any_space |= bytes.contains(&b' ');
        self.any_escape |= Reading::of_bytes(&bytes).decoded.len() < bytes.len();
        let fail = failure(&bytes);
        self.cuts.push(Cut {
            bytes,
            folded,
            fail,
        });
    }

    /// `text` with every place it says a cut replaced by `<redacted>`: in the decoded
    /// reading, with `+` as a space where a cut holds one, and as written where a cut holds
    /// an escape.
    ///
    /// Linear in the text: O(n·k + m) for n bytes of text, k cuts and m bytes of cuts (k and m
    /// are fixed by the configuration, a few dozen cuts), at most three readings of the text.
    pub fn scrub(&self, text: &str) -> String {
        if self.cuts.is_empty() {
            return text.to_string();
        }
        let decoded = Reading::of_bytes(text.as_bytes());
        let plus = (self.any_space && decoded.any_plus).then(|| decoded.plus_as_space(text));
        let mut spans = Vec::new();
        for bytes in std::iter::once(&decoded.decoded).chain(plus.as_ref()) {
            for cut in &self.cuts {
                cut.find(bytes, |first, last| {
                    spans.push((decoded.start[first], decoded.start[last + 1]));
                });
            }
        }
        if self.any_escape {
            for cut in &self.cuts {
                cut.find(text.as_bytes(), |first, last| spans.push((first, last + 1)));
            }
        }
        replace(text, spans)
    }
}

impl Cut {
    /// Calls `found(first, last)` with the first and last index in `text` of each match.
    fn find(&self, text: &[u8], mut found: impl FnMut(usize, usize)) {
        let mut matched = 0;
        for (i, &b) in text.iter().enumerate() {
            let b = if self.folded {
                b.to_ascii_lowercase()
            } else {
                b
            };
            while matched > 0 && self.bytes[matched] != b {
                matched = self.fail[matched - 1];
            }
            if self.bytes[matched] == b {
                matched += 1;
            }
            if matched == self.bytes.len() {
                found(i + 1 - matched, i);
                matched = self.fail[matched - 1];
            }
        }
    }
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

/// A text as a URL decoder reads it: one byte per `%XX` escape or plain byte, and where each
/// starts in the text.
struct Reading {
    decoded: Vec<u8>,
    /// `start[i]`: where the i-th byte's source starts; one more entry, the text's length.
    start: Vec<usize>,
    any_plus: bool,
}

impl Reading {
    fn of_bytes(raw: &[u8]) -> Reading {
        let mut r = Reading {
            decoded: Vec::with_capacity(raw.len()),
            start: Vec::with_capacity(raw.len() + 1),
            any_plus: false,
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
                    r.decoded.push(b);
                    i += 3;
                }
                None => {
                    r.any_plus |= raw[i] == b'+';
                    r.decoded.push(raw[i]);
                    i += 1;
                }
            }
        }
        r.start.push(raw.len());
        r
    }

    /// The decoded bytes with a plain `+` (not `%2B`) read as a space, as form encoding
    /// writes one.
    fn plus_as_space(&self, text: &str) -> Vec<u8> {
        let raw = text.as_bytes();
        self.decoded
            .iter()
            .zip(&self.start)
            .map(|(&b, &at)| if raw[at] == b'+' { b' ' } else { b })
            .collect()
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `text` with each of `spans` (byte ranges, overlapping or not) replaced by `<redacted>`,
/// spans that overlap or touch by one. A span is widened to whole characters: a cut's bytes
/// may end inside one of the text's (a `Basic` password that is not UTF-8).
fn replace(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    for (start, end) in &mut spans {
        while !text.is_char_boundary(*start) {
            *start -= 1;
        }
        while !text.is_char_boundary(*end) {
            *end += 1;
        }
    }
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut spans = spans.into_iter().peekable();
    while let Some((start, mut end)) = spans.next() {
        while let Some((_, next_end)) = spans.next_if(|&(next, _)| next <= end) {
            end = end.max(next_end);
        }
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// The cuts of a header value a collector may quote back: the value whole; after a leading
/// scheme word (`Bearer`, `Basic`, `[otlp.headers]`' `prefix = "Bearer "`) the credential and
/// each of its words; a `Basic` credential's `user:password` and password; the pieces of each
/// word after a `=`, `:`, `;` or `,` from [`PIECE_MIN`] bytes up.
fn cuts(value: &str) -> Vec<Vec<u8>> {
    let value = value.trim();
    let mut cuts: Vec<Vec<u8>> = vec![value.into()];
    let mut words = vec![value];
    if let Some((scheme, rest)) = value.split_once(char::is_whitespace) {
        let rest = rest.trim();
        cuts.push(rest.into());
        words.extend(rest.split_whitespace());
        cuts.extend(rest.split_whitespace().map(Vec::from));
        if scheme.eq_ignore_ascii_case("basic") {
            if let Some(pair) = base64_decode(rest) {
                if let Some(at) = pair.iter().position(|&b| b == b':') {
                    cuts.push(pair[at + 1..].to_vec());
                }
                cuts.push(pair);
            }
        }
    }
    let mut out: Vec<Vec<u8>> = cuts.into_iter().filter(|c| c.len() >= CUT_MIN).collect();
    for word in words {
        let mut pieces = word.split(['=', ':', ';', ',']);
        // The first piece is the prefix's name (`token` of `token=abc123`), or the whole word.
        pieces.next();
        out.extend(
            pieces
                .filter(|p| p.len() >= PIECE_MIN)
                .map(|p| p.as_bytes().to_vec()),
        );
    }
    out
}

/// `text` as base64, standard or URL-safe, its padding optional; `None` if it is not.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let digits = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for &c in digits {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = acc << 6 | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // A single digit past a whole group carries no byte: not base64.
    (bits < 6).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrub(values: &[&str], text: &str) -> String {
        Secrets::of(values.iter().copied()).scrub(text)
    }

    #[test]
    fn any_byte_may_be_percent_encoded() {
        // `A` as `%41`, `/` as `%2f`, the rest plain: what a collector encoding every byte,
        // or some, writes.
        let said = scrub(
            &["Bearer TOKab/9x"],
            "t %54%4f%4Bab%2f%39x; T%4FKab/9x; %54%4f%4b%61%62%2F%39%78.",
        );
        assert_eq!(said, "t <redacted>; <redacted>; <redacted>.");
    }

    #[test]
    fn a_long_cut_is_found_in_any_case_a_short_one_as_written() {
        let said = scrub(
            &["Bearer Tok-abc-123", "Ab4x"],
            "TOK-ABC-123 tok-abc-123 %74ok-ABC-123 Ab4x AB4X",
        );
        assert_eq!(said, "<redacted> <redacted> <redacted> <redacted> AB4X");
    }

    #[test]
    fn a_basic_credential_is_found_decoded_and_by_its_password() {
        // `user:pa55word!`, as `-H 'Authorization: Basic …'` carries it.
        let said = scrub(
            &["Basic dXNlcjpwYTU1d29yZCE="],
            "bad user:pa55word! (pa55word%21); as sent dXNlcjpwYTU1d29yZCE=",
        );
        assert_eq!(said, "bad <redacted> (<redacted>); as sent <redacted>");
        assert_eq!(
            base64_decode("dXNlcjpwYTU1d29yZCE"),
            base64_decode("dXNlcjpwYTU1d29yZCE=")
        );
        assert_eq!(base64_decode("a"), None);
        assert_eq!(base64_decode("ab c"), None);
    }

    #[test]
    fn a_prefix_without_a_space_is_cut_off_from_six_bytes() {
        let said = scrub(&["token=abc123", "k=short"], "abc123 token short k=short");
        assert_eq!(said, "<redacted> token short <redacted>");
    }

    #[test]
    fn plus_is_a_space_only_where_the_cut_has_one() {
        let said = scrub(&["Bearer a+b/c d"], "a%2Bb%2Fc+d a+b%2Fc a%2Bb/c, a+b/c+d");
        assert_eq!(said, "<redacted> <redacted> <redacted>, <redacted>+d");
    }

    #[test]
    fn overlapping_and_touching_matches_are_one_redaction() {
        let said = scrub(&["abcabc", "cabd"], "xabcabcabdx é%C3%A9");
        assert_eq!(said, "x<redacted>x é%C3%A9");
        // Past ASCII, percent-encoded and as written.
        let said = scrub(&["zz\u{e9}"], "zz%C3%A9 zz\u{e9}!");
        assert_eq!(said, "<redacted> <redacted>!");
    }

    #[test]
    fn a_value_still_encoded_is_found_decoded_too_unless_it_leaves_too_little() {
        let said = scrub(
            &["ab%2Fcd", "%41%42"],
            "ab/cd ab%2Fcd ab%252Fcd A B AB %41%42",
        );
        assert_eq!(said, "<redacted> <redacted> <redacted> A B AB <redacted>");
    }

    #[test]
    fn it_is_never_printed() {
        let s = Secrets::of(["Bearer hunter2-secret"]);
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
