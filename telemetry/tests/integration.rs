//! The one integration-test binary of canary-telemetry: real captures, fuzzing, the fake NVML
//! library and the scrapers against a loopback HTTP(S) server.

#[macro_use]
mod macros;

mod dcgm;
mod engine_detection;
mod engines;
mod fixtures;
mod fuzz;
mod gpu_sources;
mod growth;
mod hostile_metrics;
mod models;
mod nvml;
mod scrape_order;
mod scraper;
mod tls;
