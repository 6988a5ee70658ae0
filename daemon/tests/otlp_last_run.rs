//! The daemon's OTLP last-run gauges across restarts: real `canaryd run` processes against a
//! real `canaryd sim` process, exporting to a real OTLP/HTTP receiver on loopback that decodes
//! the protobuf. At start the state sets (verdict, trend, diagnosis) carry each workload's last
//! stored run without counting it again, as `/metrics` does; a run recovered at start that
//! began before the newest stored run is counted and sent, but is not made the last.

#[allow(dead_code)] // the exporters tests use more of it than this test does
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;

mod common;

use common::{api_runs, eventually, http};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric};
use receiver::{attrs, Receiver};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The last-run state sets, one gauge per possible value.
const STATE_SETS: [&str; 4] = [
    "canary.run.verdict.state",
    "canary.run.trend.state",
    "canary.run.bottleneck.state",
    "canary.run.bottleneck.confidence.state",
];

/// A schedule that never comes due while a test runs (next 1 January, 00:00 UTC): a daemon
/// started with it runs nothing, so whatever its gauges show comes from the history.
const NOT_DUE: &str = "cron = \"0 0 1 1 *\"";

/// `canaryd run --config CONFIG` in `dir`, stderr to `dir/LOG`; with its status port.
fn daemon(dir: &Path, config: &str, log: &str) -> (common::Child, u16) {
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, config).unwrap();
    common::daemon_on_own_port(dir, &path, log, &[])
}

/// SIGTERM: the daemon flushes its export and exits 0.
fn stop(daemon: &mut common::Child, dir: &Path, log: &str) {
    daemon.signal(libc::SIGTERM);
    let code = daemon.wait_exit(Duration::from_secs(60));
    let text = std::fs::read_to_string(dir.join(log)).unwrap();
    assert_eq!(code, Some(0), "{text}");
}

/// A daemon config exporting to `endpoint`, with one target on the simulator and `workloads`.
fn config(endpoint: &str, sim_port: u16, top: &str, workloads: &str) -> String {
    format!(
        "state_dir = \"state\"\n{top}\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{endpoint}\"\nmetrics_interval = \"500ms\"\nflush_timeout = \"5s\"\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         {workloads}"
    )
}

/// A gauge point's or counter point's value as a float.
fn value(v: &Option<number_data_point::Value>) -> f64 {
    match v {
        Some(number_data_point::Value::AsDouble(d)) => *d,
        Some(number_data_point::Value::AsInt(i)) => *i as f64,
        None => f64::NAN,
    }
}

/// The points of `name` of `workload` in `metrics`: each point's attributes and value, sorted.
fn points(metrics: &[Metric], name: &str, workload: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for m in metrics.iter().filter(|m| m.name == name) {
        let data = match &m.data {
            Some(metric::Data::Gauge(g)) => &g.data_points,
            Some(metric::Data::Sum(s)) => &s.data_points,
            _ => panic!("{name} is neither a gauge nor a sum"),
        };
        for p in data {
            let a: BTreeMap<String, String> = attrs(&p.attributes).into_iter().collect();
            if a.get("canary.workload").map(String::as_str) == Some(workload) {
                out.push((a, value(&p.value)));
            }
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

/// The value of `key` whose point of state set `name` is 1, for `workload`.
fn state(metrics: &[Metric], name: &str, key: &str, workload: &str) -> Option<String> {
    let set = points(metrics, name, workload);
    let on: Vec<_> = set.iter().filter(|(_, v)| *v == 1.0).collect();
    assert!(on.len() <= 1, "{name}: more than one state holds: {set:?}");
    on.first().map(|(a, _)| a[key].clone())
}

/// `canary.runs` of `workload` by verdict: what the export counted.
fn counted(metrics: &[Metric], workload: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (a, v) in points(metrics, "canary.runs", workload) {
        *out.entry(a["canary.run.verdict"].clone()).or_default() += v;
    }
    out
}

/// `/metrics`' `canaryd_last_run_verdict` of `workload` that is 1.
fn status_last_verdict(port: u16, workload: &str) -> Option<String> {
    let (_, text) = http(port, "GET", "/metrics", "");
    let prefix = format!("canaryd_last_run_verdict{{workload=\"{workload}\",verdict=\"");
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(&prefix)?;
        let (verdict, v) = rest.split_once("\"} ")?;
        (v == "1").then(|| verdict.to_string())
    })
}

/// A restart used to leave the last-run gauges empty until each workload ran again (the
/// "Last verdict" panel blank), while `/metrics` seeded its own from the history. Now they
/// carry the stored run's states, under the same labels the live run's had, and nothing is
/// counted again: no `canary.runs` point and no `canary.run` event comes from a stored run.
#[test]
fn a_restart_seeds_the_last_runs_state_sets_from_the_history_without_counting_it_again() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let first_collector = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // Every request misses a 1 ms end-to-end SLO: the run fails, a verdict a restart's blank
    // default could not be taken for.
    let workload = |schedule: &str| {
        format!(
            "[workloads.strict]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 20\n\
             speedup = 20\nscale_lengths = 0.05\n{schedule}\n\
             slos = \"request_latency:1\"\nmin_good_fraction = 0.9\n"
        )
    };
    let first = config(
        &first_collector.url(),
        sim_port,
        "",
        &workload("every = \"1h\""),
    );
    let (mut daemon1, status1) = daemon(dir.path(), &first, "first.log");
    let run = eventually(120, "the first run", || {
        api_runs(status1).into_iter().next()
    });
    stop(&mut daemon1, dir.path(), "first.log");
    assert_eq!(run["verdict_kind"], "fail", "{run}");
    let live = first_collector.last_metrics();
    assert_eq!(
        state(
            &live,
            "canary.run.verdict.state",
            "canary.run.verdict",
            "strict"
        )
        .as_deref(),
        Some("fail")
    );

    // The next start: nothing is due, so nothing runs.
    let second_collector = rt.block_on(Receiver::start());
    let second = config(&second_collector.url(), sim_port, "", &workload(NOT_DUE));
    let (mut daemon2, status2) = daemon(dir.path(), &second, "second.log");
    assert_eq!(
        status_last_verdict(status2, "strict").as_deref(),
        Some("fail")
    );
    stop(&mut daemon2, dir.path(), "second.log");
    let folders = std::fs::read_dir(dir.path().join("state/artifacts/strict")).unwrap();
    assert_eq!(folders.count(), 1, "the second start ran the workload");
    let seeded = second_collector.last_metrics();

    // Each state set as the live run left it: the same states under the same labels.
    for name in STATE_SETS {
        let was = points(&live, name, "strict");
        assert!(!was.is_empty(), "{name}: the live run exported none");
        assert_eq!(points(&seeded, name, "strict"), was, "{name}");
    }
    // The stored run was counted by the process that ran it, not again.
    assert_eq!(counted(&live, "strict").get("fail"), Some(&1.0));
    assert!(counted(&seeded, "strict").is_empty(), "{seeded:?}");
    let events: Vec<_> = second_collector
        .logs()
        .into_iter()
        .filter(|l| l.event_name == "canary.run")
        .collect();
    assert!(events.is_empty(), "{events:?}");
}

