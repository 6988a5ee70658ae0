//! [`ApiKeySource`]: where a target's API key is. A plan holds only that; the key itself is
//! read when the run starts, so it never sits in a config, a log or a `Debug` print.

use super::setting::{Setting, SettingError};
use crate::target::ApiKey;
use std::path::PathBuf;

/// Where a target's API key is. `Debug` shows a variable's name or a file's path unless it
/// [`looks_like_a_key`].
#[derive(Clone, PartialEq, Eq)]
pub enum ApiKeySource {
    /// A file holding the key (surrounding white space dropped).
    File(PathBuf),
    /// An environment variable that must be set.
    Env(String),
    /// An environment variable used when it is set (`OPENAI_API_KEY` for `canaryd replay`):
    /// unset or empty means no key.
    EnvIfSet(String),
}

impl std::fmt::Debug for ApiKeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, name) = match self {
            ApiKeySource::File(path) => ("File", key_path_shown(path)),
            ApiKeySource::Env(var) => ("Env", (!looks_like_a_key(var)).then(|| var.clone())),
            ApiKeySource::EnvIfSet(var) => {
                ("EnvIfSet", (!looks_like_a_key(var)).then(|| var.clone()))
            }
        };
        match name {
            Some(name) => write!(f, "{kind}({name:?})"),
            None => write!(f, "{kind}(<named like a key>)"),
        }
    }
}

/// The largest API key file read: a key is a line; more is a wrong path.
pub const MAX_KEY_FILE_BYTES: u64 = 64 << 10;

// === A key pasted where its variable's name or its file's path is due ===
//
// `api_key_env = "sk-…"` is a mistake easily made, and every message about the variable
// would quote the key (`api_key_env: sk-… is not set here`), into logs, verdicts, history
// and the status API. Such a "name" is refused or left unshown, never quoted.

/// Why a variable's name given for a key is refused when it is none ([`is_variable_name`]).
pub const NOT_A_VARIABLE_NAME: &str =
    "does not look like a variable name; is it the key itself? (not shown)";

/// What a message says in place of a variable's name or a file's path that
/// [`looks_like_a_key`].
pub const NAME_NOT_SHOWN: &str = "(its name is not shown: it looks like a key itself)";

/// True when `name` can name an environment variable as shells write them:
/// `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// True when `name` (a variable's, a file's) looks like a key rather than a name: 16
/// characters or more without a `.`, a space or a `/`, digits among them, and letters in both
/// cases, or 32 characters or more (hex keys are in one case). Names are mostly in one case
/// (`OPENAI_API_KEY`, `openai-key`); keys mix them (`sk-ZQ1x…`, `hf_…`).
pub fn looks_like_a_key(name: &str) -> bool {
    let has = |f: fn(&char) -> bool| name.chars().any(|c| f(&c));
    name.chars().count() >= 16
        && !name.contains(['.', '/', ' '])
        && has(char::is_ascii_digit)
        && ((has(char::is_ascii_lowercase) && has(char::is_ascii_uppercase))
            || name.chars().count() >= 32)
}

/// What a message may show of a secret's file `path`: `None` when its file name
/// [`looks_like_a_key`], as when a key is pasted where its file's path was due (a path so
/// named is not shown even when it is a file's).
pub fn key_path_shown(path: &std::path::Path) -> Option<String> {
    let name = path.file_name().map(|n| n.to_string_lossy());
    match name.is_some_and(|n| looks_like_a_key(&n)) {
        true => None,
        false => Some(path.display().to_string()),
    }
}

/// Warns, once per file in this process, when a key file can be read by others than its
/// owner: the key is used all the same (the file is the user's to fix), but said.
fn warn_if_others_can_read(path: &std::path::Path) {
    static WARNED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let Some(mode) = others_can_read(path) else {
        return;
    };
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned.iter().any(|p| p == path) {
        warned.push(path.to_path_buf());
        let shown = key_path_shown(path).unwrap_or_else(|| NAME_NOT_SHOWN.to_string());
        tracing::warn!(
            "API key file {shown} can be read by its group or others (mode {mode:o}): chmod 600 it"
        );
    }
}

/// The file's mode when its group or others may read it.
fn others_can_read(path: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o044 != 0).then_some(mode)
}

