//! The deployment files in `deploy/`: the systemd unit's hardening, rated by systemd itself,
//! the README section it points to, the Kubernetes DaemonSet's config (valid, exporting OTLP to
//! the Collector, and consistent with the pod's env, privileges and scrape annotations), the
//! shard Job (no shell, args Kubernetes expands to a replay canaryd takes, a volume it can
//! write), the image the manifests run, the objects they need, the Collector's scrape of the
//! daemon's `/metrics` and the README's table of config keys; and the test suite's closing line
//! (`scripts/suite-summary.awk`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(rel)
}

#[test]
fn systemd_unit_exposure_is_at_most_2_3() {
    let unit = deploy("systemd/canaryd.service");
    let out = match Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            return canary_testkit::skip(
                "systemd",
                &format!(
                    "systemd-analyze does not run here ({e}); scripts/setup/systemd.sh installs it"
                ),
            )
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
    assert!(level <= 2.3, "exposure {level} > 2.3:\n{text}");
    // What eBPF needs, and nothing more.
    let unit = std::fs::read_to_string(&unit).unwrap();
    assert!(unit.contains("\nType=notify\n"));
    assert!(unit.contains("\nCapabilityBoundingSet=CAP_BPF CAP_PERFMON\n"));
    assert!(unit.contains("\nStateDirectory=canaryd\n"));
    // The release thread may take SCHED_FIFO 2 (one above real-time workers), and no higher.
    assert!(unit.contains("\nLimitRTPRIO=2\n") && unit.contains("\nRestrictRealtime=no\n"));
    // A hard open-file limit a closed loop of 1,000 users fits under (canaryd raises its soft
    // limit to it at start).
    assert!(unit.contains("\nLimitNOFILE=65536\n"));
    // The clock's synchronization is read (adjtimex with modes 0); it cannot be set without
    // CAP_SYS_TIME, which the bounding set leaves out. BPF maps fit the locked-memory limit
    // of kernels that charge them to it.
    assert!(!unit.contains("\nProtectClock=yes"));
    // glibc's adjtimex is the clock_adjtime syscall.
    assert!(unit.contains("\nSystemCallFilter=@system-service adjtimex clock_adjtime "));
    assert!(unit.contains("\nLimitMEMLOCK=8M\n"));
}

/// The replay container's `env` names and `args` items in `shard-job.yaml`, in order.
fn shard_job_env_and_args(job: &str) -> (Vec<String>, Vec<String>) {
    let block = |start: &str| -> Vec<&str> {
        let mut lines = job.lines().skip_while(|l| l.trim() != start);
        let header = lines
            .next()
            .unwrap_or_else(|| panic!("no `{start}` in shard-job.yaml"));
        let indent = header.len() - header.trim_start().len();
        lines
            .take_while(|l| l.len() - l.trim_start().len() > indent || l.trim().is_empty())
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect()
    };
    let env = block("env:")
        .iter()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("- ")?;
            let l = l.strip_prefix('{').unwrap_or(l);
            let name = l.strip_prefix("name: ")?;
            Some(name.split([',', ' ', '}']).next()?.to_string())
        })
        .collect();
    let args = block("args:")
        .iter()
        .map(|l| {
            l.trim()
                .strip_prefix("- ")
                .unwrap_or_else(|| panic!("args are one item a line: {l:?}"))
                .to_string()
        })
        .collect();
    (env, args)
}

/// `$(NAME)` expanded as Kubernetes expands a container's args: each name the container's env
/// declares is replaced; anything else stays as written.
fn k8s_expand(arg: &str, vars: &[(&str, &str)]) -> String {
    let mut out = arg.to_string();
    for (name, value) in vars {
        out = out.replace(&format!("$({name})"), value);
    }
    out
}

/// The `$(NAME)` references in an arg.
fn k8s_refs(arg: &str) -> Vec<&str> {
    arg.split("$(")
        .skip(1)
        .filter_map(|r| r.split(')').next())
        .collect()
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
    let (env, args) = shard_job_env_and_args(&job);
    let shard = args
        .iter()
        .position(|a| a == "--shard")
        .and_then(|i| args.get(i + 1))
        .unwrap_or_else(|| panic!("no --shard in {args:?}"));
    assert_eq!(
        shard,
        &format!("$(SHARD_INDEX)/{n}"),
        "--shard must use the completion index and N = completions = {n}"
    );
    // SHARD_INDEX is the completion index, from the downward API.
    assert!(env.iter().any(|e| e == "SHARD_INDEX"), "{env:?}");
    assert!(
        job.contains(
            "fieldRef: {fieldPath: \"metadata.annotations['batch.kubernetes.io/job-completion-index']\"}"
        ),
        "SHARD_INDEX does not come from the job-completion-index annotation"
    );
}

