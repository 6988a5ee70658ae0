//! Kernel socket timing (eBPF) joined to a real replay against `canaryd sim`, checked against
//! the simulator's own ground truth on the same monotonic clock; and what happens without the
//! privileges to load it. CI runs as root, so the programs really load; elsewhere these tests
//! skip, counted by the suite and saying why.

mod common;

use canary_testkit::skip;
use common::{shared, text, CANARYD};
use std::path::Path;
use std::process::{Command, Output};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

/// Whether this process loads the programs (it is root, and the kernel lets root): `Err` says
/// why not when the host is the cause (not root, no BTF, refused: lockdown, seccomp, a
/// container without CAP_BPF). Any other failure as root is a bug and fails the test.
fn host_loads_ebpf() -> Result<(), String> {
    use canary_ebpf::Unavailable;
    if !is_root() {
        return Err("loading eBPF programs needs root (CI runs as root)".into());
    }
    match canary_ebpf::Tracer::start(std::process::id()) {
        Ok(_) => Ok(()),
        Err(e @ (Unavailable::NotPermitted(_) | Unavailable::NoBtf(_))) => Err(format!(
            "root, but this host does not load eBPF programs: {e}"
        )),
        Err(e) => panic!("eBPF failed as root: {e}"),
    }
}

/// `None` (and a counted skip) when the test cannot run here. The skip fails the test where
/// `CANARYD_REQUIRE` lists `ebpf` (scripts/test.sh does when `canaryd doctor` found it
/// available).
fn skip_unless(need_root: bool) -> Option<()> {
    if let Err(reason) = canary_ebpf::built() {
        skip("ebpf", reason);
        return None;
    }
    if need_root {
        if let Err(why) = host_loads_ebpf() {
            skip("ebpf", &why);
            return None;
        }
    }
    Some(())
}

/// `canaryd sim` as a child process with a ground-truth log, killed on drop.
struct Sim {
    _child: common::Child,
    port: u16,
}

impl Sim {
    fn start(dir: &Path) -> Sim {
        let truth = dir.join("truth.jsonl");
        let (child, port) = common::sim(&["--truth-log", truth.to_str().unwrap()]);
        Sim {
            _child: child,
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// `[wrapper...] canaryd replay` of the 20-row Mooncake arXiv trace into `DIR/out`.
fn replay(dir: &Path, wrapper: &[&str], url: &str, extra: &[&str]) -> Output {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(CANARYD);
            c
        }
        None => Command::new(CANARYD),
    };
    cmd.args(["replay", "--trace", trace.to_str().unwrap(), "--url", url])
        .args([
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
            "--speedup",
            "20",
        ])
        .args(extra)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("canaryd runs")
}

fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("out/summary.json")).unwrap()).unwrap()
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v}"))
}

