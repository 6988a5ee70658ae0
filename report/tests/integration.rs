//! `canaryd report` end to end on folders written here: what a page says of an experiment, a
//! sweep, a series, a merged run and the bounds in a run's latencies. Each test goes through
//! the command's own entry point ([`canary_report::cli::report`]), so it reads the folders as
//! `canaryd report` does.

#[path = "integration/fixtures.rs"]
mod fixtures;
#[path = "integration/pages.rs"]
mod pages;
#[path = "integration/run_page.rs"]
mod run_page;
