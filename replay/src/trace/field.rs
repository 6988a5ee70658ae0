//! Lenient field values shared by the parsers, and their checked conversions.
//!
//! Rows are deserialized into structs whose fields accept any JSON value ([`Scalar`],
//! [`HashIds`]) rather than the final types. serde would otherwise report a type error
//! as "invalid type: string, expected u32 at line 1 column 30", without the field's name;
//! here every conversion goes through [`Row`], which names the file, line and field.
//! Strings are borrowed from the line buffer, so a well-formed row allocates nothing but
//! its `hash_ids`.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

use serde::de::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::error::{JsonPlace, JsonSyntax};
use super::TraceError;

/// Any JSON value, with strings borrowed and containers skipped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Uint(u64),
    Int(i64),
    /// A number that is not a 64-bit integer, and its text as the row writes it: an error
    /// quotes that (the float would print `0.0` as `0`, and 2^64 as 18446744073709552000).
    Float(f64, &'a str),
    Str(Cow<'a, str>),
    Bool(bool),
    Array,
    Object,
}

impl fmt::Display for Scalar<'_> {
    /// How the value reads in an error message ("found …").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Uint(n) => write!(f, "{n}"),
            Self::Int(n) => write!(f, "{n}"),
            Self::Float(_, text) => f.write_str(text),
            Self::Str(s) => write!(f, "string {s:?}"),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Array => f.write_str("an array"),
            Self::Object => f.write_str("an object"),
        }
    }
}

impl<'a> Scalar<'a> {
    /// The value a JSON value's text holds (`text` is valid JSON: serde_json checked it).
    fn from_json(text: &'a str) -> Result<Self, &'static str> {
        Ok(match text.as_bytes().first() {
            Some(b'"') => match &text[1..text.len() - 1] {
                plain if !plain.contains('\\') => Scalar::Str(Cow::Borrowed(plain)),
                _ => Scalar::Str(Cow::Owned(
                    serde_json::from_str(text).map_err(|_| "invalid string")?,
                )),
            },
            Some(b'[') => Scalar::Array,
            Some(b'{') => Scalar::Object,
            Some(b't') => Scalar::Bool(true),
            Some(b'f') => Scalar::Bool(false),
            Some(b'n') => return Err("invalid type: null, expected any JSON value"),
            _ => {
                if let Ok(n) = text.parse::<u64>() {
                    Scalar::Uint(n)
                } else if let Ok(n) = text.parse::<i64>() {
                    // `-0` is 0, as serde_json read it (a float -0.0, taken as 0).
                    match n {
                        0 => Scalar::Uint(0),
                        n => Scalar::Int(n),
                    }
                } else {
                    match text.parse::<f64>() {
                        Ok(x) if x.is_finite() => Scalar::Float(x, text),
                        _ => return Err("number out of range"),
                    }
                }
            }
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read as its text, so that a number keeps the digits the row wrote; serde_json
        // places an error here at the value, so it still names the field.
        let raw = <&'de RawValue>::deserialize(d)?;
        Scalar::from_json(raw.get()).map_err(serde::de::Error::custom)
    }
}

/// A `hash_ids` value: the ids, or a description of what was found instead.
#[derive(Debug)]
pub(crate) enum HashIds {
    Ids(Vec<u64>),
    Bad(String),
}

impl HashIds {
    /// The ids of a JSON value's text (valid JSON: serde_json checked it). A plain array of
    /// integers, every row of a real trace, is read in one tight pass; anything else goes
    /// through [`Scalar`] to say what the row wrote instead.
    fn from_json(text: &str) -> HashIds {
        if let Some(mut ids) = plain_ids(text.as_bytes()) {
            // Give back the slack of the doubling: the request keeps these for the whole run.
            ids.shrink_to_fit();
            return HashIds::Ids(ids);
        }
        if !text.starts_with('[') {
            return HashIds::Bad(describe(text));
        }
        let elements: Vec<&RawValue> = serde_json::from_str(text).unwrap_or_default();
        for (i, e) in elements.iter().enumerate() {
            if !matches!(Scalar::from_json(e.get()), Ok(Scalar::Uint(_))) {
                return HashIds::Bad(format!("element {i} = {}", describe(e.get())));
            }
        }
        // Not reached for valid JSON: every element was a u64, which `plain_ids` reads.
        HashIds::Bad(describe(text))
    }
}

/// A JSON value's text as an error quotes it.
fn describe(text: &str) -> String {
    match Scalar::from_json(text) {
        Ok(v) => v.to_string(),
        Err(_) => text.to_string(),
    }
}

/// The ids of `text` when it is an array of integers that fit in a u64 and nothing else.
fn plain_ids(text: &[u8]) -> Option<Vec<u64>> {
    let skip = |i: &mut usize| {
        while text.get(*i).is_some_and(|b| b.is_ascii_whitespace()) {
            *i += 1;
        }
    };
    let mut i = 1;
    if text.first() != Some(&b'[') {
        return None;
    }
    let mut ids = Vec::with_capacity(16);
    skip(&mut i);
    if text.get(i) == Some(&b']') {
        return Some(ids);
    }
    loop {
        let start = i;
        let mut n: u64 = 0;
        while let Some(d) = text.get(i).filter(|b| b.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            i += 1;
        }
        if i == start {
            return None;
        }
        ids.push(n);
        skip(&mut i);
        match text.get(i) {
            Some(b',') => {
                i += 1;
                skip(&mut i);
            }
            Some(b']') => return Some(ids),
            _ => return None,
        }
    }
}

impl<'de> Deserialize<'de> for HashIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read as its text: serde_json checks it once, and its ids are read in one pass
        // (each element as a `Scalar` of its own text cost 30–40 % of a trace's parse).
        let raw = <&'de RawValue>::deserialize(d)?;
        Ok(HashIds::from_json(raw.get()))
    }
}

/// The most of a bad value an error quotes (bytes): a line may hold 16 MiB, and the error is
/// printed and kept among the summary's warnings.
const FOUND_LIMIT: usize = 120;

/// What an error quotes of a bad value: its start, printable, and its length when cut.
fn shown(found: impl fmt::Display) -> String {
    let text = found.to_string();
    let start = canary_core::prefix_within(&text, FOUND_LIMIT);
    let mut out = canary_core::printable(start).into_owned();
    if start.len() < text.len() {
        out.push_str(&format!("… ({} bytes)", text.len()));
    }
    out
}

/// One row being converted: knows where it is, so every error names file, line and field.
#[derive(Clone, Copy)]
pub(crate) struct Row<'p> {
    pub path: &'p Path,
    pub line: u64,
}

