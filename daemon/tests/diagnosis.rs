//! The diagnosis names the bottleneck a simulator profile or fault really causes, with its
//! evidence, in `summary.json` and in the printed table (issue 19). Each test starts
//! `canaryd sim` shaped to cause one class, replays a real trace against it with `/metrics`
//! scraped, and reads what `canaryd replay` wrote and printed.

mod common;
#[path = "diagnosis/cpu_quota.rs"]
mod cpu_quota;

use common::{shared, text, Child, CANARYD};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Who has this host. The healthy test's premise is an idle host: on two cores, another
/// test's simulator and replay beside it put scheduler slices (3–4 ms) into its TTFTs, and
/// without eBPF the client−server gap cannot tell those from a slow link. So it runs alone;
/// the other tests share the host, as they always did.
static HOST: RwLock<()> = RwLock::new(());

fn shared_host() -> RwLockReadGuard<'static, ()> {
    HOST.read().unwrap_or_else(|e| e.into_inner())
}

fn idle_host() -> RwLockWriteGuard<'static, ()> {
    HOST.write().unwrap_or_else(|e| e.into_inner())
}

/// `canaryd sim` with the profile `profile`: [`common::sim_with_profile`].
fn sim(dir: &Path, profile: &str, extra: &[&str]) -> (Child, u16) {
    common::sim_with_profile(dir, profile, extra)
}

/// `canaryd replay` of the Mooncake conversation trace against `port`, `/metrics` scraped
/// every 100 ms, NVML and eBPF off; `summary.json` and what it printed.
fn replay(dir: &Path, port: u16, args: &[&str]) -> (Value, String) {
    replay_with(dir, port, args, None)
}

/// [`replay`], with GPUs sampled every 100 ms through `nvml` (a library and its environment)
/// when given.
fn replay_with(
    dir: &Path,
    port: u16,
    args: &[&str],
    nvml: Option<(&Path, &[(&str, &str)])>,
) -> (Value, String) {
    run_replay(dir, replay_cmd(dir, port, args, nvml))
}

/// The command [`replay_with`] runs.
fn replay_cmd(
    dir: &Path,
    port: u16,
    args: &[&str],
    nvml: Option<(&Path, &[(&str, &str)])>,
) -> Command {
    let trace = shared("traces/mooncake_conversation_first2000.jsonl");
    let mut cmd = Command::new(CANARYD);
    cmd.args(["replay", "--trace"])
        .arg(&trace)
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .args(["--model", "canary-sim", "--no-ebpf"])
        .args(["--server-metrics-interval", "100ms", "--output-dir", "out"]);
    match nvml {
        Some((lib, env)) => {
            cmd.arg("--nvml-lib")
                .arg(lib)
                .args(["--gpu-interval", "100ms"]);
            cmd.envs(env.iter().copied());
        }
        None => {
            cmd.arg("--no-nvml");
        }
    }
    cmd.args(args)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    cmd
}

/// Runs a replay `cmd`: `summary.json`, checked against the schema, and what it printed.
fn run_replay(dir: &Path, mut cmd: Command) -> (Value, String) {
    let out = cmd.output().expect("canaryd replay runs");
    let printed = text(&out);
    let summary = dir.join("out/summary.json");
    let doc: Value = match std::fs::read(&summary) {
        Ok(b) => serde_json::from_slice(&b).unwrap(),
        Err(e) => panic!("{}: {e}\n{printed}", summary.display()),
    };
    // Every class's summary, preemptions and GPU context included, keeps to the one schema.
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(schema).unwrap()).unwrap();
    let v = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(&doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    (doc, printed)
}

/// The evidence figure `name` of the diagnosis.
fn evidence<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no evidence {name} in {d:#}"))
}

