//! canary-replay's integration tests: one binary, real simulator, real sockets.

mod connect;
mod hostile;
mod hostile_traces;
mod prompt;
mod replay_sim;
mod rx_stamps;
mod support;
mod tls;
mod trace_formats;
