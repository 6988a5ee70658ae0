//! `canaryd run` exporting over OTLP: a real daemon process, a real `canaryd sim` process and
//! a real OTLP/HTTP receiver on loopback that decodes the protobuf with `opentelemetry-proto`
//! (the one the exporters crate tests with). After a few short scheduled runs and a SIGTERM,
//! the receiver must hold the requests' spans, the run metrics, and exactly one `canary.run`
//! event per run with its workload, verdict and trend; the header secret must reach the
//! collector and nothing else (logs, artifacts, SQLite history, status API). Against a
//! collector that accepts but never answers, the final flush of `canaryd replay` and of the
//! daemon's SIGTERM keeps its deadline and reports every item it did not deliver.

#[allow(dead_code)] // the exporters tests use more of it than this test does
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;

mod common;

use common::{api_runs, eventually, files_under, free_port, http, Child};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use receiver::{attrs, Receiver};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

/// The OTLP header secret: sent to the collector, never written or shown anywhere else.
const SECRET: &str = "otlp-HDR-SECRET-6061";

/// `canaryd run --config CONFIG` in `dir`, stderr to `dir/daemon.log`; with its status port.
fn daemon(dir: &Path, config: &Path, env: &[(&str, &str)]) -> (Child, u16) {
    common::daemon_on_own_port(dir, config, "daemon.log", env)
}

/// GET `path` on the status endpoint; (status, body).
fn get(port: u16, path: &str) -> (u16, String) {
    http(port, "GET", path, "")
}

/// SIGTERM to the daemon: it must flush and exit 0 within a minute; its log.
fn stop(daemon: &mut Child, dir: &Path) -> String {
    daemon.signal(libc::SIGTERM);
    let code = daemon.wait_exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert_eq!(code, Some(0), "{log}");
    log
}

/// A short workload: the first 20 rows of the bundled trace at 20x, lengths scaled by 1/20,
/// every 2 s.
fn workload(name: &str, extra: &str) -> String {
    format!(
        "[workloads.{name}]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 20\n\
         speedup = 20\nscale_lengths = 0.05\nevery = \"2s\"\n{extra}\n"
    )
}