impl Row<'_> {
    pub fn missing(&self, field: &'static str) -> TraceError {
        TraceError::MissingField {
            path: self.path.into(),
            line: self.line,
            field,
        }
    }

    pub fn wrong_type(
        &self,
        field: &'static str,
        expected: &'static str,
        found: impl fmt::Display,
    ) -> TraceError {
        TraceError::WrongType {
            path: self.path.into(),
            line: self.line,
            field,
            expected,
            found: shown(found),
        }
    }

    pub fn invalid(
        &self,
        field: &'static str,
        expected: impl Into<String>,
        found: impl fmt::Display,
    ) -> TraceError {
        TraceError::InvalidValue {
            path: self.path.into(),
            line: self.line,
            field,
            expected: expected.into(),
            found: shown(found),
        }
    }

    pub fn required<'v, 'a>(
        &self,
        field: &'static str,
        v: &'v Option<Scalar<'a>>,
    ) -> Result<&'v Scalar<'a>, TraceError> {
        v.as_ref().ok_or_else(|| self.missing(field))
    }

    /// A token count: an integer in `1..=u32::MAX` (an integral float such as `12.0` is
    /// accepted, some writers emit them). With `allow_zero`, 0 is accepted too.
    pub fn count(
        &self,
        field: &'static str,
        v: &Scalar<'_>,
        allow_zero: bool,
    ) -> Result<u32, TraceError> {
        let expected = if allow_zero {
            "a non-negative integer"
        } else {
            "a positive integer"
        };
        let n = match *v {
            Scalar::Uint(n) => n,
            Scalar::Int(_) => return Err(self.invalid(field, expected, v)),
            Scalar::Float(x, _) if x.fract() == 0.0 && x >= 0.0 && x <= u32::MAX as f64 => x as u64,
            Scalar::Float(x, _) if x < 0.0 => return Err(self.invalid(field, expected, v)),
            _ => return Err(self.wrong_type(field, expected, v)),
        };
        if n == 0 && !allow_zero {
            return Err(self.invalid(field, expected, v));
        }
        u32::try_from(n).map_err(|_| self.invalid(field, format!("{expected} below 2^32"), v))
    }

    /// A token length: a [`count`](Self::count) of at most `limit` (the load's
    /// [`length_limit`](super::LoadOptions::length_limit)), so that nothing sized by it (a
    /// prompt, a response cap) can be absurd.
    pub fn length(
        &self,
        field: &'static str,
        v: &Scalar<'_>,
        allow_zero: bool,
        limit: u32,
    ) -> Result<u32, TraceError> {
        let n = self.count(field, v, allow_zero)?;
        if n > limit {
            return Err(self.invalid(field, format!("at most {limit} tokens (length_limit)"), n));
        }
        Ok(n)
    }

    /// A JSONL row read into `T`, which must be an object: serde's derive would also read
    /// an array, by position (`[3000, 7322, 490]` as timestamp, input and output).
    pub fn object<'a, T: Deserialize<'a>>(&self, text: &'a [u8]) -> Result<T, TraceError> {
        if text.first() == Some(&b'{') {
            return serde_json::from_slice(text).map_err(|source| self.json(text, source));
        }
        // Valid JSON of another kind is named as such; anything else is a syntax error.
        match serde_json::from_slice::<Scalar<'_>>(text) {
            Ok(found) => Err(TraceError::NotAnObject {
                path: self.path.into(),
                line: self.line,
                found: shown(found),
            }),
            // `null` is valid JSON that `Scalar` does not take.
            Err(_) if text == b"null" => Err(TraceError::NotAnObject {
                path: self.path.into(),
                line: self.line,
                found: "null".into(),
            }),
            Err(source) => Err(self.json(text, source)),
        }
    }

    /// A JSON row that did not parse, naming the field the error is in when there is one.
    pub fn json(&self, text: &[u8], source: serde_json::Error) -> TraceError {
        TraceError::Json {
            path: self.path.into(),
            line: self.line,
            place: place(text, source.column().saturating_sub(1)),
            source: JsonSyntax::new(text, source),
        }
    }

    /// A non-negative time in the trace's unit, converted to microseconds
    /// (`us_per_unit` is 1,000 for milliseconds, 1,000,000 for seconds).
    pub fn time_us(
        &self,
        field: &'static str,
        v: &Scalar<'_>,
        unit: &'static str,
        us_per_unit: u64,
    ) -> Result<u64, TraceError> {
        let expected = || format!("a non-negative number of {unit}");
        match *v {
            Scalar::Uint(n) => n
                .checked_mul(us_per_unit)
                .ok_or_else(|| self.invalid(field, format!("{} below 2^64 µs", expected()), v)),
            Scalar::Float(x, _) if x >= 0.0 && x * (us_per_unit as f64) < 1.8e19 => {
                Ok((x * us_per_unit as f64).round() as u64)
            }
            // Non-negative, but too large: said so, not "expected a non-negative number".
            Scalar::Float(x, _) if x >= 0.0 => {
                Err(self.invalid(field, format!("{} below 2^64 µs", expected()), v))
            }
            Scalar::Int(_) | Scalar::Float(..) => Err(self.invalid(field, expected(), v)),
            _ => Err(TraceError::WrongType {
                path: self.path.into(),
                line: self.line,
                field,
                expected: "a number",
                found: v.to_string(),
            }),
        }
    }

    /// Checks `hash_ids` against `input_length`: `(n-1)*bs < input <= n*bs` for n ≥ 1 ids.
    pub fn block_rule(
        &self,
        input: u32,
        ids: &canary_core::HashIds,
        block_size: u32,
    ) -> Result<(), TraceError> {
        let n = ids.len() as u64;
        let (bs, input64) = (block_size as u64, input as u64);
        if n == 0 || ((n - 1) * bs < input64 && input64 <= n * bs) {
            return Ok(());
        }
        Err(TraceError::BlockRule {
            path: self.path.into(),
            line: self.line,
            input_length: input,
            blocks: ids.len(),
            block_size,
        })
    }

    /// The ids in their compact form (the row's own `Vec` is dropped with the row).
    pub fn hash_ids(&self, v: Option<HashIds>) -> Result<canary_core::HashIds, TraceError> {
        match v {
            None => Ok(canary_core::HashIds::new()),
            Some(HashIds::Ids(ids)) => Ok(ids.into()),
            Some(HashIds::Bad(found)) => {
                Err(self.wrong_type("hash_ids", "an array of non-negative integers", found))
            }
        }
    }
}

