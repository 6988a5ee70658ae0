//! The `canaryd` binary: parse the command line, set up logging, run, pick an exit code.

use clap::Parser;
use std::io::Write;

fn main() {
    let cli = canaryd::Cli::parse();
    init_logging(cli.log_format);
    for warning in environment_warnings() {
        tracing::warn!("{warning}");
    }
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

/// The environment variables canaryd reads at start whose value it cannot use, each said once
/// (they used to be ignored without a word). Their values are not shown.
fn environment_warnings() -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = std::env::var_os("RUST_LOG") {
        // As `init_logging` reads it.
        if tracing_subscriber::EnvFilter::try_from_default_env().is_err() {
            out.push(rust_log_warning(v.to_str()));
        }
    }
    // As canary_replay's workers read it (a whole number, else every worker is raised).
    const MAX: &str = "CANARYD_REALTIME_WORKERS_MAX";
    if let Some(v) = std::env::var_os(MAX) {
        if v.to_str().and_then(|v| v.parse::<usize>().ok()).is_none() {
            out.push(format!(
                "{MAX} is not a whole number of 0 or more (the value is not shown); ignored: \
                 with real-time workers, every worker is raised"
            ));
        }
    }
    out
}

/// The warning for a `RUST_LOG` that does not parse (`value`, when UTF-8): which directive,
/// by its place, never its text.
fn rust_log_warning(value: Option<&str>) -> String {
    let which = value
        .and_then(|v| {
            v.split(',')
                .position(|d| tracing_subscriber::EnvFilter::try_new(d).is_err())
        })
        .map(|i| format!("its directive {} does not parse", i + 1))
        .unwrap_or_else(|| "it does not parse".into());
    format!(
        "RUST_LOG is not a log filter: {which} (the value is not shown); logging at info \
         instead; expected directives such as `debug` or `info,canaryd=debug`, comma-separated"
    )
}