/// The threshold on `figure` that fired: its observed value.
fn fired(d: &Value, figure: &str) -> f64 {
    let t = d["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["figure"] == figure)
        .unwrap_or_else(|| panic!("no threshold {figure} fired in {d:#}"));
    assert_eq!(t["met"], true, "{t}");
    let (observed, limit) = (
        t["observed"].as_f64().unwrap(),
        t["limit"].as_f64().unwrap(),
    );
    match t["op"].as_str().unwrap() {
        ">=" => assert!(observed >= limit, "{t}"),
        _ => assert!(observed < limit, "{t}"),
    }
    observed
}

/// The diagnosis of `doc`, checked to name `class` in `summary.json` and in the table.
fn diagnosis<'a>(doc: &'a Value, printed: &str, class: &str) -> &'a Value {
    let d = &doc["diagnosis"];
    assert_eq!(d["class"], class, "{d:#}\n{printed}");
    assert!(
        printed.contains(&format!("diagnosis: {class} (")),
        "the table names the class:\n{printed}"
    );
    assert!(printed.contains("  why: "), "{printed}");
    d
}

/// The interval where the class held lies inside the run and took some of it.
fn held_inside_the_run(d: &Value) {
    let i = &d["interval"];
    let (start, end) = (i["start_s"].as_f64().unwrap(), i["end_s"].as_f64().unwrap());
    assert!(0.0 <= start && start < end, "{i}");
    assert!(i["held_s"].as_f64().unwrap() > 0.0, "{i}");
    let share = i["share_of_run"].as_f64().unwrap();
    assert!(share > 0.0 && share <= 1.0 + 1e-9, "{i}");
}

#[test]
fn an_overloaded_engine_is_queueing() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    // The capacity profile saturates at ~107 req/s for these lengths; the trace sped up 60×
    // offers ~180 req/s, so requests wait in the engine's queue.
    let (_sim, port) = sim(dir.path(), r#"{"profile": "capacity"}"#, &[]);
    let (doc, printed) = replay(
        dir.path(),
        port,
        &[
            "--speedup",
            "60",
            "--max-requests",
            "300",
            "--max-input-tokens",
            "32",
            "--max-output-tokens",
            "16",
        ],
    );
    let d = diagnosis(&doc, &printed, "queueing");
    let queue = fired(d, "server_queue_time_mean");
    assert!(fired(d, "queue_share_of_ttft") >= 0.5);
    let e = evidence(d, "server_queue_time_mean");
    assert_eq!(e["source"], "server_metrics");
    assert_eq!(e["value"].as_f64().unwrap(), queue);
    // From the scrapes over time: where the queue held.
    held_inside_the_run(d);
    assert_eq!(d["interval"]["condition"], "queue_depth >= 1");
}

#[test]
fn kv_pressure_with_preemptions_is_kv_memory_bound() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    // Eight 10-token prompts of 30 output tokens need 320 tokens of KV; the engine has 120
    // and admits optimistically, so it preempts (sim README, "KV pressure"). Decode steps of
    // 4 ms keep the KV full for a few hundred ms, so the 100 ms scrapes catch it full even on
    // a loaded host (at 1 ms the whole run could fall between scrapes).
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "fast", "decode_base_us": 4000, "kv_budget_tokens": 120,
            "kv_admission": "optimistic"}"#,
        &[],
    );
    let (doc, printed) = replay(
        dir.path(),
        port,
        &[
            "--speedup",
            "100",
            "--max-requests",
            "60",
            "--concurrency",
            "8",
            "--max-input-tokens",
            "10",
            "--max-output-tokens",
            "30",
        ],
    );
    let d = diagnosis(&doc, &printed, "kv-memory-bound");
    assert!(fired(d, "preemptions_per_request") >= 0.01);
    assert!(evidence(d, "preemptions")["value"].as_f64().unwrap() >= 1.0);
    assert!(evidence(d, "kv_cache_usage_max")["value"].as_f64().unwrap() >= 0.9);
    held_inside_the_run(d);
    assert_eq!(doc["completed"], 60, "preempted requests still complete");
}