#[test]
fn scheduled_runs_reach_an_otlp_receiver_with_their_verdicts_and_the_secret_stays_there() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);

    std::fs::write(dir.path().join("otlp-token"), format!("{SECRET}\n")).unwrap();
    let mut config = format!(
        "state_dir = \"state\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{}\"\nmetrics_interval = \"500ms\"\nflush_timeout = \"5s\"\n\
         [otlp.headers]\nauthorization = {{ file = \"otlp-token\", prefix = \"Bearer \" }}\n\
         x-canary-org = \"daemon-test\"\n\
         [baseline]\nruns = 5\nmin_runs = 1\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         metrics_url = \"http://127.0.0.1:{sim_port}/metrics\"\n",
        receiver.url()
    );
    // Each run of `steady` in slices (issue 18's timeslices, as a workload key).
    config += &workload("steady", "slice_duration = \"250ms\"");
    // Every request misses a 1 ms end-to-end SLO: each run of `strict` fails.
    config += &workload(
        "strict",
        "slos = \"request_latency:1\"\nmin_good_fraction = 0.9",
    );
    // A trace that is not there: `error` runs that never reach the replay still send their
    // verdict.
    config += &workload("missing", "").replace("\"bundled\"", "\"no-such-trace.jsonl\"");
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();

    // No CA certificates on this host (a scratch container, say): plain http export must
    // not need them.
    std::fs::write(dir.path().join("no-certs.pem"), "").unwrap();
    std::fs::create_dir(dir.path().join("no-certs")).unwrap();
    let no_certs = [
        ("SSL_CERT_FILE", dir.path().join("no-certs.pem")),
        ("SSL_CERT_DIR", dir.path().join("no-certs")),
    ];
    let no_certs: Vec<(&str, &str)> = no_certs
        .iter()
        .map(|(k, v)| (*k, v.to_str().unwrap()))
        .collect();
    let (mut daemon, status) = daemon(dir.path(), &path, &no_certs);

    // Two finished runs of each workload.
    let api = eventually(120, "two runs of each workload", || {
        let (code, body) = get(status, "/api/runs?limit=100");
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let count = |w: &str| {
            v["runs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["workload"] == w)
                .count()
        };
        (count("steady") >= 2 && count("strict") >= 2 && count("missing") >= 1).then_some(body)
    });
    let mut shown = vec![api, get(status, "/metrics").1];
    let v: Value = serde_json::from_str(&shown[0]).unwrap();
    for r in v["runs"].as_array().unwrap() {
        shown.push(get(status, &format!("/api/runs/{}", r["id"].as_str().unwrap())).1);
    }

    // SIGTERM: runs in flight end as `error: interrupted`, the exporter is flushed.
    let log = stop(&mut daemon, dir.path());

    // Every run, from its verdict.json: id -> (workload, verdict kind, trend); the direction
    // an `insufficient` trend was seen to move, unconfirmed, by id; and each completed run's
    // telemetry sources from its summary.json, by id.
    let mut runs: BTreeMap<String, (String, String, Option<String>)> = BTreeMap::new();
    let mut unconfirmed: BTreeMap<String, String> = BTreeMap::new();
    let mut sources: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    for (p, bytes) in files_under(&dir.path().join("state/artifacts"), &["otlp-token"]) {
        if p.file_name() == Some("verdict.json".as_ref()) {
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            let id: String = v["id"].as_str().unwrap().into();
            if let Some(u) = v["comparison"]["unconfirmed"].as_str() {
                unconfirmed.insert(id.clone(), u.into());
            }
            runs.insert(
                id,
                (
                    v["workload"].as_str().unwrap().into(),
                    v["verdict_kind"].as_str().unwrap().into(),
                    v["trend"].as_str().map(String::from),
                ),
            );
        }
        if p.file_name() == Some("summary.json".as_ref()) {
            let s: Value = serde_json::from_slice(&bytes).unwrap();
            if let (Some(id), Some(t)) = (
                s["run"]["run_id"].as_str(),
                s["telemetry_sources"].as_object(),
            ) {
                sources.insert(id.into(), t.clone());
            }
        }
    }
    let kinds = |w: &str| -> Vec<&str> {
        runs.values()
            .filter(|r| r.0 == w)
            .map(|r| r.1.as_str())
            .collect()
    };
    assert!(
        kinds("steady").iter().filter(|k| **k == "pass").count() >= 2,
        "{runs:?}"
    );
    assert!(
        kinds("strict").iter().filter(|k| **k == "fail").count() >= 2,
        "{runs:?}"
    );
    assert!(kinds("missing").iter().all(|k| *k == "error"), "{runs:?}");

    // One run event per run, carrying its workload, verdict and trend.
    let events: Vec<_> = receiver
        .logs()
        .into_iter()
        .filter(|l| l.event_name == "canary.run")
        .collect();
    let mut seen: BTreeMap<String, HashMap<String, String>> = BTreeMap::new();
    for e in &events {
        let a = attrs(&e.attributes);
        let id = a["canary.run.id"].clone();
        assert!(
            seen.insert(id.clone(), a).is_none(),
            "two events for run {id}"
        );
    }
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        runs.keys().collect::<Vec<_>>(),
        "one event per run"
    );
    for (id, (w, kind, trend)) in &runs {
        let a = &seen[id];
        assert_eq!(&a["canary.workload"], w, "{a:?}");
        assert_eq!(&a["canary.run.verdict"], kind, "{a:?}");
        assert_eq!(a.get("canary.run.trend"), trend.as_ref(), "{a:?}");
        // The direction seen against a reference of one run, as the log's `insufficient
        // (unconfirmed: regressed; …)`: on the event exactly when verdict.json has it.
        assert_eq!(
            a.get("canary.run.trend.unconfirmed"),
            unconfirmed.get(id),
            "{a:?}"
        );
        // Each telemetry source's state as summary.json gives it, and why one is not
        // available (NVML and eBPF are turned off here).
        if let Some(sources) = sources.get(id) {
            assert!(!sources.is_empty(), "{id}");
            for (name, state) in sources {
                let key = format!("canary.telemetry.{name}");
                let said = state["state"].as_str().unwrap();
                assert_eq!(
                    a.get(&format!("{key}.state")).map(String::as_str),
                    Some(said)
                );
                assert_eq!(
                    a.contains_key(&format!("{key}.reason")),
                    said != "available",
                    "{a:?}"
                );
            }
            assert_eq!(a["canary.telemetry.nvml.state"], "disabled", "{a:?}");
            assert_eq!(a["canary.telemetry.ebpf.state"], "disabled", "{a:?}");
        }
        if kind == "fail" {
            assert!(
                a["canary.run.verdict.reasons"].contains("request_latency"),
                "{a:?}"
            );
        }
        // An interrupted run says what the stop left unsent; others do not.
        let interrupted = a.get("canary.run.interrupted").map(String::as_str) == Some("true");
        assert_eq!(a.contains_key("canary.run.unsent"), interrupted, "{a:?}");
        if w == "missing" {
            assert!(
                a["canary.run.verdict.reasons"].contains("no-such-trace.jsonl"),
                "{a:?}"
            );
            assert!(!a.contains_key("canary.run.requests"), "{a:?}");
            // Under its workload's labels, not empty ones: a series of those would stand
            // beside the workload's own in Grafana.
            assert_eq!(a["server.address"], "127.0.0.1", "{a:?}");
            assert_eq!(a["gen_ai.request.model"], "canary-sim", "{a:?}");
        }
    }
    // Some run was compared with its baseline. With `min_runs = 1` a run whose latency moved
    // against a reference of one run (a loaded host) reads `insufficient`, its direction
    // unconfirmed: compared all the same, and said so on its event.
    assert!(
        runs.iter().any(|(id, r)| match r.2.as_deref() {
            Some("steady" | "regressed" | "improved") => true,
            Some("insufficient") => seen[id].contains_key("canary.run.trend.unconfirmed"),
            _ => false,
        }),
        "a run compared with its baseline: {runs:?}"
    );

    // Spans: one per sampled request, named after operation and model, per workload.
    let spans = receiver.spans();
    for w in ["steady", "strict"] {
        let n = spans
            .iter()
            .filter(|s| {
                attrs(&s.attributes)
                    .get("canary.workload")
                    .map(String::as_str)
                    == Some(w)
            })
            .count();
        assert!(n >= 40, "{w}: {n} spans");
    }
    assert!(spans.iter().all(|s| s.name == "chat canary-sim"));

    // Metrics (cumulative, so the last export holds every run): runs by workload and
    // verdict, equal to the runs recorded.
    let metrics = receiver.last_metrics();
    let runs_metric = metrics
        .iter()
        .find(|m| m.name == "canary.runs")
        .expect("canary.runs exported");
    let Some(metric::Data::Sum(sum)) = &runs_metric.data else {
        panic!("canary.runs is not a sum")
    };
    let mut counted: BTreeMap<(String, String), i64> = BTreeMap::new();
    for p in &sum.data_points {
        let a = attrs(&p.attributes);
        let n = match p.value {
            Some(number_data_point::Value::AsInt(i)) => i,
            _ => 0,
        };
        *counted
            .entry((
                a["canary.workload"].clone(),
                a["canary.run.verdict"].clone(),
            ))
            .or_default() += n;
    }
    let mut expected: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (w, kind, _) in runs.values() {
        *expected.entry((w.clone(), kind.clone())).or_default() += 1;
    }
    assert_eq!(counted, expected);
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
        "canary.run.good_request.ratio",
    ] {
        assert!(metrics.iter().any(|m| m.name == name), "{name} missing");
    }

    // `steady`'s runs came in slices: in each completed run's artifacts and over OTLP, with
    // its workload; `strict`, which has no slice_duration, has none.
    let mut sliced = 0;
    for (p, bytes) in files_under(&dir.path().join("state/artifacts"), &["otlp-token"]) {
        if p.file_name() != Some("summary.json".as_ref()) {
            continue;
        }
        let s: Value = serde_json::from_slice(&bytes).unwrap();
        let slices = s["timeslices"]["slices"].as_array();
        match s["run"]["workload"].as_str() {
            Some("steady") if s["requests"].as_u64() == Some(20) => {
                assert_eq!(s["timeslices"]["requested_slice_duration_s"], 0.25, "{p:?}");
                let sent: u64 = slices
                    .unwrap()
                    .iter()
                    .map(|x| x["requests"].as_u64().unwrap())
                    .sum();
                assert_eq!(sent, 20, "{p:?}");
                assert!(p.with_file_name("timeslices.csv").is_file(), "{p:?}");
                sliced += 1;
            }
            Some("strict") => assert!(slices.is_none(), "{p:?}"),
            _ => {}
        }
    }
    assert!(sliced >= 2, "{sliced} complete runs of steady with slices");

    // The server's own latencies (the sim's /metrics), each point with its kind: the mean
    // exact, the percentiles estimates; its ITL with what one observation is, and its
    // prefix-cache hit ratio with its kind, as summary.json says them.
    let mut said: std::collections::BTreeSet<(String, String)> = Default::default();
    for (p, bytes) in files_under(&dir.path().join("state/artifacts"), &["otlp-token"]) {
        if p.file_name() == Some("summary.json".as_ref()) {
            let s: Value = serde_json::from_slice(&bytes).unwrap();
            for key in ["itl_observation", "prefix_cache_hit_rate_kind"] {
                if let Some(v) = s["server"][key].as_str() {
                    said.insert((key.into(), v.into()));
                }
            }
        }
    }
    let server = metrics
        .iter()
        .find(|m| m.name == "canary.run.server.latency")
        .expect("canary.run.server.latency exported");
    let Some(metric::Data::Gauge(g)) = &server.data else {
        panic!("canary.run.server.latency is not a gauge")
    };
    let mut phases = std::collections::BTreeSet::new();
    for p in &g.data_points {
        let a = attrs(&p.attributes);
        let want = if a["canary.statistic"] == "mean" {
            "exact"
        } else {
            "estimate"
        };
        assert_eq!(a["canary.value_kind"], want, "{a:?}");
        phases.insert(a["canary.server.phase"].clone());
        if a["canary.server.phase"] == "inter_token_latency" {
            let o = a["canary.server.itl_observation"].clone();
            assert!(
                said.contains(&("itl_observation".into(), o)),
                "{a:?} {said:?}"
            );
        }
    }
    assert!(phases.contains("inter_token_latency"), "{phases:?}");
    if let Some(hit) = metrics
        .iter()
        .find(|m| m.name == "canary.run.server.prefix_cache.hit_ratio")
    {
        let Some(metric::Data::Gauge(g)) = &hit.data else {
            panic!("not a gauge")
        };
        for p in &g.data_points {
            let kind = attrs(&p.attributes)["canary.value_kind"].clone();
            assert!(
                said.contains(&("prefix_cache_hit_rate_kind".into(), kind)),
                "{said:?}"
            );
        }
    }
    let slice_ttft = metrics
        .iter()
        .find(|m| m.name == "canary.slice.time_to_first_token")
        .expect("canary.slice.time_to_first_token exported");
    let Some(metric::Data::Gauge(g)) = &slice_ttft.data else {
        panic!("canary.slice.time_to_first_token is not a gauge")
    };
    let workloads: std::collections::BTreeSet<String> = g
        .data_points
        .iter()
        .map(|p| attrs(&p.attributes)["canary.workload"].clone())
        .collect();
    assert_eq!(workloads.into_iter().collect::<Vec<_>>(), ["steady"]);

    // The secret went to the collector with every export, and nowhere else.
    let posts = receiver.posts();
    assert!(!posts.is_empty());
    for p in &posts {
        let h: HashMap<_, _> = p.headers.iter().cloned().collect();
        assert_eq!(
            h.get("authorization").map(String::as_str),
            Some(format!("Bearer {SECRET}").as_str()),
            "{}",
            p.path
        );
        assert_eq!(
            h.get("x-canary-org").map(String::as_str),
            Some("daemon-test")
        );
        assert!(
            !String::from_utf8_lossy(&p.body).contains(SECRET),
            "{}",
            p.path
        );
    }
    assert!(!log.contains(SECRET), "{log}");
    for body in &shown {
        assert!(!body.contains(SECRET), "{body}");
    }
    let files = common::assert_no_file_holds(dir.path(), SECRET, &["otlp-token"]);
    assert!(files.iter().any(|p| p.ends_with("state/history.sqlite")));
}

