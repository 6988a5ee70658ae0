//! The cuts of a header's value a server or a collector may quote back on their own: the value
//! whole; after a leading scheme word (`Bearer`, `Basic`, `Token`, `[otlp.headers]`' `prefix =
//! "Bearer "`), whatever the header, the credential; a `Basic` credential's `user:password`
//! and password; a cookie's values; the piece of a word after a `=`, `:`, `;` or `,`
//! (`token=abc123`); each cut that holds a `%XX` escape (a value given still encoded) decoded
//! too.
//!
//! Only a credential's value has cuts ([`is_credential`]): a header named like one, or a
//! value that is a scheme word and a credential. Another header's value is looked for only
//! whole, and only when it is long ([`WHOLE_MIN`]): its words are text.
//!
//! A value of several words is split into its words, and a word into its pieces at `;` and
//! `,` too, only where it is a credential ([`Words::All`]): in an `Authorization` header, or in
//! one the caller says is (the exporter's headers are there to authenticate to a collector).
//! Elsewhere such a value is text (`User-Agent: canary (X11; Linux x86_64)`, a list such as
//! `x-sim-fault: no_done,interrupted`), and its words and items are no secret.

/// The parts of a header's name that say it carries a credential (ASCII, lower case): its
/// value is a secret. Any other header's value is text the user chose to send (a route, a
/// tenant, a version, `X-Ns: 127`) and no secret: scrubbing it blanked the same words in
/// canaryd's own messages (`connect to <redacted>.0.0.1`, TLS audit M1).
const CREDENTIAL_NAMES: [&str; 11] = [
    "auth",
    "key",
    "token",
    "secret",
    "pass",
    "cookie",
    "credential",
    "session",
    "signature",
    "dsn",
    "jwt",
];

/// The shortest value of a header that is no credential looked for whole (bytes): a name that
/// does not say it carries a credential may still (an `x-tenant-id` that is one), and one
/// opaque word this long (longer than `model=canary-sim`), quoted back whole, is no word of
/// canaryd's own text. A value of words or a list is text, and no piece of it is looked for.
const WHOLE_MIN: usize = 20;

/// Headers that carry a credential under a name that does not say so.
const CREDENTIAL_HEADERS: [&str; 1] = ["x-honeycomb-team"];

/// The scheme words that mark a value as a credential whatever its header
/// (`X-Env: Token abc123`).
const SCHEMES: [&str; 6] = ["bearer", "basic", "token", "digest", "negotiate", "apikey"];

/// True when header `name`'s `value` is a credential: the name says so (case-insensitive:
/// `Authorization`, `Proxy-Authorization`, `*key*`, `*token*`, `*secret*`, `*password*`,
/// `Cookie`, …), or the value is a scheme word and a credential (`Bearer abc123`).
pub(super) fn is_credential(name: &str, value: &[u8]) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_NAMES.iter().any(|n| name.contains(n))
        || CREDENTIAL_HEADERS.contains(&name.as_str())
        || split_once_space(trim(value)).is_some_and(|(scheme, rest)| {
            !trim(rest).is_empty()
                && SCHEMES
                    .iter()
                    .any(|s| scheme.eq_ignore_ascii_case(s.as_bytes()))
        })
}

/// Which words of a header's value may be secrets on their own.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Words {
    /// Each, in a credential ([`is_credential`]) of any name: the caller says its words are
    /// all secrets (the exporter's headers). A header that is no credential has no secrets.
    All,
    /// Those of a value that is one word, or a scheme word and one word (`Token abc123`), and
    /// their pieces after a `=` or `:`; each, and its pieces at `;` and `,` too, in an
    /// `Authorization` or `Proxy-Authorization` header.
    OfCredentials,
}

/// The shortest cut looked for (bytes): a value whole, the credential after a scheme word,
/// each of its words, a `Basic` credential's `user:password` and password. Shorter, it would
/// blank out common text and guess little.
const CUT_MIN: usize = 3;

/// The shortest piece of a word after a `=`, `:`, `;` or `,` looked for on its own, and the
/// shortest cookie value (bytes): a value given with its prefix and no space (`token=abc123`,
/// `[otlp.headers]`' `prefix = "token="`). Where the secret starts is a guess there, so short
/// pieces are left: the names and words such a value holds (`token`, `key`, `true`, `admin`)
/// are 5 bytes or fewer.
const PIECE_MIN: usize = 6;

/// A header value's leading scheme word (`Bearer` of `Bearer abc123`), when it has one: alone
/// it is no secret, so a text that ends in it (`… Bearer`) keeps it.
pub(super) fn scheme(value: &[u8]) -> &[u8] {
    split_once_space(trim(value)).map_or(&[], |(scheme, _)| scheme)
}

