//! From the file as written ([`raw`]) to the validated [`Config`], one section at a time.
//! Every error names the file, the line and the key path.

mod sweep;
mod synthesis;
mod target;
mod workload;

use super::recover::Dropped;
use super::{line_of, otlp, raw, BaselineConfig, Config, ConfigError, Otlp, Telemetry};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(super) use target::client_identity;
use target::scrape_url;

/// Why a header name is not one, never quoting past its first invalid character: a
/// credential pasted into the name (`"Authorization: Bearer …" = ""`) stops at the `:`.
pub(super) fn invalid_header_name(name: &str) -> Option<String> {
    let valid = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let bad = match name.bytes().position(|b| !valid(b)) {
        None if !name.is_empty() => return None,
        None => return Some("an empty header name".into()),
        Some(i) => i,
    };
    let what = match name[bad..].chars().next() {
        Some(' ') => "a space".to_string(),
        Some(c) => format!("{:?}", c),
        None => unreachable!("a byte was found there"),
    };
    Some(format!(
        "the header name {:?}… is not valid at its byte {bad}, {what} (names are letters, \
         digits and !#$%&'*+-.^_`|~; the rest of it is not shown: it may hold a credential)",
        &name[..bad]
    ))
}

/// Where the file came from: its text (for line numbers), its name (for messages) and the
/// folder relative paths in it are taken from.
pub(super) struct Source<'a> {
    pub text: &'a str,
    pub file: &'a Path,
    pub base: &'a Path,
}

impl Source<'_> {
    /// An error at byte offset `at` of the file.
    pub fn err(&self, at: Option<usize>, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            line: at.map(|a| line_of(self.text, a)),
            message,
            more: Vec::new(),
        }
    }

    /// A warning at byte offset `at` of the file: `file:line: message`, as an error reads.
    pub fn warning(&self, at: Option<usize>, message: String) -> String {
        self.err(at, message).one()
    }

    /// `p` taken from the file's folder when relative.
    pub fn rel(&self, p: PathBuf) -> PathBuf {
        if p.is_absolute() {
            p
        } else {
            self.base.join(p)
        }
    }
}

/// Validates the whole file: every target, every workload and every section, each error
/// collected, so one pass names them all. `dropped`: what did not even parse (already said).
pub(super) fn validate(
    raw: raw::File,
    src: &Source,
    dropped: &Dropped,
) -> Result<Config, ConfigError> {
    let mut errors = Vec::new();
    let mut load_warnings = Vec::new();
    let state_dir = keep(
        &mut errors,
        state_dir(
            raw.state_dir,
            std::env::var_os(STATE_DIRECTORY),
            src,
            &mut load_warnings,
        ),
    );
    let mut targets = BTreeMap::new();
    let mut bad_targets = dropped.targets.clone();
    for (name, t) in raw.targets {
        let at = Some(t.span().start);
        match keep(
            &mut errors,
            target::target(name.clone(), at, t.into_inner(), src, &mut load_warnings),
        ) {
            Some(t) => drop(targets.insert(name, t)),
            None => drop(bad_targets.insert(name)),
        }
    }
    let workloads = workload::workloads(raw.workloads, &targets, &bad_targets, dropped, src);
    let workloads = workloads.unwrap_or_else(|e| {
        errors.extend(e);
        Vec::new()
    });
    let baseline = keep(&mut errors, baseline(raw.baseline, src));
    let retention_runs = baseline.as_ref().and_then(|b| {
        keep(
            &mut errors,
            retention_runs(raw.export.retention_runs, b, src),
        )
    });
    let retention_age = keep(&mut errors, retention_age(raw.export.retention_age, src));
    let otlp = match raw.otlp {
        None => Some(Otlp::default()),
        Some(o) => keep(&mut errors, otlp::validate(o.into_inner(), src)),
    };
    let telemetry = keep(&mut errors, telemetry(raw.telemetry, src));
    if let Some(e) = ConfigError::all(errors) {
        return Err(e);
    }
    // Each `None` above pushed its error, so with none these are all set.
    let (
        Some(state_dir),
        Some(baseline),
        Some(retention_runs),
        Some(retention_age),
        Some(otlp),
        Some(telemetry),
    ) = (
        state_dir,
        baseline,
        retention_runs,
        retention_age,
        otlp,
        telemetry,
    )
    else {
        return Err(src.err(None, "a section failed without saying why".into()));
    };
    Ok(Config {
        artifacts_dir: raw
            .export
            .artifacts_dir
            .map(|p| src.rel(p))
            .unwrap_or_else(|| state_dir.join("artifacts")),
        state_dir,
        retention_runs,
        retention_age,
        status_listen: raw
            .status
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9464))),
        realtime_workers: raw.realtime_workers.unwrap_or(false),
        telemetry,
        otlp,
        baseline,
        targets,
        workloads,
        load_warnings,
    })
}