/// Where a syntax error at byte `at` of a one-line JSON object is: in the value of a
/// top-level key (`"input_length": 1e400`, a truncated `hash_ids` array, bytes that are not
/// UTF-8 in a `text_input` string), in a key's name, after the object, or not in an object.
fn place(line: &[u8], at: usize) -> JsonPlace {
    if line.trim_ascii_start().first() != Some(&b'{') {
        return JsonPlace::Row;
    }
    let end = at.min(line.len());
    let (mut depth, mut want_key, mut key) = (0usize, false, None);
    let mut i = 0;
    while i < end {
        match line[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < line.len() && line[j] != b'"' {
                    j += if line[j] == b'\\' { 2 } else { 1 };
                }
                let in_key = depth == 1 && want_key;
                if j >= end {
                    // The error is in this string (or the row ends inside it): a key's name,
                    // or a value of the last key read.
                    return in_row(depth, in_key, key);
                }
                if in_key {
                    key = Some(String::from_utf8_lossy(&line[start..j]).into_owned());
                    want_key = false;
                }
                i = j + 1;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                want_key = depth == 1;
            }
            b'}' if depth == 1 => {
                // The row's object closed: whatever follows is in none of its fields (the
                // last key read would otherwise be blamed for `{…} {"a":1}`).
                return JsonPlace::AfterObject;
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => want_key = true,
            _ => {}
        }
        i += 1;
    }
    in_row(depth, depth == 1 && want_key, key)
}

