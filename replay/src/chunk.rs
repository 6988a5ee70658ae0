//! What one OpenAI-compatible response chunk says, in the parts timing cares about.
//!
//! Works for `chat.completion.chunk` (`delta.content`, `delta.reasoning_content` or
//! `delta.reasoning`), `text_completion` (`text`), final usage chunks, llama.cpp's `timings`,
//! in-stream error objects, a `finish_reason` that says the generation failed, and
//! non-streaming response bodies (`message.content`).
//!
//! Two readers give the same answer: [`scan`], which walks past the fields canaryd ignores
//! without building anything and answers only when sure, and serde_json ([`parse_serde`]),
//! which decides everything else, errors included. [`parse`] tries the first, then the second.

use crate::secrets::Secrets;
use canary_core::{ServerTimings, Usage};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

mod scan;

pub use scan::scan;

/// The timing-relevant content of one chunk.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ChunkInfo {
    /// Bytes of output (non-reasoning) text in this chunk.
    pub content_bytes: usize,
    /// Bytes of reasoning text in this chunk.
    pub reasoning_bytes: usize,
    /// Usage, if this chunk carries it.
    pub usage: Option<Usage>,
    /// llama.cpp-style timings, if present.
    pub timings: Option<ServerTimings>,
    /// An error object's message, if the server reported one in the stream.
    pub error: Option<String>,
    /// A choice's `finish_reason` that is one of `FAILED_FINISHES`: the server gave up on
    /// the generation (vLLM's and SGLang's `abort`, vLLM's `error`). At most
    /// `FINISH_REASON_LIMIT` bytes; the first such choice's.
    pub failed_finish: Option<String>,
}

impl ChunkInfo {
    /// True when the chunk carries at least one token (output or reasoning).
    pub fn has_token(&self) -> bool {
        self.content_bytes > 0 || self.reasoning_bytes > 0
    }
}

/// The `finish_reason`s that say the server gave up on the generation (any case): vLLM's and
/// SGLang's `abort`, vLLM's `error`, a cancellation the client did not ask for, DeepSeek's
/// `insufficient_system_resource`. Any other value is a generation that ended as its server
/// meant (OpenAI's `stop`, `length`, …; TGI's `eos_token`; Together's `eos`; Mistral's
/// `model_length`; the `""` some servers send on every chunk): an allow-list failed those.
pub const FAILED_FINISHES: [&str; 6] = [
    "abort",
    "aborted",
    "error",
    "cancelled",
    "canceled",
    "insufficient_system_resource",
];

/// True when `reason` is one of [`FAILED_FINISHES`].
pub fn is_failed_finish(reason: &[u8]) -> bool {
    FAILED_FINISHES
        .iter()
        .any(|f| f.as_bytes().eq_ignore_ascii_case(reason))
}

/// The longest [`ChunkInfo::failed_finish`] kept, bytes.
pub const FINISH_REASON_LIMIT: usize = 100;

/// The longest error message kept from a server (as of an error status's body): a server's
/// text goes into every record of the run, so it may not be as long as a response.
pub const MESSAGE_LIMIT: usize = 4096;

/// What serde_json reads of a chunk. Nothing in it grows faster than the chunk's own bytes:
/// the choices are summed as they are read and the error is borrowed as its JSON text (a
/// `Vec` of choices held about 88 MB of heap for a 1 MiB `[{},{},…]`, by a counting
/// allocator, and a `serde_json::Value` of the error grew alike).
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(default, deserialize_with = "text_bytes")]
    choices: TextBytes,
    #[serde(default)]
    usage: Option<RawUsage>,
    #[serde(default)]
    timings: Option<RawTimings>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// Bytes of output and of reasoning text over all choices, and the first failed finish.
#[derive(Default)]
struct TextBytes {
    content: usize,
    reasoning: usize,
    failed_finish: Option<String>,
}

/// Reads `choices`, adding up each choice's text as it goes, keeping none of them.
fn text_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<TextBytes, D::Error> {
    struct Choices;
    impl<'de> Visitor<'de> for Choices {
        type Value = TextBytes;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            // What serde says of a `Vec`, so the errors read as they did.
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextBytes, A::Error> {
            let mut t = TextBytes::default();
            while let Some(choice) = seq.next_element::<RawChoice<'de>>()? {
                t.content += len(&choice.text);
                for d in [&choice.delta, &choice.message].into_iter().flatten() {
                    t.content += len(&d.content);
                    t.reasoning += len(&d.reasoning_content) + len(&d.reasoning);
                }
                if t.failed_finish.is_none() {
                    t.failed_finish = choice.finish_reason.and_then(failed_finish);
                }
            }
            Ok(t)
        }
    }
    d.deserialize_seq(Choices)
}