// The audit's case: a run whose TTFT moved 36x against a baseline of one run logs
// `insufficient (unconfirmed: regressed; …)`, but its OTLP event, `canary.runs` and the trend
// state set read a bare `insufficient`: "unconfirmed" was in no exported body.
#[test]
fn a_shift_seen_against_one_run_goes_out_as_unconfirmed() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let mut config = format!(
        "state_dir = \"state\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{}\"\nmetrics_interval = \"500ms\"\nflush_timeout = \"5s\"\n\
         [baseline]\nruns = 5\nmin_runs = 1\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n",
        receiver.url()
    );
    config += &workload("moved", "");
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    let (mut daemon, status) = daemon(dir.path(), &path, &[]);

    // One passing run on the fast profile, then the server slows down (TTFT ~3 ms to ~110 ms).
    eventually(120, "a passing run", || {
        let runs = api_runs(status);
        runs.iter().any(|r| r["verdict"] == "pass").then_some(())
    });
    let (code, body) = http(
        sim_port,
        "POST",
        "/sim/profile",
        r#"{"profile":"illustrative"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let switched_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    eventually(180, "a finished run started on the slow profile", || {
        let runs = api_runs(status);
        runs.iter()
            .any(|r| {
                r["started_unix_ms"]
                    .as_i64()
                    .is_some_and(|t| t > switched_ms)
            })
            .then_some(())
    });
    let log = stop(&mut daemon, dir.path());

    // The runs started after the switch, from their verdict.json: id -> (trend, unconfirmed,
    // the baseline's runs).
    let mut slow: BTreeMap<String, (Option<String>, Option<String>, u64)> = BTreeMap::new();
    for (p, bytes) in files_under(&dir.path().join("state/artifacts"), &[]) {
        if p.file_name() != Some("verdict.json".as_ref()) {
            continue;
        }
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        if v["started_unix_ms"]
            .as_i64()
            .is_some_and(|t| t > switched_ms)
            && v["verdict_kind"] != "error"
            && v["verdict_kind"] != "interrupted"
        {
            slow.insert(
                v["id"].as_str().unwrap().into(),
                (
                    v["trend"].as_str().map(String::from),
                    v["comparison"]["unconfirmed"].as_str().map(String::from),
                    v["comparison"]["baseline_runs"].as_u64().unwrap_or(0),
                ),
            );
        }
    }
    assert!(!slow.is_empty(), "{log}");
    let events: HashMap<String, HashMap<String, String>> = receiver
        .logs()
        .into_iter()
        .filter(|l| l.event_name == "canary.run")
        .map(|l| attrs(&l.attributes))
        .map(|a| (a["canary.run.id"].clone(), a))
        .collect();
    // Each event says what verdict.json says.
    for (id, (trend, direction, _)) in &slow {
        let a = &events[id];
        assert_eq!(a.get("canary.run.trend"), trend.as_ref(), "{a:?}");
        assert_eq!(
            a.get("canary.run.trend.unconfirmed"),
            direction.as_ref(),
            "{a:?}"
        );
    }
    // The first slow run had the fast runs alone for reference: against one or two it is a
    // regression, unconfirmed (three or more would confirm it: a host slow enough to let
    // that many pass before the switch).
    let first = slow.values().min_by_key(|r| r.2).unwrap();
    let unconfirmed = match first {
        (Some(t), Some(d), n) if t == "insufficient" && d == "regressed" && *n < 3 => true,
        (Some(t), None, n) if t == "regressed" && *n >= 3 => false,
        other => panic!("{other:?}\n{log}"),
    };
    eprintln!(
        "{} slow runs, the first unconfirmed: {unconfirmed}",
        slow.len()
    );
    if unconfirmed {
        assert!(log.contains("unconfirmed: regressed"), "{log}");
        // `canary.runs` counts such a run with its direction.
        let metrics = receiver.last_metrics();
        let runs_metric = metrics.iter().find(|m| m.name == "canary.runs").unwrap();
        let Some(metric::Data::Sum(sum)) = &runs_metric.data else {
            panic!("canary.runs is not a sum")
        };
        assert!(
            sum.data_points.iter().any(|p| {
                let a = attrs(&p.attributes);
                a.get("canary.run.trend").map(String::as_str) == Some("insufficient")
                    && a.get("canary.run.trend.unconfirmed").map(String::as_str)
                        == Some("regressed")
            }),
            "{:?}",
            sum.data_points
        );
    }
}

