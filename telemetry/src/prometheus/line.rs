//! One line of the exposition text: a sample (name, labels, value, timestamp, exemplar) or a
//! descriptor comment (`# HELP`, `# TYPE`, `# UNIT`, `# EOF`).
//!
//! The lexer works on bytes of a `&str` and only ever slices at ASCII delimiters, so every slice
//! it hands out is valid UTF-8. It never panics on any input; every failure is an [`IssueKind`].

use super::{Exemplar, IssueKind, Labels};

/// What one line turned out to be.
#[derive(Debug, PartialEq)]
pub(super) enum Line<'a> {
    /// Empty, or a free-form comment.
    Blank,
    /// `# HELP name text` (text unescaped).
    Help(&'a str, String),
    /// `# TYPE name kind`.
    Type(&'a str, &'a str),
    /// `# UNIT name unit`.
    Unit(&'a str, &'a str),
    /// `# EOF`.
    Eof,
    /// A sample, with an exemplar that may have failed to parse on its own.
    Sample(RawSample),
}

/// A sample as written on its line.
#[derive(Debug, PartialEq)]
pub(super) struct RawSample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
    /// As written: milliseconds in the Prometheus text format, seconds in OpenMetrics.
    pub timestamp: Option<f64>,
    pub exemplar: Result<Option<Exemplar>, IssueKind>,
}

/// Parses one line (without its `\n`; a trailing `\r` is tolerated).
pub(super) fn parse_line(line: &str) -> Result<Line<'_>, IssueKind> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let trimmed = line.trim_start_matches([' ', '\t']);
    if trimmed.is_empty() {
        return Ok(Line::Blank);
    }
    if let Some(comment) = trimmed.strip_prefix('#') {
        return parse_comment(comment);
    }
    parse_sample(trimmed).map(Line::Sample)
}

fn parse_comment(comment: &str) -> Result<Line<'_>, IssueKind> {
    let comment = comment.trim_start_matches([' ', '\t']);
    if comment.trim_end() == "EOF" {
        return Ok(Line::Eof);
    }
    let (keyword, rest) = split_word(comment);
    if !matches!(keyword, "HELP" | "TYPE" | "UNIT") {
        return Ok(Line::Blank);
    }
    let (name, rest) = split_word(rest);
    if !is_metric_name(name) {
        return Err(IssueKind::BadDescriptor);
    }
    match keyword {
        "HELP" => Ok(Line::Help(name, unescape(rest, false))),
        "TYPE" => {
            let kind = rest.trim();
            if kind.is_empty() || kind.contains([' ', '\t']) {
                return Err(IssueKind::BadDescriptor);
            }
            Ok(Line::Type(name, kind))
        }
        _ => Ok(Line::Unit(name, rest.trim())),
    }
}

/// Splits off the first whitespace-separated word; the rest keeps its inner spacing.
fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start_matches([' ', '\t']);
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], s[i + 1..].trim_start_matches([' ', '\t'])),
        None => (s, ""),
    }
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}

fn is_name_byte(b: u8) -> bool {
    is_name_start(b) || b.is_ascii_digit()
}

pub(super) fn is_metric_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && is_name_start(b[0]) && b[1..].iter().all(|&c| is_name_byte(c))
}

