use super::*;
use crate::target::{header, ApiKey, Endpoint};
use base64::Engine;

/// The auditor's key: `/`, `+` and `=` in it, as in base64-made keys.
const KEY: &str = "sk-ZQ1xAPIKEY/k+y=1";

fn secrets(headers: &[(&str, &str)]) -> Secrets {
    let mut t = Target::new("http://h:1", Endpoint::Chat, "m").unwrap();
    t.api_key = Some(ApiKey::new(KEY));
    t.headers = headers.iter().map(|(n, v)| header(n, v).unwrap()).collect();
    Secrets::of([&t])
}

fn shown(s: &Secrets, text: &str) -> String {
    s.clean(text).into_owned()
}

// Secrets audit, item 1: a key cut short and followed by canaryd's words after the cut was
// kept whole but for its last bytes (the rule for a cut key looked only at the text's end).
#[test]
fn a_key_cut_short_is_redacted_whatever_is_said_after_the_cut() {
    let s = secrets(&[]);
    for (text, want) in [
        // The end of the text.
        (
            "refused: Bearer sk-ZQ1xAPIKEY/k+",
            "refused: Bearer <redacted>",
        ),
        // An error body the server cut: why it is short follows.
        (
            "refused: Bearer sk-ZQ1xAPIKEY/k+ (error body cut short: the connection closed)",
            "refused: Bearer <redacted> (error body cut short: the connection closed)",
        ),
        // A parser's complaint cut at 200 bytes: where it was follows.
        (
            "invalid type: string \"QQQBearer sk-ZQ1xAPIKEY/k… at line 1 column 250",
            "invalid type: string \"QQQBearer <redacted>… at line 1 column 250",
        ),
        // A lossy decode of bytes cut inside a character.
        ("key sk-ZQ1xA\u{FFFD}", "key <redacted>\u{FFFD}"),
        // Twice, the second time cut.
        (
            "sk-ZQ1xAPIKEY/k+y=1 then sk-ZQ1xAPI…",
            "<redacted> then <redacted>…",
        ),
    ] {
        assert_eq!(shown(&s, text), want, "{text}");
    }
    // Where nothing suggests a cut, a key's start is a coincidence, and 3 bytes say nothing.
    assert_eq!(s.scrub("sk-ZQ1x is a start, and so is sk-ZQ here"), None);
    assert_eq!(s.scrub("ends in sk-"), None);
    assert_eq!(s.scrub("sk- (three)"), None);
}

#[test]
fn a_cut_scrubs_first_so_it_never_keeps_part_of_a_key() {
    let s = secrets(&[("x-tenant", "tenant-0123456789")]);
    let text = format!("refused: Bearer {KEY} for tenant-0123456789");
    for limit in 0..text.len() + 4 {
        let cut = s.cut(&text, limit);
        assert!(cut.len() <= limit, "{limit}: {cut}");
        assert!(
            !cut.contains("ZQ1x") && !cut.contains("0123"),
            "{limit}: {cut}"
        );
        // Decorated after the cut as a message does, it is still clean.
        let decorated = format!("{cut}… at line 1 column 9");
        assert!(!shown(&s, &decorated).contains("ZQ1x"), "{decorated}");
    }
    assert_eq!(s.cut("no secret here", 9), "no secret");
}

#[test]
fn overlapping_secrets_are_redacted_as_one() {
    let s = secrets(&[("authorization", "Bearer tok-42/x&y")]);
    assert_eq!(shown(&s, "Bearer tok-42/x&y refused"), "<redacted> refused");
    // A secret that starts inside another start of itself.
    let s = secrets(&[("x-token", "abab-key")]);
    assert_eq!(shown(&s, "ababab-key"), "ab<redacted>");
}

// Secrets audit, item 2: a value past ASCII was skipped whole, its credential too.
#[test]
fn a_header_value_past_ascii_is_redacted_as_sent_and_as_latin_1() {
    let s = secrets(&[
        ("x-secret-hdr", "ZQ2xNONASCIIé"),
        ("authorization", "Bearer ZQ3xTOKÉN-99"),
        ("cookie", "theme=dark; session=ZQ4xCØØKIE"),
    ]);
    for text in [
        // Its bytes, as sent.
        "refused: x-secret-hdr: ZQ2xNONASCIIé",
        // Read as Latin-1 and written back in UTF-8.
        "refused: x-secret-hdr: ZQ2xNONASCIIÃ©",
        // So, and in JSON by Python (`ensure_ascii`), kept as JSON text.
        r#"{"detail":"ZQ2xNONASCII\u00c3\u00a9"}"#,
        // The credentials alone.
        "bad token ZQ3xTOKÉN-99",
        "bad token ZQ3xTOKÃ\u{89}N-99",
        "session ZQ4xCØØKIE expired",
        "session ZQ4xCÃ\u{98}Ã\u{98}KIE expired",
    ] {
        let out = shown(&s, text);
        assert!(!out.contains("ZQ"), "{text}: {out}");
        assert!(out.contains("<redacted>"), "{text}: {out}");
    }
}