#[test]
fn a_collector_that_is_down_is_reported_once_counted_and_runs_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // A collector that is down: a port meant to have nothing listening (found free; there
    // is no process to start on port 0 and read back).
    let dead = free_port();
    let mut config = format!(
        "state_dir = \"state\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"http://127.0.0.1:{dead}\"\nmetrics_interval = \"200ms\"\n\
         timeout = \"1s\"\nflush_timeout = \"2s\"\n\
         [otlp.headers]\nx-api-key = {{ env = \"CANARYD_TEST_OTLP_KEY\" }}\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n"
    );
    // Each run of `steady` in slices (issue 18's timeslices, as a workload key).
    config += &workload("steady", "slice_duration = \"250ms\"");
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    let (mut daemon, status) = daemon(dir.path(), &path, &[("CANARYD_TEST_OTLP_KEY", SECRET)]);

    // Runs pass while every export fails; the losses reach the status metrics.
    eventually(120, "three passing runs", || {
        let runs = api_runs(status);
        (runs.iter().filter(|r| r["verdict"] == "pass").count() >= 3).then_some(())
    });
    // Counted by signal: spans, metric exports and log events are different units.
    for signal in ["spans", "metrics", "logs"] {
        let drops = eventually(60, "export drops counted", || {
            let (_, m) = get(status, "/metrics");
            let line = m
                .lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "canaryd_export_drops_total{{signal=\"{signal}\"}} "
                    ))
                })?
                .to_string();
            let n: f64 = line.rsplit(' ').next()?.parse().ok()?;
            (n > 0.0).then_some(n)
        });
        assert!(drops > 0.0);
    }
    // Export runs: it is only the collector that is down.
    assert!(get(status, "/metrics")
        .1
        .contains("\ncanaryd_export_enabled 1\n"));

    let log = stop(&mut daemon, dir.path());
    // Many exports failed; each signal said so once.
    for signal in ["traces", "metrics", "logs"] {
        let n = log
            .matches(&format!(
                "OTLP {signal} export to http://127.0.0.1:{dead}/v1/{signal} failed"
            ))
            .count();
        assert_eq!(n, 1, "{signal}: {log}");
    }
    assert!(!log.contains(SECRET), "{log}");
}

