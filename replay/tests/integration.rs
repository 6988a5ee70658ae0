//! canary-replay's integration tests: one binary, real simulator, real sockets.

mod chunk_scan;
mod compact_rows;
mod connect;
mod fuzz;
mod hostile;
mod hostile_http;
mod hostile_traces;
mod latency_truth;
mod mtls;
mod plain_words;
mod prompt;
mod release;
mod replay_sim;
mod rx_stamps;
mod shapes;
mod support;
mod synthesize;
mod tls;
mod trace_audit;
mod trace_formats;