/// `r`'s value; its error joins `errors`.
fn keep<T>(errors: &mut Vec<ConfigError>, r: Result<T, ConfigError>) -> Option<T> {
    r.map_err(|e| errors.push(e)).ok()
}

/// systemd's state folder for the service (`StateDirectory=`).
const STATE_DIRECTORY: &str = "STATE_DIRECTORY";

/// Where state goes when neither `state_dir` nor `$STATE_DIRECTORY` says.
const DEFAULT_STATE_DIR: &str = "/var/lib/canaryd";

/// Whether `$STATE_DIRECTORY` (`value`) says where state goes: its first entry is not empty.
/// An empty one is as none (warned about where a file is read); the embedded default asks
/// this too, so an empty one keeps its `./canaryd-data` as no variable does.
pub(crate) fn state_directory_given(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !first_entry(v).trim_ascii().is_empty())
}

/// The first of systemd's ':'-separated list, as bytes (a path need not be UTF-8).
fn first_entry(v: &std::ffi::OsStr) -> &[u8] {
    let b = v.as_encoded_bytes();
    b.split(|&c| c == b':').next().unwrap_or_default()
}

/// `state_dir`, else systemd's `$STATE_DIRECTORY` (`from_env`), else `/var/lib/canaryd`.
///
/// A variable is taken as the folder it names or refused, never swapped for another folder:
/// one that names none (empty) is as none, warned about (it made the state folder the working
/// folder, `""`, without a word); one that names a folder canaryd will not use is an error at
/// start, before any state is written. Relative: systemd always sets an absolute path, so a
/// relative one was set by hand, and taking it would put the history database under whatever
/// folder the daemon happened to start in (`/` under most service managers); started from
/// elsewhere next time, it would find no history and judge against no baseline, without a
/// word. Resolving it against the working folder with a warning would keep that trap; an
/// error costs one edit. Not UTF-8: it used to be swapped for the default with a warning,
/// moving the history away from the folder asked for; it is refused instead, as a relative
/// one is (a `state_dir` in the file is UTF-8 too: TOML holds only text).
fn state_dir(
    set: Option<PathBuf>,
    from_env: Option<std::ffi::OsString>,
    src: &Source,
    warnings: &mut Vec<String>,
) -> Result<PathBuf, ConfigError> {
    if let Some(p) = set {
        return Ok(src.rel(p));
    }
    let Some(v) = from_env else {
        return Ok(PathBuf::from(DEFAULT_STATE_DIR));
    };
    if !state_directory_given(Some(&v)) {
        warnings.push(format!(
            "{STATE_DIRECTORY} is set but empty; state goes to {DEFAULT_STATE_DIR}, as with no \
             {STATE_DIRECTORY} (set state_dir in {} to choose)",
            src.file.display()
        ));
        return Ok(PathBuf::from(DEFAULT_STATE_DIR));
    }
    let refuse = |what: String| {
        src.err(
            None,
            format!(
                "{STATE_DIRECTORY} {what}; set it to an absolute path, or set state_dir in {}",
                src.file.display()
            ),
        )
    };
    // systemd may pass several, separated by ':'; the first is ours.
    let Ok(p) = std::str::from_utf8(first_entry(&v)) else {
        return Err(refuse(format!(
            "is not UTF-8, {}: a state folder is taken as text, as state_dir in a file is",
            String::from_utf8_lossy(first_entry(&v))
        )));
    };
    let p = PathBuf::from(p);
    if p.is_relative() {
        let resolved = std::env::current_dir()
            .map(|cwd| cwd.join(&p).display().to_string())
            .unwrap_or_else(|e| format!("the working folder, which cannot be read: {e}"));
        return Err(refuse(format!(
            "is a relative path, {}: state would go to {resolved}, under whatever folder the \
             daemon was started in (systemd's StateDirectory= always sets an absolute one)",
            p.display()
        )));
    }
    Ok(p)
}

