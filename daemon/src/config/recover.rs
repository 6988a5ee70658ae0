//! Every error of a file in one pass. serde stops at the first key or value that does not
//! parse, so when the whole file does not, each workload and each target is parsed on its own
//! (from the file's spanned tree, so lines and key paths stay the file's), the ones that parse
//! are kept, the rest of the file is parsed without the ones that do not, and what remains is
//! validated as usual: `check-config` names every bad workload and key at once. Here too:
//! how one error, or several, reads.

use super::validate::{self, Source};
use super::{key_path, line_of, raw, ConfigError};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::Path;
use toml::de::{DeTable, DeValue, ValueDeserializer};

/// What was left out of validation because it did not parse (its error is already said).
#[derive(Debug, Default)]
pub(super) struct Dropped {
    /// Targets by name: a workload naming one is not validated (its target is not known).
    pub targets: BTreeSet<String>,
    /// Some workload: "none defined" is not said when all of them were dropped.
    pub workloads: bool,
}

/// Every error of a file whose first parse error is `first`.
pub(super) fn every_error(first: toml::de::Error, src: &Source) -> ConfigError {
    let single = || toml_error(&first, src.text, src.file);
    // A syntax error: nothing after it can be trusted.
    let Ok(doc) = DeTable::parse(src.text) else {
        return single();
    };
    let span = doc.span();
    let mut doc = doc.into_inner();
    let mut errors = Vec::new();
    let mut dropped = Dropped::default();
    let workloads = keep_parsing::<raw::Workload>(&mut doc, "workloads", src, &mut errors);
    dropped.workloads = !workloads.is_empty();
    dropped.targets = keep_parsing::<raw::Target>(&mut doc, "targets", src, &mut errors);
    let rest = raw::File::deserialize(toml::de::Deserializer::from(toml::Spanned::new(span, doc)));
    match rest {
        Ok(raw) => {
            if let Err(e) = validate::validate(raw, src, &dropped) {
                errors.push(e);
            }
        }
        Err(e) => errors.push(toml_error(&e, src.text, src.file)),
    }
    ConfigError::all(errors).unwrap_or_else(single)
}

/// Parses each entry of the table `section` as a `T` on its own: the error of each one that
/// does not parse joins `errors`, and it leaves the table. Returns the names it left.
fn keep_parsing<'i, T: Deserialize<'i>>(
    doc: &mut DeTable<'i>,
    section: &str,
    src: &Source,
    errors: &mut Vec<ConfigError>,
) -> BTreeSet<String> {
    let mut bad = BTreeSet::new();
    let Some(table) = doc.get_mut(section) else {
        return bad;
    };
    let DeValue::Table(entries) = table.get_mut() else {
        return bad;
    };
    for (name, value) in std::mem::take(entries) {
        match T::deserialize(ValueDeserializer::from(value.clone())) {
            Ok(_) => drop(entries.insert(name, value)),
            Err(e) => {
                errors.push(toml_error(&e, src.text, src.file));
                bad.insert(name.get_ref().to_string());
            }
        }
    }
    bad
}

impl ConfigError {
    /// One error: `file:line: message`.
    pub(super) fn one(&self) -> String {
        let line = self.line.map(|l| format!(":{l}")).unwrap_or_default();
        format!("{}{line}: {}", self.file.display(), self.message)
    }

    /// One error as [`ConfigError::one`]; several as a count, then one per line.
    pub(super) fn render(&self) -> String {
        if self.more.is_empty() {
            return self.one();
        }
        let mut s = format!("{}: {} errors:", self.file.display(), self.more.len() + 1);
        for e in std::iter::once(self).chain(&self.more) {
            s.push_str("\n  ");
            s.push_str(&e.one());
        }
        s
    }

    /// `errors` as one, in file order (`None` when there are none).
    pub(super) fn all(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        let mut errors = errors.into_iter();
        let mut first = errors.next()?;
        first.more.extend(errors.flat_map(|mut e| {
            let more = std::mem::take(&mut e.more);
            std::iter::once(e).chain(more)
        }));
        Some(first)
    }
}

/// A parse error of `text` (read from `file`) with its line and key path.
pub(super) fn toml_error(e: &toml::de::Error, text: &str, file: &Path) -> ConfigError {
    let span = e.span();
    let mut message = plain_words(e.message().trim());
    // A duplicate key: the document does not parse, so no key path is found by its spans;
    // the key is named from the text at the error's span, under its table.
    let path = span
        .clone()
        .map(|s| key_path(text, s))
        .filter(|p| !p.is_empty())
        .or_else(|| {
            span.clone()
                .filter(|_| message.starts_with("duplicate key"))
                .and_then(|s| key_at(text, s))
        });
    // serde quotes a value of the wrong type (`headers = "Authorization: Bearer …"` where a
    // table belongs): under `headers` that value is a secret.
    // So is a value of any type under a key naming one: `api_key_env = 1234…` is a key
    // pasted as a number (serde quotes those in backticks).
    if path.as_deref().is_some_and(holds_a_secret) {
        message = hide_backquoted(&hide_quoted_strings(&message));
    }
    ConfigError {
        file: file.to_path_buf(),
        line: span.map(|s| line_of(text, s.start)),
        message: match path {
            Some(p) => format!("{p}: {message}"),
            None => message,
        },
        more: Vec::new(),
    }
}