impl ApiKeySource {
    /// Reads the key. `None` only for an [`ApiKeySource::EnvIfSet`] variable that is unset.
    /// Errors name the source, never the key, nor what looks like one: a variable's "name"
    /// that is none ([`is_variable_name`]), a file's path named like a key
    /// ([`key_path_shown`]).
    pub fn read(&self) -> Result<Option<ApiKey>, SettingError> {
        let (key, setting, from) = match self {
            ApiKeySource::File(path) => {
                let shown = key_path_shown(path);
                let refused = |reason: &str| match &shown {
                    Some(p) => SettingError::new(Setting::ApiKeyFile, reason).with_value(p),
                    None => {
                        SettingError::new(Setting::ApiKeyFile, format!("{reason} {NAME_NOT_SHOWN}"))
                    }
                };
                let key = canary_files::read_small_file(path, MAX_KEY_FILE_BYTES)
                    .and_then(|b| {
                        String::from_utf8(b).map_err(|_| {
                            std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8")
                        })
                    })
                    .map_err(|e| SettingError {
                        source: Some(e),
                        ..refused("cannot be read")
                    })?;
                if key.trim().is_empty() {
                    return Err(refused("the file is empty"));
                }
                warn_if_others_can_read(path);
                (key, Setting::ApiKeyFile, shown)
            }
            ApiKeySource::Env(var) | ApiKeySource::EnvIfSet(var) if !is_variable_name(var) => {
                return Err(SettingError::new(Setting::ApiKeyEnv, NOT_A_VARIABLE_NAME))
            }
            ApiKeySource::Env(var) => {
                let shown = (!looks_like_a_key(var)).then(|| var.clone());
                match (std::env::var(var), shown) {
                    (Ok(k), shown) if !k.trim().is_empty() => (k, Setting::ApiKeyEnv, shown),
                    (_, Some(var)) => {
                        return Err(SettingError::new(
                            Setting::ApiKeyEnv,
                            "the variable is not set or empty",
                        )
                        .with_value(var))
                    }
                    (_, None) => {
                        return Err(SettingError::new(
                            Setting::ApiKeyEnv,
                            format!("the variable is not set or empty {NAME_NOT_SHOWN}"),
                        ))
                    }
                }
            }
            ApiKeySource::EnvIfSet(var) => match std::env::var(var) {
                Ok(k) if !k.trim().is_empty() => (k, Setting::ApiKeyEnv, Some(var.clone())),
                _ => return Ok(None),
            },
        };
        let key = ApiKey::new(&key);
        let why = "the key holds characters an HTTP header cannot carry";
        match (key.authorization(), from) {
            (Some(_), _) => Ok(Some(key)),
            (None, Some(from)) => Err(SettingError::new(setting, why).with_value(from)),
            (None, None) => Err(SettingError::new(
                setting,
                format!("{why} {NAME_NOT_SHOWN}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_that_is_a_device_is_refused_not_read() {
        // /dev/zero used to be read until memory ran out; a FIFO blocked the run's thread.
        let e = ApiKeySource::File("/dev/zero".into()).read().unwrap_err();
        assert_eq!(e.setting, Setting::ApiKeyFile);
        assert_eq!(e.source.unwrap().to_string(), "not a regular file");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("key");
        std::fs::write(&big, vec![b'k'; (MAX_KEY_FILE_BYTES + 1) as usize]).unwrap();
        let e = ApiKeySource::File(big).read().unwrap_err();
        assert!(e.source.unwrap().to_string().contains("larger than"));
    }

    // Secrets audit, item 4: a key pasted where its variable's name or its file's path was
    // due was quoted by the error about it (`api_key_env sk-…: the variable is not set`).
    #[test]
    fn a_key_pasted_for_a_variable_or_a_file_is_never_quoted() {
        let message = |source: ApiKeySource| source.read().unwrap_err().to_string();
        let e = message(ApiKeySource::Env("sk-ZQ1xPASTEDKEY".into()));
        assert_eq!(
            e,
            "api_key_env: does not look like a variable name; is it the key itself? (not shown)"
        );
        // A name a variable may have, but a key's looks (`hf_…`), unset.
        let e = message(ApiKeySource::Env("hf_ZQ1xPASTEDKEY0123456789".into()));
        assert!(
            e.starts_with("api_key_env: the variable is not set or empty (its name is not shown"),
            "{e}"
        );
        let e = message(ApiKeySource::File("sk-ZQ1xPASTEDKEY7".into()));
        assert!(
            e.starts_with("api_key_file: cannot be read (its name is not shown"),
            "{e}"
        );
        let e = message(ApiKeySource::File("/etc/canaryd/sk-ZQ1xPASTEDKEY7".into()));
        assert!(!e.contains("ZQ1x"), "{e}");
        // Names are still named.
        let e = message(ApiKeySource::Env("CANARYD_TEST_NO_SUCH_KEY_VAR_2".into()));
        assert_eq!(
            e,
            "api_key_env CANARYD_TEST_NO_SUCH_KEY_VAR_2: the variable is not set or empty"
        );
        let e = message(ApiKeySource::File("/nonexistent/openai-key".into()));
        assert_eq!(e, "api_key_file /nonexistent/openai-key: cannot be read");
    }

    #[test]
    fn names_and_keys_are_told_apart() {
        for name in ["OPENAI_API_KEY", "_k", "my_key_2", "hf_ZQ1xPASTEDKEY0123"] {
            assert!(is_variable_name(name), "{name}");
        }
        for name in ["", "sk-ZQ1x", "2KEY", "MY KEY", "Bearer sk-1", "clé"] {
            assert!(!is_variable_name(name), "{name}");
        }
        for key in [
            "sk-ZQ1xPASTEDKEY",
            "hf_ZQ1xPASTEDKEY0123",
            "3f2a9c0d4e5b6a7f8e9d0c1b2a3f4e5d",
        ] {
            assert!(looks_like_a_key(key), "{key}");
        }
        for name in [
            "OPENAI_API_KEY",
            "OPENAI_API_KEY_2024",
            "openai-api-key-2024",
            "api-key.txt",
            "sk-short1",
        ] {
            assert!(!looks_like_a_key(name), "{name}");
        }
    }

    #[test]
    fn a_key_file_others_can_read_is_told_apart() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "sk-1").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(others_can_read(&key), Some(0o644));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(others_can_read(&key), None);
        // Read all the same: the warning is the user's to act on.
        assert!(ApiKeySource::File(key).read().unwrap().is_some());
    }
}
