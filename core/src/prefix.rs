//! A string's first bytes up to a cap, cut where a character starts: what a capped message,
//! label or parse issue keeps of a server's text. (`str::floor_char_boundary` does this from
//! Rust 1.91; the workspace's rust-version is older.)

/// `s`'s longest prefix of at most `max_bytes` bytes that ends at a character's start.
pub fn prefix_within(s: &str, max_bytes: usize) -> &str {
    let mut end = s.len().min(max_bytes);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_where_a_character_starts() {
        assert_eq!(
            prefix_within("héllo", 2),
            "h",
            "é is two bytes: not half of it"
        );
        assert_eq!(prefix_within("héllo", 3), "hé");
        assert_eq!(prefix_within("héllo", 99), "héllo");
        assert_eq!(prefix_within("", 4), "");
        assert_eq!(prefix_within("abc", 0), "");
    }
}