#[test]
fn a_slow_prefill_is_prefill_bound() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    // 40 ms per prefill, 2 ms per decode step, one request at a time: the first token is
    // most of every request (42 of at most 56 ms) and nothing queues. The prefill time is
    // 42 ms (prefill and the first decode step), 2 ms over the 40 asserted: a host that
    // delays the engine between taking a request and admitting it shortens that step by the
    // delay (with 0.5 ms steps it measured 41.6-41.9 ms).
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "fast", "prefill_overhead_us": 40000, "decode_base_us": 2000}"#,
        &[],
    );
    let (doc, printed) = replay(
        dir.path(),
        port,
        &[
            "--speedup",
            "100",
            "--max-requests",
            "15",
            "--concurrency",
            "1",
            "--max-input-tokens",
            "64",
            "--max-output-tokens",
            "8",
        ],
    );
    let d = diagnosis(&doc, &printed, "prefill-bound");
    assert!(fired(d, "server_prefill_time_mean") >= 40.0);
    assert!(fired(d, "prefill_share_of_ttft") >= 0.5);
    assert!(fired(d, "ttft_share_of_e2e") >= 0.5);
    let queueing = finding(d, "queueing");
    assert_eq!(queueing["state"], "clear", "{queueing:#}");
}

#[test]
fn a_slow_link_is_network() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    // Every write of every response is delayed 30 ms: the server's own TTFT stays ~1 ms.
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "fast", "decode_base_us": 500}"#,
        &["--fault-rate", "1", "--fault", "net_delay_ms=30"],
    );
    let (doc, printed) = replay(
        dir.path(),
        port,
        &[
            "--speedup",
            "100",
            "--max-requests",
            "20",
            "--max-input-tokens",
            "32",
            "--max-output-tokens",
            "4",
        ],
    );
    let d = diagnosis(&doc, &printed, "network");
    assert!(fired(d, "network_mean") >= 25.0);
    let gap = evidence(d, "client_minus_server_ttft_mean");
    assert!(gap["value"].as_f64().unwrap() >= 25.0, "{gap}");
    // With every first token stamped by the kernel on arrival (receive timestamps, on by
    // default) the gap ends there, without canaryd's read delay: an estimate. Without eBPF,
    // first tokens timed at canaryd's read leave that delay in it: a bound, said so.
    // A gap over first tokens stamped kernel_bound (a later segment's arrival) is itself an
    // upper bound, and so is the network's share of it.
    let rx = &doc["receive_timestamps"];
    let at_read = rx["first_token"]["userspace"].as_u64().unwrap_or(0);
    let all_stamped = rx["state"] == "on" && at_read == 0;
    let exact = rx["first_token"]["kernel"].as_u64().unwrap_or(0) == doc["completed"];
    let kind = if all_stamped && exact {
        "estimate"
    } else {
        "bound"
    };
    let gap_kind = if rx["state"] == "on" && exact {
        "exact"
    } else {
        "bound"
    };
    assert_eq!(gap["kind"], gap_kind, "{rx}");
    assert_eq!(evidence(d, "network_mean")["kind"], kind, "{rx}");
    // (`missing` is left out when empty.)
    let ebpf_missing = finding(d, "network")["missing"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m.as_str().unwrap().contains("ebpf")));
    assert_eq!(ebpf_missing, !all_stamped, "{d:#}");
}

#[test]
fn a_failing_target_is_target_errors() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "fast"}"#,
        &["--fault-rate", "0.5", "--fault", "status=503"],
    );
    let (doc, printed) = replay(
        dir.path(),
        port,
        &["--speedup", "100", "--max-requests", "40"],
    );
    let d = diagnosis(&doc, &printed, "target-errors");
    let rate = fired(d, "error_rate");
    assert_eq!(rate, doc["error_rate"].as_f64().unwrap());
    assert!(rate >= 0.05);
    assert_eq!(
        evidence(d, "target_errors")["value"].as_f64().unwrap(),
        doc["errors"].as_f64().unwrap()
    );
}