#[test]
fn kernel_timing_splits_ttft_and_agrees_with_the_simulators_truth() {
    let Some(()) = skip_unless(true) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path());
    let out = replay(dir.path(), &[], &sim.url(), &[]);
    assert!(out.status.success(), "{}", text(&out));
    drop(sim); // flushes the truth log
    let summary = summary(dir.path());
    assert_eq!(summary["telemetry_sources"]["ebpf"]["state"], "available");
    assert_eq!(summary["kernel"]["requests_joined"], 20, "{summary}");
    assert_eq!(summary["kernel"]["events_lost"], 0);
    let t0 = summary["t0_monotonic_ns"].as_u64().unwrap() as f64;
    let run_id = summary["run"]["run_id"].as_str().unwrap().to_string();
    let truth: std::collections::HashMap<String, serde_json::Value> =
        json_lines(&dir.path().join("truth.jsonl"))
            .into_iter()
            .filter_map(|t| Some((t["request_id"].as_str()?.to_string(), t)))
            .collect();
    let records = json_lines(&dir.path().join("out/records.jsonl"));
    assert_eq!(records.len(), 20);
    for r in &records {
        let k = &r["kernel"];
        assert!(k.is_object(), "every request was seen by the kernel: {r}");
        // The parts tile TTFT as canaryd's code saw it (client overhead ends at its read);
        // `ttft_ms` itself is the kernel's receive stamp of the token, no later.
        let ttft = f(&r["rx"]["userspace"], "ttft_ms");
        assert!(f(r, "ttft_ms") <= ttft, "{r}");
        let (rw, sw, rem, co) = (
            f(k, "request_write_ms"),
            f(k, "server_wait_ms"),
            f(k, "remainder_ms"),
            f(k, "client_overhead_ms"),
        );
        // Each boundary is a distinct event after the one before: canaryd stamps `sent`
        // before its write reaches TCP, the server answers only after reading the request, and
        // canaryd reads only what has arrived; each takes microseconds, so none of these is
        // zero (the record keeps µs). `remainder` may be: the first token can come with the
        // head.
        assert!(rw > 0.0 && sw > 0.0 && co > 0.0, "{k}");
        assert!(sw <= ttft, "{r}");
        // The parts tile TTFT; the slack is the µs rounding of the record's ms fields.
        assert!((rw + sw + rem + co - ttft).abs() < 0.01, "{r}");
        // The prompt is one word per token, each at least " w": the body alone is larger.
        let input = r["input_tokens"].as_u64().unwrap();
        assert!(k["bytes_sent"].as_u64().unwrap() > 2 * input, "{r}");
        assert!(k["bytes_received"].as_u64().unwrap() > 0, "{r}");
        assert!(
            k["srtt_us"].is_number() && k["retransmits"].is_number(),
            "{k}"
        );
        assert_eq!(
            k["connect_ms"].is_number(),
            r["connect_ms"].is_number(),
            "{r}"
        );
        assert!(k["chunk_delay_p99_ms"].as_f64().unwrap() >= f(k, "chunk_delay_p50_ms"));
        // Order on one clock (µs rounding aside): first send before last send, the response's
        // last bytes in the kernel before canaryd saw the end; the connection stayed open.
        assert!(f(k, "first_send_ms") <= rw + 0.002, "{k}");
        let last_in = f(k, "last_received_ms");
        assert!(
            last_in >= rw + sw - 0.002 && last_in <= f(&r["rx"]["userspace"], "e2e_ms") + 0.002,
            "{r}"
        );
        assert!(k["closed_ms"].is_null(), "{k}");

        // Against the simulator's truth, on the same clock. Strict causality only: the first
        // response bytes reached canaryd's kernel after the sim had the whole request, and the
        // first token's bytes after the sim had written its response head.
        let tr = &truth[&format!("{run_id}-{}", r["id"])];
        let sent = t0 + f(r, "sent_at_ms") * 1e6;
        let first_in = sent + (rw + sw) * 1e6;
        let first_token_in = first_in + rem * 1e6;
        let slack = 2_000.0; // ns: ms fields carry µs rounding
        assert!(first_in + slack > f(tr, "body_received_ns"), "{r}\n{tr}");
        assert!(first_token_in + slack > f(tr, "first_byte_ns"), "{r}\n{tr}");
    }
}