/// `OTLP export lost data: N spans dropped, M metric exports failed, K log events dropped`
/// in `log`: (N, M, K).
// OTLP audit, item 1: a collector answering 200 with a `partial_success` rejecting spans
// was counted as having taken everything; `canaryd_export_drops_total` stayed 0.
#[test]
fn spans_a_collector_rejects_in_a_partial_success_are_counted_as_dropped() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start_answering(
        0,
        receiver::Answer::Rejected {
            items: 3,
            message: "span name missing".into(),
        },
    ));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let config = format!(
        "state_dir = \"state\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{}\"\nmetrics_interval = \"200ms\"\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n{}",
        receiver.url(),
        workload("steady", "")
    );
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    let (mut daemon, status) = daemon(dir.path(), &path, &[]);
    for signal in ["spans", "logs"] {
        eventually(60, "rejected items counted", || {
            let (_, m) = get(status, "/metrics");
            let prefix = format!("canaryd_export_drops_total{{signal=\"{signal}\"}} ");
            let n: f64 = m
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))?
                .parse()
                .ok()?;
            (n > 0.0).then_some(())
        });
    }
    assert!(!receiver.spans().is_empty());
    let log = stop(&mut daemon, dir.path());
    // One warning for the signal, naming the count and the collector's message.
    assert_eq!(log.matches("OTLP traces export to ").count(), 1, "{log}");
    assert!(
        log.contains("the collector rejected 3 spans (partial success: \"span name missing\")"),
        "{log}"
    );
}

