//! `check-config` and the file systems under `state_dir` and `export.artifacts_dir`: a full
//! one (the daemon then exits 1 at start) or a read-only one (each run's files cannot be
//! written) is warned about, naming the folder, its free space and its mount. Real file
//! systems: a small tmpfs filled with `dd`, and a read-only one, each mounted in a mount
//! namespace of the test's own (`unshare -rm`, so the host's mounts are never touched).

mod common;

use common::CANARYD;
use std::path::Path;
use std::process::Command;

/// Exit status of the script when the namespace or the mount could not be made here.
const NO_NAMESPACE: i32 = 77;

/// Runs `canaryd check-config <config>` in a mount namespace of its own, after mounting a
/// tmpfs of `options` on `mount` (which must exist) and running `then` (sh) there; `None`
/// when this host gives no such namespace (no user namespaces for this user).
fn check_config_with_mount(
    mount: &Path,
    options: &str,
    then: &str,
    config: &Path,
) -> Option<String> {
    let script = format!(
        "mount -t tmpfs -o {options} tmpfs \"$1\" || exit {NO_NAMESPACE}; {then}; \
         exec \"$2\" check-config \"$3\""
    );
    let o = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script, "sh"])
        .arg(mount)
        .arg(CANARYD)
        .arg(config)
        .output()
        .expect("unshare runs (util-linux is part of the base image)");
    let text = common::text(&o);
    if o.status.code() == Some(NO_NAMESPACE) || text.contains("unshare failed") {
        canary_testkit::skip(
            "mount-namespace",
            &format!("no mount namespace here: {text}"),
        );
        return None;
    }
    assert_eq!(o.status.code(), Some(0), "{text}");
    Some(text)
}

fn write_config(dir: &Path, state_dir: &Path, extra: &str) -> std::path::PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n{extra}\
         [targets.sim]\nurl = \"http://127.0.0.1:{}\"\nmodel = \"canary-sim\"\n\
         [workloads.chat]\ntarget = \"sim\"\ntrace = \"bundled\"\nevery = \"1h\"\n",
        state_dir.display(),
        common::free_port()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A full disk under `state_dir` passed check-config, and the daemon then exited 1 at start.
#[test]
fn a_state_dir_on_a_full_file_system_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("disk");
    std::fs::create_dir(&mount).unwrap();
    let state = mount.join("state");
    let config = write_config(dir.path(), &state, "");
    // Filled to its last block; the folder made first (a folder takes no block on tmpfs).
    let fill = "mkdir \"$1/state\" && { dd if=/dev/zero of=\"$1/fill\" bs=64k 2>/dev/null; true; }";
    let Some(text) = check_config_with_mount(&mount, "size=4m", fill, &config) else {
        return;
    };
    let mount = std::fs::canonicalize(&mount).unwrap();
    let want = format!(
        "warning: state_dir: {} is on a full file system (mounted at {}): ",
        state.display(),
        mount.display()
    );
    assert!(text.contains(&want), "{want}\n{text}");
    assert!(
        text.contains(
            " bytes free (statvfs, exact when read): the daemon exits 1 at start (its history \
             cannot be opened there)"
        ),
        "{text}"
    );
    // The artifacts, under it, are on the same file system: said once.
    assert!(!text.contains("export.artifacts_dir"), "{text}");
}

/// Artifacts on a read-only file system: every run's verdict an error, not said before.
#[test]
fn an_artifacts_dir_on_a_read_only_file_system_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("ro");
    std::fs::create_dir(&mount).unwrap();
    let artifacts = mount.join("artifacts");
    let config = write_config(
        dir.path(),
        &dir.path().join("state"),
        &format!("[export]\nartifacts_dir = \"{}\"\n", artifacts.display()),
    );
    let Some(text) = check_config_with_mount(&mount, "ro,size=4m", "true", &config) else {
        return;
    };
    let mount = std::fs::canonicalize(&mount).unwrap();
    let want = format!(
        "warning: export.artifacts_dir: {} is on a read-only file system (mounted at {}): each \
         run's verdict is an error (its files cannot be written there)",
        artifacts.display(),
        mount.display()
    );
    assert!(text.contains(&want), "{want}\n{text}");
    assert!(!text.contains("warning: state_dir"), "{text}");
}
