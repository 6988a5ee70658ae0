//! Response bodies: pre-serialized SSE chunk templates and the non-streaming JSON.
//!
//! The chunk layout follows the real llama.cpp server captures in `shared/fixtures/`: key order
//! `choices, created, id, model, system_fingerprint, object`; chat content chunks carry
//! `delta.content` (or `delta.reasoning_content` for reasoning tokens), completion chunks carry
//! `choices[0].text`. As in vLLM, the finish chunk and the usage chunk (`choices: []`) are
//! separate. Each request builds its templates once; a token chunk is then three `memcpy`s.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::openai::Api;

/// The sim's output vocabulary: token *i* is `WORDS[i % WORDS.len()]`, one word with a leading
/// space, JSON-safe.
const WORDS: &[&str] = &[
    " the", " sea", " is", " a", " vast", " body", " of", " salt", " water", " that", " covers",
    " most", " earth", " and", " its", " tide",
];

pub(crate) fn word(i: u32) -> &'static str {
    WORDS[i as usize % WORDS.len()]
}

/// Token counts for the usage object.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub prompt: u32,
    pub completion: u32,
    pub cached: u32,
    pub reasoning: u32,
}

impl Usage {
    fn json(&self) -> serde_json::Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": u64::from(self.prompt) + u64::from(self.completion),
            "prompt_tokens_details": {"cached_tokens": self.cached},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning},
        })
    }
}

/// Per-request SSE templates.
pub(crate) struct Chunks {
    api: Api,
    /// `,"created":..,"id":..,"model":..,"system_fingerprint":..,"object":..` (no closing brace).
    tail: String,
}

impl Chunks {
    pub fn new(api: Api, id: &str, model: &str) -> Chunks {
        let object = match api {
            Api::Chat => "chat.completion.chunk",
            Api::Completions => "text_completion",
        };
        let tail = format!(
            r#","created":{},"id":{},"model":{},"system_fingerprint":"canary-sim","object":"{object}""#,
            unix_secs(),
            serde_json::Value::from(id),
            serde_json::Value::from(model),
        );
        Chunks { api, tail }
    }

    /// The chat role chunk (chat only).
    pub fn push_role(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(
            br#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]"#,
        );
        self.close(out);
    }

