//! Percent-decoding, for the two places text arrives escaped: a query component of the
//! status API (`?workload=chat%20peak`, where `+` is a space too) and the values of
//! `OTEL_EXPORTER_OTLP_HEADERS` (where `+` is itself). A malformed escape is kept as written.

/// Decodes `%XX` escapes.
pub fn percent_decode(s: &str) -> String {
    decode(s, false)
}

/// Decodes `%XX` escapes and `+` (a space) in a URL query component.
pub fn percent_decode_query(s: &str) -> String {
    decode(s, true)
}

fn decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(match b[i] {
            b'+' if plus_is_space => b' ',
            c => c,
        });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plus_is_a_space_only_in_a_query() {
        assert_eq!(percent_decode_query("a+b%2Bc"), "a b+c");
        assert_eq!(percent_decode("a+b%2Bc"), "a+b+c");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%e2%82%ac"), "€");
    }
}
