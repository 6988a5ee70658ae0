//! JSON as written: for tests that a file read and written again has the same bytes.

/// `s` without the whitespace outside its strings: JSON as `serde_json::to_string` writes
/// it, whatever indentation it was written with, its keys in their order (a parse into a
/// `serde_json::Value` would sort them).
pub fn compact(s: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
    for c in s.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if !c.is_whitespace() {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn whitespace_inside_strings_and_escaped_quotes_stay() {
        let pretty = "{\n  \"a b\": \"x \\\" y\",\n  \"c\": [1, 2]\n}";
        assert_eq!(super::compact(pretty), "{\"a b\":\"x \\\" y\",\"c\":[1,2]}");
    }
}
