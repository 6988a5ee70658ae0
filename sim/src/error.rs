//! What is wrong with the simulator's flags or its profile file. Its own module, below both
//! `config` (the flags) and `profile` (the file), so neither imports the other for it.

use std::path::PathBuf;

use crate::fault::FaultParseError;

/// A bad flag or profile file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--host` is not an IP address.
    #[error("--host {0:?}: not an IP address")]
    Host(String),
    /// A numeric flag out of range.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A `--fault` spec.
    #[error("--fault")]
    Fault(#[source] FaultParseError),
    /// The profile file could not be read.
    #[error("--profile {path}: cannot read")]
    ProfileRead {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The profile file is not valid JSON for a profile.
    #[error("--profile {path}: invalid profile JSON")]
    ProfileParse {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The profile's values are out of range.
    #[error("--profile {path}: {message}")]
    ProfileInvalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}