#[test]
fn an_idle_fast_engine_is_healthy_and_says_what_it_could_not_judge() {
    let _host = idle_host();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(dir.path(), r#"{"profile": "fast"}"#, &[]);
    let (doc, printed) = replay(
        dir.path(),
        port,
        &[
            "--speedup",
            "100",
            "--max-requests",
            "20",
            "--max-input-tokens",
            "32",
            "--max-output-tokens",
            "8",
        ],
    );
    // Each finding agrees with its own thresholds: one that fired met one, one with none met
    // is clear. The engine's own figures (its virtual prefill time, its KV cache) and its
    // answers are what they are whatever the host does: those are clear. Queueing, the
    // client−server gap (network) and canaryd's own CPU wait also take in a loaded host's
    // scheduler slices (3–4 ms on two cores) even with this test alone: the run is `healthy`
    // when they stayed under their limits, as on an idle host, and otherwise names one of
    // the findings that fired.
    let d = &doc["diagnosis"];
    let mut fired_classes = Vec::new();
    for f in d["findings"].as_array().unwrap() {
        let class = f["class"].as_str().unwrap();
        if f["state"] == "unknown" {
            continue;
        }
        let thresholds = f["thresholds"].as_array().unwrap();
        assert!(!thresholds.is_empty(), "{class}: {f:#}");
        for t in thresholds {
            let (observed, limit) = (
                t["observed"].as_f64().unwrap(),
                t["limit"].as_f64().unwrap(),
            );
            let over = match t["op"].as_str().unwrap() {
                ">=" => observed >= limit,
                _ => observed < limit,
            };
            assert_eq!(t["met"], over, "{class}: {t}");
        }
        let any_met = thresholds.iter().any(|t| t["met"] == true);
        match f["state"].as_str().unwrap() {
            "fired" => {
                assert!(any_met, "{class} fired with no threshold met: {f:#}");
                fired_classes.push(class);
            }
            state => assert_eq!(state, "clear", "{class}: {f:#}"),
        }
    }
    for class in ["prefill-bound", "kv-memory-bound", "target-errors"] {
        assert_eq!(finding(d, class)["state"], "clear", "{class}: {d:#}");
    }
    eprintln!("fired on this host: {fired_classes:?}");
    let d = if fired_classes.is_empty() {
        let d = diagnosis(&doc, &printed, "healthy");
        assert!(d["also"].as_array().unwrap().is_empty(), "{d:#}");
        assert_eq!(d["confidence"], "medium");
        d
    } else {
        let class = d["class"].as_str().unwrap();
        assert!(fired_classes.contains(&class), "{d:#}\n{printed}");
        // What the test is for, `healthy` on an idle engine, was not checked: counted as a
        // skip, not passed off as a pass (the rest of the run's figures are still checked).
        canary_testkit::skip(
            "quiet-host",
            &format!("a loaded host fired {fired_classes:?}: `healthy` not checked"),
        );
        diagnosis(&doc, &printed, class)
    };
    // No GPU source: compute-bound could not be judged, and the diagnosis says why.
    let compute = finding(d, "compute-bound");
    assert_eq!(compute["state"], "unknown", "{compute:#}");

    // The run's context: what the sim says of itself (vLLM's routes), this host, the load.
    let c = &doc["context"];
    assert_eq!(c["server"]["engine"], "vllm_v1", "{c:#}");
    assert_eq!(
        c["server"]["version"],
        format!("canary-sim {}", env!("CARGO_PKG_VERSION")),
        "{c:#}"
    );
    assert_eq!(c["server"]["model"], "canary-sim");
    assert!(c["server"]["max_model_len"].as_u64().unwrap() > 0, "{c:#}");
    assert!(
        c["host"]["kernel"].as_str().is_some_and(|k| !k.is_empty()),
        "{c:#}"
    );
    assert!(c["host"]["cpu_cores"].as_u64().unwrap() >= 1);
    assert_eq!(c["canaryd"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(c["workload"]["load"]["requests"], 20);
    assert_eq!(c["workload"]["output_tokens"]["max"], 8.0);
    // NVML was off: the GPU fields say so rather than vanish.
    assert!(
        c["gpu"]["model"]["unavailable"]
            .as_str()
            .is_some_and(|w| w.contains("nvml")),
        "{c:#}"
    );
}

#[test]
fn busy_gpus_with_nothing_waiting_are_compute_bound() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    // Decode-heavy: 4 ms a step, free prefill, room for everything, a few requests at a
    // time. The GPUs are the fake NVML library's, scripted at 97% (no real GPU here).
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "fast", "decode_base_us": 4000}"#,
        &[],
    );
    let lib = common::fake_nvml(dir.path());
    let (doc, printed) = replay_with(
        dir.path(),
        port,
        &[
            "--speedup",
            "100",
            "--max-requests",
            "12",
            "--concurrency",
            "2",
            "--max-input-tokens",
            "32",
            "--max-output-tokens",
            "40",
        ],
        Some((&lib, &[("FAKE_NVML_UTIL", "97")])),
    );
    let d = diagnosis(&doc, &printed, "compute-bound");
    assert_eq!(fired(d, "gpu_utilization_mean"), 97.0);
    assert!(fired(d, "kv_cache_usage_mean") < 0.5);
    assert!(fired(d, "queue_depth_mean") < 1.0);
    assert_eq!(evidence(d, "gpu_utilization_mean")["source"], "nvml");
    // From the GPU samples over time.
    held_inside_the_run(d);
    // The run's context names the GPUs NVML described.
    let gpu = &doc["context"]["gpu"];
    assert_eq!(gpu["model"], "Fake NVIDIA H100 80GB HBM3", "{gpu:#}");
    assert_eq!(gpu["count"], 2);
    assert_eq!(gpu["driver"], "580.00-fake");
    assert_eq!(gpu["source"], "nvml");
    // The run's clocks and memory utilization, in summary.json and the table, beside the
    // throttle reasons (the fake's SM 1980 MHz, memory 2619 MHz, 41 %, SW power cap).
    let g = &doc["gpu"];
    assert_eq!(
        (
            &g["sm_clock_min_mhz"],
            &g["sm_clock_avg_mhz"],
            &g["mem_clock_avg_mhz"]
        ),
        (&json!(1980.0), &json!(1980.0), &json!(2619.0)),
        "{g:#}"
    );
    assert_eq!(
        (&g["util_mem_avg_pct"], &g["util_mem_max_pct"]),
        (&json!(41.0), &json!(41.0))
    );
    assert_eq!(g["per_gpu"][1]["sm_clock_min_mhz"], 1980.0, "{g:#}");
    assert!(
        printed.contains(
            "SM lowest 1980 avg 1980 MHz, memory clock avg 2619 MHz, memory busy avg 41.0% \
             highest 41.0%; throttle reasons: sw_power_cap"
        ),
        "{printed}"
    );
}