// OTLP audit, item 2: an inherited `OTEL_*` value the exporter cannot use turned export off
// with one ERROR in the log, while `/metrics` read as working export (no drops, ready).
#[test]
fn export_turned_off_at_start_shows_in_the_status_metrics() {
    let dir = tempfile::tempdir().unwrap();
    // A collector and a target that are down: a port meant to have nothing listening.
    let dead = free_port();
    let config = format!(
        "state_dir = \"state\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"http://127.0.0.1:{dead}\"\n\
         [targets.t]\nurl = \"http://127.0.0.1:{dead}\"\nmodel = \"m\"\n\
         [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n"
    );
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    let (mut daemon, status) = daemon(
        dir.path(),
        &path,
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
    );
    let (_, m) = get(status, "/metrics");
    assert!(m.contains("\ncanaryd_export_enabled 0\n"), "{m}");
    let log = stop(&mut daemon, dir.path());
    assert!(log.contains("OTLP export off"), "{log}");
}

fn losses(log: &str) -> (u64, u64, u64) {
    let line = log
        .lines()
        .find(|l| l.contains("OTLP export lost data: "))
        .unwrap_or_else(|| panic!("no loss report in {log}"));
    let n = |what: &str| -> u64 {
        let before = line.split(what).next().unwrap();
        before.rsplit(' ').next().unwrap().parse().unwrap()
    };
    (
        n(" spans dropped"),
        n(" metric exports failed"),
        n(" log events dropped"),
    )
}

