//! A request's JSON body, written straight into the bytes sent (issue 21).
//!
//! It used to be built as a `serde_json::Value` (a map of owned keys, the prompt copied into
//! it) and then serialized: two copies of the prompt and a tree of small allocations per
//! request, all thrown away. The fields are few and known, so they are written in place, in
//! the order and with the escaping `serde_json` gave them (its map sorts keys; a later field
//! of the same name replaces an earlier one), so servers see the same bytes as before.

use crate::prompt::PromptBody;
use crate::target::{Endpoint, MaxTokensField, Target};
use serde_json::Value;

/// One top-level field's value.
enum Field<'a> {
    Str(&'a str),
    Text(String),
    Uint(u32),
    Bool(bool),
    Json(&'a Value),
    /// `[{"content": TEXT, "role": "user"}]`: one user message.
    UserMessage(&'a str),
    /// `{"include_usage": true}`.
    IncludeUsage,
}

impl Target {
    /// The JSON body for one request, as bytes: `model`, the prompt (`messages` or
    /// `prompt`), the output length, `stream` (and `stream_options` when streaming), then
    /// `--extra-inputs` and the row's own `extra`, a later field replacing an earlier one.
    pub fn body(
        &self,
        prompt: &PromptBody,
        output_tokens: u32,
        row_extra: Option<&Value>,
    ) -> Vec<u8> {
        let row_extra = match row_extra {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        let extras = self.extra_inputs.len() + row_extra.map_or(0, |m| m.len());
        let mut fields: Vec<(&str, Field)> = Vec::with_capacity(7 + extras);
        fields.push(("model", Field::Str(&self.model)));
        let mut room = 0;
        match (self.endpoint, prompt) {
            (Endpoint::Chat, PromptBody::Text(t)) => {
                room = t.len();
                fields.push(("messages", Field::UserMessage(t)));
            }
            (Endpoint::Chat, PromptBody::Messages(m)) => fields.push(("messages", Field::Json(m))),
            (Endpoint::Completions, PromptBody::Text(t)) => {
                room = t.len();
                fields.push(("prompt", Field::Str(t)));
            }
            (Endpoint::Completions, PromptBody::Messages(m)) => {
                // A completions endpoint takes text: join the message contents.
                let text: Vec<&str> = m
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|msg| msg.get("content").and_then(Value::as_str))
                    .collect();
                let text = text.join("\n");
                room = text.len();
                fields.push(("prompt", Field::Text(text)));
            }
        }
        // A zero length (BurstGPT failures replayed with `--burstgpt-failed send`) cannot be
        // asked for: leave the length to the server.
        let field = if output_tokens == 0 {
            MaxTokensField::None
        } else {
            self.max_tokens_field
        };
        if matches!(field, MaxTokensField::Both | MaxTokensField::MaxTokens) {
            fields.push(("max_tokens", Field::Uint(output_tokens)));
        }
        if matches!(
            field,
            MaxTokensField::Both | MaxTokensField::MaxCompletionTokens
        ) {
            fields.push(("max_completion_tokens", Field::Uint(output_tokens)));
        }
        fields.push(("stream", Field::Bool(self.streaming)));
        if self.streaming {
            fields.push(("stream_options", Field::IncludeUsage));
        }
        for (k, v) in self
            .extra_inputs
            .iter()
            .chain(row_extra.into_iter().flatten())
        {
            fields.push((k, Field::Json(v)));
        }
        // Stable: among fields of one name the last pushed stays last, and only it is written.
        fields.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = Vec::with_capacity(room + 256);
        out.push(b'{');
        for (i, (key, value)) in fields.iter().enumerate() {
            if fields.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if out.len() > 1 {
                out.push(b',');
            }
            string(&mut out, key);
            out.push(b':');
            value.write(&mut out);
        }
        out.push(b'}');
        out
    }
}

impl Field<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Field::Str(s) => string(out, s),
            Field::Text(s) => string(out, s),
            Field::Uint(n) => json(out, n),
            Field::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Field::Json(v) => json(out, v),
            Field::UserMessage(t) => {
                out.extend_from_slice(br#"[{"content":"#);
                string(out, t);
                out.extend_from_slice(br#","role":"user"}]"#);
            }
            Field::IncludeUsage => out.extend_from_slice(br#"{"include_usage":true}"#),
        }
    }
}

/// `s` as a JSON string, escaped as `serde_json` escapes it.
fn string(out: &mut Vec<u8>, s: &str) {
    json(out, s)
}

fn json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Writing into a Vec cannot fail, and a str or a Value always serializes.
    serde_json::to_writer(out, v).expect("a string or a JSON value always serializes");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    /// How the body was built before: a `serde_json::Value`, then serialized. The bytes
    /// written now must equal these, field order and escaping included.
    fn as_before(
        t: &Target,
        prompt: &PromptBody,
        output_tokens: u32,
        extra: Option<&Value>,
    ) -> Vec<u8> {
        let mut body = Map::new();
        body.insert("model".into(), json!(t.model));
        match (t.endpoint, prompt) {
            (Endpoint::Chat, PromptBody::Text(s)) => {
                body.insert("messages".into(), json!([{ "role": "user", "content": s }]));
            }
            (Endpoint::Chat, PromptBody::Messages(m)) => {
                body.insert("messages".into(), m.clone());
            }
            (Endpoint::Completions, PromptBody::Text(s)) => {
                body.insert("prompt".into(), json!(s));
            }
            (Endpoint::Completions, PromptBody::Messages(m)) => {
                let text: Vec<&str> = m
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|msg| msg.get("content").and_then(Value::as_str))
                    .collect();
                body.insert("prompt".into(), json!(text.join("\n")));
            }
        }
        let field = if output_tokens == 0 {
            MaxTokensField::None
        } else {
            t.max_tokens_field
        };
        match field {
            MaxTokensField::Both => {
                body.insert("max_tokens".into(), json!(output_tokens));
                body.insert("max_completion_tokens".into(), json!(output_tokens));
            }
            MaxTokensField::MaxTokens => {
                body.insert("max_tokens".into(), json!(output_tokens));
            }
            MaxTokensField::MaxCompletionTokens => {
                body.insert("max_completion_tokens".into(), json!(output_tokens));
            }
            MaxTokensField::None => {}
        }
        body.insert("stream".into(), json!(t.streaming));
        if t.streaming {
            body.insert("stream_options".into(), json!({ "include_usage": true }));
        }
        for (k, v) in &t.extra_inputs {
            body.insert(k.clone(), v.clone());
        }
        if let Some(Value::Object(extra)) = extra {
            for (k, v) in extra {
                body.insert(k.clone(), v.clone());
            }
        }
        serde_json::to_vec(&Value::Object(body)).unwrap()
    }

    #[test]
    fn the_bytes_equal_what_serde_json_wrote_from_a_value() {
        let texts = [
            String::new(),
            "hi there".to_string(),
            "quotes \" and \\ back\nslash\t\u{1}\u{1f} é 漢字 🦀 </script>".to_string(),
            "word ".repeat(3000),
        ];
        let messages = json!([
            {"role": "system", "content": "be \"brief\""},
            {"role": "user", "content": "hello\nthere", "name": "x"},
            {"role": "assistant", "content": null},
        ]);
        let extras: [Option<Value>; 5] = [
            None,
            Some(json!("not an object")),
            Some(json!({"temperature": 0.0, "a_first": [1, 2], "zz_last": {"k": "v"}})),
            // A row may repeat an --extra-inputs key: the row's value wins.
            Some(json!({"ignore_eos": false, "top_p": 0.5})),
            // Or, unvalidated, one canaryd sets: it replaced it before, so it does now.
            Some(json!({"stream": "row", "model": "other", "max_tokens": 1})),
        ];
        let mut compared = 0;
        for endpoint in [Endpoint::Chat, Endpoint::Completions] {
            for field in [
                MaxTokensField::Both,
                MaxTokensField::MaxTokens,
                MaxTokensField::MaxCompletionTokens,
                MaxTokensField::None,
            ] {
                for streaming in [true, false] {
                    for inputs in [Map::new(), {
                        let mut m = Map::new();
                        m.insert("ignore_eos".into(), json!(true));
                        m.insert("min_tokens".into(), json!(8));
                        m.insert("\"odd\nkey".into(), json!("v"));
                        m
                    }] {
                        let mut t = Target::new("http://h:1", endpoint, "m\"odel").unwrap();
                        t.max_tokens_field = field;
                        t.streaming = streaming;
                        t.extra_inputs = inputs;
                        let prompts = texts
                            .iter()
                            .map(|s| PromptBody::Text(s.clone()))
                            .chain([PromptBody::Messages(messages.clone())]);
                        for prompt in prompts {
                            for n in [0, 7, u32::MAX] {
                                for extra in &extras {
                                    let now = t.body(&prompt, n, extra.as_ref());
                                    let before = as_before(&t, &prompt, n, extra.as_ref());
                                    assert_eq!(
                                        String::from_utf8_lossy(&now),
                                        String::from_utf8_lossy(&before),
                                        "{endpoint:?} {field:?} streaming {streaming} n {n}"
                                    );
                                    compared += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 2 * 4 * 2 * 2 * 5 * 3 * 5);
    }
}
