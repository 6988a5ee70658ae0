//! canary-replay: replays a production trace against an OpenAI-compatible server.
#![deny(missing_docs)]