/// The image may have no shell: the Job runs canaryd itself, and every `$(VAR)` in its args
/// is one Kubernetes expands (a variable the container declares); expanded, they are args
/// canaryd takes.
#[test]
fn shard_job_has_no_shell_and_its_args_expand_to_a_replay_canaryd_takes() {
    let job = std::fs::read_to_string(deploy("k8s/shard-job.yaml")).unwrap();
    let code: Vec<&str> = job
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert!(
        !code.iter().any(|l| l.trim().starts_with("command:")),
        "the Job overrides the entrypoint"
    );
    for shell in ["/bin/sh", "${", "exec "] {
        assert!(!code.iter().any(|l| l.contains(shell)), "{shell} in {job}");
    }
    let (env, args) = shard_job_env_and_args(&job);
    assert_eq!(args.first().map(String::as_str), Some("replay"), "{args:?}");
    for arg in &args {
        for r in k8s_refs(arg) {
            assert!(
                env.iter().any(|e| e == r),
                "$({r}) in {arg:?} is no variable the container declares ({env:?}): \
                 Kubernetes leaves it as written"
            );
        }
    }
    for (flag, value) in [
        ("--start-at", "$(START_AT)"),
        ("--output-dir", "/results/shard-$(SHARD_INDEX)"),
    ] {
        let i = args.iter().position(|a| a == flag);
        assert_eq!(
            i.and_then(|i| args.get(i + 1)).map(String::as_str),
            Some(value),
            "{args:?}"
        );
    }
    // Expanded as in pod 1 with the instant the README's command fills in, canaryd takes every
    // arg and gets as far as the trace, which is not here.
    let script = format!("{FILL_START_AT}; printf %s \"$START_AT\"");
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let start_at = String::from_utf8(out.stdout).unwrap();
    let vars = [("SHARD_INDEX", "1"), ("START_AT", start_at.as_str())];
    let expanded: Vec<String> = args.iter().map(|a| k8s_expand(a, &vars)).collect();
    let trace = expanded
        .iter()
        .position(|a| a == "--trace")
        .and_then(|i| expanded.get(i + 1))
        .expect("a --trace");
    assert!(!Path::new(trace).exists(), "{trace} exists here");
    let out = Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(&expanded)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(trace.as_str()), "{expanded:?}: {err}");
}

/// The Job's unprivileged user can write to a new, root-owned volume (fsGroup), and the
/// volume is one that pods on several nodes can mount at once.
#[test]
fn shard_job_can_write_its_results_volume_from_every_node() {
    let job = std::fs::read_to_string(deploy("k8s/shard-job.yaml")).unwrap();
    let uid = job
        .lines()
        .find_map(|l| l.trim().strip_prefix("runAsUser: "))
        .expect("the Job sets runAsUser");
    let pod_level = job
        .lines()
        .skip_while(|l| l.trim() != "restartPolicy: Never")
        .take_while(|l| l.trim() != "containers:")
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        pod_level.contains("securityContext:") && pod_level.contains(&format!("fsGroup: {uid}")),
        "no pod-level fsGroup {uid}:\n{pod_level}"
    );
    assert!(job.contains("persistentVolumeClaim: {claimName: canaryd-results}"));
    for text in [
        &job,
        &std::fs::read_to_string(deploy("k8s/namespace.yaml")).unwrap(),
    ] {
        assert!(text.contains("ReadWriteMany"), "{text}");
    }
}

