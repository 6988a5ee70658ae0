//! canary-sim: a simulated OpenAI-compatible inference server.