/// Lines of `records.jsonl` in `dir`: one span per request (the sample ratio is 1).
fn records_in(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
        .count() as u64
}

#[test]
fn replay_flush_to_a_collector_that_never_answers_keeps_its_deadline_and_counts_every_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let silent = receiver::Silent::start();
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    let mut replay = Child(
        std::process::Command::new(common::CANARYD)
            .args(["replay", "--trace"])
            .arg(&trace)
            .args(["--url", &format!("http://127.0.0.1:{sim_port}")])
            .args([
                "--model",
                "canary-sim",
                "--output-dir",
                "out",
                "--speedup",
                "20",
            ])
            .args(["--otlp-endpoint", &silent.url()])
            .args([
                "--otlp-metrics-interval",
                "200ms",
                "--otlp-flush-timeout",
                "2s",
            ])
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TIMEOUT")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("replay.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    // summary.json is written when the replay ends, just before the flush starts.
    let out = dir.path().join("out");
    eventually(120, "the replay to end", || {
        out.join("summary.json").exists().then_some(())
    });
    let code = replay.wait_exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.path().join("replay.log")).unwrap();
    assert_eq!(code, Some(0), "{log}");
    // The flush gave up at its deadline, as canaryd says (below); how long that took on the
    // wall clock is the host's, and the in-process test of the exporter bounds it
    // (otlp_export.rs, a collector that never answers).
    // Nothing was delivered: every span, the run event and the metric export in flight
    // are lost, and said to be.
    let (spans, metric_exports, events) = losses(&log);
    assert_eq!(spans, records_in(&out), "{log}");
    assert_eq!(events, 1, "{log}");
    assert!(metric_exports >= 1, "{log}");
    assert!(
        log.contains("the flush stopped at its 2s deadline"),
        "{log}"
    );
}

