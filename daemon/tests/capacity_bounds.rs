//! The capacity canary's bracket ends on bounds: with receive timestamps off every TTFT is
//! canaryd's read, an upper bound, so a probe failed on goodput judged against a TTFT no
//! request meets rests on bounds (the truth could pass it). `canaryd sweep --find-max-rate`
//! says so in `sweep.json` (`capacity.not_established`); the daemon's `kind = "capacity"`
//! workload said it only in its log line, worked out from the probes again, and stored,
//! served and showed the same bracket as established. Real runs: `canaryd run` against
//! `canaryd sim`.

#[allow(dead_code)] // the exporters tests use more of it than this test does
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;

mod common;

use common::{api_runs, eventually, http, json, sim};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric};
use receiver::{attrs, Receiver};
use serde_json::Value;

/// `canary.capacity.not_established`'s points in `metrics`, as (bound, value), sorted.
fn not_established_points(metrics: &[Metric]) -> Vec<(String, f64)> {
    let mut points: Vec<(String, f64)> = metrics
        .iter()
        .filter(|m| m.name == "canary.capacity.not_established")
        .flat_map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.clone(),
            other => panic!("canary.capacity.not_established is not a gauge: {other:?}"),
        })
        .map(|p| {
            let Some(number_data_point::Value::AsDouble(v)) = p.value else {
                panic!("{p:?}")
            };
            (attrs(&p.attributes)["canary.capacity.bound"].clone(), v)
        })
        .collect();
    points.sort_by(|a, b| a.0.cmp(&b.0));
    points.dedup();
    points
}

/// A TTFT no request meets: every judgement a miss on canaryd's read, an upper bound.
const SLO: &str = "time_to_first_token:0.001";

fn config(dir: &std::path::Path, sim_port: u16, otlp: &str) -> std::path::PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{otlp}\"\nmetrics_interval = \"500ms\"\n\
         [baseline]\nruns = 10\nmin_runs = 1\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         kernel_timestamps = false\n\
         [workloads.capacity]\ntarget = \"sim\"\nkind = \"capacity\"\nevery = \"1h\"\n\
         request_rate = 20\narrival_pattern = \"constant\"\nbenchmark_duration = \"1s\"\n\
         isl = 32\nosl = 4\nwarmup_requests = 1\n\
         slos = \"{SLO}\"\nmin_good_fraction = 0.9\n\
         max_probes = 2\nsearch_precision = 0.3\ncapacity_tolerance = 0.1\n",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

