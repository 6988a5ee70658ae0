//! Files a config names or is: a workload's `tokenizer` loaded when the file is read, as a
//! run loads it (check-config said ok, and every run failed); a config that is not UTF-8
//! named by line and column, not by byte index.

use super::{error_at, GOOD};
use crate::config::Config;
use std::path::Path;

/// [`GOOD`] with `tokenizer = PATH` in the workload `chat`.
fn with_tokenizer(path: &std::path::Path) -> String {
    GOOD.replace(
        "every = \"15m\"",
        &format!("every = \"15m\"\ntokenizer = \"{}\"", path.display()),
    )
}

#[test]
fn a_tokenizer_that_a_run_could_not_load_is_an_error_naming_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-tokenizer.json");
    let e = error_at(
        &with_tokenizer(&missing),
        "tokenizer",
        "workloads.chat.tokenizer: cannot read tokenizer file",
    );
    assert!(e.contains("missing-tokenizer.json"), "{e}");
    assert!(e.contains("No such file"), "{e}");
    // Valid JSON, not a tokenizer.
    let bad = dir.path().join("badtok.json");
    std::fs::write(&bad, "{\"not\":\"a tokenizer\"}").unwrap();
    error_at(
        &with_tokenizer(&bad),
        "tokenizer",
        "workloads.chat.tokenizer: invalid tokenizer file",
    );
    // A folder.
    error_at(
        &with_tokenizer(dir.path()),
        "tokenizer",
        "workloads.chat.tokenizer: cannot read tokenizer file",
    );
}

#[test]
fn a_config_that_is_not_utf8_is_named_by_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("canaryd.toml");
    let mut bytes = GOOD.as_bytes().to_vec();
    // In `model = "m"` (line 6): after `model = "`, column 10.
    let at = GOOD.find("model = \"m\"").unwrap() + "model = \"".len();
    bytes.insert(at, 0xff);
    std::fs::write(&path, bytes).unwrap();
    let e = Config::load(&path).unwrap_err().to_string();
    let want = format!(
        "{}:6: not UTF-8: an invalid byte at column 10",
        path.display()
    );
    assert!(e.starts_with(&want), "want {want:?}, got {e}");
    assert!(!e.contains("index"), "{e}");
}

/// A `state_dir` no user could create (under `/proc`, or through a file) fails the daemon at
/// start: an error when the file is read, naming the line, where check-config said ok.
#[test]
fn a_state_dir_that_cannot_be_made_is_an_error_naming_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let through_a_file = dir.path().join("a-file/state");
    for state in [Path::new("/proc/canaryd-nope/state"), &through_a_file] {
        let path = dir.path().join("canaryd.toml");
        let text = GOOD.replace(
            "state_dir = \"/tmp/canaryd-state\"",
            &format!("state_dir = \"{}\"", state.display()),
        );
        std::fs::write(&path, &text).unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        let want = format!(
            "{}:2: state_dir: {} cannot be",
            path.display(),
            state.display()
        );
        assert!(e.starts_with(&want), "want {want:?}, got {e}");
    }
    // One that can: no error, and nothing left behind by the check.
    let path = dir.path().join("canaryd.toml");
    let state = dir.path().join("new/state");
    let text = GOOD.replace(
        "state_dir = \"/tmp/canaryd-state\"",
        &format!("state_dir = \"{}\"", state.display()),
    );
    std::fs::write(&path, &text).unwrap();
    Config::load(&path).unwrap();
    assert!(!dir.path().join("new").exists());
}
