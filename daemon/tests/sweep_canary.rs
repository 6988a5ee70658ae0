//! The sweep canary: `canaryd run` with a `kind = "sweep"` workload (closed loops of 2, 8
//! and 32 users, 2 s each) against a real `canaryd sim --profile capacity` (8 slots; its
//! capacity known in closed form, `Profile::capacity`, ~107 req/s). The first runs find the
//! knee at 8 users, at most that capacity (5 % allowed for measurement), and become the
//! baseline; then `POST /sim/profile` makes every decode step four times slower, and a later
//! run's verdict turns to `fail: knee at … req/s, baseline … ± …`, in `/api/runs`,
//! `verdict.json`, the log and over OTLP (`canary.sweep.knee`) (issue 18).

#[allow(dead_code)] // the exporters tests use more of it than this test does
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;

mod common;

use canary_sim::Profile;
use common::{api_runs, eventually, http, sim_with_profile};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use receiver::{attrs, Receiver};
use serde_json::Value;

const ISL: u32 = 32;
const OSL: u32 = 16;

/// Four times the capacity profile's decode cost: about a quarter of its capacity.
const SLOWER: &str = r#"{"profile":"capacity","decode_base_us":8000,"decode_per_seq_us":1000}"#;

fn config(dir: &std::path::Path, sim_port: u16, otlp: &str) -> std::path::PathBuf {
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [otlp]\nendpoint = \"{otlp}\"\nmetrics_interval = \"500ms\"\n\
         [baseline]\nruns = 10\nmin_runs = 1\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.knee]\ntarget = \"sim\"\nkind = \"sweep\"\nevery = \"1s\"\n\
         sweep_concurrency = [2, 8, 32]\ncooldown = \"200ms\"\nbenchmark_duration = \"2s\"\n\
         isl = {ISL}\nosl = {OSL}\nwarmup_requests = 2\nknee_tolerance = 0.1\n",
        dir.join("state").display()
    );
    let path = dir.join("canaryd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A rate as verdicts print it: whole from 100 req/s up, else two decimals at most.
fn rate(r: f64) -> String {
    if r >= 100.0 {
        return format!("{r:.0}");
    }
    let s = format!("{r:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A finished run of `workload` from the status API on port `status`: the first the API
/// lists once one is there (newest first), waited for up to 120 s.
fn first(status: u16, workload: &str) -> Value {
    eventually(120, &format!("a finished {workload} run"), || {
        api_runs(status)
            .into_iter()
            .find(|r| r["workload"] == workload)
    })
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn sweep_knee_verdict_turns_to_fail_when_the_simulator_slows_down() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = sim_with_profile(dir.path(), r#"{"profile": "capacity"}"#, &[]);
    let cfg = config(dir.path(), sim_port, &receiver.url());
    let (_d, status) = common::daemon_on_own_port(dir.path(), &cfg, "daemon.log", &[]);
    let profile = Profile::capacity_profile();
    let capacity = profile.capacity(ISL, OSL);
    let fast = capacity.requests_per_s;
    // The closed-form ceiling of the grid point below the knee (2 users).
    let below = profile.throughput_at(ISL, OSL, 2).requests_per_s;
    eprintln!("known capacity: {fast:.1} req/s (at 2 users: {below:.1})");

    // The first run: no baseline yet, so it passes.
    let oldest = eventually(120, "a finished sweep run", || {
        api_runs(status).into_iter().last()
    });
    assert_eq!(oldest["verdict"], "pass", "{oldest:#}");
    assert!(oldest["sweep"]["baseline"].is_null(), "{oldest:#}");
    // A knee at the profile's 8 slots, at its capacity, in the first of the first 3 runs
    // that has it. c8's closed loop leaves a slot empty for a step or more per request
    // (the client's turnaround), about 3 % under the capacity c32's queue keeps; a turnaround
    // a starved host stretches past about 12 ms (3 steps) makes that the 10 % gain of no knee.
    // A knee at the wrong point in all 3 still fails.
    let first = eventually(180, "a sweep run with its knee at c8", || {
        let runs = api_runs(status);
        let first3: Vec<&Value> = runs.iter().rev().take(3).collect();
        let knees: Vec<&Value> = first3.iter().map(|r| &r["sweep"]["knee"]).collect();
        if let Some(r) = first3.iter().find(|r| r["sweep"]["knee"]["label"] == "c8") {
            eprintln!("the first runs' knees: {knees:#?}");
            return Some((*r).clone());
        }
        assert!(
            first3.len() < 3,
            "no knee at c8 in the first 3 runs: {knees:#?}"
        );
        None
    });
    eprintln!("first run with its knee at c8: {first:#}");
    let s = &first["sweep"];
    assert_eq!(s["axis"], "concurrency");
    // Where the sim saturates is its slot count whatever the host's speed (past 8 users the
    // rest wait), so the knee's point is exact. Its throughput is not: a loaded host runs
    // the sim's steps late and only ever lowers it (this test failed once beside a full CI
    // on 2 cores, when the bound was 0.8 of the capacity). So the bounds are the closed
    // form's: at most the capacity (an upper bound for a closed loop; 5 % allowed for
    // measurement), and over the ceiling
    // of the point below (2 users, ~47 req/s), as only a sim running more than 2 at once can
    // be; a rate misread or a knee at the wrong point still fails.
    assert_eq!(capacity.concurrency, 8);
    let knee = f(&s["knee"]["request_throughput"]);
    assert!(
        knee > below && knee < fast * 1.05,
        "knee {knee} vs capacity {fast} and {below} at 2 users"
    );
    assert_eq!(s["points"].as_array().unwrap().len(), 3);
    // Each point is a run of its own folder, and sweep.json marks the knee.
    let art = dir
        .path()
        .join("state/artifacts/knee")
        .join(first["id"].as_str().unwrap());
    assert!(art.join("point-02-c8/records.jsonl").is_file());
    let doc: Value =
        serde_json::from_slice(&std::fs::read(art.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(doc["knee"]["label"], "c8", "{doc:#}");
    assert!(first["figures"]["requests"].as_u64().unwrap() > 0);

    // Slow the simulator down.
    let switched_ms = now_ms();
    let (code, body) = http(sim_port, "POST", "/sim/profile", SLOWER);
    assert_eq!(code, 200, "{body}");
    let failed = eventually(180, "a failed sweep run started after the slowdown", || {
        api_runs(status).into_iter().find(|r| {
            r["verdict_kind"] == "fail" && r["started_unix_ms"].as_i64().unwrap() > switched_ms
        })
    });
    eprintln!("failed run: {failed:#}");
    let verdict = failed["verdict"].as_str().unwrap();
    let s = &failed["sweep"];
    let base = &s["baseline"];
    let k = f(&s["knee"]["request_throughput"]);
    let expected = format!(
        "fail: knee at {} req/s, baseline {} ± {}",
        rate(k),
        rate(f(&base["knee"])),
        rate(f(&base["spread"]))
    );
    assert!(verdict.starts_with(&expected), "{verdict} vs {expected}");
    assert!(k <= f(&base["fail_at_or_below"]), "{s:#}");
    assert!(k < fast * 0.5, "{s:#}");
    let id = failed["id"].as_str().unwrap();
    let v: Value = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join("state/artifacts/knee")
                .join(id)
                .join("verdict.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(v["verdict"], verdict);
    assert_eq!(v["sweep"]["baseline"], *base);
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(log.contains(&expected[6..]), "{log}");

    // The status page charts the knees with their baseline, and the failed run's knee is in
    // its table as `/api/runs` reports it (exact on hover).
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200);
    let chart = page
        .split("id=\"capacity-0\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no knee chart: {page}"))
        .split("</figure>")
        .next()
        .unwrap();
    for layer in ["knee", "baseline knee", "not a pass"] {
        assert!(
            chart.contains(&format!("data-name=\"{layer}\"")),
            "{layer}: {chart}"
        );
    }
    assert!(page.contains("<th>knee, req/s</th>"), "{page}");
    let label = s["knee"]["label"].as_str().unwrap();
    assert!(
        page.contains(&format!(
            "<span title=\"{k} req/s\">{} at {label}</span>",
            rate(k)
        )),
        "{page}"
    );

    // Over OTLP: `canary.sweep.knee` by figure, each the figure of a run the API lists.
    let points = eventually(30, "canary.sweep.knee with a baseline point", || {
        let metrics = receiver.last_metrics();
        let m = metrics.iter().find(|m| m.name == "canary.sweep.knee")?;
        let Some(metric::Data::Gauge(g)) = &m.data else {
            panic!("canary.sweep.knee is not a gauge: {m:?}")
        };
        let points: Vec<(String, f64)> = g
            .data_points
            .iter()
            .map(|p| {
                let a = attrs(&p.attributes);
                assert_eq!(a["canary.workload"], "knee", "{a:?}");
                let v = match p.value {
                    Some(number_data_point::Value::AsDouble(v)) => v,
                    other => panic!("{other:?}"),
                };
                (a["canary.sweep.figure"].clone(), v)
            })
            .collect();
        points
            .iter()
            .any(|p| p.0 == "baseline" && p.1.is_finite())
            .then_some(points)
    });
    // The points are one run's figures, exactly.
    common::assert_one_runs_figures(
        points,
        &api_runs(status),
        &[
            ("knee", "/sweep/knee/request_throughput"),
            ("baseline", "/sweep/baseline/knee"),
        ],
    );
}

/// A sweep canary against a server that fails at every load (a bad replica: a quarter of its
/// answers are 503s, `canaryd sim --fault-rate 0.25 --fault status=503`), and a rate sweep
/// with SLOs no rate met, on a healthy one. Every point of the first is over 5 % target errors
/// and was left out of the knee, so the run passed as "no knee (the series did not saturate)";
/// the second passed without a word of its SLOs. Each is now a `fail` naming its points, as a
/// latency run over `max_error_rate` and a capacity search where no rate passed are (audit
/// F1).
#[test]
fn a_sweep_whose_points_failed_at_the_target_or_met_no_slo_fails_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let (faulty_dir, healthy_dir) = (dir.path().join("faulty"), dir.path().join("healthy"));
    std::fs::create_dir_all(&faulty_dir).unwrap();
    std::fs::create_dir_all(&healthy_dir).unwrap();
    let capacity = r#"{"profile": "capacity"}"#;
    let faults = ["--fault-rate", "0.25", "--fault", "status=503"];
    let (_faulty, faulty_port) = sim_with_profile(&faulty_dir, capacity, &faults);
    let (_healthy, healthy_port) = sim_with_profile(&healthy_dir, capacity, &[]);
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.faulty]\nurl = \"http://127.0.0.1:{faulty_port}\"\nmodel = \"canary-sim\"\n\
         [targets.healthy]\nurl = \"http://127.0.0.1:{healthy_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.failing]\ntarget = \"faulty\"\nkind = \"sweep\"\nevery = \"1s\"\n\
         sweep_concurrency = [2, 8]\nbenchmark_duration = \"1s\"\n\
         isl = {ISL}\nosl = {OSL}\nwarmup_requests = 2\n\
         [workloads.unmet]\ntarget = \"healthy\"\nkind = \"sweep\"\nevery = \"1s\"\n\
         request_rate = 5\nsweep_request_rate = [5, 10]\nbenchmark_duration = \"1s\"\n\
         isl = {ISL}\nosl = {OSL}\nwarmup_requests = 2\n\
         slos = \"time_to_first_token:1\"\nmin_good_fraction = 0.9\n",
        dir.path().join("state").display()
    );
    let cfg = dir.path().join("canaryd.toml");
    std::fs::write(&cfg, text).unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &cfg, "daemon.log", &[]);
    let run = first(status, "failing");
    eprintln!("failing: {run:#}");
    assert_eq!(run["verdict_kind"], "fail", "{run:#}");
    let verdict = run["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("fail: error rate above max_error_rate 0.05 at c2 (0.")
            && verdict.contains(", c8 (0.")
            && verdict.ends_with("; left out of the knee (over 5% errors): c2, c8"),
        "{verdict}"
    );
    let s = &run["sweep"];
    assert!(s["knee"].is_null(), "{s:#}");
    let left = s["left_out"].as_array().expect("left_out");
    assert_eq!(left.len(), 2, "{s:#}");
    assert!(left.iter().all(|l| l["why"] == "target_errors"), "{s:#}");

    let run = first(status, "unmet");
    eprintln!("unmet: {run:#}");
    assert_eq!(run["verdict_kind"], "fail", "{run:#}");
    assert_eq!(
        run["verdict"],
        "fail: capacity at SLO: no rate passed time_to_first_token:1: below 5 req/s, the \
         lowest rate swept (2 points)"
    );
    assert!(run["sweep"]["capacity"]["max_passing_rate"].is_null());

    // The log and the status page say which points were left out, and that no point is
    // left for a step, never that the series did not saturate. (Whether the rate series,
    // every point evidence, has a knee is noise: 5 and 10 requests over a second.)
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    let said = "no knee: 0 of the 2 points are evidence, and a knee is a step between two; \
                left out: c2 (";
    assert!(log.contains(&format!("[{said}")), "{log}");
    assert!(
        log.contains("; capacity at SLO: no rate passed; 2 points"),
        "{log}"
    );
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains(&format!("<span class=\"no-knee\">{said}")),
        "{page}"
    );
    // The failing workload's own section (the unmet rate series may say it of itself).
    let failing = page
        .split("<h2>failing")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .unwrap_or_else(|| panic!("no section for the failing workload: {page}"));
    assert!(failing.contains("<span class=\"no-knee\">"), "{failing}");
    assert!(!failing.contains("did not saturate"), "{failing}");
}

/// A signal during a daemon sweep's first point: `sweep.json` says the sweep was interrupted
/// and which points never ran, as `canaryd sweep`'s does (it said neither: a sweep cut short
/// read as a finished one of one point), and the log's knee line names them.
#[test]
fn a_sweep_a_signal_stops_says_so_and_names_the_points_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.long]\ntarget = \"sim\"\nkind = \"sweep\"\nevery = \"1h\"\n\
         sweep_concurrency = [2, 8, 32]\nbenchmark_duration = \"60s\"\n\
         isl = {ISL}\nosl = {OSL}\ngrace_period = \"2s\"\n",
        dir.path().join("state").display()
    );
    let cfg = dir.path().join("canaryd.toml");
    std::fs::write(&cfg, text).unwrap();
    let (mut d, _status) = common::daemon_on_own_port(dir.path(), &cfg, "daemon.log", &[]);
    let artifacts = dir.path().join("state/artifacts/long");
    let run_dir = eventually(60, "the first point to send requests", || {
        let run = std::fs::read_dir(&artifacts).ok()?.next()?.ok()?.path();
        let records = std::fs::read_to_string(run.join("point-01-c2/records.jsonl")).ok()?;
        (records.lines().count() >= 3).then_some(run)
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(std::time::Duration::from_secs(60)), Some(0));

    let doc: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(doc["interrupted"], true, "{doc:#}");
    assert_eq!(doc["not_run"], serde_json::json!(["c8", "c32"]), "{doc:#}");
    assert_eq!(doc["points"].as_array().map(Vec::len), Some(1), "{doc:#}");
    assert_eq!(doc["left_out"][0]["why"], "cut_short", "{doc:#}");
    let verdict: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(verdict["verdict"], "interrupted", "{verdict:#}");
    assert_eq!(verdict["sweep"]["not_run"], doc["not_run"], "{verdict:#}");
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains(
            "left out: c2 (cut short by a signal); not run: c8, c32 (a signal stopped the sweep)"
        ),
        "{log}"
    );
    assert!(!log.contains("did not saturate"), "{log}");
}