/// The cuts of header `name`'s `value`, each of [`CUT_MIN`] bytes or more (some may be alike);
/// when it is no credential ([`is_credential`]), only the value whole, if [`WHOLE_MIN`] bytes
/// or more.
pub(super) fn cuts(name: &str, value: &[u8], words: Words) -> Vec<Vec<u8>> {
    let value = trim(value);
    if !is_credential(name, value) {
        // One opaque word: a list (`no_done,interrupted`) or words are text.
        let opaque = !value
            .iter()
            .any(|b| b.is_ascii_whitespace() || b",;".contains(b));
        return match opaque && value.len() >= WHOLE_MIN {
            true => vec![value.into()],
            false => Vec::new(),
        };
    }
    let all = words == Words::All
        || ["authorization", "proxy-authorization"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n));
    let mut cuts: Vec<Vec<u8>> = vec![value.into()];
    let split = split_spaces(value);
    // The words whose pieces are looked for: a one-word value's, a credential's.
    let mut words = match all || split.len() == 1 {
        true => vec![value],
        false => Vec::new(),
    };
    if let Some((scheme, rest)) = split_once_space(value) {
        let rest = trim(rest);
        cuts.push(rest.into());
        if all || split.len() == 2 {
            words.extend(split_spaces(rest));
            cuts.extend(split_spaces(rest).into_iter().map(Vec::from));
        }
        if scheme.eq_ignore_ascii_case(b"basic") {
            if let Some(pair) = base64_decode(rest) {
                if let Some(at) = pair.iter().position(|&b| b == b':') {
                    cuts.push(pair[at + 1..].to_vec());
                }
                cuts.push(pair);
            }
        }
    }
    let mut out: Vec<Vec<u8>> = cuts.into_iter().filter(|c| c.len() >= CUT_MIN).collect();
    // A list's items (`a,b`) are pieces only in a credential.
    let separators: &[u8] = match all {
        true => b"=:;,",
        false => b"=:",
    };
    for word in words {
        let mut pieces = word.split(|b| separators.contains(b));
        // The first piece is the prefix's name (`token` of `token=abc123`), or the whole word.
        pieces.next();
        out.extend(pieces.filter(|p| p.len() >= PIECE_MIN).map(Vec::from));
    }
    if name.eq_ignore_ascii_case("cookie") {
        // `a=1; b=2`: a value may hold `:` or `,`, which the pieces above split.
        for pair in value.split(|&b| b == b';') {
            if let Some(at) = pair.iter().position(|&b| b == b'=') {
                let v = pair[at + 1..].trim_ascii();
                if v.len() >= PIECE_MIN {
                    out.push(v.to_vec());
                }
            }
        }
    }
    // A value a config file gave still encoded is looked for decoded too.
    let decoded: Vec<Vec<u8>> = out
        .iter()
        .filter_map(|cut| {
            let text = std::str::from_utf8(cut).ok()?;
            let decoded = crate::percent_decode(text);
            // `%41%42` alone would leave `AB`: too short to look for.
            (decoded != text && decoded.len() >= CUT_MIN).then(|| decoded.into_bytes())
        })
        .collect();
    out.extend(decoded);
    out
}

/// How many bytes the whitespace character at the start of `bytes` takes (ASCII or, where
/// the bytes are UTF-8 there, any Unicode white space); 0 when none starts there.
fn space_len(bytes: &[u8]) -> usize {
    match bytes.first() {
        None => 0,
        Some(b) if b.is_ascii() => usize::from(b.is_ascii_whitespace()),
        Some(_) => (2..=4)
            .filter_map(|n| std::str::from_utf8(bytes.get(..n)?).ok())
            .find_map(|s| s.chars().next())
            .filter(|c| c.is_whitespace())
            .map_or(0, char::len_utf8),
    }
}

/// `value` without white space at either end.
fn trim(mut value: &[u8]) -> &[u8] {
    while space_len(value) > 0 {
        value = &value[space_len(value)..];
    }
    // It ends after its last byte that starts no white space (the bytes of a character
    // past ASCII that is not white space included).
    let (mut end, mut i) = (0, 0);
    while i < value.len() {
        match space_len(&value[i..]) {
            0 => {
                i += 1;
                end = i;
            }
            n => i += n,
        }
    }
    &value[..end]
}

/// `value` split at its first white space character.
fn split_once_space(value: &[u8]) -> Option<(&[u8], &[u8])> {
    (0..value.len()).find_map(|i| match space_len(&value[i..]) {
        0 => None,
        n => Some((&value[..i], &value[i + n..])),
    })
}

/// `value`'s words: what white space separates.
fn split_spaces(mut value: &[u8]) -> Vec<&[u8]> {
    let mut words = Vec::new();
    while let Some((word, rest)) = split_once_space(value) {
        if !word.is_empty() {
            words.push(word);
        }
        value = rest;
    }
    if !value.is_empty() {
        words.push(value);
    }
    words
}

/// `text` as base64, standard or URL-safe, its padding optional; `None` if it is not.
fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    let end = text.iter().rposition(|&b| b != b'=').map_or(0, |i| i + 1);
    let digits = &text[..end];
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

    #[test]
    fn base64_padding_is_optional_and_a_lone_digit_is_not_base64() {
        assert_eq!(
            base64_decode(b"dXNlcjpwYTU1d29yZCE"),
            base64_decode(b"dXNlcjpwYTU1d29yZCE=")
        );
        assert_eq!(
            base64_decode(b"dXNlcjpwYTU1d29yZCE").as_deref(),
            Some(&b"user:pa55word!"[..])
        );
        assert_eq!(base64_decode(b"a"), None);
        assert_eq!(base64_decode(b"ab c"), None);
    }

    #[test]
    fn white_space_is_ascii_or_unicode_and_a_value_need_not_be_utf_8() {
        assert_eq!(trim(b" \tab c\xc2\xa0"), b"ab c");
        assert_eq!(trim(b"\xc2\xa0\xffx\xff "), b"\xffx\xff");
        assert_eq!(
            split_spaces("Token\u{a0}a b\t c".as_bytes()),
            [&b"Token"[..], b"a", b"b", b"c"]
        );
        assert_eq!(split_once_space(b"abc"), None);
        assert_eq!(trim(b"   "), b"");
    }
}