/// Behind TLS (a rustls terminator, which sends two session tickets after the handshake) the
/// tickets reach the client after a new connection's first request: that request gets no
/// server wait nor remainder (they were the tickets' arrival and the rest of the wait), the
/// requests on the reused connection get the server's real wait.
#[test]
fn a_new_tls_connections_tickets_are_not_taken_for_the_response() {
    let Some(()) = skip_unless(true) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend: std::net::SocketAddr = format!("127.0.0.1:{}", sim.port).parse().unwrap();
    let (port, ca_pem) = runtime.block_on(canary_testkit::tls_terminator(backend));
    std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
    let out = Command::new(CANARYD)
        .args(["profile", "--url", &format!("https://localhost:{port}")])
        .args([
            "--model",
            "canary-sim",
            "--ca-bundle",
            "ca.pem",
            "--no-nvml",
        ])
        .args([
            "--concurrency",
            "1",
            "--request-count",
            "4",
            "--isl",
            "16",
            "--osl",
            "4",
        ])
        .args(["-H", "x-sim-fault: stall_first_ms=300", "-o", "out"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("canaryd runs");
    assert!(out.status.success(), "{}", text(&out));
    let records = json_lines(&dir.path().join("out/records.jsonl"));
    assert_eq!(records.len(), 4);
    let (new, reused): (Vec<_>, Vec<_>) = records.iter().partition(|r| r["connect_ms"].is_f64());
    assert_eq!((new.len(), reused.len()), (1, 3), "one connection, reused");
    let k = &new[0]["kernel"];
    assert!(k.is_object(), "{}", new[0]);
    assert!(
        k["server_wait_ms"].is_null() && k["remainder_ms"].is_null(),
        "{k}"
    );
    assert!(
        k["request_write_ms"].is_f64() && k["client_overhead_ms"].is_f64(),
        "{k}"
    );
    for r in reused {
        // The sim sleeps 300 ms after reading the request, before its head.
        assert!(f(&r["kernel"], "server_wait_ms") >= 300.0, "{r}");
    }
}

#[test]
fn a_stall_before_the_first_byte_is_server_wait_not_client_overhead() {
    let Some(()) = skip_unless(true) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path());
    let out = replay(
        dir.path(),
        &[],
        &sim.url(),
        &[
            "--max-requests",
            "4",
            "-H",
            "x-sim-fault: stall_first_ms=1000",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    for r in json_lines(&dir.path().join("out/records.jsonl")) {
        let k = &r["kernel"];
        // The sim sleeps 1 s after reading the request, before its head. Read as client
        // overhead, it would be all of that; only a stall of ours as long reaches the bound.
        assert!(f(k, "server_wait_ms") >= 1000.0, "{r}");
        assert!(f(k, "client_overhead_ms") < 1000.0, "{r}");
        assert!(f(&r, "ttft_ms") >= 1000.0, "{r}");
    }
}

#[test]
fn without_privileges_kernel_timing_is_off_once_and_the_replay_goes_on() {
    let Some(()) = skip_unless(false) else {
        return;
    };
    if let Err(e) = Command::new("setpriv").arg("--version").output() {
        return skip(
            "setpriv",
            &format!("setpriv (util-linux) does not run here: {e}"),
        );
    }
    // No capabilities at all, for this process and whatever it executes, even as root.
    let drop_all = [
        "setpriv",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--",
    ];
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path());
    let out = replay(dir.path(), &drop_all, &sim.url(), &[]);
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&out);
    let warnings = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("kernel socket timing off"))
        .count();
    assert_eq!(warnings, 1, "reported once: {log}");
    assert!(log.contains("CAP_BPF"), "says what is missing: {log}");
    let s = summary(dir.path());
    assert_eq!(s["errors"], 0);
    assert_eq!(s["telemetry_sources"]["ebpf"]["state"], "unavailable");
    assert!(s.get("kernel").is_none(), "{s}");
    for r in json_lines(&dir.path().join("out/records.jsonl")) {
        assert!(r.get("kernel").is_none(), "absent, not zero: {r}");
    }
    // `--no-ebpf` turns it off without a warning.
    let quiet = replay(
        dir.path(),
        &drop_all,
        &sim.url(),
        &["--no-ebpf", "--overwrite"],
    );
    assert!(quiet.status.success(), "{}", text(&quiet));
    assert!(
        !text(&quiet).contains("kernel socket timing"),
        "{}",
        text(&quiet)
    );
    assert_eq!(
        summary(dir.path())["telemetry_sources"]["ebpf"]["state"],
        "disabled"
    );

    // doctor says the same, and why.
    let mut doctor = Command::new(drop_all[0]);
    doctor
        .args(&drop_all[1..])
        .arg(CANARYD)
        .args(["doctor", "--json"]);
    let report: serde_json::Value =
        serde_json::from_slice(&doctor.output().expect("doctor runs").stdout).unwrap();
    assert_eq!(report["ebpf"]["state"], "unavailable", "{report}");
    assert!(
        report["ebpf"]["reason"]
            .as_str()
            .unwrap()
            .contains("CAP_PERFMON"),
        "{report}"
    );
    match host_loads_ebpf() {
        Ok(()) => {
            let out = Command::new(CANARYD)
                .args(["doctor", "--json"])
                .output()
                .unwrap();
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(report["ebpf"]["state"], "available", "{report}");
            minimal_capabilities_suffice();
        }
        // The rest ran; the part that needs the programs loaded did not, so the test counts
        // as skipped.
        Err(why) => skip(
            "ebpf",
            &format!("loading with full and with minimal capabilities was not checked: {why}"),
        ),
    }
}