/// The place of an error at `depth`: in the value of `key` unless a key was due there.
fn in_row(depth: usize, in_key: bool, key: Option<String>) -> JsonPlace {
    match (depth, in_key, key) {
        (0, ..) => JsonPlace::Row,
        (_, true, after) => JsonPlace::Key { after },
        (_, false, Some(key)) => JsonPlace::Field(key),
        // In an object whose first key was not read: `{1: …}`, `{"a" 1}` is a key error.
        (_, false, None) => JsonPlace::Key { after: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row<'static> {
        Row {
            path: Path::new("f.jsonl"),
            line: 3,
        }
    }

    #[test]
    fn counts() {
        let r = row();
        assert_eq!(r.count("n", &Scalar::Uint(7), false).unwrap(), 7);
        assert_eq!(
            r.count("n", &Scalar::Float(12.0, "12.0"), false).unwrap(),
            12
        );
        assert_eq!(r.count("n", &Scalar::Uint(0), true).unwrap(), 0);
        let msg = |v: Scalar<'_>| r.count("n", &v, false).unwrap_err().to_string();
        assert_eq!(
            msg(Scalar::Uint(0)),
            r#"f.jsonl:3: field "n": expected a positive integer, found 0"#
        );
        assert_eq!(
            msg(Scalar::Float(2.5, "2.5")),
            r#"f.jsonl:3: field "n": expected a positive integer, found 2.5"#
        );
        assert_eq!(
            msg(Scalar::Bool(true)),
            r#"f.jsonl:3: field "n": expected a positive integer, found true"#
        );
        assert!(msg(Scalar::Uint(1 << 32)).contains("below 2^32"));
    }

    #[test]
    fn a_huge_bad_value_is_quoted_by_its_start_and_length() {
        let huge = format!("\u{1b}[2J{}", "9".repeat(16 << 20));
        let msg = row().wrong_type("t", "a number", &huge).to_string();
        assert!(msg.len() < 300, "{} bytes", msg.len());
        assert!(!msg.chars().any(char::is_control), "{msg}");
        assert!(
            msg.starts_with(r#"f.jsonl:3: field "t": expected a number, found \u{1b}[2J999"#),
            "{msg}"
        );
        assert!(msg.ends_with(&format!("… ({} bytes)", huge.len())), "{msg}");
    }

    #[test]
    fn times() {
        let r = row();
        assert_eq!(
            r.time_us("t", &Scalar::Uint(3), "ms", 1_000).unwrap(),
            3_000
        );
        assert_eq!(
            r.time_us("t", &Scalar::Float(1.2345678, "1.2345678"), "s", 1_000_000)
                .unwrap(),
            1_234_568
        );
        for bad in [
            Scalar::Int(-1),
            Scalar::Float(-0.5, "-0.5"),
            Scalar::Float(f64::NAN, "NaN"),
            Scalar::Uint(u64::MAX),
        ] {
            let e = r.time_us("t", &bad, "ms", 1_000).unwrap_err();
            assert_eq!(
                e.kind(),
                super::super::TraceErrorKind::InvalidValue,
                "{bad:?}"
            );
        }
        let e = r
            .time_us("t", &Scalar::Str("x".into()), "ms", 1_000)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"f.jsonl:3: field "t": expected a number, found string "x""#
        );
    }

    #[test]
    fn lengths_have_a_limit() {
        let r = row();
        assert_eq!(r.length("n", &Scalar::Uint(10), false, 10).unwrap(), 10);
        let e = r.length("n", &Scalar::Uint(11), false, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"f.jsonl:3: field "n": expected at most 10 tokens (length_limit), found 11"#
        );
    }

    #[test]
    fn syntax_errors_name_the_field_they_are_in() {
        let at = |line: &str| {
            let e = serde_json::from_str::<serde_json::Value>(line).unwrap_err();
            place(line.as_bytes(), e.column().saturating_sub(1))
        };
        let field = |s: &str| JsonPlace::Field(s.to_string());
        assert_eq!(
            at(r#"{"a": 1, "input_length": 1e400}"#),
            field("input_length")
        );
        assert_eq!(at(r#"{"a": 1, "hash_ids": [1, 2"#), field("hash_ids"));
        assert_eq!(at(r#"{"a\"b": {"x": tru}}"#), field("a\\\"b"));
        assert_eq!(at(r#"{"a": "x", "b": [1, {"c": -}]}"#), field("b"));
        let key_after = |s: &str| JsonPlace::Key {
            after: Some(s.to_string()),
        };
        assert_eq!(at(r#"{"a": 1, "b"#), key_after("a"));
        assert_eq!(at(r#"{"a": 1, "b\u12"#), key_after("a"));
        assert_eq!(at(r#"{"b\u12"#), JsonPlace::Key { after: None });
        assert_eq!(at("not json"), JsonPlace::Row);
        assert_eq!(at("[1, 2"), JsonPlace::Row);
    }

    // An error inside a value's string was put in no field (`malformed JSON: invalid unicode
    // code point at line 1 column 92`), though the key before it was known.
    #[test]
    fn syntax_errors_inside_a_value_string_name_its_field() {
        let at = |line: &[u8]| {
            let e = serde_json::from_slice::<serde_json::Value>(line).unwrap_err();
            place(line, e.column().saturating_sub(1))
        };
        let field = |s: &str| JsonPlace::Field(s.to_string());
        // Cut off inside the string, an escape that is no escape, bytes that are not UTF-8.
        assert_eq!(at(br#"{"a": 1, "text_input": "abc"#), field("text_input"));
        assert_eq!(at(br#"{"a": 1, "t": "a\q", "b": 2}"#), field("t"));
        assert_eq!(at(b"{\"a\": 1, \"t\": \"\xff\xfe\"}"), field("t"));
        assert_eq!(at(b"{\"s\": \"\xff\", \"b\": 1}"), field("s"));
        // In a string nested in the value: still that field's.
        assert_eq!(
            at(b"{\"a\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}"),
            field("messages")
        );
        assert_eq!(
            at(br#"{"a": 1, "messages": [{"role": "us"#),
            field("messages")
        );
        // In a key's name: no field to name, but the one before it.
        assert_eq!(
            at(b"{\"a\": 1, \"\xff\": 2}"),
            JsonPlace::Key {
                after: Some("a".into())
            }
        );
    }

    // Trailing characters after the row's object were blamed on its last field: `{…,
    // "hash_ids": [1]} {"a":1}` read as `field "hash_ids": malformed JSON`.
    #[test]
    fn syntax_errors_after_the_object_are_in_no_field() {
        let at = |line: &str| {
            let e = serde_json::from_str::<serde_json::Value>(line).unwrap_err();
            place(line.as_bytes(), e.column().saturating_sub(1))
        };
        assert_eq!(at(r#"{"a": 1, "b": [1]} {"a":1}"#), JsonPlace::AfterObject);
        assert_eq!(at(r#"{"a": {"x": 1}}x"#), JsonPlace::AfterObject);
        assert_eq!(at(r#"{"a": "}"} ]"#), JsonPlace::AfterObject);
        // A nested object closing is not the row's.
        assert_eq!(
            at(r#"{"a": {"x": 1}, "b": x}"#),
            JsonPlace::Field("b".into())
        );
    }

    #[test]
    fn hash_ids_describe_what_they_found() {
        let ids: HashIds = serde_json::from_str("[1, 2, 3]").unwrap();
        assert!(matches!(ids, HashIds::Ids(v) if v == [1, 2, 3]));
        let bad: HashIds = serde_json::from_str(r#"[1, -2, "x"]"#).unwrap();
        assert!(
            matches!(bad, HashIds::Bad(ref s) if s == "element 1 = -2"),
            "{bad:?}"
        );
        let bad: HashIds = serde_json::from_str(r#"{"a": 1}"#).unwrap();
        assert!(matches!(bad, HashIds::Bad(ref s) if s == "an object"));
        let bad: HashIds = serde_json::from_str("[1, [2], 3]").unwrap();
        assert!(
            matches!(bad, HashIds::Bad(ref s) if s == "element 1 = an array"),
            "{bad:?}"
        );
        let bad: HashIds = serde_json::from_str("[1, null]").unwrap();
        assert!(
            matches!(bad, HashIds::Bad(ref s) if s == "element 1 = null"),
            "{bad:?}"
        );
        // The one-pass reading agrees with serde's on every spacing JSON allows.
        for text in [
            "[]",
            "[ ]",
            "[\n]",
            "[0]",
            "[ 1 ,2\t,\r\n3 ]",
            "[18446744073709551615]",
        ] {
            let want: Vec<u64> = serde_json::from_str(text).unwrap();
            let ids: HashIds = serde_json::from_str(text).unwrap();
            assert!(
                matches!(ids, HashIds::Ids(ref v) if *v == want),
                "{text}: {ids:?}"
            );
        }
    }

    /// Every row of the real traces: the one-pass reading gives serde's ids.
    /// `-0` is 0, as serde_json's own reading took it (a float -0.0): a timestamp or a
    /// length written `-0` loads.
    #[test]
    fn minus_zero_is_zero() {
        let v: Scalar<'_> = serde_json::from_str("-0").unwrap();
        assert_eq!(v, Scalar::Uint(0));
        let v: Scalar<'_> = serde_json::from_str("-3").unwrap();
        assert_eq!(v, Scalar::Int(-3));
    }

    #[test]
    fn hash_ids_of_the_real_traces_are_serdes() {
        #[derive(serde::Deserialize)]
        struct Both {
            hash_ids: serde_json::Value,
        }
        #[derive(serde::Deserialize)]
        struct Ours {
            hash_ids: HashIds,
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/");
        let mut rows = 0;
        for name in [
            "mooncake_conversation_first2000.jsonl",
            "mooncake_synthetic.jsonl",
            "mooncake_arxiv_first20.jsonl",
        ] {
            let text = std::fs::read_to_string(format!("{dir}{name}")).unwrap();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let want: Vec<u64> =
                    serde_json::from_value(serde_json::from_str::<Both>(line).unwrap().hash_ids)
                        .unwrap();
                let ours = serde_json::from_str::<Ours>(line).unwrap().hash_ids;
                assert!(
                    matches!(ours, HashIds::Ids(ref v) if *v == want),
                    "{name}: {line}"
                );
                rows += 1;
            }
        }
        assert!(rows > 5000, "{rows}");
    }

    // A float was quoted as Rust prints it, not as the row wrote it: a hash id `0.0` read
    // "element 0 = 0" (a valid id), and 2^64 read 18446744073709552000 (another number).
    #[test]
    fn values_are_quoted_as_written() {
        let bad: HashIds = serde_json::from_str("[0.0, 1]").unwrap();
        assert!(
            matches!(bad, HashIds::Bad(ref s) if s == "element 0 = 0.0"),
            "{bad:?}"
        );
        let bad: HashIds = serde_json::from_str("[1, 18446744073709551616]").unwrap();
        assert!(
            matches!(bad, HashIds::Bad(ref s) if s == "element 1 = 18446744073709551616"),
            "{bad:?}"
        );
        let v: Scalar<'_> = serde_json::from_str("1.50e0").unwrap();
        assert_eq!(
            (v.to_string(), v),
            ("1.50e0".into(), Scalar::Float(1.5, "1.50e0"))
        );
        for (text, want) in [
            ("7", Scalar::Uint(7)),
            ("-7", Scalar::Int(-7)),
            (r#""a\"b""#, Scalar::Str("a\"b".into())),
            (r#""ab""#, Scalar::Str("ab".into())),
            ("[1, [2]]", Scalar::Array),
            (r#"{"a": [1]}"#, Scalar::Object),
            ("false", Scalar::Bool(false)),
        ] {
            assert_eq!(serde_json::from_str::<Scalar<'_>>(text).unwrap(), want);
        }
        // Out of range, as serde_json says it.
        let e = serde_json::from_str::<Scalar<'_>>("1e400").unwrap_err();
        assert!(e.to_string().starts_with("number out of range"), "{e}");
    }
}