#[test]
fn the_same_run_with_idle_gpus_is_not_compute_bound() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "fast", "decode_base_us": 4000}"#,
        &[],
    );
    let lib = common::fake_nvml(dir.path());
    let (doc, printed) = replay_with(
        dir.path(),
        port,
        &[
            "--speedup",
            "100",
            "--max-requests",
            "12",
            "--concurrency",
            "2",
            "--max-input-tokens",
            "32",
            "--max-output-tokens",
            "40",
        ],
        Some((&lib, &[("FAKE_NVML_UTIL", "40")])),
    );
    // Not "healthy": on a shared host (see HOST) other tests' slices in the TTFTs can fire
    // the network rule. What this run is about is the GPU rule: it judged 40 % and cleared.
    let d = &doc["diagnosis"];
    assert_ne!(d["class"], "compute-bound", "{d:#}\n{printed}");
    let compute = finding(d, "compute-bound");
    assert_eq!(compute["state"], "clear", "{d:#}");
    let util = compute["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["figure"] == "gpu_utilization_mean")
        .unwrap_or_else(|| panic!("the GPU rule judged no utilization: {compute:#}"));
    assert_eq!(
        (util["observed"].as_f64(), &util["met"]),
        (Some(40.0), &json!(false))
    );
    // The GPU rule could judge this time; only canaryd's own CPU (no eBPF here) could not.
    let missing = d["missing"].as_array().unwrap();
    assert!(
        missing
            .iter()
            .all(|m| m.as_str().unwrap().starts_with("client-bound")),
        "{d:#}"
    );
}