#[test]
fn daemon_sigterm_flush_to_a_collector_that_never_answers_keeps_its_deadline_and_counts_every_loss()
{
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let silent = receiver::Silent::start();
    // The default 10 s export timeout: every export outlives the 2 s flush deadline.
    let mut config = format!(
        "state_dir = \"state\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{}\"\nmetrics_interval = \"200ms\"\nflush_timeout = \"2s\"\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n",
        silent.url()
    );
    config += &workload("once", "").replace("every = \"2s\"", "every = \"1h\"");
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    let (mut daemon, status) = daemon(dir.path(), &path, &[]);
    let run = eventually(120, "the run to finish", || {
        api_runs(status).into_iter().next()
    });
    assert_eq!(run["verdict"], "pass", "{run}");
    // Spans, metrics and the run event are each stuck in an export.
    eventually(30, "three exports waiting for an answer", || {
        (silent.accepted.load(std::sync::atomic::Ordering::Relaxed) >= 3).then_some(())
    });

    daemon.signal(libc::SIGTERM);
    let code = daemon.wait_exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert_eq!(code, Some(0), "{log}");
    // Nothing runs, so the stop is the flush, and it gave up at its deadline, as the daemon
    // says; the wall clock's bound is the in-process test's (otlp_export.rs).
    assert!(
        log.contains("the flush stopped at its 2s deadline"),
        "{log}"
    );
    let artifacts = Path::new(run["artifacts"].as_str().unwrap());
    let artifacts = if artifacts.is_absolute() {
        artifacts.to_path_buf()
    } else {
        dir.path().join(artifacts)
    };
    let (spans, metric_exports, events) = losses(&log);
    assert_eq!(spans, records_in(&artifacts), "{log}");
    assert_eq!(events, 1, "one run, one event: {log}");
    assert!(metric_exports >= 1, "{log}");
}

/// A run whose process was killed is recovered at the next start and exported under its
/// workload's labels: the export knew none of them before the first schedule, and sent the
/// run with an empty server address and model (a series of its own beside the workload's).
#[test]
fn a_run_recovered_at_start_is_exported_under_its_workloads_labels() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let config = format!(
        "state_dir = \"state\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{}\"\nflush_timeout = \"5s\"\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.long]\ntarget = \"sim\"\ntrace = \"bundled\"\nspeedup = 2\n\
         scale_lengths = 0.05\nevery = \"1h\"\n",
        receiver.url()
    );
    let path = dir.path().join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    let (mut first, _) = daemon(dir.path(), &path, &[]);
    let artifacts = dir.path().join("state/artifacts/long");
    let run_dir = eventually(60, "the run to record requests", || {
        let run = std::fs::read_dir(&artifacts).ok()?.next()?.ok()?.path();
        let records = std::fs::read_to_string(run.join("records.jsonl")).ok()?;
        (records.lines().count() >= 3).then_some(run)
    });
    first.signal(libc::SIGKILL);
    assert_eq!(first.wait_exit(Duration::from_secs(30)), None, "killed");
    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();

    let (mut second, _) = daemon(dir.path(), &path, &[]);
    let event = eventually(60, "the recovered run's event", || {
        receiver
            .logs()
            .into_iter()
            .map(|l| attrs(&l.attributes))
            .find(|a| a.get("canary.run.id") == Some(&id))
    });
    stop(&mut second, dir.path());
    assert_eq!(event["canary.run.verdict"], "error", "{event:?}");
    assert_eq!(event["server.address"], "127.0.0.1", "{event:?}");
    assert_eq!(event["gen_ai.request.model"], "canary-sim", "{event:?}");
}