// The audit: as uid 65534, `canaryd replay … --runs 3` warned "kernel socket timing off" three
// times, loading the programs again each run; the daemon said it once. So do `--runs N` and a
// sweep's points now, and every run still says eBPF was unavailable.
#[test]
fn without_privileges_kernel_timing_is_off_once_over_a_commands_runs() {
    let Some(()) = skip_unless(false) else {
        return;
    };
    if let Err(e) = Command::new("setpriv").arg("--version").output() {
        return skip(
            "setpriv",
            &format!("setpriv (util-linux) does not run here: {e}"),
        );
    }
    let drop_all = [
        "setpriv",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--",
    ];
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(dir.path());
    let warned_once = |out: &Output| {
        let log = text(out);
        assert!(out.status.success(), "{log}");
        let warnings = log
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("kernel socket timing off"))
            .count();
        assert_eq!(warnings, 1, "reported once: {log}");
    };
    let unavailable = |summary: &Path| {
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(summary).unwrap()).unwrap();
        let ebpf = &s["telemetry_sources"]["ebpf"];
        assert_eq!(
            ebpf["state"],
            "unavailable",
            "{}: {ebpf}",
            summary.display()
        );
        assert!(
            ebpf["reason"].as_str().unwrap().contains("CAP_BPF"),
            "says why: {ebpf}"
        );
    };
    let out = replay(
        dir.path(),
        &drop_all,
        &sim.url(),
        &["--max-requests", "3", "--runs", "3"],
    );
    warned_once(&out);
    for i in 1..=3 {
        unavailable(&dir.path().join(format!("out/run-{i}/summary.json")));
    }
    // A sweep's points are runs of one command too.
    let mut cmd = Command::new(drop_all[0]);
    cmd.args(&drop_all[1..])
        .arg(CANARYD)
        .args(["sweep", "--url", &sim.url(), "--model", "canary-sim"])
        .args(["--isl", "16", "--osl", "4", "--request-count", "3"])
        .args(["--concurrency", "1,2,3", "--warmup-request-count", "0"])
        .args(["--no-nvml", "--output-dir", "sweep"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdin(std::process::Stdio::null());
    let out = cmd.output().expect("canaryd runs");
    warned_once(&out);
    for point in ["point-01-c1", "point-02-c2", "point-03-c3"] {
        unavailable(&dir.path().join(format!("sweep/{point}/summary.json")));
    }
}

/// What the README tells a systemd unit to grant: an unprivileged user with only CAP_BPF and
/// CAP_PERFMON (as ambient capabilities) loads the programs.
fn minimal_capabilities_suffice() {
    use std::os::unix::fs::PermissionsExt;
    // A copy the unprivileged user can execute (the build directory is root's).
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("canaryd");
    std::fs::copy(CANARYD, &bin).unwrap();
    let doctor = |caps: &str| -> serde_json::Value {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"))
            .arg("--")
            .arg(&bin)
            .args(["doctor", "--json"])
            .current_dir(dir.path())
            .output()
            .expect("setpriv runs");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)))
    };
    let with = doctor("+bpf,+perfmon");
    assert_eq!(with["ebpf"]["state"], "available", "{with}");
    let without_perfmon = doctor("+bpf");
    assert_eq!(
        without_perfmon["ebpf"]["state"], "unavailable",
        "{without_perfmon}"
    );
}
