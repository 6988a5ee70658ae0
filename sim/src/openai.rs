//! OpenAI-compatible request bodies, reduced to what the sim needs.

use serde::Deserialize;

use crate::prompt::{PromptTokens, Tokenizer};

/// Which API a generation request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Chat,
    Completions,
}

/// A generation request, validated.
#[derive(Debug, Clone)]
pub(crate) struct GenRequest {
    pub stream: bool,
    pub include_usage: bool,
    /// `max_completion_tokens`, else `max_tokens`, else `None` (profile default).
    pub max_tokens: Option<u32>,
    pub prompt: PromptTokens,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct Common {
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    /// Accepted and ignored: the sim never stops before the length limit anyway.
    #[serde(default)]
    #[allow(dead_code)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    n: Option<u32>,
    /// Refused unless empty: the sim's output is a fixed text that never stops before the
    /// length limit, and ignoring them would give longer outputs than vLLM would.
    #[serde(default)]
    stop: Option<serde_json::Value>,
    #[serde(default)]
    stop_token_ids: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChatBody {
    messages: Vec<Message>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct CompletionBody {
    prompt: Prompt,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Ids(Vec<u64>),
    Texts(Vec<String>),
    IdLists(Vec<Vec<u64>>),
}

impl GenRequest {
    /// Parses a body; the error text is for a 400 reply.
    pub fn parse(api: Api, body: &[u8], block_size: u32) -> Result<GenRequest, String> {
        let mut tok = Tokenizer::new(block_size);
        let common = match api {
            Api::Chat => {
                let b: ChatBody = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                for m in &b.messages {
                    match &m.content {
                        Some(Content::Text(t)) => tok.push_text(t),
                        Some(Content::Parts(parts)) => {
                            for t in parts.iter().filter_map(|p| p.text.as_deref()) {
                                tok.push_text(t);
                            }
                        }
                        None => {}
                    }
                }
                b.common
            }
            Api::Completions => {
                let b: CompletionBody = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                match &b.prompt {
                    Prompt::Text(t) => tok.push_text(t),
                    Prompt::Ids(ids) => ids.iter().for_each(|&i| tok.push_id(i)),
                    Prompt::Texts(v) if v.len() == 1 => tok.push_text(&v[0]),
                    Prompt::IdLists(v) if v.len() == 1 => v[0].iter().for_each(|&i| tok.push_id(i)),
                    _ => return Err("batched prompts are not supported by canary-sim".into()),
                }
                let empty = match &b.prompt {
                    Prompt::Text(t) => t.is_empty(),
                    Prompt::Ids(ids) => ids.is_empty(),
                    Prompt::Texts(v) => v[0].is_empty(),
                    Prompt::IdLists(v) => v[0].is_empty(),
                };
                if empty {
                    // vLLM's words: a real engine has no prefill of nothing.
                    return Err("The decoder prompt cannot be empty".into());
                }
                b.common
            }
        };
        for (field, v) in [
            ("stop", &common.stop),
            ("stop_token_ids", &common.stop_token_ids),
        ] {
            let empty = match v {
                None | Some(serde_json::Value::Null) => true,
                Some(serde_json::Value::String(s)) => s.is_empty(),
                Some(serde_json::Value::Array(a)) => a.is_empty(),
                Some(_) => false,
            };
            if !empty {
                return Err(format!(
                    "{field} is not supported by canary-sim: its output is a fixed text that \
                     always runs to max_tokens (finish_reason \"length\"); leave {field} out"
                ));
            }
        }
        if common.n.unwrap_or(1) != 1 {
            return Err("n != 1 is not supported by canary-sim".into());
        }
        let max_tokens = common.max_completion_tokens.or(common.max_tokens);
        if max_tokens == Some(0) {
            return Err("max_tokens must be at least 1".into());
        }
        let stream = common.stream.unwrap_or(false);
        if common.stream_options.is_some() && !stream {
            // vLLM's own words (its request validation).
            return Err("Stream options can only be defined when `stream=True`.".into());
        }
        Ok(GenRequest {
            stream,
            include_usage: stream
                && common
                    .stream_options
                    .and_then(|o| o.include_usage)
                    .unwrap_or(false),
            max_tokens,
            prompt: tok.finish(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_prompt_and_limits() {
        let body = br#"{"model":"x","messages":[{"role":"system","content":"a b"},
            {"role":"user","content":[{"type":"text","text":"c d e"},{"type":"image_url","image_url":{}}]}],
            "max_tokens":5,"max_completion_tokens":7,"stream":true,
            "stream_options":{"include_usage":true},"ignore_eos":true}"#;
        let r = GenRequest::parse(Api::Chat, body, 2).unwrap();
        assert_eq!(r.prompt.count, 5);
        assert_eq!(r.prompt.block_hashes.len(), 2);
        assert_eq!(r.max_tokens, Some(7), "max_completion_tokens wins");
        assert!(r.stream && r.include_usage);
        let r = GenRequest::parse(Api::Chat, br#"{"messages":[],"max_tokens":3}"#, 2).unwrap();
        assert_eq!(
            (r.max_tokens, r.stream, r.include_usage),
            (Some(3), false, false)
        );
    }

    #[test]
    fn completion_prompts() {
        let p = |b: &str| GenRequest::parse(Api::Completions, b.as_bytes(), 4);
        assert_eq!(p(r#"{"prompt":"a b c"}"#).unwrap().prompt.count, 3);
        assert_eq!(p(r#"{"prompt":["a b"]}"#).unwrap().prompt.count, 2);
        assert_eq!(p(r#"{"prompt":[1,2,3,4,5]}"#).unwrap().prompt.count, 5);
        assert_eq!(p(r#"{"prompt":[[1,2]]}"#).unwrap().prompt.count, 2);
        assert!(p(r#"{"prompt":["a","b"]}"#).is_err());
        assert!(p(r#"{"prompt":"a","n":2}"#).is_err());
        assert!(p(r#"{"prompt":"a","max_tokens":0}"#).is_err());
        assert!(p(r#"{"prompt":"a","max_tokens":-1}"#).is_err());
        assert!(p(r#"{"nope":1}"#).is_err());
        // Before, both were served (an empty prompt as 0 prompt tokens), unlike vLLM.
        for empty in [r#""""#, "[]", r#"[""]"#, "[[]]"] {
            let e = p(&format!(r#"{{"prompt":{empty}}}"#)).unwrap_err();
            assert_eq!(e, "The decoder prompt cannot be empty", "{empty}");
        }
        let e = p(r#"{"prompt":"a","stream_options":{"include_usage":true}}"#).unwrap_err();
        assert!(e.starts_with("Stream options can only"), "{e}");
        let e = p(r#"{"prompt":"a","stream":false,"stream_options":{}}"#).unwrap_err();
        assert!(e.starts_with("Stream options can only"), "{e}");
        assert!(p(r#"{"prompt":"a","stream":true,"stream_options":{}}"#).is_ok());
        assert!(p(r#"{"prompt":"a","stream_options":null}"#).is_ok());
        // Before, stop strings were ignored and the output ran to max_tokens.
        for stop in [r#""sea""#, r#"["sea"]"#] {
            let e = p(&format!(r#"{{"prompt":"a","stop":{stop}}}"#)).unwrap_err();
            assert!(e.starts_with("stop is not supported"), "{e}");
        }
        let e = p(r#"{"prompt":"a","stop_token_ids":[2]}"#).unwrap_err();
        assert!(e.starts_with("stop_token_ids is not"), "{e}");
        for none in ["null", "[]", r#""""#] {
            let b = format!(r#"{{"prompt":"a","stop":{none},"stop_token_ids":{none}}}"#);
            assert!(p(&b).is_ok(), "{b}");
        }
        assert!(p("{").is_err());
    }
}