#[derive(Deserialize)]
struct RawChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<RawDelta<'a>>,
    #[serde(default, borrow)]
    message: Option<RawDelta<'a>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    /// Any JSON: a value that is not a string is no verdict, and no reason to refuse the chunk.
    #[serde(default, borrow)]
    finish_reason: Option<&'a RawValue>,
}

/// A `finish_reason` that is a string and one of [`FAILED_FINISHES`], cut to
/// [`FINISH_REASON_LIMIT`].
fn failed_finish(raw: &RawValue) -> Option<String> {
    let reason = serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()?;
    if !is_failed_finish(reason.as_bytes()) {
        return None;
    }
    Some(canary_core::prefix_within(&reason, FINISH_REASON_LIMIT).to_string())
}

#[derive(Deserialize)]
struct RawDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawUsage {
    prompt_tokens: Option<u32>,
    completion_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_details: Option<RawPromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<RawCompletionDetails>,
}

#[derive(Deserialize)]
struct RawPromptDetails {
    cached_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct RawCompletionDetails {
    reasoning_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct RawTimings {
    prompt_ms: Option<f64>,
    predicted_ms: Option<f64>,
    prompt_n: Option<u32>,
    predicted_n: Option<u32>,
    cache_n: Option<u32>,
}

fn len(s: &Option<Cow<'_, str>>) -> usize {
    s.as_ref().map_or(0, |s| s.len())
}

/// Parses one chunk's JSON. `Err` means the chunk is not JSON of a recognisable shape.
///
/// The scanner's answer when it has one, else serde_json's: the same `ChunkInfo` for every
/// input, and serde_json's error for every input that has one.
pub fn parse(data: &str) -> Result<ChunkInfo, serde_json::Error> {
    match scan(data) {
        Some(info) => Ok(info),
        None => parse_serde(data),
    }
}

/// serde_json's complaint about a chunk or body, kept short: its text quotes the value it
/// met whole (a string of a megabyte where a number was due), and a record's message must
/// not be as long as a response. Cut, it still says where. The value is the server's: it
/// comes without `secrets`, scrubbed before the cut and the words after it (a key the cut
/// fell inside would otherwise leak all but its last bytes).
pub fn reason(e: &serde_json::Error, secrets: &Secrets) -> String {
    let full = e.to_string();
    if full.len() <= REASON_LIMIT {
        return secrets.clean(&full).into_owned();
    }
    format!(
        "{}… at line {} column {}",
        secrets.cut(&full, REASON_LIMIT),
        e.line(),
        e.column()
    )
}

/// The longest [`reason`], bytes.
const REASON_LIMIT: usize = 200;

/// [`parse`] by serde_json alone: the reference the scanner is tested against, and what
/// decides every chunk the scanner gives up on.
pub fn parse_serde(data: &str) -> Result<ChunkInfo, serde_json::Error> {
    let raw: Raw<'_> = serde_json::from_str(data)?;
    let mut info = ChunkInfo {
        content_bytes: raw.choices.content,
        reasoning_bytes: raw.choices.reasoning,
        failed_finish: raw.choices.failed_finish,
        ..ChunkInfo::default()
    };
    info.usage = raw.usage.map(|u| Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
        cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
    });
    info.timings = raw.timings.map(|t| ServerTimings {
        prompt_ms: t.prompt_ms,
        predicted_ms: t.predicted_ms,
        prompt_n: t.prompt_n,
        predicted_n: t.predicted_n,
        cache_n: t.cache_n,
    });
    info.error = raw.error.map(error_message);
    Ok(info)
}

/// The message of an OpenAI-style error (`{"message":..}` or a bare string), else the
/// error's JSON text; at most [`MESSAGE_LIMIT`] bytes.
fn error_message(e: &RawValue) -> String {
    #[derive(Deserialize)]
    struct Object<'a> {
        #[serde(borrow)]
        message: Option<&'a RawValue>,
    }
    let text = e.get();
    let string = |raw: &str| serde_json::from_str::<Cow<'_, str>>(raw).ok();
    let message = if text.starts_with('{') {
        serde_json::from_str::<Object<'_>>(text)
            .ok()
            .and_then(|o| o.message)
            .and_then(|m| string(m.get()))
    } else {
        string(text)
    };
    canary_core::prefix_within(message.as_deref().unwrap_or(text), MESSAGE_LIMIT).to_string()
}

