//! Records the git commit canaryd is built from as `CANARYD_GIT_SHA`, for `summary.json`'s
//! `context.canaryd.git_sha`.
//!
//! A `CANARYD_GIT_SHA` set in the build's environment wins (a package built from a tarball
//! can say where it came from). Otherwise the commit is read with `git`, only when this crate
//! sits in the work tree of canaryd's own repository: a tarball unpacked inside some other
//! repository must not take that repository's commit. Without either, nothing is set and
//! the context says the commit is unknown.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CANARYD_GIT_SHA");
    if std::env::var_os("CANARYD_GIT_SHA").is_some() {
        return; // passed through to the compiler as it is
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let Some(workspace) = manifest.parent() else {
        return;
    };
    let Some(toplevel) = git(workspace, &["rev-parse", "--show-toplevel"]) else {
        return;
    };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&toplevel), workspace) {
        return;
    }
    let Some(sha) = git(workspace, &["rev-parse", "HEAD"]) else {
        return;
    };
    println!("cargo:rustc-env=CANARYD_GIT_SHA={sha}");
    // Built again when HEAD moves: the files that name the checked-out commit (a worktree
    // has its own HEAD; branch refs live in the common directory).
    for (what, file) in [("--git-dir", "HEAD"), ("--git-common-dir", "packed-refs")] {
        if let Some(dir) = git(workspace, &["rev-parse", what]) {
            let path = workspace.join(dir).join(file);
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    if let Some(branch) = git(workspace, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(common) = git(workspace, &["rev-parse", "--git-common-dir"]) {
            let path = workspace.join(common).join(branch);
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// `git ARGS` run in `dir`: its first line of output, when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim().to_string();
    (out.status.success() && !line.is_empty()).then_some(line)
}
