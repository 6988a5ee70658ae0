//! The `canaryd` binary: parse the command line, set up logging, run, pick an exit code.

use clap::Parser;
use std::io::Write;

fn main() {
    let cli = canaryd::Cli::parse();
    init_logging(cli.log_format);
    // Before any runtime or socket: a closed loop of 1,000 users needs more files than the
    // usual soft limit of 1024; the hard limit needs no privilege to reach.
    match canaryd::file_limit::raise() {
        canaryd::file_limit::Raised::From(from, to) => {
            tracing::debug!("open-file limit (RLIMIT_NOFILE) raised from {from} to {to}")
        }
        canaryd::file_limit::Raised::Refused(errno) => tracing::debug!(
            "open-file limit (RLIMIT_NOFILE) not raised: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
        canaryd::file_limit::Raised::AlreadyHigh => {}
    }
    // Before any thread starts (see the module for why and what it saves).
    match canaryd::malloc_arenas::cap() {
        canaryd::malloc_arenas::Capped::At(n) => tracing::debug!("malloc arenas capped at {n}"),
        canaryd::malloc_arenas::Capped::ByEnvironment => {
            tracing::debug!("malloc arenas as MALLOC_ARENA_MAX says")
        }
        canaryd::malloc_arenas::Capped::Not => tracing::debug!("malloc arenas not capped"),
    }
    match canaryd::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Not eprintln!: a closed stderr must not turn an error into a panic.
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::exit(1);
        }
    }
}

fn init_logging(format: canaryd::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A log line that cannot be written (stderr closed, as under `2>&1 | head -1`, or full)
    // is lost, not reported: the report would be tracing-subscriber's own `eprintln!` to that
    // same stderr, which panics and takes the run (and its artifacts) with it.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    // Under journald, timestamps are added by the journal: do not print them twice.
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    match (format, journald) {
        (canaryd::LogFormat::Json, _) => builder.json().init(),
        (_, true) => builder.without_time().with_ansi(false).init(),
        _ => builder.init(),
    }
}