/// serde's message with the Rust type it expected in words: `invalid type: string "x",
/// expected f64` says `expected a number` (a key read as a plain number or count; the keys
/// with a range of their own say it themselves).
fn plain_words(message: &str) -> String {
    const WORDS: [(&str, &str); 10] = [
        ("f64", "a number"),
        ("f32", "a number"),
        ("u8", "a whole number, 0 or more"),
        ("u16", "a whole number, 0 or more"),
        ("u32", "a whole number, 0 or more"),
        ("u64", "a whole number, 0 or more"),
        ("usize", "a whole number, 0 or more"),
        ("i32", "a whole number"),
        ("i64", "a whole number"),
        ("bool", "true or false"),
    ];
    for (ty, words) in WORDS {
        if let Some(head) = message.strip_suffix(&format!("expected {ty}")) {
            return format!("{head}expected {words}");
        }
    }
    message.to_string()
}

/// The key at `span` of `text` as a dotted path: a table header's own (`[workloads.chat]` is
/// `workloads.chat`), else the key, dotted as written, under the last table header before it
/// (`workloads.chat.every`, `workloads.chat.a.b`); a key inside an inline table, whose
/// table this does not follow, bare (`X`). `None` when the span holds no one-line key.
fn key_at(text: &str, span: std::ops::Range<usize>) -> Option<String> {
    /// The table a header line names: `[a.b]` or `[[a.b]]`, comment and spaces aside; not a
    /// line of a multi-line array (`[1, 2],`), which has a comma or more after its bracket.
    fn table(line: &str) -> Option<&str> {
        let line = line.trim();
        let (inner, close) = match line.strip_prefix("[[") {
            Some(inner) => (inner, "]]"),
            None => (line.strip_prefix('[')?, "]"),
        };
        let end = inner.find(close)?;
        let rest = inner[end + close.len()..].trim_start();
        let name = inner[..end].trim();
        (!name.contains(',') && (rest.is_empty() || rest.starts_with('#'))).then_some(name)
    }
    let key = text.get(span.clone())?.trim();
    let key = key.trim_start_matches('[').trim_end_matches(']').trim();
    if key.is_empty() || key.contains('\n') || key.len() > 200 {
        return None;
    }
    let line_start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    if line.trim_start().starts_with('[') {
        return Some(
            table(line)
                .filter(|t| !t.is_empty())
                .unwrap_or(key)
                .to_string(),
        );
    }
    // A key after an `=` on its line is inside an inline table: bare.
    let head = text.get(line_start..span.start)?;
    if head.contains('=') {
        return Some(key.to_string());
    }
    // The whole dotted key as written on its line (`a.b`, not only `b`).
    let key = text.get(line_start..span.end)?.trim();
    let under = text[..line_start]
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('['))
        .find_map(table);
    Some(match under {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

/// Whether the key at `path` holds a secret, or names where one is (a pasted secret is
/// found there too).
fn holds_a_secret(path: &str) -> bool {
    const SECRET_KEYS: [&str; 4] = ["headers", "api_key_env", "api_key_file", "client_key"];
    path.split('.').any(|k| SECRET_KEYS.contains(&k))
}

/// `message` with the value serde quoted in backticks (`invalid type: integer `5`, …`: a
/// number, a boolean) said as `(not shown)`; the backticked names of other messages (`unknown
/// field `envv`, expected `env`…`) stay.
fn hide_backquoted(message: &str) -> String {
    if !(message.starts_with("invalid type:") || message.starts_with("invalid value:")) {
        return message.to_string();
    }
    let Some((before, rest)) = message.split_once('`') else {
        return message.to_string();
    };
    // Unclosed: nothing after the backtick is shown.
    let after = rest.split_once('`').map_or("", |(_, after)| after);
    format!("{before}(not shown){after}")
}

/// `message` with each `string "…"` serde wrote (Rust's debug quoting, `\"` inside) said as
/// `a string (not shown)`.
fn hide_quoted_strings(message: &str) -> String {
    const QUOTED: &str = "string \"";
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find(QUOTED) {
        out.push_str(&rest[..at]);
        out.push_str("a string (not shown)");
        let after = &rest[at + QUOTED.len()..];
        let mut escaped = false;
        let end = after.char_indices().find_map(|(i, c)| match (escaped, c) {
            (false, '\\') => {
                escaped = true;
                None
            }
            (false, '"') => Some(i + 1),
            _ => {
                escaped = false;
                None
            }
        });
        // Unclosed: nothing after the quote is shown.
        rest = end.map_or("", |e| &after[e..]);
    }
    out.push_str(rest);
    out
}