fn finding<'a>(d: &'a Value, class: &str) -> &'a Value {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["class"] == class)
        .unwrap_or_else(|| panic!("no finding for {class}"))
}

/// The replay [`canaryd_starved_of_cpu_is_client_bound`] and its control run: the fast
/// engine, 150 requests of up to 64 streamed tokens at 100× the trace's pace.
const STARVED_REPLAY: &[&str] = &[
    "--speedup",
    "100",
    "--max-requests",
    "150",
    "--max-input-tokens",
    "32",
    "--max-output-tokens",
    "64",
];

#[test]
fn canaryd_starved_of_cpu_is_client_bound() {
    let _host = shared_host();
    // canaryd itself in a cgroup allowed 5 % of one CPU (the simulator is not): it cannot
    // read 100× the trace's pace, and the kernel counts how long the quota stopped it.
    let quota = match cpu_quota::CpuQuota::create(5_000, 100_000) {
        Ok(q) => q,
        Err(why) => return canary_testkit::skip("cgroup-cpu", &why),
    };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(dir.path(), r#"{"profile": "fast"}"#, &[]);
    let cmd = quota.wrap(replay_cmd(dir.path(), port, STARVED_REPLAY, None));
    let (doc, printed) = run_replay(dir.path(), cmd);
    let cpu = &doc["client_cpu"];
    // What the kernel said, from the cgroup canaryd was put in.
    assert_eq!(
        cpu["cgroup"].as_str(),
        Some(quota.stat().to_str().unwrap()),
        "{cpu:#}"
    );
    assert_eq!(cpu["cpu_quota_cores"].as_f64(), Some(0.05), "{cpu:#}");
    assert!(cpu["throttled_periods"].as_u64().unwrap() > 0, "{cpu:#}");
    let d = diagnosis(&doc, &printed, "client-bound");
    let share = fired(d, "cpu_throttled_s_per_run_s");
    let wall = cpu["wall_s"].as_f64().unwrap();
    let throttled = cpu["throttled_s"].as_f64().unwrap();
    assert!((share - throttled / wall).abs() < 1e-9, "{cpu:#}");
    // The quota made it late against the trace's schedule.
    assert!(fired(d, "dispatch_lag_p99") >= 10.0);
    let e = evidence(d, "cpu_throttled_s_per_run_s");
    assert_eq!(
        (e["kind"].as_str(), e["source"].as_str()),
        (Some("exact"), Some("client_cpu"))
    );
    assert!(printed.contains("cpu_throttled_s_per_run_s"), "{printed}");
    drop(quota);

    // The control: the same run with canaryd free is not client-bound.
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(dir.path(), r#"{"profile": "fast"}"#, &[]);
    let (doc, printed) = replay(dir.path(), port, STARVED_REPLAY);
    let d = &doc["diagnosis"];
    assert_ne!(d["class"], "client-bound", "{d:#}\n{printed}");
    let cb = finding(d, "client-bound");
    assert_eq!(cb["state"], "clear", "{cb:#}");
    let cpu = &doc["client_cpu"];
    assert!(cpu["cpu_s"].as_f64().unwrap() > 0.0, "{cpu:#}");
    assert!(cpu["timeslices"].as_u64().unwrap() > 0, "{cpu:#}");
}

/// The interval where the class held ends with the run, and its share is of the run's
/// duration: `summary.json` and the printed `held a–b s (N% of the run)` agree with both.
fn held_within_the_run(doc: &Value, printed: &str) {
    let (d, run_s) = (&doc["diagnosis"], doc["duration_s"].as_f64().unwrap());
    let i = &d["interval"];
    let (end, held) = (i["end_s"].as_f64().unwrap(), i["held_s"].as_f64().unwrap());
    let share = i["share_of_run"].as_f64().unwrap();
    assert!(end <= run_s && held <= run_s, "{i} of a {run_s} s run");
    assert!(
        (share - held / run_s).abs() < 1e-9,
        "{i} of a {run_s} s run"
    );
    let p = if end < 1.0 { 3 } else { 1 };
    let line = format!("–{end:.p$} s ({:.0}% of the run)", share * 100.0);
    assert!(printed.contains(&line), "{line}\n{printed}");
}

// The README's `--runs 5` example, one run: the Mooncake arxiv trace at 10× with lengths
// scaled to 5 % runs about half a second, prefill-bound throughout. Its stretch ran to the
// scrape after the run and its share was of a second (`held 0.0–0.5 s (52% of the run)`).
// With the illustrative profile as it is, TTFT is 49–61 % of the latency, on the rule's 50 %
// edge (the README's compare example is healthy once and prefill-bound once), and CI failed
// at 49 %; with decode steps of 2.5 ms, not 5, it measured 65–77 % (6 runs).
#[test]
fn a_half_second_run_holds_within_its_duration_and_says_its_units() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "illustrative", "decode_base_us": 2500}"#,
        &[],
    );
    let mut cmd = Command::new(CANARYD);
    cmd.args(["replay", "--trace"])
        .arg(shared("traces/mooncake_arxiv_first20.jsonl"))
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .args(["--model", "canary-sim", "--no-ebpf", "--no-nvml"])
        .args(["--speedup", "10", "--scale-lengths", "0.05"])
        .args(["--output-dir", "out"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    let (doc, printed) = run_replay(dir.path(), cmd);
    let d = diagnosis(&doc, &printed, "prefill-bound");
    held_within_the_run(&doc, &printed);
    // Each threshold with its unit, as the evidence line has it.
    let t = &d["thresholds"][0];
    assert_eq!(
        (&t["figure"], &t["unit"]),
        (&"server_prefill_time_mean".into(), &"ms".into())
    );
    let limit = format!(" ms ≥ {:.1} ms;", t["limit"].as_f64().unwrap());
    assert!(
        printed.contains("why: server_prefill_time_mean ") && printed.contains(&limit),
        "{printed}"
    );
}

// Every request answered 503: the server exports its TTFT histogram, but nothing completed,
// so what the network rule lacked is the client's TTFT (it blamed a missing histogram).
#[test]
fn an_all_errors_run_lacks_a_client_ttft_not_a_server_histogram() {
    let _host = shared_host();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(
        dir.path(),
        r#"{"profile": "fast"}"#,
        &["--fault-rate", "1", "--fault", "status=503"],
    );
    let (doc, printed) = replay(
        dir.path(),
        port,
        &["--speedup", "100", "--max-requests", "10"],
    );
    assert_eq!(doc["completed"], 0, "{printed}");
    diagnosis(&doc, &printed, "target-errors");
    held_within_the_run(&doc, &printed);
    let net = finding(&doc["diagnosis"], "network");
    assert_eq!(net["state"], "unknown", "{net:#}");
    let missing = net["missing"].to_string();
    assert!(missing.contains("no client TTFT"), "{missing}");
    assert!(!missing.contains("exposes no TTFT histogram"), "{missing}");
    assert!(
        printed.contains("network: no client TTFT: no request completed with a first token"),
        "{printed}"
    );
}
