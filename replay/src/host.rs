//! canaryd's build and the host it runs on, for `summary.json`'s `context.canaryd` and
//! `context.host`: read from `/proc` and `/etc` (Linux), each field unavailable with the file
//! that could not be read.

use canary_core::{CanarydContext, HostContext, Known};

/// Why a build does not know its commit.
const SHA_UNKNOWN: &str =
    "unknown: built outside canaryd's git repository (a tarball) and without CANARYD_GIT_SHA";

/// canaryd's version, and the commit it was built from: `CANARYD_GIT_SHA` as `build.rs`
/// recorded it (from the build's environment, else `git rev-parse HEAD`), else unknown.
pub fn canaryd_context() -> CanarydContext {
    CanarydContext {
        version: Known::Value(env!("CARGO_PKG_VERSION").to_string()),
        git_sha: Known::from_option(
            option_env!("CANARYD_GIT_SHA").map(str::to_string),
            SHA_UNKNOWN,
        ),
        workers: crate::workers::context(),
    }
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

fn trimmed(path: &str) -> Known<String> {
    match read(path) {
        Ok(s) if !s.trim().is_empty() => Known::Value(s.trim().to_string()),
        Ok(_) => Known::unavailable(format!("{path}: empty")),
        Err(e) => Known::unavailable(e),
    }
}

/// The CPU model from `/proc/cpuinfo`'s text: x86's `model name`, else arm64's `Hardware`
/// or `CPU part`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Hardware", "CPU part"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// The host canaryd runs on.
pub fn host_context() -> HostContext {
    let cpuinfo = "/proc/cpuinfo";
    let cpu_model = match read(cpuinfo) {
        Ok(t) => Known::from_option(cpu_model(&t), format!("{cpuinfo}: no model name")),
        Err(e) => Known::unavailable(e),
    };
    let cores = std::thread::available_parallelism();
    // SAFETY: sysconf reads a system constant; no memory is touched.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    HostContext {
        name: trimmed("/proc/sys/kernel/hostname"),
        cpu_model,
        cpu_cores: if online > 0 {
            Known::Value(online as u32)
        } else {
            Known::unavailable("sysconf(_SC_NPROCESSORS_ONLN) failed")
        },
        cpus_allowed: match cores {
            Ok(n) => Known::Value(n.get() as u32),
            Err(e) => Known::unavailable(format!("affinity: {e}")),
        },
        kernel: trimmed("/proc/sys/kernel/osrelease"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_models_of_x86_and_arm() {
        let x86 =
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) 8480\n";
        assert_eq!(cpu_model(x86).unwrap(), "Intel(R) Xeon(R) 8480");
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n";
        assert_eq!(cpu_model(arm).unwrap(), "0xd0c");
        assert!(cpu_model("processor\t: 0\n").is_none());
    }

    #[test]
    fn this_host_is_described() {
        let h = host_context();
        assert!(h.kernel.value().is_some_and(|k| !k.is_empty()), "{h:?}");
        assert!(h.cpu_cores.value().is_some_and(|n| *n >= 1), "{h:?}");
        let c = canaryd_context();
        assert_eq!(c.version.value().unwrap(), env!("CARGO_PKG_VERSION"));
    }

    /// Built in canaryd's checkout (as the suite is), the context names its commit; built
    /// where git cannot say, it says the commit is unknown.
    #[test]
    fn the_git_sha_is_the_checkouts_commit_or_unknown() {
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .arg("-C")
                .arg(workspace)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let ours = git(&["rev-parse", "--show-toplevel"])
            .and_then(|t| std::path::Path::new(&t).canonicalize().ok())
            .is_some_and(|t| Some(t) == workspace.canonicalize().ok());
        let sha = canaryd_context().git_sha;
        match git(&["rev-parse", "HEAD"]).filter(|_| ours) {
            Some(head) => assert_eq!(sha.value(), Some(&head), "{sha:?}"),
            None => assert_eq!(sha, Known::unavailable(SHA_UNKNOWN)),
        }
    }
}
