//! The rules of both scrubs this one replaced: the replay's (a server's error bodies, with the
//! target's key and headers) and the OTLP exporter's (a collector's answers, with its headers).

use super::*;
use base64::Engine;

/// The auditor's key: `/`, `+` and `=` in it, as in base64-made keys.
const KEY: &str = "sk-ZQ1xAPIKEY/k+y=1";

/// A replay's secrets: the key and these headers.
fn secrets(headers: &[(&str, &str)]) -> Secrets {
    let mut s = Secrets::default();
    s.add_secret(KEY.as_bytes());
    for (name, value) in headers {
        s.add_header(name, value.as_bytes(), Words::OfCredentials);
    }
    s
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
    let s = secrets(&[("x-tenant-token", "tenant-0123456789")]);
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
    let s = secrets(&[("x-cfg-secret", "ZQcx&CFG<HDR>'\"")]);
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
    let s = secrets(&[("x-tier-key", "Gold42")]);
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
    let s = secrets(&[("x-tenant-token", "ZQ6xTENANT-0001")]);
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
    let s = secrets(&[("x-tenant-token", "tenant-SECRET")]);
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
    assert_eq!(Secrets::within("a<redacted>bc", 11), "a<redacted>");
    assert_eq!(Secrets::within("a<redacted>bc", 10), "a");
    assert_eq!(Secrets::within("ab", 1), "a");
}

// The OTLP exporter's scrub.

/// An exporter's secrets: these header values.
fn scrub(values: &[&str], text: &str) -> String {
    let mut s = Secrets::default();
    for value in values {
        s.add_header("x-auth-header", value.as_bytes(), Words::All);
    }
    s.clean(text).into_owned()
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
    let mut s = Secrets::default();
    s.add_header("authorization", b"Bearer hunter2-secret", Words::All);
    assert!(!format!("{s:?}").contains("hunter2"));
}

// The replay's rule for a value cut short met the exporter's `… ab Bearer`: a scheme word
// alone at a cut is no secret's start; with a byte of the credential after it, it is.
#[test]
fn a_scheme_word_alone_at_a_cut_is_kept() {
    let said = scrub(
        &["Bearer tok/9 x"],
        "ab Bearer; ab Bearer (why); ab BEARER%20…",
    );
    assert_eq!(said, "ab Bearer; ab Bearer (why); ab BEARER%20…");
    let said = scrub(&["Bearer tok/9 x"], "cut Bearer t… and Bearer%20to");
    assert_eq!(said, "cut <redacted>… and <redacted>");
}

// The exporter's `x-env=Token T` met the replay's `User-Agent`-like header: a scheme word and
// one word is a credential in any header; a credential's text of several words is split only
// where the caller says its words are secrets.
#[test]
fn a_text_header_is_split_into_words_only_when_it_is_a_credential() {
    let text = "on Linux x86_64); token ENVTOKecho-55 refused";
    let mut s = Secrets::default();
    s.add_header(
        "x-client-key",
        b"canary (X11; Linux x86_64)",
        Words::OfCredentials,
    );
    s.add_header("x-env", b"Token ENVTOKecho-55", Words::OfCredentials);
    assert_eq!(
        s.clean(text),
        "on Linux x86_64); <redacted> refused",
        "the whole value, folded"
    );
    assert_eq!(s.clean("ENVTOKecho-55"), "<redacted>");
    s.add_header("x-client-key", b"canary (X11; Linux x86_64)", Words::All);
    // Its words, and the piece after its `;` (` Linux x86_64)`).
    assert_eq!(s.clean(text), "on<redacted>; <redacted> refused");
}

