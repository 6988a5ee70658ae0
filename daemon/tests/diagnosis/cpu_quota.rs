//! [`CpuQuota`]: a CPU cgroup of its own with a quota, to starve a `canaryd` started in it.
//! cgroup v2 (`cpu.max`) where its `cpu` controller is available, else v1's `cpu`
//! hierarchy (`cpu.cfs_quota_us`). Needs root; the caller skips, loudly, when it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A cgroup removed when dropped (after what ran in it exited).
pub struct CpuQuota {
    dir: PathBuf,
}

const V2: &str = "/sys/fs/cgroup";
const V1_CPU: &str = "/sys/fs/cgroup/cpu";

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

impl CpuQuota {
    /// A new cgroup allowed `quota_us` of every `period_us` of CPU time; why not, when it
    /// cannot be made.
    pub fn create(quota_us: u64, period_us: u64) -> Result<CpuQuota, String> {
        let name = format!(
            "canaryd-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let v2 = Path::new(V2);
        let controllers =
            std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        let (dir, v1) = if controllers.split_whitespace().any(|c| c == "cpu") {
            let subtree = v2.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "cpu") {
                write(&subtree, "+cpu")?;
            }
            (v2.join(&name), false)
        } else if Path::new(V1_CPU).join("cpu.cfs_quota_us").exists() {
            (Path::new(V1_CPU).join(&name), true)
        } else {
            return Err(format!(
                "no cgroup cpu controller: {V2}/cgroup.controllers lists no cpu ({:?}) and \
                 {V1_CPU} is not a cgroup v1 cpu hierarchy",
                controllers.trim()
            ));
        };
        std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let quota = CpuQuota { dir };
        if v1 {
            write(&quota.dir.join("cpu.cfs_period_us"), &period_us.to_string())?;
            write(&quota.dir.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
        } else {
            write(
                &quota.dir.join("cpu.max"),
                &format!("{quota_us} {period_us}"),
            )?;
        }
        Ok(quota)
    }

    /// Its `cpu.stat`.
    pub fn stat(&self) -> PathBuf {
        self.dir.join("cpu.stat")
    }

    /// `cmd`, run by a shell that first moves itself into this cgroup and then execs it:
    /// everything the command does is under the quota, from its first instruction.
    pub fn wrap(&self, cmd: Command) -> Command {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(self.dir.join("cgroup.procs"))
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        if let Some(d) = cmd.get_current_dir() {
            sh.current_dir(d);
        }
        sh
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // The process in it has exited; the kernel may take a moment to let the group go.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("left behind: {}", self.dir.display());
    }
}