/// A point whose verdict is an error (a target where every request fails) stops the sweep:
/// its figures stay in `sweep.json` (they were dropped, and it read as a sweep of no point),
/// those after it are `not_run`, and the log says so rather than "did not saturate". And the
/// two error cuts the README describes: at `max_error_rate = 0.5`, points with about 25 %
/// errors pass their gate and the run passes, while the knee leaves them out and says so.
#[test]
fn a_sweep_stopped_by_a_failed_point_keeps_it_and_a_lenient_gate_still_leaves_errors_out() {
    let dir = tempfile::tempdir().unwrap();
    let (dead_dir, faulty_dir) = (dir.path().join("dead"), dir.path().join("faulty"));
    std::fs::create_dir_all(&dead_dir).unwrap();
    std::fs::create_dir_all(&faulty_dir).unwrap();
    let capacity = r#"{"profile": "capacity"}"#;
    let (_dead, dead_port) = sim_with_profile(
        &dead_dir,
        capacity,
        &["--fault-rate", "1", "--fault", "status=503"],
    );
    let (_faulty, faulty_port) = sim_with_profile(
        &faulty_dir,
        capacity,
        &["--fault-rate", "0.25", "--fault", "status=503"],
    );
    let text = format!(
        "state_dir = \"{}\"\n\
         [telemetry]\nnvml = false\nebpf = false\n\
         [targets.dead]\nurl = \"http://127.0.0.1:{dead_port}\"\nmodel = \"canary-sim\"\n\
         [targets.faulty]\nurl = \"http://127.0.0.1:{faulty_port}\"\nmodel = \"canary-sim\"\n\
         [workloads.dead]\ntarget = \"dead\"\nkind = \"sweep\"\nevery = \"1h\"\n\
         sweep_concurrency = [2, 8, 32]\nbenchmark_duration = \"1s\"\n\
         isl = {ISL}\nosl = {OSL}\nwarmup_requests = 0\n\
         [workloads.lenient]\ntarget = \"faulty\"\nkind = \"sweep\"\nevery = \"1h\"\n\
         sweep_concurrency = [2, 8]\nbenchmark_duration = \"1s\"\nmax_error_rate = 0.5\n\
         isl = {ISL}\nosl = {OSL}\nwarmup_requests = 2\n",
        dir.path().join("state").display()
    );
    let cfg = dir.path().join("canaryd.toml");
    std::fs::write(&cfg, text).unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &cfg, "daemon.log", &[]);
    let run = first(status, "dead");
    eprintln!("dead: {run:#}");
    assert_eq!(run["verdict_kind"], "error", "{run:#}");
    assert!(
        run["verdict"]
            .as_str()
            .unwrap()
            .starts_with("error: the point c2: error: target unusable"),
        "{run:#}"
    );
    let id = run["id"].as_str().unwrap();
    let run_dir = dir.path().join("state/artifacts/dead").join(id);
    let doc: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(doc["points"].as_array().map(Vec::len), Some(1), "{doc:#}");
    assert_eq!(doc["points"][0]["label"], "c2", "{doc:#}");
    assert!(doc["points"][0]["requests"].as_u64() > Some(0), "{doc:#}");
    assert_eq!(doc["left_out"][0]["why"], "error_verdict", "{doc:#}");
    assert_eq!(doc["not_run"], serde_json::json!(["c8", "c32"]), "{doc:#}");
    assert!(doc.get("interrupted").is_none(), "{doc:#}");
    assert_eq!(run["sweep"]["not_run"], doc["not_run"], "{run:#}");

    let run = first(status, "lenient");
    eprintln!("lenient: {run:#}");
    assert_eq!(run["verdict_kind"], "pass", "{run:#}");
    let left = run["sweep"]["left_out"].as_array().expect("left_out");
    assert!(
        left.len() == 2 && left.iter().all(|l| l["why"] == "target_errors"),
        "{run:#}"
    );

    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains(
            "[no knee: 0 of the 1 points are evidence, and a knee is a step between two; left \
             out: c2 (its verdict is an error); not run: c8, c32 (the sweep stopped at a point \
             that failed)"
        ),
        "{log}"
    );
    assert!(
        log.contains("[no knee: 0 of the 2 points are evidence, and a knee is a step between two; left out: c2 ("),
        "{log}"
    );
    assert!(!log.contains("did not saturate"), "{log}");
}
