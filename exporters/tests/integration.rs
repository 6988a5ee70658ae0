//! canary-exporters against real peers: `canary-sim` as the inference server, a real
//! OTLP/HTTP receiver decoding what arrives.

mod export;
mod receiver;
mod tls;
