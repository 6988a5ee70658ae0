//! The deployment files in `deploy/`: the systemd unit's hardening, rated by systemd itself, and
//! the Kubernetes shard Job's consistency with `--shard`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(rel)
}

#[test]
fn systemd_unit_exposure_is_at_most_2_0() {
    let unit = deploy("systemd/canaryd.service");
    let out = match Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: systemd-analyze is not available here ({e})");
            return;
        }
    };
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for canaryd.service:")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in systemd-analyze's output:\n{text}"));
    assert!(level <= 2.0, "exposure {level} > 2.0:\n{text}");
    // What eBPF needs, and nothing more.
    let unit = std::fs::read_to_string(&unit).unwrap();
    assert!(unit.contains("\nType=notify\n"));
    assert!(unit.contains("\nCapabilityBoundingSet=CAP_BPF CAP_PERFMON\n"));
    assert!(unit.contains("\nStateDirectory=canaryd\n"));
}

#[test]
fn shard_job_runs_one_shard_per_completion_index() {
    let job = std::fs::read_to_string(deploy("k8s/shard-job.yaml")).unwrap();
    let field = |name: &str| -> u32 {
        job.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{name}` in shard-job.yaml"))
    };
    let n = field("completions:");
    assert_eq!(field("parallelism:"), n);
    assert!(job.contains("completionMode: Indexed"));
    assert!(
        job.contains(&format!("--shard \"${{JOB_COMPLETION_INDEX}}/{n}\"")),
        "--shard must use the completion index and N = completions = {n}"
    );
}