// Secrets audit, item 3: only the exact and JSON-escaped forms were looked for.
#[test]
fn a_secret_html_escaped_percent_encoded_or_in_another_case_is_redacted() {
    let s = secrets(&[("x-cfg", "ZQcx&CFG<HDR>'\"")]);
    for text in [
        // HTML entities, as Python's html.escape, Go's and others write them.
        "Unauthorized: ZQcx&amp;CFG&lt;HDR&gt;&#x27;&quot;",
        "Unauthorized: ZQcx&amp;CFG&lt;HDR&gt;&#39;&#34;",
        "Unauthorized: ZQcx&amp;CFG&lt;HDR&gt;'\"",
        // Percent-encoded, hex digits in either case, a space as %20 or +.
        "url=Bearer%20sk-ZQ1xAPIKEY%2Fk%2By%3D1",
        "url=Bearer+sk-ZQ1xAPIKEY%2fk%2by%3d1",
        "url=sk-ZQ1xAPIKEY/k%2By%3D1",
        "url=ZQcx%26CFG%3CHDR%3E%27%22",
        // Lower and upper case.
        "lower=bearer sk-zq1xapikey/k+y=1",
        "upper=BEARER SK-ZQ1XAPIKEY/K+Y=1",
        "upper=ZQCX&CFG<HDR>'\"",
    ] {
        let out = shown(&s, text);
        assert!(!out.to_ascii_lowercase().contains("zq"), "{text}: {out}");
    }
    // A short value is found only as written: its letters could be a word.
    let s = secrets(&[("x-tier", "Gold42")]);
    assert_eq!(
        shown(&s, "tier gold42 and GOLD42"),
        "tier gold42 and GOLD42"
    );
    assert_eq!(shown(&s, "tier Gold42"), "tier <redacted>");
}

#[test]
fn a_secret_in_base64_is_redacted_wherever_it_sits_in_what_was_encoded() {
    let b64 = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let s = secrets(&[("x-tenant", "ZQ6xTENANT-0001")]);
    for quoted in [
        // The auditor's server: the whole Authorization value and the x- headers, encoded.
        format!("Bearer {KEY} | x-tenant=ZQ6xTENANT-0001"),
        // The key 0, 1 and 2 bytes into a group of three.
        format!("{KEY}!"),
        format!("a{KEY}"),
        format!("ab{KEY}"),
        "x ZQ6xTENANT-0001 y".to_string(),
    ] {
        for encoded in [b64.encode(&quoted), url.encode(&quoted)] {
            let out = shown(&s, &format!("b64={encoded}"));
            // Nothing is left of the characters made of a secret's bits alone: character i
            // holds bits 6i..6i+6.
            let left: String = out.split("<redacted>").collect();
            for secret in [KEY, "ZQ6xTENANT-0001"] {
                let Some(at) = quoted.find(secret) else {
                    continue;
                };
                let core = &encoded[(8 * at).div_ceil(6)..8 * (at + secret.len()) / 6];
                for piece in core.as_bytes().windows(4) {
                    let piece = std::str::from_utf8(piece).unwrap();
                    assert!(!left.contains(piece), "{quoted}: {piece} in {out}");
                }
            }
        }
    }
}

#[test]
fn a_basic_credential_is_redacted_decoded_and_its_password_alone() {
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:ZQ5xPASSWORD");
    let s = secrets(&[("authorization", &format!("Basic {basic}"))]);
    for text in [
        format!("bad credential {basic}"),
        "user alice:ZQ5xPASSWORD refused".to_string(),
        "password ZQ5xPASSWORD is wrong".to_string(),
    ] {
        let out = shown(&s, &text);
        assert!(
            !out.contains("ZQ5x") && !out.contains(&basic[8..]),
            "{text}: {out}"
        );
    }
}

#[test]
fn secrets_are_never_printed() {
    let s = secrets(&[("x-tenant", "tenant-SECRET")]);
    let debug = format!("{s:?}");
    assert!(
        !debug.contains("SECRET") && !debug.contains("ZQ1x"),
        "{debug}"
    );
}

// Secrets audit (2026-11-29), item 3: a server that dumps what it got as hex quoted a Basic
// credential in full.
#[test]
fn a_secret_in_hex_is_redacted_in_either_case() {
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:basicPASS99xyz");
    let s = secrets(&[("authorization", &format!("Basic {basic}"))]);
    let hex = |t: &str| t.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for secret in [KEY, "alice:basicPASS99xyz", basic.as_str()] {
        for encoded in [hex(secret), hex(secret).to_uppercase()] {
            let out = shown(&s, &format!("who? hex={encoded}."));
            assert_eq!(out, "who? hex=<redacted>.", "{secret}");
        }
    }
    // Hex that is no secret's stays.
    assert_eq!(shown(&s, "id=deadbeef0123"), "id=deadbeef0123");
}

// Audit (hostile servers), finding 9: a key redacted just before a cut left the cut inside
// the marker, `…xxxx<redac`, which reads as if a key's start were there.
#[test]
fn a_cut_never_falls_inside_a_redaction_marker() {
    let s = secrets(&[]);
    let text = format!("{}{KEY} more", "x".repeat(95));
    for limit in 95..105 {
        assert_eq!(s.cut(&text, limit), "x".repeat(95), "{limit}");
    }
    assert_eq!(s.cut(&text, 105), format!("{}<redacted>", "x".repeat(95)));
    // A marker whole before the cut stays; only one the cut falls inside goes.
    assert_eq!(within("a<redacted>bc", 11), "a<redacted>");
    assert_eq!(within("a<redacted>bc", 10), "a");
    assert_eq!(within("ab", 1), "a");
}
