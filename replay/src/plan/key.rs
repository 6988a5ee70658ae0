//! [`ApiKeySource`]: where a target's API key is. A plan holds only that; the key itself is
//! read when the run starts, so it never sits in a config, a log or a `Debug` print.

use super::setting::{Setting, SettingError};
use crate::target::ApiKey;
use std::path::PathBuf;

/// Where a target's API key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiKeySource {
    /// A file holding the key (surrounding white space dropped).
    File(PathBuf),
    /// An environment variable that must be set.
    Env(String),
    /// An environment variable used when it is set (`OPENAI_API_KEY` for `canaryd replay`):
    /// unset or empty means no key.
    EnvIfSet(String),
}

/// The largest API key file read: a key is a line; more is a wrong path.
pub const MAX_KEY_FILE_BYTES: u64 = 64 << 10;

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
        tracing::warn!(
            "API key file {} can be read by its group or others (mode {mode:o}): chmod 600 it",
            path.display()
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
    /// Errors name the source, never the key.
    pub fn read(&self) -> Result<Option<ApiKey>, SettingError> {
        let (key, setting, from) = match self {
            ApiKeySource::File(path) => {
                let shown = path.display().to_string();
                let key = canary_files::read_small_file(path, MAX_KEY_FILE_BYTES)
                    .and_then(|b| {
                        String::from_utf8(b).map_err(|_| {
                            std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8")
                        })
                    })
                    .map_err(|e| SettingError {
                        source: Some(e),
                        ..SettingError::new(Setting::ApiKeyFile, "cannot be read")
                            .with_value(&shown)
                    })?;
                if key.trim().is_empty() {
                    return Err(SettingError::new(Setting::ApiKeyFile, "the file is empty")
                        .with_value(shown));
                }
                warn_if_others_can_read(path);
                (key, Setting::ApiKeyFile, shown)
            }
            ApiKeySource::Env(var) => match std::env::var(var) {
                Ok(k) if !k.trim().is_empty() => (k, Setting::ApiKeyEnv, var.clone()),
                _ => {
                    return Err(SettingError::new(
                        Setting::ApiKeyEnv,
                        "the variable is not set or empty",
                    )
                    .with_value(var))
                }
            },
            ApiKeySource::EnvIfSet(var) => match std::env::var(var) {
                Ok(k) if !k.trim().is_empty() => (k, Setting::ApiKeyEnv, var.clone()),
                _ => return Ok(None),
            },
        };
        let key = ApiKey::new(&key);
        match key.authorization() {
            Some(_) => Ok(Some(key)),
            None => Err(SettingError::new(
                setting,
                "the key holds characters an HTTP header cannot carry",
            )
            .with_value(from)),
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
