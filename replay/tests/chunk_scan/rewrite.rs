//! Rewritten variants of real chunks: the same JSON written back with random whitespace, key
//! order, escapes, ignored members of nested junk (sometimes the same key twice), and known
//! strings swapped for `null`.

use canary_testkit::fuzz::Rng;
use serde_json::Value;

/// Writes `v` back as JSON with random whitespace, key order, escapes and ignored junk.
struct Rewriter<'r> {
    rng: &'r mut Rng,
    /// Chance in 16 that a character of a value string is escaped.
    escape: usize,
    out: String,
}

const JUNK_KEYS: &[&str] = &["id", "model", "logprobs", "x", "{\"[", "object", "é😀"];
const JUNK_TEXT: &[&str] = &["}{", "\"]", "a,b:c", "\\", "é", "😀", "\u{1}", "", "null"];

impl Rewriter<'_> {
    fn ws(&mut self) {
        if self.rng.below(4) == 0 {
            for _ in 0..1 + self.rng.below(3) {
                self.out.push([' ', '\n', '\t', '\r'][self.rng.below(4)]);
            }
        }
    }

    fn string(&mut self, s: &str, escape: usize) {
        self.out.push('"');
        for c in s.chars() {
            let forced = matches!(c, '"' | '\\') || (c as u32) < 0x20;
            if !forced && self.rng.below(16) >= escape {
                self.out.push(c);
                continue;
            }
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '/' => Some("\\/"),
                '\n' => Some("\\n"),
                '\t' => Some("\\t"),
                '\r' => Some("\\r"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                _ => None,
            };
            match short {
                Some(e) if self.rng.below(2) == 0 => self.out.push_str(e),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        let hex = match self.rng.below(2) {
                            0 => format!("\\u{u:04x}"),
                            _ => format!("\\u{u:04X}"),
                        };
                        self.out.push_str(&hex);
                    }
                }
            }
        }
        self.out.push('"');
    }

    fn junk(&mut self, depth: usize) {
        match self.rng.below(if depth > 3 { 5 } else { 7 }) {
            0 => self
                .out
                .push_str(["true", "false", "null"][self.rng.below(3)]),
            1 => self
                .out
                .push_str(["0", "-1.5e-3", "17", "1E+2", "-0"][self.rng.below(5)]),
            2..=4 => {
                let t = JUNK_TEXT[self.rng.below(JUNK_TEXT.len())];
                self.string(t, 8);
            }
            5 => {
                self.out.push('[');
                for i in 0..self.rng.below(3) {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.ws();
                    self.junk(depth + 1);
                }
                self.out.push(']');
            }
            _ => {
                self.out.push('{');
                for i in 0..self.rng.below(3) {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let k = JUNK_KEYS[self.rng.below(JUNK_KEYS.len())];
                    self.string(k, 0);
                    self.out.push(':');
                    self.junk(depth + 1);
                }
                self.out.push('}');
            }
        }
    }

    fn value(&mut self, v: &Value) {
        self.ws();
        match v {
            Value::String(s) => self.string(s, self.escape),
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.ws();
                self.out.push(']');
            }
            Value::Object(map) => {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                // Shuffle, then add ignored members (sometimes the same key twice).
                for i in (1..members.len()).rev() {
                    members.swap(i, self.rng.below(i + 1));
                }
                self.out.push('{');
                let mut first = true;
                let junk = self.rng.below(3);
                for (k, v) in members {
                    for _ in 0..junk {
                        if !first {
                            self.out.push(',');
                        }
                        first = false;
                        self.ws();
                        let key = format!("junk{}", self.rng.below(2));
                        self.string(&key, 0);
                        self.out.push(':');
                        self.junk(0);
                    }
                    if !first {
                        self.out.push(',');
                    }
                    first = false;
                    self.ws();
                    // A key rarely escaped: the scanner then leaves it to serde_json.
                    let esc = usize::from(self.rng.below(20) == 0) * 16;
                    self.string(k, esc);
                    self.ws();
                    self.out.push(':');
                    self.value(v);
                }
                self.ws();
                self.out.push('}');
            }
            other => self.out.push_str(&other.to_string()),
        }
        self.ws();
    }
}

/// Sometimes swaps a known string for `null`, adds reasoning or an `error: null`.
fn vary(v: &mut Value, rng: &mut Rng) {
    if let Value::Object(map) = v {
        for (k, val) in map.iter_mut() {
            let known = matches!(k.as_str(), "content" | "text" | "reasoning_content");
            if known && rng.below(6) == 0 {
                *val = Value::Null;
            } else {
                vary(val, rng);
            }
        }
        if map.contains_key("content") && rng.below(4) == 0 {
            map.insert("reasoning".into(), "thinking \u{e9}\u{1F600}".into());
        }
        if map.contains_key("choices") && rng.below(8) == 0 {
            map.insert("error".into(), Value::Null);
        }
    } else if let Value::Array(items) = v {
        items.iter_mut().for_each(|i| vary(i, rng));
    }
}

/// Rewritten variants of every captured and simulated chunk.
pub fn variants(chunks: &[String], per_chunk: usize, rng: &mut Rng) -> Vec<String> {
    let mut out = Vec::new();
    for c in chunks {
        let v: Value = serde_json::from_str(c).unwrap();
        for _ in 0..per_chunk {
            let mut v = v.clone();
            vary(&mut v, rng);
            let escape = [0, 1, 8, 16][rng.below(4)];
            let mut w = Rewriter {
                rng,
                escape,
                out: String::new(),
            };
            w.value(&v);
            out.push(w.out);
        }
    }
    out
}
