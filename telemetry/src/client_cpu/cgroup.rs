//! canaryd's CPU cgroup: where it is (`/proc/self/cgroup` joined with
//! `/proc/self/mountinfo`), the quota it and its ancestors set, and how long the quota
//! throttled it (`cpu.stat`). Both cgroup v2 (`cpu.max`, `throttled_usec`) and v1's `cpu`
//! controller (`cpu.cfs_quota_us`, `throttled_time`), since hosts still mount either.

use std::path::{Path, PathBuf};

/// Which cgroup hierarchy holds the `cpu` controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    V1,
    V2,
}

/// canaryd's cgroup directory, found once per run.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Located {
    pub dir: PathBuf,
    /// The hierarchy's mount point: ancestors' quotas are read up to it.
    pub mount: PathBuf,
    pub version: Version,
}

/// The counters at one moment.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CgroupCpu {
    /// The `cpu.stat` read.
    pub stat: PathBuf,
    pub throttled_ns: u64,
    pub nr_throttled: u64,
    /// The tightest quota of the cgroup and its ancestors, in cores.
    pub quota_cores: Option<f64>,
}

impl CgroupCpu {
    /// Seconds throttled and periods throttled since `a`.
    pub fn throttled_since(&self, a: &CgroupCpu) -> Option<(f64, u64)> {
        Some((
            self.throttled_ns.checked_sub(a.throttled_ns)? as f64 / 1e9,
            self.nr_throttled.checked_sub(a.nr_throttled)?,
        ))
    }
}

/// `(version, path)` of the cgroup holding the `cpu` controller in a `/proc/PID/cgroup`.
fn own_path(proc_cgroup: &str) -> Option<(Version, &str)> {
    let mut v2 = None;
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        if id == "0" && ctrls.is_empty() {
            v2 = Some((Version::V2, path));
        } else if ctrls.split(',').any(|c| c == "cpu") {
            return Some((Version::V1, path));
        }
    }
    v2
}

/// `(root, mount point)` of the hierarchy of `version` in a `/proc/PID/mountinfo`.
fn mount_of(mountinfo: &str, version: Version) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        let pre: Vec<&str> = pre.split(' ').collect();
        let mut post = post.split(' ');
        let (fstype, _source, opts) = (post.next()?, post.next()?, post.next().unwrap_or(""));
        let hit = match version {
            Version::V2 => fstype == "cgroup2",
            Version::V1 => fstype == "cgroup" && opts.split(',').any(|o| o == "cpu"),
        };
        if !hit {
            return None;
        }
        Some((pre.get(3)?.to_string(), PathBuf::from(pre.get(4)?)))
    })
}

impl Located {
    /// canaryd's cpu cgroup, from `proc_self`'s `cgroup` and `mountinfo`.
    pub fn find(proc_self: &Path) -> Option<Located> {
        let cg = std::fs::read_to_string(proc_self.join("cgroup")).ok()?;
        let mi = std::fs::read_to_string(proc_self.join("mountinfo")).ok()?;
        let (version, path) = own_path(&cg)?;
        let (root, mount) = mount_of(&mi, version)?;
        // Inside a cgroup namespace or a container the mount shows a subtree.
        let rel = path.strip_prefix(root.as_str()).unwrap_or(path);
        let dir = mount.join(rel.trim_start_matches('/'));
        dir.join("cpu.stat").exists().then_some(Located {
            dir,
            mount,
            version,
        })
    }

    /// The counters now.
    pub fn read(&self) -> Option<CgroupCpu> {
        let stat = self.dir.join("cpu.stat");
        let text = std::fs::read_to_string(&stat).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        let (throttled_ns, nr_throttled) = match self.version {
            Version::V2 => (field("throttled_usec")? * 1000, field("nr_throttled")?),
            Version::V1 => (field("throttled_time")?, field("nr_throttled")?),
        };
        Some(CgroupCpu {
            stat,
            throttled_ns,
            nr_throttled,
            quota_cores: self.quota_cores(),
        })
    }

    /// The tightest quota from the cgroup up to the mount point.
    fn quota_cores(&self) -> Option<f64> {
        let mut best: Option<f64> = None;
        let mut dir = Some(self.dir.as_path());
        while let Some(d) = dir.filter(|d| d.starts_with(&self.mount)) {
            if let Some(q) = quota_of(d, self.version) {
                best = Some(best.map_or(q, |b| b.min(q)));
            }
            dir = d.parent();
        }
        best
    }
}

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

/// A cgroup's own quota in cores: v2 `cpu.max` (`max 100000` is none), v1
/// `cpu.cfs_quota_us` over `cpu.cfs_period_us` (-1 is none).
pub(super) fn quota_of(dir: &Path, version: Version) -> Option<f64> {
    let (quota, period) = match version {
        Version::V2 => {
            let max = read(dir, "cpu.max")?;
            let mut f = max.split_whitespace();
            (f.next()?.to_string(), f.next()?.to_string())
        }
        Version::V1 => (
            read(dir, "cpu.cfs_quota_us")?.trim().to_string(),
            read(dir, "cpu.cfs_period_us")?.trim().to_string(),
        ),
    };
    let (q, p) = (quota.parse::<f64>().ok()?, period.parse::<f64>().ok()?);
    (q > 0.0 && p > 0.0).then(|| q / p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_controller_is_found_in_v1_and_v2_listings() {
        let v1 = "9:name=systemd:/\n4:memory:/x\n1:cpu,cpuacct:/canary\n0::/\n";
        assert_eq!(own_path(v1), Some((Version::V1, "/canary")));
        let v2 = "0::/system.slice/canaryd.service\n";
        assert_eq!(
            own_path(v2),
            Some((Version::V2, "/system.slice/canaryd.service"))
        );
        assert_eq!(own_path("garbage"), None);
    }

    #[test]
    fn mounts_are_matched_by_type_and_controller() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n\
                  31 25 0:27 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n\
                  40 25 0:35 /ns /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mount_of(mi, Version::V1),
            Some(("/".into(), "/sys/fs/cgroup/cpu".into()))
        );
        assert_eq!(
            mount_of(mi, Version::V2),
            Some(("/ns".into(), "/sys/fs/cgroup/unified".into()))
        );
    }

    #[test]
    fn quotas_read_in_cores_and_none_when_unlimited() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cpu.max"), "5000 100000\n").unwrap();
        assert_eq!(quota_of(d.path(), Version::V2), Some(0.05));
        std::fs::write(d.path().join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(quota_of(d.path(), Version::V2), None);
        std::fs::write(d.path().join("cpu.cfs_quota_us"), "-1\n").unwrap();
        std::fs::write(d.path().join("cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(quota_of(d.path(), Version::V1), None);
        std::fs::write(d.path().join("cpu.cfs_quota_us"), "150000\n").unwrap();
        assert_eq!(quota_of(d.path(), Version::V1), Some(1.5));
    }
}