    /// One token chunk. `malformed` cuts the JSON short.
    pub fn push_token(&self, out: &mut Vec<u8>, i: u32, reasoning: bool, malformed: bool) {
        let w = word(i).as_bytes();
        match self.api {
            Api::Chat => {
                out.extend_from_slice(
                    br#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{""#,
                );
                out.extend_from_slice(if reasoning {
                    b"reasoning_content"
                } else {
                    b"content"
                });
                out.extend_from_slice(br#"":""#);
                out.extend_from_slice(w);
                if malformed {
                    return out.extend_from_slice(b"\n\n");
                }
                out.extend_from_slice(br#""}}]"#);
            }
            Api::Completions => {
                out.extend_from_slice(br#"data: {"choices":[{"text":""#);
                out.extend_from_slice(w);
                if malformed {
                    return out.extend_from_slice(b"\n\n");
                }
                out.extend_from_slice(br#"","index":0,"logprobs":null,"finish_reason":null}]"#);
            }
        }
        self.close(out);
    }

    /// The chunk with `finish_reason` (always `length`: the sim never stops early).
    pub fn push_finish(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.api {
            Api::Chat => br#"data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}]"#.as_slice(),
            Api::Completions => {
                br#"data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}]"#
            }
        });
        self.close(out);
    }

    /// The usage chunk (`choices: []`).
    pub fn push_usage(&self, out: &mut Vec<u8>, usage: &Usage) {
        out.extend_from_slice(br#"data: {"choices":[]"#);
        out.extend_from_slice(self.tail.as_bytes());
        out.extend_from_slice(br#","usage":"#);
        out.extend_from_slice(usage.json().to_string().as_bytes());
        out.extend_from_slice(b"}\n\n");
    }

    pub fn push_done(out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }

    fn close(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.tail.as_bytes());
        out.extend_from_slice(b"}\n\n");
    }
}

/// The non-streaming reply body.
pub(crate) fn full_body(api: Api, id: &str, model: &str, reasoning: u32, usage: &Usage) -> String {
    let text = |range: std::ops::Range<u32>| range.map(word).collect::<String>();
    let finish = "length";
    let v = match api {
        Api::Chat => {
            let mut message = json!({
                "role": "assistant",
                "content": text(reasoning..usage.completion),
            });
            if reasoning > 0 {
                message["reasoning_content"] = text(0..reasoning).into();
            }
            json!({
                "id": id, "object": "chat.completion", "created": unix_secs(), "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
                "usage": usage.json(),
            })
        }
        Api::Completions => json!({
            "id": id, "object": "text_completion", "created": unix_secs(), "model": model,
            "choices": [{"index": 0, "text": text(0..usage.completion), "logprobs": null, "finish_reason": finish}],
            "usage": usage.json(),
        }),
    };
    v.to_string()
}

/// An OpenAI-style error body.
pub(crate) fn error_body(status: u16, message: &str) -> String {
    let kind = match status {
        400 => "BadRequestError",
        404 => "NotFoundError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        s if s >= 500 => "InternalServerError",
        _ => "Error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": status}}).to_string()
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(buf: &[u8]) -> Vec<serde_json::Value> {
        std::str::from_utf8(buf)
            .unwrap()
            .split("\n\n")
            .filter(|s| !s.is_empty())
            .map(|s| serde_json::from_str(s.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn chat_chunks_are_valid_json() {
        let c = Chunks::new(Api::Chat, "chatcmpl-1", "m\"q");
        let mut out = Vec::new();
        c.push_role(&mut out);
        c.push_token(&mut out, 0, true, false);
        c.push_token(&mut out, 1, false, false);
        c.push_finish(&mut out);
        let u = Usage {
            prompt: 3,
            completion: 2,
            cached: 0,
            reasoning: 1,
        };
        c.push_usage(&mut out, &u);
        let ev = events(&out);
        assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(ev[1]["choices"][0]["delta"]["reasoning_content"], " the");
        assert_eq!(ev[2]["choices"][0]["delta"]["content"], " sea");
        assert_eq!(ev[2]["model"], "m\"q");
        assert_eq!(ev[3]["choices"][0]["finish_reason"], "length");
        assert_eq!(ev[4]["usage"]["total_tokens"], 5);
        assert_eq!(
            ev[4]["usage"]["completion_tokens_details"]["reasoning_tokens"],
            1
        );
        let mut bad = Vec::new();
        c.push_token(&mut bad, 0, false, true);
        let s = std::str::from_utf8(&bad).unwrap();
        assert!(s.starts_with("data: {") && s.ends_with("\n\n"));
        assert!(serde_json::from_str::<serde_json::Value>(&s[6..]).is_err());
    }

    #[test]
    fn completion_chunks_and_bodies() {
        let c = Chunks::new(Api::Completions, "cmpl-1", "m");
        let mut out = Vec::new();
        c.push_token(&mut out, 2, false, false);
        c.push_finish(&mut out);
        let ev = events(&out);
        assert_eq!(ev[0]["choices"][0]["text"], " is");
        assert_eq!(ev[0]["object"], "text_completion");
        let u = Usage {
            prompt: 1,
            completion: 3,
            cached: 0,
            reasoning: 2,
        };
        let chat: serde_json::Value =
            serde_json::from_str(&full_body(Api::Chat, "x", "m", 2, &u)).unwrap();
        assert_eq!(chat["choices"][0]["message"]["content"], " is");
        assert_eq!(
            chat["choices"][0]["message"]["reasoning_content"],
            " the sea"
        );
        let e: serde_json::Value = serde_json::from_str(&error_body(429, "slow down")).unwrap();
        assert_eq!(e["error"]["code"], 429);
        assert_eq!(e["error"]["type"], "RateLimitError");
    }
}