/// Both manifests run one image, named after this version, that the Dockerfile in the repo
/// builds: its user is the pods' and its entrypoint canaryd. The binary's glibc symbol versions
/// are ones the Dockerfile's base image has (a binary built here runs there).
#[test]
fn manifests_run_the_image_the_dockerfile_builds() {
    let image = format!("registry.example.com/canaryd:{}", env!("CARGO_PKG_VERSION"));
    for file in ["k8s/daemonset.yaml", "k8s/shard-job.yaml"] {
        let yaml = std::fs::read_to_string(deploy(file)).unwrap();
        let images: Vec<&str> = yaml
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image: "))
            .collect();
        assert_eq!(images, [image.as_str()], "{file}");
        assert!(
            yaml.contains("runAsUser: 65532") && yaml.contains("deploy/container/Dockerfile"),
            "{file}"
        );
    }
    let dockerfile = std::fs::read_to_string(deploy("container/Dockerfile")).unwrap();
    let code: Vec<&str> = dockerfile
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(code.first(), Some(&"FROM debian:bookworm-slim"), "{code:?}");
    for line in [
        "COPY canaryd /usr/local/bin/canaryd",
        "USER 65532:65532",
        "ENTRYPOINT [\"/usr/local/bin/canaryd\"]",
    ] {
        assert!(code.contains(&line), "no {line:?} in {code:?}");
    }
    assert!(dockerfile.contains("ca-certificates"));
    // Never claimed to be tested.
    assert!(dockerfile.contains("never been built or tested"));
    assert!(readme_section("Running on Kubernetes").contains("**It is untested**"));
    // Debian 12's glibc is 2.36: every GLIBC_2.x version the binary asks for must be at most
    // that (the version names are strings in its dynamic section).
    let bin = std::fs::read(env!("CARGO_BIN_EXE_canaryd")).unwrap();
    let needle = b"GLIBC_2.";
    let mut newest = 0u32;
    let mut i = 0;
    while let Some(at) = bin[i..].windows(needle.len()).position(|w| w == needle) {
        let rest = &bin[i + at + needle.len()..];
        let digits: String = rest
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .map(|&b| b as char)
            .collect();
        if let Ok(minor) = digits.parse::<u32>() {
            newest = newest.max(minor);
        }
        i += at + needle.len();
    }
    assert!(newest > 0, "no GLIBC_2.x version in the binary");
    assert!(
        newest <= 36,
        "the binary needs GLIBC_2.{newest}; debian:bookworm-slim has 2.36"
    );
}

/// The command `shard-job.yaml` and the README give for filling in `START_AT`.
const FILL_START_AT: &str = "START_AT=$(date -u -d '+2 minutes' +%Y-%m-%dT%H:%M:%SZ)";

#[test]
fn shard_job_starts_every_pod_at_one_instant_filled_in_at_creation() {
    let job = std::fs::read_to_string(deploy("k8s/shard-job.yaml")).unwrap();
    assert!(job.contains("- $(START_AT)"), "{job}");
    assert!(
        job.contains("- {name: START_AT, value: \"__START_AT__\"}"),
        "{job}"
    );
    let fill = "sed \"s/__START_AT__/$START_AT/\" deploy/k8s/shard-job.yaml | kubectl create -f -";
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    for (name, text) in [("shard-job.yaml", &job), ("README.md", &readme)] {
        assert!(text.contains(FILL_START_AT), "{name} lacks {FILL_START_AT}");
        assert!(text.contains(fill), "{name} lacks {fill}");
    }
    // The instant that command produces is one canaryd takes; the placeholder is refused.
    let script = format!("{FILL_START_AT}; printf %s \"$START_AT\"");
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let start_at = String::from_utf8(out.stdout).unwrap();
    for (value, accepted) in [(start_at.as_str(), true), ("__START_AT__", false)] {
        let out = Command::new(env!("CARGO_BIN_EXE_canaryd"))
            .args([
                "replay",
                "--trace",
                "/nonexistent/trace.jsonl",
                "--model",
                "m",
            ])
            .args(["--url", "http://127.0.0.1:9", "--start-at", value])
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(!err.contains("RFC 3339"), accepted, "{value:?}: {err}");
        if accepted {
            assert!(err.contains("/nonexistent/trace.jsonl"), "{value:?}: {err}");
        }
    }
}

#[test]
fn systemd_unit_points_to_a_readme_section_that_exists() {
    let unit = std::fs::read_to_string(deploy("systemd/canaryd.service")).unwrap();
    let section = unit
        .lines()
        .find_map(|l| l.split("see README (\"").nth(1)?.split("\")").next())
        .expect("the unit names a README section as: see README (\"Section\")");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    assert!(
        readme
            .lines()
            .any(|l| l.starts_with('#') && l.trim_start_matches('#').trim() == section),
        "README.md has no heading {section:?}"
    );
}