/// The error message in an error status's body (`{"error": …}`), if it has one.
pub fn error_in_body(body: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        error: Option<&'a RawValue>,
    }
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let body: Body<'_> = serde_json::from_str(body).ok()?;
    body.error.map(error_message)
}

/// The message of an SSE `event: error`, whatever its data's shape: its `error`'s (as in an
/// error status's body), else its own `message`, else its JSON or plain text; at most
/// [`MESSAGE_LIMIT`] bytes.
pub fn error_event_message(data: &str) -> String {
    if let Some(m) = error_in_body(data) {
        return m;
    }
    let text = data.trim();
    if text.is_empty() {
        return "an error event without data".to_string();
    }
    match serde_json::from_str::<&RawValue>(text) {
        Ok(raw) => error_message(raw),
        Err(_) => canary_core::prefix_within(text, MESSAGE_LIMIT).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../../shared/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn data_lines(sse: &str) -> Vec<&str> {
        sse.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .collect()
    }

    #[test]
    fn a_complaint_quoting_a_huge_value_is_kept_short() {
        let chunk = format!(r#"{{"choices":"{}"}}"#, "A".repeat(1 << 20));
        let e = parse(&chunk).unwrap_err();
        let why = reason(&e, &Secrets::default());
        assert!(why.len() < 300, "{} bytes", why.len());
        assert!(why.starts_with("invalid type: string"), "{why}");
        assert!(
            why.ends_with(&format!("… at line 1 column {}", e.column())),
            "{why}"
        );
        let small = parse(r#"{"choices":7}"#).unwrap_err();
        assert_eq!(reason(&small, &Secrets::default()), small.to_string());
    }

    #[test]
    fn an_error_is_its_message_else_its_json_text_never_over_4_kib() {
        let msg = |data: &str| parse_serde(data).unwrap().error;
        let m = msg(r#"{"error":{"message":"bo\"om","code":5}}"#);
        assert_eq!(m.as_deref(), Some("bo\"om"));
        assert_eq!(msg(r#"{"error":"plain"}"#).as_deref(), Some("plain"));
        let no_message = r#"{"code":500, "type":"x"}"#;
        let m = msg(&format!(r#"{{"error":{no_message}}}"#));
        assert_eq!(m.as_deref(), Some(no_message));
        let m = msg(r#"{"error":{"message":7}}"#);
        assert_eq!(m.as_deref(), Some(r#"{"message":7}"#));
        assert_eq!(msg(r#"{"error":null}"#), None);
        // Cut at a character's start: "é" is two bytes.
        let long = "é".repeat(3000);
        let m = msg(&format!(r#"{{"error":"{long}"}}"#)).unwrap();
        assert_eq!(m.len(), MESSAGE_LIMIT);
        assert!(long.starts_with(&m));
        let m = msg(&format!(r#"{{"error":"x{long}"}}"#)).unwrap();
        assert_eq!(m.len(), MESSAGE_LIMIT - 1);
        // An error status's body.
        let m = error_in_body(r#" {"error":{"message":"nope"},"x":1}"#);
        assert_eq!(m.as_deref(), Some("nope"));
        assert_eq!(error_in_body(r#"["error"]"#), None);
        assert_eq!(error_in_body("Bad Gateway"), None);
    }

    #[test]
    fn a_finish_reason_off_the_list_is_a_failed_finish_and_kept_short() {
        let finish = |r: &str| {
            let chunk =
                format!(r#"{{"choices":[{{"delta":{{"content":"x"}},"finish_reason":{r}}}]}}"#);
            let info = parse(&chunk).unwrap();
            assert_eq!(info.content_bytes, 1, "{chunk}");
            info.failed_finish
        };
        // Every way a generation ends as its server meant, as real servers write it.
        for ok in [
            "stop",
            "length",
            "tool_calls",
            "function_call",
            "content_filter",
            "eos_token",
            "stop_sequence",
            "eos",
            "model_length",
            "",
            "STOP",
        ] {
            assert_eq!(finish(&format!(r#""{ok}""#)), None, "{ok}");
        }
        assert_eq!(finish("null"), None);
        assert_eq!(
            finish(r#"{"type":"abort"}"#),
            None,
            "not a string: no verdict"
        );
        assert_eq!(finish(r#""st\u006fp""#), None, "decoded");
        assert_eq!(finish(r#""abort""#).as_deref(), Some("abort"));
        assert_eq!(finish(r#""error""#).as_deref(), Some("error"));
        assert_eq!(finish(r#""Abort""#).as_deref(), Some("Abort"));
        assert_eq!(
            finish(r#""insufficient_system_resource""#).as_deref(),
            Some("insufficient_system_resource")
        );
        // Completions, non-streaming bodies, and the first failed choice of several.
        let i = parse(
            r#"{"choices":[{"text":"a","finish_reason":"stop"},{"text":"b","finish_reason":"abort"},
                {"text":"","finish_reason":"error"}]}"#,
        )
        .unwrap();
        assert_eq!(
            (i.content_bytes, i.failed_finish.as_deref()),
            (2, Some("abort"))
        );
        let i = parse(r#"{"choices":[{"message":{"content":"xy"},"finish_reason":"abort"}]}"#);
        assert_eq!(i.unwrap().failed_finish.as_deref(), Some("abort"));
    }

    #[test]
    fn an_error_event_says_its_message_whatever_its_shape() {
        for (data, message) in [
            (r#"{"error":{"message":"busy","code":503}}"#, "busy"),
            (
                r#"{"message":"engine overloaded","code":503}"#,
                "engine overloaded",
            ),
            (r#""plain""#, "plain"),
            (r#"{"code":503}"#, r#"{"code":503}"#),
            ("overloaded, try later", "overloaded, try later"),
            ("  ", "an error event without data"),
        ] {
            assert_eq!(error_event_message(data), message, "{data}");
        }
        assert_eq!(
            error_event_message(&"x".repeat(10_000)).len(),
            MESSAGE_LIMIT
        );
    }

    #[test]
    fn llamacpp_chat_stream_counts_tokens_usage_and_timings() {
        let sse = fixture("llamacpp_server_chat_stream.sse");
        let infos: Vec<_> = data_lines(&sse).iter().map(|d| parse(d).unwrap()).collect();
        assert!(!infos[0].has_token(), "role chunk carries no token");
        let tokens = infos.iter().filter(|i| i.has_token()).count();
        let last = infos.last().unwrap();
        let usage = last.usage.as_ref().unwrap();
        // llama.cpp counts the end-of-generation token, which carries no text: one more
        // token than text chunks. Hence OSL comes from usage whenever the server reports it.
        assert_eq!(usage.completion_tokens, Some(tokens as u32 + 1));
        assert_eq!(usage.cached_tokens, Some(0));
        let t = last.timings.as_ref().unwrap();
        assert_eq!(t.prompt_n, usage.prompt_tokens);
        assert!(t.prompt_ms.unwrap() > 0.0);
    }

    #[test]
    fn completions_stream_uses_text() {
        for name in [
            "llamacpp_server_completions_stream.sse",
            "llama_cpp_python_completions_stream.sse",
        ] {
            let sse = fixture(name);
            let tokens = data_lines(&sse)
                .iter()
                .filter(|d| parse(d).unwrap().has_token())
                .count();
            assert!(tokens > 10, "{name}: {tokens}");
        }
    }

    #[test]
    fn non_streaming_body_has_content_and_usage() {
        let info = parse(&fixture("llama_cpp_python_chat_nonstream.json")).unwrap();
        assert!(info.content_bytes > 0);
        assert!(info.usage.unwrap().completion_tokens.unwrap() > 0);
    }

    #[test]
    fn reasoning_and_errors() {
        let r = parse(r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#).unwrap();
        assert_eq!((r.reasoning_bytes, r.content_bytes), (3, 0));
        let r = parse(r#"{"choices":[{"delta":{"reasoning":"hm","content":""}}]}"#).unwrap();
        assert_eq!(r.reasoning_bytes, 2);
        let e = parse(r#"{"error":{"message":"boom","type":"server_error"}}"#).unwrap();
        assert_eq!(e.error.as_deref(), Some("boom"));
        assert!(parse("{not json").is_err());
        let u = parse(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":1}}}"#).unwrap();
        assert_eq!(u.usage.unwrap().reasoning_tokens, Some(1));
    }
}
