//! A server's text made safe to print: its control characters (C0, DEL, C1) written as
//! `\u{..}` escapes. A hostile server's error message or version string otherwise reaches a
//! terminal as escape sequences (clearing it, retitling it, faking output) or a log as forged
//! lines (journald makes one entry per line).

use std::borrow::Cow;

/// `s` with every control character escaped (`\n` as `\n`, ESC as `\u{1b}`); `s` itself when
/// it has none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
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
    fn leaves_plain_text_and_other_scripts_alone() {
        for s in ["model not found", "モデル «x» — 404", ""] {
            assert!(matches!(printable(s), Cow::Borrowed(b) if b == s));
        }
    }
}
