//! TEMPORARY stand-in until the prompt branch merges (replaced wholesale).
#![allow(missing_docs)]
use canary_core::TraceRequest;
pub enum PromptBody {
    Text(String),
    Messages(serde_json::Value),
}
pub struct Prompt {
    pub body: PromptBody,
    pub tokens: Option<u32>,
}
pub struct PromptBuilder;
impl PromptBuilder {
    pub fn build(&self, req: &TraceRequest) -> Prompt {
        let words: Vec<String> = (0..req.input_tokens).map(|i| format!("w{i}")).collect();
        Prompt {
            body: PromptBody::Text(words.join(" ")),
            tokens: Some(req.input_tokens),
        }
    }
}
