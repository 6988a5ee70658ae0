//! The `canaryd` binary: parse the command line, set up logging, run, pick an exit code.

use clap::Parser;
use std::io::Write;

fn main() {
    let cli = canaryd::Cli::parse();
    let rust_log = init_logging(cli.log_format);
    for warning in environment_warnings(rust_log) {
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

/// Sets up logging from `RUST_LOG`, read and parsed here once; the warning for a value that
/// does not parse (logging is then at info), said once logging is up.
fn init_logging(format: canaryd::LogFormat) -> Option<String> {
    let (filter, warning) = log_filter(std::env::var_os("RUST_LOG").as_deref());
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
    warning
}

/// The log filter `RUST_LOG` (`value`, when set) asks for, as
/// `EnvFilter::try_from_default_env` reads it (a value that is not UTF-8 does not parse), else
/// info with the warning saying so.
fn log_filter(value: Option<&std::ffi::OsStr>) -> (tracing_subscriber::EnvFilter, Option<String>) {
    let info = || tracing_subscriber::EnvFilter::new("info");
    let Some(value) = value else {
        return (info(), None);
    };
    let text = value.to_str();
    match text.map(|v| tracing_subscriber::EnvFilter::builder().parse(v)) {
        Some(Ok(filter)) => (filter, None),
        _ => (info(), Some(rust_log_warning(text))),
    }
}

/// The environment variables canaryd reads at start whose value it cannot use, each said once
/// (they used to be ignored without a word), from the one reading that is used: `rust_log`,
/// [`init_logging`]'s; the workers' `CANARYD_REALTIME_WORKERS_MAX`. Their values are not shown.
fn environment_warnings(rust_log: Option<String>) -> Vec<String> {
    rust_log
        .into_iter()
        .chain(canary_replay::workers::max_threads_env().warning())
        .collect()
}

/// The warning for a `RUST_LOG` that does not parse (`value`, when UTF-8): which directive,
/// by its place, never its text. Only here, once the whole value failed, is each directive
/// parsed alone, to find the first that fails (the parse error does not say which).
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    /// `RUST_LOG` is parsed once, and the filter and its warning come from that parse: a
    /// filter that parses is used and not warned about; one that does not is info, warned
    /// about by its directive's place, its text never shown.
    #[test]
    fn rust_log_gives_its_filter_or_info_with_a_warning_from_one_parse() {
        let (f, w) = log_filter(None);
        assert_eq!((f.to_string(), w), ("info".to_string(), None));
        let (f, w) = log_filter(Some(OsStr::new("warn,canaryd=debug")));
        assert_eq!(w, None);
        assert!(f.to_string().contains("canaryd=debug"), "{f}");
        let (f, w) = log_filter(Some(OsStr::new("info,canaryd=debgu,sk-NOTSHOWN=info")));
        assert_eq!(f.to_string(), "info");
        let w = w.unwrap();
        assert!(
            w.starts_with("RUST_LOG is not a log filter: its directive 2 does not parse"),
            "{w}"
        );
        assert!(!w.contains("NOTSHOWN") && !w.contains("debgu"), "{w}");
        let (f, w) = log_filter(Some(OsStr::from_bytes(b"canaryd=\xff")));
        assert_eq!(f.to_string(), "info");
        assert!(w
            .unwrap()
            .starts_with("RUST_LOG is not a log filter: it does not parse"),);
    }
}