// Every probe fails on misses judged on upper bounds, so the failing end (the lowest rate
// tried) is not established. verdict.json, /api/runs (the history's row), the status page
// and /metrics said nothing of it; the log line alone did.
#[test]
fn a_capacity_runs_failing_end_on_bounds_is_stored_served_and_shown_as_not_established() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim(&[]);
    let cfg = config(dir.path(), sim_port, &receiver.url());
    let (_d, status) = common::daemon_on_own_port(dir.path(), &cfg, "daemon.log", &[]);
    let run = eventually(120, "a finished capacity run", || {
        api_runs(status).into_iter().last()
    });
    let c = &run["capacity"];
    assert_eq!(run["verdict_kind"], "fail", "{run:#}");
    assert!(c["max_passing_rate"].is_null(), "{c:#}");
    let failed = c["min_failing_rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("{c:#}"));
    // The probe at the failing end: failed on a good share that at most reaches 0.9.
    let probe = c["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["rate"].as_f64() == Some(failed))
        .unwrap_or_else(|| panic!("{c:#}"));
    let verdict = probe["verdict"].as_str().unwrap();
    assert!(verdict.contains("rests on bounds: up to"), "{probe}");

    // /api/runs: the stored run names the end, its rate and the probe's reason.
    let ends = c["not_established"]
        .as_array()
        .unwrap_or_else(|| panic!("no not_established: {c:#}"));
    assert_eq!(ends.len(), 1, "{c:#}");
    let end = &ends[0];
    assert_eq!(end["end"], "failed", "{end}");
    assert_eq!(end["rate"].as_f64(), Some(failed), "{end}");
    let why = end["why"].as_str().unwrap();
    assert!(why.starts_with("rests on bounds: up to"), "{end}");
    assert!(verdict.contains(why), "{why} not in {verdict}");

    // verdict.json in the run's folder holds the same.
    let id = run["id"].as_str().unwrap();
    let v = json(
        &dir.path()
            .join("state/artifacts/capacity")
            .join(id)
            .join("verdict.json"),
    );
    assert_eq!(
        v["capacity"]["not_established"], c["not_established"],
        "{v:#}"
    );
    let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
    assert_eq!(code, 200);
    let one: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        one["capacity"]["not_established"], c["not_established"],
        "{one:#}"
    );

    // The status page: the bracket's cell says which end, the reason on hover.
    let below = canary_core::rate_text::rate_below(failed);
    let (_, page) = http(status, "GET", "/", "");
    assert!(
        page.contains(&format!(
            "not established: the failing end (below {below} req/s) rests on bounds"
        )),
        "{page}"
    );
    assert!(page.contains("class=\"not-established\" title=\"rests on bounds: up to"));

    // /metrics: the bracket's ends, the failing one marked.
    let (code, metrics) = http(status, "GET", "/metrics", "");
    assert_eq!(code, 200);
    assert!(
        metrics.contains(&format!(
            "canaryd_last_run_capacity_rate{{workload=\"capacity\",end=\"failed\"}} {failed}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "canaryd_last_run_capacity_not_established{workload=\"capacity\",end=\"failed\"} 1"
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("end=\"passed\""), "{metrics}");

    // Over OTLP: `canary.capacity.not_established` 1 for the failing end, no passed point.
    let points = eventually(30, "canary.capacity.not_established", || {
        let points = not_established_points(&receiver.last_metrics());
        (!points.is_empty()).then_some(points)
    });
    assert_eq!(points, [("failed".to_string(), 1.0)]);

    // The log line, as before.
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains(&format!(
            "not established: the fail at {below} req/s rests on"
        )),
        "{log}"
    );
}

/// `canaryd sweep --find-max-rate` against `url` into `DIR/out`, receive timestamps off,
/// judged by a TTFT of 200 ms for 90 % of requests: 20 then 40 req/s after a pass, 10 after a
/// fail.
fn search(dir: &std::path::Path, url: &str, out: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(common::CANARYD)
        .args(["sweep", "--url", url, "--model", "canary-sim", "-o", out])
        .args(["--no-ebpf", "--no-nvml", "--no-kernel-timestamps"])
        .args(["--find-max-rate", "--slo", "time_to_first_token:200"])
        .args(["--min-good-fraction", "0.9", "--request-rate", "20"])
        .args([
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "1s",
        ])
        .args(["--max-runs", "2", "--isl", "32", "--osl", "4"])
        .args(extra)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("canaryd runs")
}

// `canaryd compare` of two capacity searches called B lower on B's failing end, though its
// probe failed on TTFT misses judged on upper bounds (sweep.json's `not_established`), and
// said nothing of it. A: the fast simulator, passing; B: one whose every prefill takes 250 ms,
// failing a TTFT of 200 ms on canaryd's read of each first token.
#[test]
fn a_compare_of_capacities_says_which_end_its_verdict_rests_on_is_not_established() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_fast, fast) = sim(&[]);
    let (_slow, slow) = common::sim_with_profile(
        dir,
        r#"{"profile": "fast", "prefill_overhead_us": 250000}"#,
        &[],
    );
    // B's search exports over OTLP, as the daemon's capacity workloads do.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let otlp = receiver.url();
    let b_export = ["--otlp-endpoint", otlp.as_str()];
    for (port, out, extra) in [(fast, "a", &[][..]), (slow, "b", &b_export[..])] {
        let done = search(dir, &format!("http://127.0.0.1:{port}"), out, extra);
        assert!(
            dir.join(out).join("sweep.json").is_file(),
            "{}",
            common::text(&done)
        );
    }
    let (a, b) = (
        json(&dir.join("a/sweep.json")),
        json(&dir.join("b/sweep.json")),
    );
    let (a, b) = (&a["capacity"], &b["capacity"]);
    let passed = a["max_passing_rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("A passed no rate: {a:#}"));
    assert!(a.get("not_established").is_none(), "{a:#}");
    let failed = b["min_failing_rate"].as_f64().unwrap();
    assert!(b["max_passing_rate"].is_null(), "{b:#}");
    let end = &b["not_established"][0];
    assert_eq!(end["end"], "failed", "{b:#}");
    let why = end["why"].as_str().unwrap();
    // Its export says the same: the failing end 1 (on bounds), no passed end. A one-shot
    // search sent no such gauge.
    let exported = not_established_points(
        &receiver
            .all_metrics()
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
    );
    assert_eq!(exported, [("failed".to_string(), 1.0)], "{b:#}");

    let shown = std::process::Command::new(common::CANARYD)
        .args(["compare", "a", "b"])
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let said = common::text(&shown);
    let line = said
        .lines()
        .find(|l| l.contains("capacity at SLO: A"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(failed <= passed, "{a:#} {b:#}");
    assert!(
        line.contains("B lower (the brackets do not overlap: bounds)"),
        "{line}"
    );
    let below = canary_core::rate_text::rate_below(failed);
    assert!(
        line.ends_with(&format!(
            "; not established: B's fail at {below} req/s {why}"
        )),
        "{line}"
    );
    // And in its JSON.
    let shown = std::process::Command::new(common::CANARYD)
        .args(["compare", "a", "b", "--json"])
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&shown.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::text(&shown)));
    let c = &doc["capacity"];
    assert_eq!(c["verdict"], "lower", "{c:#}");
    assert_eq!(c["b"]["not_established"][0]["why"], why, "{c:#}");
    assert_eq!(
        c["rests_on_bounds"][0],
        format!("B's fail at {below} req/s {why}"),
        "{c:#}"
    );
}
