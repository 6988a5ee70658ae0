//! The forms a secret may be quoted in: the texts a server may make of its bytes, each as
//! written and as JSON, HTML and URLs escape it; its base64; its hex. Found once per run: a few
//! dozen short strings for each secret.

use base64::Engine;

/// A secret this long or longer (bytes) is found in base64 and hex too: shorter, what is left
/// of it between its neighbours' bits is too short to tell apart from any other base64.
const BASE64_MIN: usize = 8;

/// Every form of `secret`: its bytes as they are (a `Basic` password need not be UTF-8), the
/// texts [`decodings`] makes of them each as written and [`escaped`], and its [`base64_forms`]
/// and [`hex_forms`]. Some may be alike.
pub(super) fn forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![secret.to_vec()];
    for text in decodings(secret) {
        forms.extend(escaped(&text).into_iter().map(String::into_bytes));
    }
    forms.extend(base64_forms(secret).into_iter().map(String::into_bytes));
    forms.extend(hex_forms(secret).into_iter().map(String::into_bytes));
    forms
}

/// The texts a server may make of a secret's bytes: read as UTF-8 (as sent: `-H` and a
/// config's `headers` are text), and read as Latin-1, byte by byte, as HTTP/1.1 servers
/// often read header bytes from 0x80 up (Python's `http.server`) before they write them back
/// in UTF-8. Past ASCII, the UTF-8 text in upper and in lower case too (the letters past ASCII
/// are not found whatever their case otherwise). One text for ASCII.
fn decodings(secret: &[u8]) -> Vec<String> {
    let utf8 = String::from_utf8_lossy(secret).into_owned();
    if secret.is_ascii() {
        return vec![utf8];
    }
    let latin1 = secret.iter().map(|&b| char::from(b)).collect();
    let (upper, lower) = (utf8.to_uppercase(), utf8.to_lowercase());
    vec![utf8, latin1, upper, lower]
}

/// `text` as written and as escaped for a JSON string ([`json_forms`]), HTML ([`html_forms`])
/// and a URL ([`percent_forms`]).
fn escaped(text: &str) -> Vec<String> {
    let mut forms = json_forms(text);
    forms.extend(html_forms(text));
    forms.extend(percent_forms(text.as_bytes()));
    forms
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

/// `text` with `&`, `<`, `>` as HTML entities, and its quotes as each common escaper writes
/// them: Python's `html.escape` (`&quot;`, `&#x27;`), Go's and markupsafe's (`&#34;`, `&#39;`),
/// others' (`&quot;`, `&#39;`), or left alone (`html.escape(quote=False)`).
fn html_forms(text: &str) -> Vec<String> {
    let mut forms: Vec<String> = Vec::new();
    for (quot, apos) in [
        ("&quot;", "&#x27;"),
        ("&#34;", "&#39;"),
        ("&quot;", "&#39;"),
        ("\"", "'"),
    ] {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '"' => out.push_str(quot),
                '\'' => out.push_str(apos),
                c => out.push(c),
            }
        }
        if !forms.contains(&out) {
            forms.push(out);
        }
    }
    forms
}

/// `bytes` percent-encoded as URL encoders write them: every byte but RFC 3986's unreserved
/// ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`, or also keeping `/` (Python's `quote`) or `!'()*`
/// (JavaScript's `encodeURIComponent`); a space as `%20` or `+` (forms, `quote_plus`); hex
/// digits in upper or lower case.
fn percent_forms(bytes: &[u8]) -> Vec<String> {
    const UPPER: &[u8; 16] = b"0123456789ABCDEF";
    const LOWER: &[u8; 16] = b"0123456789abcdef";
    let mut forms: Vec<String> = Vec::new();
    for keep in [&b""[..], b"/", b"!'()*"] {
        for plus in [false, true] {
            for hex in [UPPER, LOWER] {
                let mut out = String::with_capacity(bytes.len() * 3);
                for &b in bytes {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
                        out.push(char::from(b));
                    } else if plus && b == b' ' {
                        out.push('+');
                    } else {
                        out.push('%');
                        out.push(char::from(hex[usize::from(b >> 4)]));
                        out.push(char::from(hex[usize::from(b & 15)]));
                    }
                }
                if !forms.contains(&out) {
                    forms.push(out);
                }
            }
        }
    }
    forms
}

/// What base64 makes of `secret` wherever it sits in what is encoded, in the standard and the
/// URL-safe alphabets: it starts 0, 1 or 2 bytes into a group of three, and for each of the
/// three the characters made of its bits alone (those that mix in a neighbour's bits differ
/// from one text to the next). Empty for a secret under [`BASE64_MIN`] bytes.
fn base64_forms(secret: &[u8]) -> Vec<String> {
    if secret.len() < BASE64_MIN {
        return Vec::new();
    }
    let mut forms = Vec::new();
    for engine in [
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for offset in 0..3 {
            let mut input = vec![0u8; offset];
            input.extend_from_slice(secret);
            let encoded = engine.encode(&input);
            // Character i holds bits 6i..6i+6 of the input; the secret's are 8 * offset on.
            let start = (8 * offset).div_ceil(6);
            let end = 8 * (offset + secret.len()) / 6;
            if !forms.iter().any(|f| f == &encoded[start..end]) {
                forms.push(encoded[start..end].to_string());
            }
        }
    }
    forms
}

/// `secret`'s bytes in hexadecimal (a server that dumps what it got as hex); lower case, as
/// a secret this long is found whatever its case ([`super::FOLD_MIN`]). Empty under
/// [`BASE64_MIN`] bytes, as base64's.
fn hex_forms(secret: &[u8]) -> Vec<String> {
    if secret.len() < BASE64_MIN {
        return Vec::new();
    }
    vec![secret.iter().map(|b| format!("{b:02x}")).collect()]
}