/// `[baseline]`, with `min_runs` not above `runs`.
fn baseline(b: raw::Baseline, src: &Source) -> Result<BaselineConfig, ConfigError> {
    // The line of min_runs when set, else of runs: one of them is in the file.
    let min_runs_at = b
        .min_runs
        .as_ref()
        .or(b.runs.as_ref())
        .map(|v| v.span().start);
    let baseline = BaselineConfig {
        runs: b.runs.map_or(20, |v| v.into_inner()).max(1),
        min_runs: b.min_runs.map_or(3, |v| v.into_inner()).max(1),
        alpha: b.alpha.map_or(0.001, |v| v.0),
        k_mad: b.k_mad.map_or(3.0, |v| v.0),
        min_shift: b.min_shift.map_or(0.05, |v| v.0),
        min_shift_ms: b.min_shift_ms.map_or(1.0, |v| v.0),
    };
    if baseline.min_runs > baseline.runs {
        return Err(src.err(
            min_runs_at,
            format!(
                "baseline.min_runs ({}) must not exceed baseline.runs ({})",
                baseline.min_runs, baseline.runs
            ),
        ));
    }
    Ok(baseline)
}

/// The warning for a `baseline.min_runs` under [`SPREAD_MIN_RUNS`]: allowed (a new
/// deployment compares sooner), but what it compares against says nothing of run-to-run
/// variation.
///
/// [`SPREAD_MIN_RUNS`]: crate::judge::baseline::SPREAD_MIN_RUNS
pub(super) fn baseline_warning(b: &BaselineConfig) -> Option<String> {
    let needed = crate::judge::baseline::SPREAD_MIN_RUNS;
    (b.min_runs < needed).then(|| {
        format!(
            "baseline.min_runs ({}) is below {needed}: the medians of fewer than {needed} \
             baseline runs do not measure run-to-run variation (the MAD of one is 0, of two \
             half their one difference), so until {needed} passing runs are stored a run that \
             moved reads `insufficient` (the direction under `unconfirmed`), a `steady` says \
             the runs it rests on, and a capacity or knee `fail` says its baseline measured no \
             variation",
            b.min_runs
        )
    })
}

/// `export.retention_runs`: at least what the baseline needs to compare at all.
fn retention_runs(
    set: Option<toml::Spanned<usize>>,
    baseline: &BaselineConfig,
    src: &Source,
) -> Result<usize, ConfigError> {
    match set {
        None => Ok(500),
        // Retention counts every run, the baseline only passing ones: with fewer kept than
        // min_runs, no run would ever be compared.
        Some(r) if *r.get_ref() < baseline.min_runs => Err(src.err(
            Some(r.span().start),
            format!(
                "export.retention_runs: {} keeps fewer runs than baseline.min_runs ({}) \
                 needs, so no run would ever be compared with a baseline; expected {} or more",
                r.get_ref(),
                baseline.min_runs,
                baseline.min_runs
            ),
        )),
        Some(r) => Ok(r.into_inner()),
    }
}

/// The shortest `export.retention_age`: a run is pruned right after it is recorded, so an
/// age under a run's own length (`0s`, which elsewhere often means "no limit") deleted each
/// run, its artifacts with it, as it finished.
const MIN_RETENTION_AGE: Duration = Duration::from_secs(3600);

fn retention_age(
    set: Option<toml::Spanned<raw::HumanDuration>>,
    src: &Source,
) -> Result<Duration, ConfigError> {
    match set {
        None => Ok(Duration::from_secs(30 * 86400)),
        Some(d) if d.get_ref().0 < MIN_RETENTION_AGE => Err(src.err(
            Some(d.span().start),
            format!(
                "export.retention_age: {:?} would delete runs as they finish (each is pruned \
                 right after it is recorded); expected 1h or more",
                d.get_ref().0
            ),
        )),
        Some(d) => Ok(d.into_inner().0),
    }
}

/// `[telemetry]`, with a usable `dcgm_url` when one is set.
fn telemetry(t: raw::Telemetry, src: &Source) -> Result<Telemetry, ConfigError> {
    let dcgm_url = match t.dcgm_url {
        Some(u) if u.get_ref().is_empty() => None,
        Some(u) => {
            let at = Some(u.span().start);
            let u = u.into_inner();
            scrape_url(&u).map_err(|m| src.err(at, format!("telemetry.dcgm_url: {m}")))?;
            Some(u)
        }
        None => None,
    };
    Ok(Telemetry {
        nvml: t.nvml.unwrap_or(true),
        nvml_lib: t.nvml_lib.map(|p| src.rel(p)),
        gpu_interval: t
            .gpu_interval
            .map_or(canary_telemetry::Config::NVML_INTERVAL, |d| d.0),
        dcgm_url,
        scrape_interval: t
            .scrape_interval
            .map_or(canary_telemetry::Config::SCRAPE_INTERVAL, |d| d.0),
        ebpf: t.ebpf.unwrap_or(true),
    })
}

