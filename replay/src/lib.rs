//! canary-replay: replays a production trace against an OpenAI-compatible server.
#![deny(missing_docs)]

mod prompt;
pub use prompt::{
    Prompt, PromptBody, PromptBuilder, PromptError, TokenCheck, Tokenizer, TokenizerSpec,
};
