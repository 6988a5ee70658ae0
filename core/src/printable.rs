//! A server's text made safe to print: its control characters (C0, DEL, C1) and the
//! invisible ones that move or hide text (bidi overrides and isolates, zero-width
//! characters, the Unicode line and paragraph separators) written as `\u{..}` escapes. A
//! hostile server's error message or version string otherwise reaches a terminal as escape
//! sequences (clearing it, retitling it, faking output), a log as forged lines (journald makes
//! one entry per line), or a reader as text shown in another order than it is
//! ("Trojan Source").

use std::borrow::Cow;

/// `s` with every control character escaped (`\n` as `\n`, ESC as `\u{1b}`); `s` itself when
/// it has none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unprintable) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unprintable(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A control character, or an invisible one that reorders, joins or breaks text: the
/// format characters a terminal or log viewer acts on (Unicode's Cf bidi and zero-width
/// ones, the soft hyphen, the BOM), the separators Zl and Zp, the invisible tag characters
/// (text hidden in plain sight) and the Hangul fillers that render as blanks.
fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{61c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{3164}'
                | '\u{ffa0}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_a_terminal_or_a_log_would_act_on() {
        let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2Jok\r\n2026-01-01 INFO pass\u{9b}31m";
        let shown = printable(hostile);
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert_eq!(
            shown,
            r"\u{1b}]0;pwned\u{7}\u{1b}[2Jok\r\n2026-01-01 INFO pass\u{9b}31m"
        );
    }

    #[test]
    fn escapes_what_reorders_or_hides_text() {
        // An RLO makes "pass" read as "liaf" backwards; a line separator breaks a log line.
        let hostile = "ok\u{202e}liaf\u{202c} \u{2066}x\u{2069}\u{200b}\u{2028}forged\u{feff}\u{e0041}\u{3164}";
        assert_eq!(
            printable(hostile),
            r"ok\u{202e}liaf\u{202c} \u{2066}x\u{2069}\u{200b}\u{2028}forged\u{feff}\u{e0041}\u{3164}"
        );
    }

    #[test]
    fn leaves_plain_text_and_other_scripts_alone() {
        for s in ["model not found", "モデル «x» — 404", ""] {
            assert!(matches!(printable(s), Cow::Borrowed(b) if b == s));
        }
    }
}