/// The unit's settings in order, `(key, value)`, comments left out.
fn unit_settings() -> Vec<(String, String)> {
    std::fs::read_to_string(deploy("systemd/canaryd.service"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The value of the unit's one `key=` line.
fn unit_setting(key: &str) -> String {
    let found: Vec<String> = unit_settings()
        .into_iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(found.len(), 1, "{key}= set {} times", found.len());
    found[0].clone()
}

/// The unit's comments, joined into one line of single-spaced words.
fn unit_comments() -> String {
    let unit = std::fs::read_to_string(deploy("systemd/canaryd.service")).unwrap();
    let comments: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .collect();
    comments
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// SIGHUP is asynchronous: `systemctl reload` succeeded whatever canaryd then made of the file.
/// The unit runs check-config first, on the binary and file ExecStart runs, as canaryd's own
/// command line takes it, and systemd stops at a failing line: a file check-config refuses is
/// never signalled, and the reload fails.
#[test]
fn systemd_reload_fails_on_a_config_check_config_refuses() {
    let start = unit_setting("ExecStart");
    let start: Vec<&str> = start.split_whitespace().collect();
    let [bin, "run", "--config", path] = start[..] else {
        panic!("ExecStart is not `BIN run --config PATH`: {start:?}");
    };
    let reload: Vec<String> = unit_settings()
        .into_iter()
        .filter(|(k, _)| k == "ExecReload")
        .map(|(_, v)| v)
        .collect();
    // No `-` prefix: systemd would ignore the check's failure.
    assert_eq!(
        reload,
        [
            format!("{bin} check-config {path}"),
            "/bin/kill -HUP $MAINPID".to_string()
        ],
        "check-config must run before the SIGHUP"
    );
    let check: Vec<&str> = reload[0].split_whitespace().skip(1).collect();
    assert_eq!(check.last(), Some(&path));
    // That command line, run by canaryd on another file: a refused one fails (exit 1), the
    // example passes (its warnings do not fail it).
    let check_config = |file: &Path| {
        Command::new(env!("CARGO_BIN_EXE_canaryd"))
            .args(&check[..check.len() - 1])
            .arg(file)
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("canaryd.toml");
    let example = std::fs::read_to_string(deploy("canaryd.example.toml")).unwrap();
    std::fs::write(
        &bad,
        example.replacen("target = \"vllm\"", "target = \"vlm\"", 1),
    )
    .unwrap();
    let out = check_config(&bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no target \"vlm\""), "{err}");
    let out = check_config(&deploy("canaryd.example.toml"));
    assert!(out.status.success(), "{out:?}");
    let section = readme_section("Running under systemd");
    assert!(section.contains("check-config"), "{section}");
}

/// What canaryd writes into its state directory gets the directory's own access: with the
/// group allowed to read the folder (StateDirectoryMode), UMask lets it read the files too,
/// and neither lets others in. (UMask=0077 under 0750 made the group's access an illusion.)
#[test]
fn systemd_state_directory_mode_and_umask_agree() {
    let octal = |key: &str| u32::from_str_radix(&unit_setting(key), 8).unwrap();
    let (umask, mode) = (octal("UMask"), octal("StateDirectoryMode"));
    let (files, dirs) = (0o666 & !umask, 0o777 & !umask);
    assert_eq!(
        dirs, mode,
        "folders canaryd makes differ from the state directory"
    );
    assert_eq!(files & 0o040 != 0, mode & 0o050 == 0o050, "group read");
    assert_eq!((files | dirs | mode) & 0o007, 0, "others get access");
    assert!(
        files & 0o020 == 0 && mode & 0o020 == 0,
        "the group may write"
    );
    // The choice and its reason are said where they are set.
    let comments = unit_comments();
    for part in ["no secret", "`canaryd` group"] {
        assert!(comments.contains(part), "the unit does not say {part:?}");
    }
}

/// Type=notify: the start lasts until READY=1, which comes after the history is opened and a
/// killed process's runs are recovered; systemd's default 90s would kill a long recovery, over
/// and over. The limit is set above it and its reason said.
#[test]
fn systemd_start_timeout_leaves_room_for_recovery() {
    let value = unit_setting("TimeoutStartSec");
    let secs: u64 = match value.strip_suffix("min") {
        Some(m) => m.parse::<u64>().unwrap() * 60,
        None => value.trim_end_matches('s').parse().unwrap(),
    };
    assert!(
        secs > 90,
        "TimeoutStartSec={value} is not above the default 90s"
    );
    let comments = unit_comments();
    for part in ["READY=1", "records.jsonl", "default 90s"] {
        assert!(comments.contains(part), "the unit does not say {part:?}");
    }
    assert!(readme_section("Running under systemd").contains(&format!("TimeoutStartSec={value}")));
}

/// ProtectSystem=strict leaves only the StateDirectory writable: a state_dir or artifacts_dir
/// elsewhere needs ReadWritePaths=, which the unit and the README say how to add.
#[test]
fn systemd_unit_says_how_to_write_outside_the_state_directory() {
    assert_eq!(unit_setting("ProtectSystem"), "strict");
    assert_eq!(unit_setting("StateDirectory"), "canaryd");
    let comments = unit_comments();
    let section = readme_section("Running under systemd");
    for text in [&comments, &section] {
        for part in ["ReadWritePaths=", "systemctl edit canaryd", "artifacts_dir"] {
            assert!(text.contains(part), "{part:?} not said in {text}");
        }
    }
}

/// The README's text under `heading` (a `###` heading), up to the next heading of any level.
fn readme_section(heading: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    readme
        .lines()
        .skip_while(|l| l.trim_start_matches('#').trim() != heading || !l.starts_with('#'))
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Pod spec cannot set the open-file limit: each Kubernetes manifest says where it comes
/// from, suggests the systemd unit's own `LimitNOFILE` and points to a README section that
/// exists and says how to raise it with either runtime and how to see it (`canaryd doctor`).
#[test]
fn k8s_manifests_say_where_the_open_file_limit_comes_from_and_how_to_raise_it() {
    let unit = std::fs::read_to_string(deploy("systemd/canaryd.service")).unwrap();
    let nofile = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("the unit sets LimitNOFILE");
    for file in ["k8s/daemonset.yaml", "k8s/shard-job.yaml"] {
        let yaml = std::fs::read_to_string(deploy(file)).unwrap();
        let comments: String = yaml
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix('#'))
            .collect::<Vec<_>>()
            .join(" ");
        let comments = comments.split_whitespace().collect::<Vec<_>>().join(" ");
        for part in [
            "RLIMIT_NOFILE",
            "Pod spec cannot set",
            "raises its soft limit to",
            "in_flight_cap",
            &format!("LimitNOFILE={nofile}"),
        ] {
            assert!(comments.contains(part), "{file} does not say {part:?}");
        }
        let section = comments
            .split("see README (\"")
            .nth(1)
            .and_then(|r| r.split("\")").next())
            .unwrap_or_else(|| panic!("{file} names no README section"));
        let text = readme_section(section);
        assert!(!text.is_empty(), "README.md has no heading {section:?}");
        for part in [
            "RLIMIT_NOFILE",
            "default_ulimits = [\"nofile=",
            "base_runtime_spec",
            &format!("LimitNOFILE={nofile}"),
            &format!("the systemd unit's {nofile}"),
            "canaryd doctor",
            "in_flight_cap",
        ] {
            assert!(
                text.contains(part),
                "README {section:?} does not say {part:?}"
            );
        }
    }
}

/// The `canaryd.toml` embedded in the DaemonSet's ConfigMap, dedented.
fn configmap_toml(yaml: &str) -> String {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "canaryd.toml: |");
    let header = lines
        .next()
        .expect("a `canaryd.toml: |` block in daemonset.yaml");
    let indent = header.len() - header.trim_start().len() + 2;
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn daemonset_config_is_valid_and_matches_the_pod() {
    let yaml = std::fs::read_to_string(deploy("k8s/daemonset.yaml")).unwrap();
    let toml = configmap_toml(&yaml);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, &toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .arg("check-config")
        .arg(&path)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n---\n{toml}");
    assert!(text.contains("1 workload(s)"), "{text}");
    let config = canaryd::config::Config::parse(&toml, &path, dir.path()).unwrap();
    // The probes reach the status endpoint on the pod's address.
    assert!(
        config.status_listen.ip().is_unspecified(),
        "{}",
        config.status_listen
    );

    // It exports to a Collector's OTLP/HTTP receiver (the port collector.yaml listens on for
    // HTTP), as `host.name` of the node (below), and check-config says so.
    let endpoint = config
        .otlp
        .endpoint
        .as_deref()
        .expect("the ConfigMap names an [otlp] endpoint");
    let collector = std::fs::read_to_string(deploy("otel/collector.yaml")).unwrap();
    let http_port = collector
        .lines()
        .skip_while(|l| l.trim() != "http:")
        .find_map(|l| l.trim().strip_prefix("endpoint: "))
        .and_then(|e| e.rsplit(':').next())
        .expect("collector.yaml's OTLP http receiver");
    assert!(
        endpoint.starts_with("http") && endpoint.ends_with(&format!(":{http_port}")),
        "{endpoint}: not the collector's OTLP/HTTP port {http_port}"
    );
    assert!(
        text.contains(&format!("OTLP export to {endpoint}")),
        "{text}"
    );
    // A Prometheus that scrapes annotated pods finds the daemon's own /metrics.
    let annotation = |key: &str| {
        yaml.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("prometheus.io/{key}: ")))
            .unwrap_or_else(|| panic!("no prometheus.io/{key} annotation"))
            .trim_matches('"')
    };
    assert_eq!(annotation("scrape"), "true");
    assert_eq!(annotation("path"), "/metrics");
    assert_eq!(
        annotation("port"),
        config.status_listen.port().to_string(),
        "the status port"
    );

    // Every variable the pod sets is one the config reads, and the other way round; besides
    // them, the node's name as the exported `host.name`.
    let mut env: Vec<&str> = yaml
        .lines()
        .skip_while(|l| l.trim() != "env:")
        .take_while(|l| l.trim() != "ports:")
        .filter_map(|l| l.trim().strip_prefix("- name: "))
        .collect();
    let host = ["NODE_NAME", "OTEL_RESOURCE_ATTRIBUTES"];
    assert!(host.iter().all(|v| env.contains(v)), "{env:?}");
    assert!(yaml.contains("fieldPath: spec.nodeName") && yaml.contains("host.name=$(NODE_NAME)"));
    env.retain(|v| !host.contains(v));
    let named: Vec<String> = config
        .targets
        .values()
        .filter_map(|t| match &t.api_key {
            Some(canaryd::config::ApiKeySource::Env(v)) => Some(v.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(env, named, "the pod's env and the config's api_key_env");

    // An unprivileged pod cannot load eBPF programs: the config must not ask for it, and
    // capabilities added for it would be a false promise.
    let code: Vec<&str> = yaml
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    let root = code.iter().any(|l| l.trim() == "runAsUser: 0");
    if !root {
        assert!(
            !config.telemetry.ebpf,
            "ebpf on in a pod running as non-root"
        );
        assert!(
            !code.iter().any(|l| l.trim().starts_with("add:")),
            "capabilities added to a non-root container do not reach its process"
        );
    }
}

/// The longest canaryd's own shutdown can take: the largest workload's `grace_period` (for
/// requests in flight) plus the final export flush (`[otlp] flush_timeout`).
fn longest_shutdown(config: &canaryd::config::Config) -> std::time::Duration {
    let grace = config
        .workloads
        .iter()
        .map(|w| w.grace_period)
        .max()
        .expect("the config has a workload");
    grace + config.otlp.flush_timeout
}

/// On SIGTERM canaryd lets requests in flight finish, records the partial run and flushes its
/// exports: the kubelet (DaemonSet) and systemd (the unit, running the example config) must
/// wait longer than that before their SIGKILL.
#[test]
fn pods_and_the_unit_wait_for_canaryds_own_shutdown() {
    let yaml = std::fs::read_to_string(deploy("k8s/daemonset.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("canaryd.toml");
    let config = canaryd::config::Config::parse(&configmap_toml(&yaml), &path, dir.path()).unwrap();
    let pod: u64 = yaml
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds: "))
        .expect("the DaemonSet sets terminationGracePeriodSeconds (Kubernetes' default is 30s)")
        .parse()
        .unwrap();
    let need = longest_shutdown(&config);
    assert!(
        std::time::Duration::from_secs(pod) >= need,
        "terminationGracePeriodSeconds {pod} < grace_period + flush_timeout = {need:?}"
    );

    let unit = std::fs::read_to_string(deploy("systemd/canaryd.service")).unwrap();
    let stop: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec=")?.strip_suffix('s'))
        .expect("the unit sets TimeoutStopSec in seconds")
        .parse()
        .unwrap();
    let example = deploy("canaryd.example.toml");
    let config = canaryd::config::Config::load(&example).unwrap();
    let need = longest_shutdown(&config);
    assert!(
        std::time::Duration::from_secs(stop) >= need,
        "TimeoutStopSec={stop}s < the example's grace_period + flush_timeout = {need:?}"
    );
    // Each says the rule, so that an edit of a config does not outgrow it unseen.
    for text in [&yaml, &unit] {
        let comments: String = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix('#'))
            .collect::<Vec<_>>()
            .join(" ");
        let comments = comments.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            comments.contains("grace_period") && comments.contains("flush_timeout"),
            "the stop timeout's rule is not said: {comments}"
        );
    }
}

/// `kubectl apply` on a fresh cluster: every namespace the manifests use is a Namespace in
/// deploy/k8s, applied first in the README, and every Secret, ConfigMap and claim they use is
/// defined there or has a stub (a command or a commented manifest) in namespace.yaml.
#[test]
fn k8s_manifests_name_only_objects_the_repo_defines_or_stubs() {
    let dir = deploy("k8s");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort();
    let code = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    // Objects defined: (kind, name) of each document.
    let mut defined = Vec::new();
    for (_, text) in &files {
        for doc in text.split("\n---") {
            let lines = code(doc);
            let kind = lines.iter().find_map(|l| l.strip_prefix("kind: "));
            let name = lines
                .iter()
                .skip_while(|l| l.as_str() != "metadata:")
                .find_map(|l| l.trim().strip_prefix("name: "));
            if let (Some(k), Some(n)) = (kind, name) {
                defined.push((k.to_string(), n.to_string()));
            }
        }
    }
    let stubs = std::fs::read_to_string(dir.join("namespace.yaml")).unwrap();
    let mut used = 0;
    for (file, text) in &files {
        for l in code(text) {
            let l = l.trim();
            if let Some(ns) = l.strip_prefix("namespace: ") {
                used += 1;
                assert!(
                    defined.contains(&("Namespace".to_string(), ns.to_string())),
                    "{file}: namespace {ns} is defined nowhere in deploy/k8s"
                );
            }
            let refs = [
                ("secretKeyRef: {name: ", "Secret", "create secret generic "),
                ("configMap: {name: ", "ConfigMap", "create configmap "),
                (
                    "persistentVolumeClaim: {claimName: ",
                    "PersistentVolumeClaim",
                    "",
                ),
            ];
            for (prefix, kind, command) in refs {
                let Some(name) = l
                    .split(prefix)
                    .nth(1)
                    .and_then(|r| r.split([',', '}']).next())
                else {
                    continue;
                };
                used += 1;
                if defined.contains(&(kind.to_string(), name.to_string())) {
                    continue;
                }
                let stubbed = if command.is_empty() {
                    stubs.contains(&format!(
                        "#   kind: {kind}\n#   metadata:\n#     name: {name}\n"
                    ))
                } else {
                    stubs.contains(&format!("kubectl -n canaryd {command}{name} "))
                };
                assert!(
                    stubbed,
                    "{file}: {kind} {name} has no stub in namespace.yaml"
                );
            }
        }
    }
    assert!(used >= 6, "only {used} references found");
    // The README applies the namespace before anything that lives in it.
    let section = readme_section("Running on Kubernetes");
    let at = |s: &str| {
        section
            .find(s)
            .unwrap_or_else(|| panic!("README \"Running on Kubernetes\" lacks {s}"))
    };
    let ns = at("kubectl apply -f deploy/k8s/namespace.yaml");
    assert!(ns < at("kubectl -n canaryd create secret generic canaryd "));
    assert!(ns < at("kubectl apply -f deploy/k8s/daemonset.yaml"));
    assert!(ns < at("kubectl -n canaryd create configmap canaryd-traces "));
}

/// The Collector scrapes the daemon's own `/metrics` (skips, history write errors), which
/// OTLP does not carry, into the same metrics backend.
#[test]
fn collector_scrapes_the_daemons_own_metrics() {
    let collector = std::fs::read_to_string(deploy("otel/collector.yaml")).unwrap();
    let code: Vec<&str> = collector
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    let has = |s: &str| code.iter().any(|l| l.trim() == s);
    assert!(has("prometheus/canaryd:") && has("metrics_path: /metrics"));
    // Defaulting to canaryd's own default listen address: an unset variable is no empty target.
    assert!(has(
        "- targets: [\"${env:CANARYD_STATUS_ADDR:-127.0.0.1:9464}\"]"
    ));
    // None of the scrape's address labels, whichever names the receiver's version gives them.
    for key in [
        "server.address",
        "server.port",
        "url.scheme",
        "net.host.name",
        "net.host.port",
        "http.scheme",
    ] {
        assert!(
            has(&format!("- {{key: {key}, action: delete}}")),
            "resource/canaryd-scrape keeps {key}"
        );
    }
    let pipeline = code
        .iter()
        .skip_while(|l| l.trim() != "metrics/canaryd:")
        .take(4)
        .map(|l| l.trim())
        .collect::<Vec<_>>();
    assert!(
        pipeline.contains(&"receivers: [prometheus/canaryd]")
            && pipeline.contains(&"exporters: [prometheusremotewrite]"),
        "{pipeline:?}"
    );
}

/// Each key a simple table of the config file takes (its raw struct's fields) is in the
/// README's table of keys.
#[test]
fn readme_config_table_names_every_key() {
    let raw =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config/raw.rs"))
            .unwrap();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    for (strukt, table) in [
        ("Status", "[status]"),
        ("Export", "[export]"),
        ("Telemetry", "[telemetry]"),
        ("Otlp", "[otlp]"),
        ("Baseline", "[baseline]"),
        ("Target", "[targets.NAME]"),
    ] {
        let body = raw
            .split(&format!("pub struct {strukt} {{\n"))
            .nth(1)
            .and_then(|r| r.split("\n}").next())
            .unwrap_or_else(|| panic!("no struct {strukt} in raw.rs"));
        let fields: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("    pub ")?.split(':').next())
            .collect();
        assert!(!fields.is_empty(), "{strukt}");
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{table}` |")))
            .unwrap_or_else(|| panic!("no README row for {table}"));
        for f in fields {
            let section = format!("`{}.{f}]`", table.trim_end_matches(']'));
            assert!(
                row.contains(&format!("`{f}`")) || row.contains(&section),
                "README's {table} row lacks `{f}`"
            );
        }
    }
}

#[test]
fn the_suite_counts_a_skip_as_skipped_not_passed() {
    let dir = tempfile::tempdir().unwrap();
    // What canary_testkit::skip appends (one test skipping twice counts once), and the `test
    // result:` lines of two test binaries.
    let skips = dir.path().join("skips");
    std::fs::write(
        &skips,
        "ebpf\tebpf/tests/integration.rs:14\tload::follows\tnot root: EPERM\n\
         ebpf\tebpf/tests/integration.rs:14\tload::follows\tagain\n\
         systemd\tdaemon/tests/deploy.rs:24\tsystemd_unit\tno systemd-analyze\n",
    )
    .unwrap();
    let log = dir.path().join("log");
    std::fs::write(
        &log,
        "test result: ok. 10 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
         test result: FAILED. 5 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out\n",
    )
    .unwrap();
    let summary = |status: &str| {
        let out = Command::new("awk")
            .arg("-v")
            .arg(format!("skips={}", skips.display()))
            .args(["-v", &format!("status={status}"), "-f"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/suite-summary.awk"))
            .arg(&log)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = summary("101");
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines,
        [
            "  skipped [ebpf] load::follows (ebpf/tests/integration.rs:14): not root: EPERM",
            "  skipped [systemd] systemd_unit (daemon/tests/deploy.rs:24): no systemd-analyze",
            "canaryd: 13 passed, 1 failed, 2 skipped",
        ]
    );
    // A failed run whose failure left no result line says so rather than "0 failed".
    std::fs::write(&log, "").unwrap();
    std::fs::write(&skips, "").unwrap();
    assert_eq!(
        summary("101").trim(),
        "canaryd: 0 passed, 0 failed, 0 skipped (a test binary failed without a result line: see above)"
    );
}