/// A run whose process was killed, recovered at a start after a newer run was recorded,
/// used to be exported as its workload's last: the "Last verdict" panel showed its `error`
/// while `/metrics` (and the history) kept the newer `pass`. Now it is counted and sent, and
/// the state sets stay the newer run's.
#[test]
fn a_run_recovered_at_start_older_than_the_last_run_is_counted_but_not_made_the_last() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let collector = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let endpoint = collector.url();
    let workload = |shape: &str, schedule: &str| {
        format!(
            "[workloads.w]
target = \"sim\"\ntrace = \"bundled\"\n{shape}\n\
             scale_lengths = 0.05\n{schedule}\n"
        )
    };
    // 1. A long run, killed once it has recorded a few requests: its folder has records and
    // no verdict.
    let long = workload("speedup = 2", "every = \"1h\"");
    let (mut first, _) = daemon(dir.path(), &config(&endpoint, sim_port, "", &long), "1.log");
    let artifacts = dir.path().join("state/artifacts/w");
    let orphan = eventually(60, "the run to record requests", || {
        let run = std::fs::read_dir(&artifacts).ok()?.next()?.ok()?.path();
        let records = std::fs::read_to_string(run.join("records.jsonl")).ok()?;
        (records.lines().count() >= 3).then_some(run)
    });
    first.signal(libc::SIGKILL);
    assert_eq!(first.wait_exit(Duration::from_secs(30)), None, "killed");
    let orphan = orphan.file_name().unwrap().to_str().unwrap().to_string();

    // 2. A newer run recorded in the same history, by a daemon whose runs go to another
    // artifacts folder (so it does not see, and recover, the killed one).
    let short = workload("max_requests = 20\nspeedup = 20", "every = \"1h\"");
    let top = "[export]\nartifacts_dir = \"other-artifacts\"";
    let (mut second, status) = daemon(
        dir.path(),
        &config(&endpoint, sim_port, top, &short),
        "2.log",
    );
    let newer = eventually(120, "the newer run", || api_runs(status).into_iter().next());
    stop(&mut second, dir.path(), "2.log");
    assert_eq!(newer["verdict_kind"], "pass", "{newer}");

    // 3. A start that finds the killed run, older than the newest recorded; nothing is due.
    let third_collector = rt.block_on(Receiver::start());
    let third = config(
        &third_collector.url(),
        sim_port,
        "",
        &workload("speedup = 2", NOT_DUE),
    );
    let (mut third_daemon, status) = daemon(dir.path(), &third, "3.log");
    let event = eventually(60, "the recovered run's event", || {
        third_collector
            .logs()
            .into_iter()
            .map(|l| attrs(&l.attributes))
            .find(|a| a.get("canary.run.id") == Some(&orphan))
    });
    assert_eq!(event["canary.run.verdict"], "error", "{event:?}");
    // Recovered in its place by start, before the newer run (ids name the second only).
    let runs = api_runs(status);
    let recovered = runs.iter().find(|r| r["id"] == orphan.as_str()).unwrap();
    let started = |r: &serde_json::Value| r["started_unix_ms"].as_i64().unwrap();
    assert!(started(recovered) < started(&newer), "{recovered} {newer}");
    // /metrics keeps the newer run as the last; the export now agrees.
    assert_eq!(status_last_verdict(status, "w").as_deref(), Some("pass"));
    stop(&mut third_daemon, dir.path(), "3.log");
    let exported = third_collector.last_metrics();
    assert_eq!(
        state(
            &exported,
            "canary.run.verdict.state",
            "canary.run.verdict",
            "w"
        )
        .as_deref(),
        Some("pass"),
        "{:?}",
        points(&exported, "canary.run.verdict.state", "w")
    );
    // Counted as the run it is: one `error`, and the seeded pass not again.
    assert_eq!(
        counted(&exported, "w"),
        BTreeMap::from([("error".to_string(), 1.0)])
    );
}