#[cfg(test)]
mod state_dir_tests {
    use super::*;

    /// An empty `$STATE_DIRECTORY=` made the state folder `""`, the working folder, without
    /// a word: warned about, naming the variable, and the default taken.
    #[test]
    fn an_empty_state_directory_is_warned_about_and_not_taken() {
        let src = Source {
            text: "",
            file: Path::new("canaryd.toml"),
            base: Path::new("/etc/canaryd"),
        };
        let mut warnings = Vec::new();
        let got = state_dir(None, Some("".into()), &src, &mut warnings).unwrap();
        assert_eq!(got, Path::new("/var/lib/canaryd"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0]
                .starts_with("STATE_DIRECTORY is set but empty; state goes to /var/lib/canaryd"),
            "{warnings:?}"
        );
        // systemd's list: the first is taken, without a word.
        let mut warnings = Vec::new();
        let got = state_dir(
            None,
            Some("/var/lib/a:/var/lib/b".into()),
            &src,
            &mut warnings,
        )
        .unwrap();
        assert_eq!(
            (got.as_path(), warnings.len()),
            (Path::new("/var/lib/a"), 0)
        );
        let got = state_dir(None, None, &src, &mut warnings).unwrap();
        assert_eq!(
            (got.as_path(), warnings.len()),
            (Path::new("/var/lib/canaryd"), 0)
        );
    }

    /// A relative `$STATE_DIRECTORY` (systemd sets an absolute one) put the history under
    /// whatever folder the daemon started in, without a word: an error naming the variable,
    /// its value, the folder it would have meant and the file's `state_dir` to set instead.
    /// A relative first entry of systemd's list is the same; a `state_dir` in the file wins
    /// over the variable, so then the variable is not looked at.
    /// A `$STATE_DIRECTORY` that is not UTF-8 was swapped for `/var/lib/canaryd` with a
    /// warning, the history moved away from the folder asked for: refused, as a relative one
    /// is. One that names no folder (empty, blank, an empty first entry) is as none, and the
    /// embedded default (`state_directory_given`) reads it the same way.
    #[test]
    fn a_state_directory_is_taken_or_refused_never_swapped_for_another_folder() {
        use std::os::unix::ffi::OsStrExt;
        let src = Source {
            text: "",
            file: Path::new("/etc/canaryd/canaryd.toml"),
            base: Path::new("/etc/canaryd"),
        };
        let bad = std::ffi::OsStr::from_bytes(b"/var/lib/caf\xe9");
        let mut warnings = Vec::new();
        let err = state_dir(None, Some(bad.into()), &src, &mut warnings)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("STATE_DIRECTORY is not UTF-8, /var/lib/caf\u{fffd}: "),
            "{err}"
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        for empty in ["", "  ", ":/var/lib/b"] {
            let mut warnings = Vec::new();
            let got = state_dir(None, Some(empty.into()), &src, &mut warnings).unwrap();
            assert_eq!(
                (got.as_path(), warnings.len()),
                (Path::new("/var/lib/canaryd"), 1),
                "{empty:?}"
            );
            assert!(!state_directory_given(Some(empty.as_ref())), "{empty:?}");
        }
        assert!(!state_directory_given(None));
        assert!(state_directory_given(Some("/var/lib/a".as_ref())));
        assert!(state_directory_given(Some(bad)));
    }

    #[test]
    fn a_relative_state_directory_is_an_error_naming_both_paths() {
        let src = Source {
            text: "",
            file: Path::new("/etc/canaryd/canaryd.toml"),
            base: Path::new("/etc/canaryd"),
        };
        let cwd = std::env::current_dir().unwrap();
        for value in ["canaryd-state", "canaryd-state:/var/lib/b"] {
            let mut warnings = Vec::new();
            let err = state_dir(None, Some(value.into()), &src, &mut warnings)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!(
                    "STATE_DIRECTORY is a relative path, canaryd-state: state would go to {}, \
                     under whatever folder the daemon was started in",
                    cwd.join("canaryd-state").display()
                )),
                "{err}"
            );
            assert!(
                err.contains("or set state_dir in /etc/canaryd/canaryd.toml"),
                "{err}"
            );
            assert!(warnings.is_empty(), "{warnings:?}");
        }
        let mut warnings = Vec::new();
        let got = state_dir(
            Some("/srv/canaryd".into()),
            Some("canaryd-state".into()),
            &src,
            &mut warnings,
        )
        .unwrap();
        assert_eq!(
            (got.as_path(), warnings.len()),
            (Path::new("/srv/canaryd"), 0)
        );
    }
}