// A list in a header that is no credential (the simulator's faults) is text: neither its items
// nor the value whole are secrets, whatever the caller says of its words. In a credential, its
// items are secrets where the caller says its words are.
#[test]
fn a_list_in_a_header_that_is_no_credential_keeps_its_items() {
    let mut s = Secrets::default();
    s.add_header("x-sim-fault", b"no_done,interrupted", Words::OfCredentials);
    s.add_header("x-sim-fault", b"no_done,interrupted", Words::All);
    s.add_header("x-api-key", b"token=KEYspell99", Words::OfCredentials);
    assert_eq!(
        s.clean(r#"unknown item "interrupted" in no_done,interrupted; key KEYspell99"#),
        r#"unknown item "interrupted" in no_done,interrupted; key <redacted>"#
    );
    s.add_header("x-fault-token", b"no_done,interrupted", Words::All);
    assert_eq!(
        s.clean("unknown item interrupted"),
        "unknown item <redacted>"
    );
}

// TLS audit M1: every header value of 3 bytes or more was a secret, so ordinary values
// (`-H 'X-Ns: 127'`, `X-Kind: server`, `model=canary-sim`, an OTLP tenant `tenant logs`)
// blanked the same words in canaryd's own messages: `connect to <redacted>.0.0.1:19101: TLS
// <redacted>: the <redacted>'s certificate …`, `path /v1/<redacted>`. Only a credential's
// value is a secret now, by its header's name or its scheme word.
#[test]
fn ordinary_header_values_are_no_secrets_and_credentials_still_are() {
    let ordinary = [
        ("X-Kind", "server"),
        ("X-Cluster", "handshake"),
        ("X-Ns", "127"),
        ("X-Route", "model=canary-sim"),
        ("X-Env", "production"),
        ("X-Version", "0.6"),
        ("X-Retry", "after"),
        ("x-scope-orgid", "tenant logs"),
    ];
    let text = "connect to 127.0.0.1:19101: TLS handshake: the server's certificate is not \
                signed by a CA canaryd trusts; model canary-sim is overloaded; no quota for \
                production; retry after 20s; Server version 0.6.3; path /v1/logs for tenant";
    for words in [Words::OfCredentials, Words::All] {
        let mut s = secrets(&[]);
        for (name, value) in ordinary {
            s.add_header(name, value.as_bytes(), words);
        }
        assert_eq!(s.scrub(text), None, "{words:?}");
    }
    // A credential is one by its header's name, in any case, or by its scheme word.
    for name in [
        "Authorization",
        "PROXY-AUTHORIZATION",
        "X-Api-Key",
        "api_key",
        "X-Auth-Token",
        "x-client-secret",
        "X-Password",
        "Cookie",
        "x-session-id",
        "x-honeycomb-team",
    ] {
        for words in [Words::OfCredentials, Words::All] {
            let mut s = Secrets::default();
            for (n, v) in ordinary {
                s.add_header(n, v.as_bytes(), words);
            }
            s.add_header(name, b"ZQ9xCRED-0042", words);
            assert_eq!(
                s.clean("no ZQ9xCRED-0042 (zq9xcred-0042) for production"),
                "no <redacted> (<redacted>) for production",
                "{name}"
            );
        }
    }
    let mut s = Secrets::default();
    s.add_header("X-Gateway", b"Bearer ZQ8xGW-77", Words::OfCredentials);
    assert_eq!(s.clean("token ZQ8xGW-77"), "token <redacted>");
    // A scheme word alone is no credential.
    let mut s = Secrets::default();
    s.add_header("X-Mode", b"basic", Words::All);
    assert_eq!(s.scrub("basic mode"), None);
}

#[test]
fn a_long_value_under_a_plain_name_is_looked_for_whole_and_named_credentials_are_secrets() {
    // A DSN, a JWT and a pass carry credentials under names without `auth` or `key`.
    for name in ["uptrace-dsn", "X-JWT", "x-pass"] {
        let mut s = Secrets::default();
        s.add_header(name, b"ZQ7xNAMED", Words::OfCredentials);
        assert_eq!(s.clean("bad ZQ7xNAMED"), "bad <redacted>", "{name}");
    }
    // A long opaque value under a plain name, quoted back whole, is blanked; its words are
    // not looked for on their own, and a short plain value is no secret (TLS audit M1).
    let mut s = Secrets::default();
    s.add_header("x-tenant-id", b"t-4f0c2d6e9a8b7c51e3d2", Words::All);
    s.add_header("X-Kind", b"server", Words::All);
    assert_eq!(
        s.clean("unknown tenant t-4f0c2d6e9a8b7c51e3d2 on server 4"),
        "unknown tenant <redacted> on server 4"
    );
}