/// Decodes `\\`, `\"` and `\n`. An unknown escape keeps its backslash, as Prometheus does.
/// `quoted` says whether `\"` is an escape (label values) or literal (HELP text).
fn unescape(s: &str, quoted: bool) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if quoted => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A cursor over the bytes of a sample line.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn name(&mut self) -> Option<&'a str> {
        let start = self.pos;
        if !self.peek().is_some_and(is_name_start) {
            return None;
        }
        while self.peek().is_some_and(is_name_byte) {
            self.pos += 1;
        }
        Some(&self.s[start..self.pos])
    }

    /// A `"..."` string with escapes; the cursor is on the opening quote.
    fn quoted(&mut self) -> Option<String> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        let bytes = self.s.as_bytes();
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b'\\' => self.pos += 2,
                b'"' => {
                    let raw = &self.s[start..self.pos];
                    self.pos += 1;
                    return Some(unescape(raw, true));
                }
                _ => self.pos += 1,
            }
        }
        None
    }

    /// A whitespace-delimited token.
    fn token(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(|b| b != b' ' && b != b'\t') {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    /// `{k="v",...}`; returns the labels and, for the UTF-8 syntax `{"name",k="v"}`, a quoted
    /// metric name found among them.
    fn labels(&mut self) -> Result<(Labels, Option<String>), IssueKind> {
        let mut pairs = Vec::new();
        let mut quoted_name = None;
        if !self.eat(b'{') {
            return Ok((Labels::default(), None));
        }
        loop {
            self.skip_ws();
            if self.eat(b'}') {
                break;
            }
            if pairs.len() == super::MAX_LABELS {
                return Err(IssueKind::TooManyLabels);
            }
            let key_quoted = self.peek() == Some(b'"');
            let key = match key_quoted {
                true => self.quoted().ok_or(IssueKind::BadLabels)?,
                false => self.name().ok_or(IssueKind::BadLabels)?.to_owned(),
            };
            self.skip_ws();
            if self.eat(b'=') {
                self.skip_ws();
                let value = self.quoted().ok_or(IssueKind::BadLabels)?;
                pairs.push((key, value));
            } else if key_quoted && quoted_name.is_none() && pairs.is_empty() {
                quoted_name = Some(key);
            } else {
                return Err(IssueKind::BadLabels);
            }
            self.skip_ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                break;
            }
            return Err(IssueKind::BadLabels);
        }
        Ok((Labels::from_pairs(pairs), quoted_name))
    }
}

/// Parses a value as Prometheus writes it: floats, `+Inf`, `-Inf`, `NaN` (any case).
pub(super) fn parse_value(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    // Rust's float parser accepts "infinity" and "nan" spellings but nothing exotic like hex or
    // underscores; reject the few forms it accepts that Prometheus does not.
    if b.is_empty() || b.len() > 64 {
        return None;
    }
    s.parse::<f64>().ok()
}

fn parse_sample(line: &str) -> Result<RawSample, IssueKind> {
    let mut cur = Cursor { s: line, pos: 0 };
    let name = cur.name().map(str::to_owned);
    let (labels, quoted_name) = cur.labels()?;
    let name = match (name, quoted_name) {
        (Some(n), None) => n,
        (None, Some(n)) if !n.is_empty() => n,
        _ => return Err(IssueKind::BadName),
    };
    let before_value = cur.pos;
    cur.skip_ws();
    if cur.pos == before_value && cur.peek().is_some() {
        return Err(IssueKind::BadName);
    }
    let value = parse_value(cur.token()).ok_or(IssueKind::BadValue)?;
    cur.skip_ws();
    let mut timestamp = None;
    if cur.peek().is_some_and(|b| b != b'#') {
        timestamp = Some(parse_value(cur.token()).ok_or(IssueKind::BadTimestamp)?);
        if !timestamp.is_some_and(f64::is_finite) {
            return Err(IssueKind::BadTimestamp);
        }
        cur.skip_ws();
    }
    let exemplar = match cur.peek() {
        None => Ok(None),
        Some(b'#') => {
            cur.pos += 1;
            parse_exemplar(&mut cur).map(Some)
        }
        Some(_) => return Err(IssueKind::TrailingGarbage),
    };
    Ok(RawSample {
        name,
        labels,
        value,
        timestamp,
        exemplar,
    })
}

fn parse_exemplar(cur: &mut Cursor<'_>) -> Result<Exemplar, IssueKind> {
    cur.skip_ws();
    if cur.peek() != Some(b'{') {
        return Err(IssueKind::BadExemplar);
    }
    let (labels, name) = cur.labels().map_err(|_| IssueKind::BadExemplar)?;
    if name.is_some() {
        return Err(IssueKind::BadExemplar);
    }
    cur.skip_ws();
    let value = parse_value(cur.token()).ok_or(IssueKind::BadExemplar)?;
    cur.skip_ws();
    let mut timestamp = None;
    if cur.peek().is_some() {
        timestamp = Some(parse_value(cur.token()).ok_or(IssueKind::BadExemplar)?);
        cur.skip_ws();
        if cur.peek().is_some() {
            return Err(IssueKind::BadExemplar);
        }
    }
    Ok(Exemplar {
        labels,
        value,
        timestamp_s: timestamp,
    })
}
