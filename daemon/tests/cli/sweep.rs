//! `canaryd sweep` as a real process against `canaryd sim` with the `capacity` profile, whose
//! saturation rate is known in closed form (`Profile::capacity`): the knee lands on the last
//! offered rate below it, `--find-max-rate` finds it within 10 %, `sweep.json` and
//! `sweep.csv` hold every point, `canaryd report` reads the folder, and the exit status says
//! when a point measured nothing or no rate passed (issue 18).

#[path = "sweep/compare.rs"]
mod compare;
#[path = "sweep/per_user.rs"]
mod per_user;

use super::canaryd;
use super::receiver::{attrs, Receiver};
use crate::common::{free_port, sim_with_profile, text};
use canary_sim::Profile;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use serde_json::Value;
use std::path::Path;

/// 32 prompt tokens and 16 output tokens per request, as `Profile::capacity`'s docs use.
const ISL: u32 = 32;
const OSL: u32 = 16;

/// The capacity profile's saturation rate for these lengths (about 107 requests/s).
fn known_capacity() -> f64 {
    Profile::capacity_profile()
        .capacity(ISL, OSL)
        .requests_per_s
}

fn sweep(dir: &Path, url: &str, extra: &[&str]) -> std::process::Output {
    sweep_into(dir, url, "out", extra)
}

/// A sweep into `dir/out`.
fn sweep_into(dir: &Path, url: &str, out: &str, extra: &[&str]) -> std::process::Output {
    let (isl, osl) = (ISL.to_string(), OSL.to_string());
    let mut args = vec!["sweep", "--url", url, "--model", "canary-sim"];
    args.extend(["--isl", &isl, "--osl", &osl, "--output-dir", out]);
    args.extend(["--no-nvml", "--no-ebpf", "--warmup-request-count", "2"]);
    args.extend_from_slice(extra);
    canaryd(&args, dir)
}

/// A sweep into `dir/out` under the open-file limit `files` (soft and hard).
fn sweep_limited(dir: &Path, url: &str, files: u64, extra: &[&str]) -> std::process::Output {
    let (isl, osl) = (ISL.to_string(), OSL.to_string());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_canaryd"));
    cmd.args(["sweep", "--url", url, "--model", "canary-sim"])
        .args(["--isl", &isl, "--osl", &osl, "--output-dir", "out"])
        .args(["--no-nvml", "--no-ebpf", "--warmup-request-count", "2"])
        .args(extra)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CANARYD_REQUEST_WORKERS")
        .stdin(std::process::Stdio::null());
    super::file_limits::limit_files(&mut cmd, files, files);
    cmd.output().unwrap()
}

/// A point's own `summary.json` (or its experiment's, with `--runs`).
fn point_summary(dir: &Path, p: &Value) -> Value {
    let path = dir
        .join("out")
        .join(p["dir"].as_str().unwrap())
        .join("summary.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Makes the capacity simulator at `url` four times slower a decode step.
fn slow_down(url: &str) {
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let (code, body) = crate::common::http(
        port,
        "POST",
        "/sim/profile",
        r#"{"profile":"capacity","decode_base_us":8000,"decode_per_seq_us":1000}"#,
    );
    assert_eq!(code, 200, "{body}");
}

fn sweep_json(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("out/sweep.json")).unwrap()).unwrap()
}

/// Who loads this host. The tests whose figures need the simulator to keep up with its virtual
/// time hold it alone ([`timing`]): on a 2-core machine another test's simulator and sweep
/// beside one starve its simulator. The other tests here that load a simulator share it
/// ([`shared`]), so they run beside each other but not beside a timing test. The lock covers
/// the whole test binary (daemon/tests/cli_sweep.rs holds these tests alone), and cargo runs
/// test binaries one at a time.
static TIMING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn timing() -> std::sync::RwLockWriteGuard<'static, ()> {
    TIMING.write().unwrap_or_else(|e| e.into_inner())
}

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    TIMING.read().unwrap_or_else(|e| e.into_inner())
}

fn capacity_sim(dir: &Path) -> (crate::common::Child, String) {
    let (child, port) = sim_with_profile(dir, r#"{"profile": "capacity"}"#, &[]);
    (child, format!("http://127.0.0.1:{port}"))
}

/// Engine time the simulator at `url` has dropped so far, seconds: time it fell more than 5 ms
/// behind its virtual clock because the host did not run it (its own /metrics counter).
fn lag_dropped_s(url: &str) -> f64 {
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let (code, body) = crate::common::http(port, "GET", "/metrics", "");
    assert_eq!(code, 200, "{body}");
    body.lines()
        .find(|l| l.starts_with("canary_sim_engine_lag_dropped_seconds_total{"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no lag counter in {body}"))
}

/// One CSV line's fields: quoted ones (a note with commas) unquoted, `""` as `"`.
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[test]
fn a_rate_sweep_finds_the_knee_at_the_known_capacity() {
    let _timing = timing();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let cap = known_capacity();
    assert!((100.0..115.0).contains(&cap), "{cap}");
    // Offered rates around the capacity: 105 is the last below it, 140 well above.
    let lag_before = lag_dropped_s(&url);
    let out = sweep(
        dir.path(),
        &url,
        &[
            "--request-rate",
            "35,60,105,140,210",
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "1.5s",
            "--gpus",
            "2",
            "--cooldown",
            "200ms",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let dropped = lag_dropped_s(&url) - lag_before;
    let doc = sweep_json(dir.path());
    assert_eq!(doc["schema_version"], 2);
    assert_eq!(doc["kind"], "sweep");
    assert_eq!(doc["axis"], "request_rate");
    let points = doc["points"].as_array().unwrap();
    assert_eq!(points.len(), 5);

    let tps: Vec<f64> = points
        .iter()
        .map(|p| p["request_throughput"].as_f64().unwrap())
        .collect();
    let knee = doc["knee"]["label"].as_str().unwrap_or_default();
    eprintln!("knee {knee}, throughputs {tps:.1?} vs {cap:.1}; simulator dropped {dropped:.3} s");
    // The knee: where the closed-form capacity falls. 105 req/s is 98 % of it, so on a
    // loaded host that point may already fall short (86 req/s, TTFT p99 up 30x, seen in
    // CI) and the rule names 140, the first at capacity; never a point well below or
    // well above it. The point before 105 is 60, not 70: the rule reads 105 as no gain
    // (the knee at the point before) when it served under 110 % of that point: 66 req/s
    // after 60 (62 % of the capacity), 77 after 70 (72 %).
    assert!(["r105", "r140"].contains(&knee), "{doc:#}");
    // Above the capacity, throughput stops at it whatever the offered rate: never above it (by
    // more than the measurement's edges), and not far below. A host that starved the simulator
    // made it serve less: the time it dropped (over the whole sweep, charged to each 1.5 s
    // point: a bound) lowers the floor, to nothing once it is 1.5 s; a slower server drops
    // none. (0.001 to 0.18 s dropped at load 3 to 6; 2.2 s with the simulator stopped a
    // quarter of the time, when it served 86 req/s.)
    let floor = 0.75 * cap * (1.0 - dropped / 1.5);
    let knee_tp = doc["knee"]["request_throughput"].as_f64().unwrap();
    assert!(knee_tp > floor && knee_tp < 1.05 * cap, "{floor}: {doc:#}");
    for (p, tp) in points[2..].iter().zip(&tps[2..]) {
        assert!(
            tp < &(1.05 * cap) && tp > &floor,
            "{tp} vs {cap} ({floor}): {p:#}"
        );
    }
    // Past the capacity the server's queue grew through each point: its notes say so, and
    // it keeps its verdict (a plain sweep measures what the load did). Well under it, no note.
    for p in &points[3..] {
        let note = p["notes"][0].as_str().unwrap_or_default();
        assert!(note.starts_with("the server did not keep up"), "{p:#}");
        assert_eq!(p["verdict"], "pass", "{p:#}");
    }
    assert!(points[0]["notes"].is_null(), "{:#}", points[0]);

    // Each point: its folder, its own run at its rate, its figures.
    for (i, p) in points.iter().enumerate() {
        let rate = [35.0, 60.0, 105.0, 140.0, 210.0][i];
        assert_eq!(p["index"], i + 1);
        assert_eq!(p["value"], rate);
        let folder = format!("point-{:02}-r{rate}", i + 1);
        assert_eq!(p["dir"], folder.as_str());
        let summary: Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("out").join(&folder).join("summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(summary["run"]["load"]["shape"], "rate");
        assert_eq!(summary["run"]["load"]["request_rate"], rate);
        assert_eq!(p["requests"], summary["requests"]);
        assert_eq!(p["verdict"], "pass");
        // --gpus: no GPU seen, so the flag's count, and tokens/s per GPU is half the total.
        assert_eq!(p["gpus"], 2);
        assert_eq!(p["gpus_from"], "--gpus");
        let total = p["output_tokens_per_s"].as_f64().unwrap();
        assert_eq!(
            p["output_tokens_per_s_per_gpu"].as_f64().unwrap(),
            total / 2.0
        );
        assert!(p["output_tokens_per_s_per_user"].as_f64().unwrap() > 0.0);
        // Its figures that are bounds: TTFT is one unless the kernel stamped every first
        // token (summary.json's receive_timestamps), as the run's own table says.
        let bounds: Vec<&str> = p["bounds"]
            .as_array()
            .expect("bounds: an array")
            .iter()
            .map(|b| b.as_str().unwrap())
            .collect();
        let rx = &summary["receive_timestamps"];
        let stamped = rx["requests"].as_u64().unwrap_or(0);
        let ttft_exact = stamped > 0 && rx["first_token"]["kernel"].as_u64() == Some(stamped);
        assert_eq!(
            bounds.contains(&"time_to_first_token"),
            !ttft_exact,
            "{rx:#} {p:#}"
        );
        for b in &bounds {
            assert!(
                [
                    "output_token_throughput_per_user",
                    "time_to_first_token",
                    "inter_token_latency",
                    "request_latency"
                ]
                .contains(b),
                "{b}"
            );
        }
        for m in [
            "time_to_first_token_ms",
            "inter_token_latency_ms",
            "request_latency_ms",
        ] {
            let (p50, p99) = (p[m]["p50"].as_f64().unwrap(), p[m]["p99"].as_f64().unwrap());
            assert!(0.0 < p50 && p50 <= p99, "{m}: {p:#}");
        }
        // The simulator's /metrics: its queue and KV gauges.
        assert!(p["server"]["queue_depth_max"].is_number(), "{p:#}");
        assert!(p["server"]["kv_cache_usage_mean"].is_number(), "{p:#}");
    }
    // Above capacity the server's own queue grows.
    assert!(points[4]["server"]["queue_depth_max"].as_f64().unwrap() > 5.0);
    assert_eq!(doc["pareto_axes"][0], "output_tokens_per_s_per_gpu");
    let pareto: Vec<&str> = doc["pareto"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(pareto.contains(&"r35"), "the fastest per user: {pareto:?}");

    // sweep.csv: the header, then one row per point agreeing with sweep.json.
    let csv = std::fs::read_to_string(dir.path().join("out/sweep.csv")).unwrap();
    let mut lines = csv.lines();
    let header = csv_fields(lines.next().unwrap());
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<String>> = lines.map(csv_fields).collect();
    assert_eq!(rows.len(), 5);
    for (row, p) in rows.iter().zip(points) {
        assert_eq!(row.len(), header.len());
        assert_eq!(row[col("label")], p["label"].as_str().unwrap());
        let bounds: Vec<&str> = p["bounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap())
            .collect();
        assert_eq!(row[col("bounds")], bounds.join(";"));
        let tp: f64 = row[col("request_throughput")].parse().unwrap();
        assert_eq!(tp, p["request_throughput"].as_f64().unwrap());
        let ttft: f64 = row[col("ttft_p99_ms")].parse().unwrap();
        assert_eq!(ttft, p["time_to_first_token_ms"]["p99"].as_f64().unwrap());
        assert_eq!(
            row[col("knee")],
            if p["label"] == knee { "true" } else { "false" }
        );
        let notes: Vec<&str> = p["notes"]
            .as_array()
            .map(|n| n.iter().map(|n| n.as_str().unwrap()).collect())
            .unwrap_or_default();
        assert_eq!(row[col("notes")], notes.join("; "));
    }

    // The table says the same.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("knee: {knee}")), "{stdout}");
    assert!(
        stdout.contains("Pareto front (output_tokens_per_s_per_gpu"),
        "{stdout}"
    );

    // `canaryd report` of the folder draws the series with the same knee.
    let report = canaryd(&["report", "out", "-o", "sweep.html"], dir.path());
    assert!(report.status.success(), "{}", text(&report));
    let html = std::fs::read_to_string(dir.path().join("sweep.html")).unwrap();
    let folder = if knee == "r105" {
        "point-03-r105"
    } else {
        "point-04-r140"
    };
    assert!(
        html.contains(&format!("Knee at {folder}")),
        "{}",
        text(&report)
    );
}

/// Engine time the simulator may drop over [`small_load_steps_below_capacity_show_no_knee`]'s
/// sweep (its own counter, seconds) for a failed attempt to be put down to the host: 0.001 to
/// 0.18 s were seen at host load 3 to 6 over the 1.5 s points of the knee test; 0.1 s over
/// these 8 points of under a second each is already a tenth of one point's time.
const SMALL_STEPS_MAX_DROPPED_S: f64 = 0.1;

/// Steps of 5 % or less in offered load, far below the capacity (40 to 54 req/s of about 107;
/// the statistics audit's finding F12): throughput tracks the load at every step, so every step
/// gains under 10 %, and with a fixed 10 % floor the knee rested on TTFT p99's noise alone
/// (each point's p99 is the slowest of its 40 requests). The old rule named a knee (r40 to
/// r50) in 6 of 6 sweeps of these points; weighed against its load step, no step saturates.
///
/// The premise is a simulator that kept its virtual time: one the host starved serves late, and
/// its throughput and TTFT p99 then move with what else ran, not with the load. An attempt that
/// fails while the simulator dropped more than [`SMALL_STEPS_MAX_DROPPED_S`] (its own counter)
/// is printed and repeated, up to 3 attempts; one that fails with the premise held fails the
/// test at once. When the host starved the simulator in all 3, the premise never held: the test
/// skips (tier `quiet-host`, counted in the suite's closing line), it does not pass.
#[test]
fn small_load_steps_below_capacity_show_no_knee() {
    let _timing = timing();
    const ATTEMPTS: usize = 3;
    let cap = known_capacity();
    let mut starved = Vec::new();
    let (doc, out) = loop {
        let dir = tempfile::tempdir().unwrap();
        let (_sim, url) = capacity_sim(dir.path());
        let lag_before = lag_dropped_s(&url);
        let out = sweep(
            dir.path(),
            &url,
            &[
                "--request-rate",
                "40,42,44,46,48,50,52,54",
                "--request-count",
                "40",
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
        let dropped = lag_dropped_s(&url) - lag_before;
        let doc = sweep_json(dir.path());
        let points = doc["points"].as_array().unwrap();
        assert_eq!(points.len(), 8, "{doc:#}");
        let judged = no_knee_in_small_steps(&doc, cap);
        eprintln!(
            "attempt {}: simulator dropped {dropped:.3} s; {}",
            starved.len() + 1,
            judged.as_ref().map_or_else(|e| e.as_str(), |n| n.as_str())
        );
        match judged {
            Ok(_) => break (doc, out),
            Err(why) if dropped > SMALL_STEPS_MAX_DROPPED_S => {
                starved.push(format!("dropped {dropped:.3} s: {why}"));
            }
            Err(why) => panic!(
                "{why} with the simulator on time (dropped {dropped:.3} s; earlier attempts, \
                 the host starving the simulator: {starved:?}): {doc:#}"
            ),
        }
        if starved.len() == ATTEMPTS {
            // Not a pass: counted and listed as a skip by scripts/test.sh's closing line.
            return canary_testkit::skip(
                "quiet-host",
                &format!(
                    "the host starved the simulator in each of {ATTEMPTS} attempts (over \
                     {SMALL_STEPS_MAX_DROPPED_S} s of engine time dropped), so no sweep showed \
                     whether small steps read as a knee: {starved:?}"
                ),
            );
        }
    };
    assert!(
        doc["knee_method"]
            .as_str()
            .unwrap()
            .contains("of the step's relative increase in the axis value"),
        "{doc:#}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "knee: none (no step in load gained in throughput under min(10%, 50% of its load \
             increase) while TTFT p99 rose over 20%)"
        ),
        "{stdout}"
    );
}

/// [`small_load_steps_below_capacity_show_no_knee`]'s judgement of one sweep: every point
/// below 75 % of the capacity `cap`, every step a gain under 10 % (the fixed floor's half of the
/// rule held at every step, so only the load step keeps these from being knees), and no knee.
/// `Ok`: the steps the fixed floor alone would have read as knees; `Err`: what failed.
fn no_knee_in_small_steps(doc: &Value, cap: f64) -> Result<String, String> {
    let figures: Vec<(f64, f64, f64)> = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let tp = p["request_throughput"].as_f64().unwrap();
            let p99 = p["time_to_first_token_ms"]["p99"].as_f64().unwrap();
            (p["value"].as_f64().unwrap(), tp, p99)
        })
        .collect();
    let mut noise = Vec::new();
    for w in figures.windows(2) {
        let ((la, ta, pa), (lb, tb, pb)) = (w[0], w[1]);
        if tb >= 0.75 * cap {
            return Err(format!("r{lb} served {tb} req/s of a capacity of {cap}"));
        }
        if tb / ta - 1.0 >= canary_core::series::KNEE_GAIN {
            return Err(format!("r{la}→r{lb} gained {:.3}", tb / ta - 1.0));
        }
        if pb / pa - 1.0 > canary_core::series::KNEE_RISE {
            noise.push(format!("r{la}→r{lb}: TTFT p99 {pa:.2} → {pb:.2} ms"));
        }
    }
    match doc["knee"].is_null() {
        true => Ok(format!("steps the fixed floor read as knees: {noise:?}")),
        false => Err(format!(
            "a knee at {:.1}% of the capacity",
            doc["knee"]["request_throughput"]
                .as_f64()
                .unwrap_or(f64::NAN)
                / cap
                * 100.0
        )),
    }
}

#[test]
fn a_concurrency_sweep_runs_closed_loops_and_says_per_gpu_is_unknown() {
    let _shared = shared();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = rt.block_on(Receiver::start());
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let out = sweep(
        dir.path(),
        &url,
        &[
            "--concurrency",
            "1,4",
            "--request-count",
            "12",
            "--json",
            "--otlp-endpoint",
            &receiver.url(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    // --json: stdout is sweep.json, nothing else.
    let printed: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(printed, doc);
    assert_eq!(doc["axis"], "concurrency");
    for (p, users) in doc["points"].as_array().unwrap().iter().zip([1, 4]) {
        let folder = dir.path().join("out").join(p["dir"].as_str().unwrap());
        let summary: Value =
            serde_json::from_slice(&std::fs::read(folder.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["run"]["load"]["shape"], "closed_loop");
        assert_eq!(summary["run"]["load"]["users"], users);
        assert_eq!(p["completed"], 12);
        assert!(p["output_tokens_per_s_per_gpu"].is_null());
        assert!(p["gpus"].is_null());
    }
    // The knee over OTLP, as the daemon's sweep workloads export it: `canary.sweep.knee`
    // with the knee's requests/s, or no point when the series has none.
    let knees = receiver.metrics_named("canary.sweep.knee");
    let points: Vec<(String, f64)> = knees
        .iter()
        .flat_map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.clone(),
            other => panic!("canary.sweep.knee is not a gauge: {other:?}"),
        })
        .map(|p| {
            let Some(number_data_point::Value::AsDouble(v)) = p.value else {
                panic!("{p:?}")
            };
            (attrs(&p.attributes)["canary.sweep.figure"].clone(), v)
        })
        .collect();
    let expected: Vec<(String, f64)> = doc["knee"]["request_throughput"]
        .as_f64()
        .map(|tp| ("knee".to_string(), tp))
        .into_iter()
        .collect();
    assert_eq!(points, expected, "{doc:#}");
    // The sweep's own export came: the receiver saw metrics after the last point's.
    assert!(!receiver.posts().is_empty());
    assert_eq!(doc["pareto_axes"][0], "output_tokens_per_s");
    assert!(
        doc["notes"][0]
            .as_str()
            .unwrap()
            .contains("tokens/s per GPU unknown"),
        "{doc:#}"
    );
    // A second sweep into the same folder is refused, naming it, unless --overwrite.
    let again = sweep(
        dir.path(),
        &url,
        &["--concurrency", "1", "--request-count", "2"],
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again).contains("holds an earlier sweep"),
        "{}",
        text(&again)
    );
    // The user's own folders beside the points stay, whatever their names.
    for own in ["point-cloud", "point-01-notes"] {
        std::fs::create_dir_all(dir.path().join("out").join(own)).unwrap();
        std::fs::write(dir.path().join("out").join(own).join("keep.txt"), "x").unwrap();
    }
    let again = sweep(
        dir.path(),
        &url,
        &["--concurrency", "2", "--request-count", "2", "--overwrite"],
    );
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        !dir.path().join("out/point-02-c4").exists(),
        "the earlier points are gone"
    );
    for own in ["point-cloud", "point-01-notes"] {
        assert!(
            dir.path().join("out").join(own).join("keep.txt").exists(),
            "{own}"
        );
    }
    assert_eq!(
        sweep_json(dir.path())["points"].as_array().unwrap().len(),
        1
    );
}

/// One `--find-max-rate` search from 50 requests/s, in a fresh folder, with the checks that
/// hold whatever the host's load: the document's shape, every probe's verdict against its own
/// good fraction, and no passing rate above the capacity (a late simulator or a late client
/// only lowers what passes). Returns the folder, the document and the command's stdout.
fn find_max_rate_attempt(url: &str, cap: f64) -> (tempfile::TempDir, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        dir.path(),
        url,
        &[
            "--find-max-rate",
            "--slo",
            "time_to_first_token:100",
            "--min-good-fraction",
            "0.95",
            "--request-rate",
            "50",
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "2s",
            "--max-runs",
            "9",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    assert_eq!(doc["kind"], "find_max_rate");
    let c = &doc["capacity"];
    let passed = c["max_passing_rate"].as_f64().unwrap();
    let failed = c["min_failing_rate"].as_f64().unwrap();
    assert!(passed < failed, "{doc:#}");
    // Not above the capacity: a probe passes only when its server kept up, which lets
    // through at most 1 % over what it serves (the rule's cut, MIN_SERVED_SHARE), and a
    // starved simulator serves less, never more. (109.375 req/s passed here, 2 % over.)
    let most = cap / canaryd::capacity::MIN_SERVED_SHARE;
    assert!(
        passed <= most,
        "{passed} vs {cap} (at most {most:.1}): {doc:#}"
    );
    assert_eq!(c["slo"], "time_to_first_token:100");
    assert_eq!(c["min_good_fraction"], 0.95);
    // Every probe is a run with its own folder; the bounded search used at most --max-runs.
    let points = doc["points"].as_array().unwrap();
    assert!(points.len() <= 9 && points.len() >= 3, "{doc:#}");
    assert_eq!(points[0]["value"], 50.0);
    assert_eq!(points[0]["dir"], "point-01-r50", "{doc:#}");
    for p in points {
        assert!(dir
            .path()
            .join("out")
            .join(p["dir"].as_str().unwrap())
            .join("records.jsonl")
            .is_file());
        // A probe passes exactly when its good fraction met the bar, the client offered its
        // rate (a starved client may not have) and the server kept up with it (its queue did
        // not grow through the probe): the notes say which did not.
        let good = p["good_fraction"].as_f64().unwrap();
        let held = !p["notes"].as_array().is_some_and(|n| {
            n.iter().any(|n| {
                let n = n.as_str().unwrap();
                n.contains("could not offer") || n.contains("did not keep up")
            })
        });
        assert_eq!(
            p["passed"].as_bool().unwrap(),
            good >= 0.95 && held,
            "{p:#}"
        );
        // The answer is the bracket of the probes: the highest pass, the lowest fail above it.
        let v = p["value"].as_f64().unwrap();
        if p["passed"] == true {
            assert!(v <= passed, "{p:#} passed above {passed}");
        } else {
            assert!(v >= failed || v < passed, "{p:#} failed inside the bracket");
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("capacity at SLO (time_to_first_token:100, 95% good)"),
        "{stdout}"
    );
    assert!(stdout.contains("a bound: at least"), "{stdout}");
    (dir, doc, stdout)
}

#[test]
fn find_max_rate_is_within_ten_percent_of_the_known_capacity() {
    let _timing = timing();
    let setup = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(setup.path());
    let cap = known_capacity();
    // A loaded host moves the answer down, never up: a simulator starved of CPU runs its
    // virtual time late, so the 100 req/s probe (93 % of the capacity) misses the 100 ms TTFT
    // (good fraction 0.46 to 0.94 seen at load 6 to 8 on 2 cores) and the search settles at
    // 96.9, just inside the 10 %, or below it when a lower probe is hit too. So an attempt
    // below 90 % is printed and the search run again, up to 3 times; every attempt's exact
    // checks (above) must hold, and a search low 3 times (a real regression) fails.
    const ATTEMPTS: usize = 3;
    let mut seen = Vec::new();
    let mut found = None;
    for attempt in 1..=ATTEMPTS {
        let (dir, doc, stdout) = find_max_rate_attempt(&url, cap);
        let passed = doc["capacity"]["max_passing_rate"].as_f64().unwrap();
        let rates: Vec<(f64, bool)> = doc["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["value"].as_f64().unwrap(), p["passed"] == true))
            .collect();
        eprintln!("attempt {attempt}: max passing rate {passed} vs capacity {cap:.1}: {rates:?}");
        seen.push(passed);
        if passed > 0.9 * cap {
            found = Some((dir, doc, stdout));
            break;
        }
    }
    let Some((dir, doc, _stdout)) = found else {
        panic!("max passing rate below 90 % of the capacity {cap:.1} in every attempt: {seen:?}");
    };
    // `canaryd compare` prints the bracket rounded outward, as the sweep does, so it still
    // holds: 106.25 .. 112.5 read "below 112" (rounded to the nearest, under the rate that
    // failed).
    let compared = canaryd(&["compare", "out", "out"], dir.path());
    let bracket = |k: &str| doc["capacity"][k].as_f64().unwrap();
    let said = format!(
        "capacity at SLO: A at least {}, below {} req/s",
        canary_core::rate_text::rate_at_least(bracket("max_passing_rate")),
        canary_core::rate_text::rate_below(bracket("min_failing_rate"))
    );
    assert!(text(&compared).contains(&said), "{}", text(&compared));
    let points = doc["points"].as_array().unwrap();
    // The report draws the probes in order of increasing rate, not in the order they ran. A
    // bisection always runs a probe after a higher one (200 then 150 when 100 passed, as on
    // an idle host; 100 then 75 when a loaded host failed 100), so the two orders differ.
    // (This used to name the third probe 200: that is the flake seen on a loaded host.)
    let ran: Vec<f64> = points
        .iter()
        .map(|p| p["value"].as_f64().unwrap())
        .collect();
    assert!(ran.windows(2).any(|w| w[1] < w[0]), "{ran:?}");
    let report = canaryd(&["report", "out", "-o", "search.html"], dir.path());
    assert!(report.status.success(), "{}", text(&report));
    let html = std::fs::read_to_string(dir.path().join("search.html")).unwrap();
    let mut by_rate: Vec<&Value> = points.iter().collect();
    by_rate.sort_by(|a, b| {
        a["value"]
            .as_f64()
            .unwrap()
            .total_cmp(&b["value"].as_f64().unwrap())
    });
    let at = |p: &Value| {
        let cell = format!("<td>{}</td>", p["dir"].as_str().unwrap());
        html.find(&cell)
            .unwrap_or_else(|| panic!("{cell} not in the report"))
    };
    for pair in by_rate.windows(2) {
        assert!(
            at(pair[0]) < at(pair[1]),
            "{} before {}",
            pair[0]["dir"],
            pair[1]["dir"]
        );
    }
}

// The search passed rates the client never offered: under the open-file limit, canaryd held
// requests for a slot once 15 were in flight, TTFT (timed from the send) left the wait out,
// and a probe at 400 req/s against a server of 107 passed ("at least 400 req/s", exit 0)
// though the point completed 104 req/s and schedule_hold p99 was 1357 ms. Such a probe fails.
#[test]
fn a_probe_the_client_could_not_offer_fails_whatever_the_slos_said() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    // 60 files leave about 15 requests in flight; 400 req/s needs over 40 at the server's
    // 107 req/s. A TTFT bound of 10 s holds for every request the simulator queues.
    let out = sweep_limited(
        dir.path(),
        &url,
        60,
        &[
            "--find-max-rate",
            "--slo",
            "time_to_first_token:10000",
            "--min-good-fraction",
            "0.95",
            "--request-rate",
            "400",
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "0.5s",
            "--max-runs",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    let doc = sweep_json(dir.path());
    let p = &doc["points"][0];
    // The run itself is as described: held by the open-file ceiling, its sends spread over
    // longer than the schedule, and every request it sent met the SLO.
    let s = point_summary(dir.path(), p);
    assert_eq!(s["in_flight_cap"]["source"], "open_files", "{s:#}");
    assert!(s["schedule_hold"]["max"].as_f64().unwrap() > 0.0, "{s:#}");
    let sends = &s["sends"];
    assert!(
        sends["sent_s"].as_f64().unwrap() > sends["scheduled_s"].as_f64().unwrap(),
        "{sends}"
    );
    assert_eq!(p["good_fraction"], 1.0, "{p:#}");
    // The probe fails, saying why, and bounds the capacity from above.
    assert_eq!(p["passed"], false, "{p:#}");
    let verdict = p["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("fail: the client could not offer the rate"),
        "{verdict}"
    );
    assert!(
        p["notes"][0]
            .as_str()
            .unwrap()
            .contains("in-flight slots (set by open_files)"),
        "{p:#}"
    );
    assert!(doc["capacity"]["max_passing_rate"].is_null(), "{doc:#}");
    assert_eq!(doc["capacity"]["min_failing_rate"], 400.0, "{doc:#}");
    assert!(text(&out).contains("no rate passed"), "{}", text(&out));
}

// A short probe passed a rate the server could not sustain: 2 s at 112 req/s against a
// server of 107 ends with under 100 ms of queue, and "at least 112 req/s" was printed as a
// bound. Here 130 req/s for 2 s (21 % over) under a TTFT bound every request meets: the queue
// grows through the probe, TTFT with it, and the probe fails saying so; half that rate (the
// search's next probe) is served and passes.
#[test]
fn a_probe_whose_queue_grew_fails_though_every_request_met_the_slo() {
    let _timing = timing();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let cap = known_capacity();
    let out = sweep(
        dir.path(),
        &url,
        &[
            "--find-max-rate",
            "--slo",
            "time_to_first_token:10000",
            "--min-good-fraction",
            "0.95",
            "--request-rate",
            "130",
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "2s",
            "--max-runs",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    let over = &doc["points"][0];
    assert_eq!(over["value"], 130.0, "{doc:#}");
    assert_eq!(over["good_fraction"], 1.0, "{over:#}");
    assert_eq!(over["passed"], false, "{over:#}");
    let verdict = over["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("fail: the server did not keep up"),
        "{verdict}"
    );
    // The trend in the probe's summary is the queue's: TTFT grew by about R/C − 1 seconds per
    // second sent (the simulator starved of CPU serves less, so it may grow faster, not slower).
    let t = &point_summary(dir.path(), over)["ttft_trend"];
    let slope = t["slope_ms_per_s"].as_f64().unwrap();
    assert!(slope > 0.8 * 1000.0 * (130.0 / cap - 1.0), "{t}");
    assert!(t["requests"].as_u64().unwrap() >= 200, "{t}");
    let under = &doc["points"][1];
    assert_eq!(under["value"], 65.0, "{doc:#}");
    assert_eq!(under["passed"], true, "{under:#}");
    assert!(under["notes"].is_null(), "{under:#}");
    assert_eq!(doc["capacity"]["max_passing_rate"], 65.0, "{doc:#}");
    assert_eq!(doc["capacity"]["min_failing_rate"], 130.0, "{doc:#}");
}

// The queue check passed a rate 2 % over the capacity: 2 s at 109.375 req/s against a
// server of 107.3 rose about 20 ms per second of sending, under the old cut of 3 % (31 ms/s),
// so `--find-max-rate` printed "at least 109 (passed)" where 6 s at that rate met a 100 ms
// TTFT on 82 % of requests. Its rise, known to 3 standard errors, is over 1 % of the rate
// (10.1 ms/s): it fails, and its trend carries the standard error that said so. The probe is
// 4 s, not 2: the rise per second is the same (still under the old cut), but a stall of the
// host mid-probe steps TTFT up, and the step's standard error eats into the room over 10.1
// less in a longer probe (the simulator stopped for 20-200 ms mid-probe: slope less 3 se 20
// to 33 ms/s in 2 s, 38 to 60 in 4 s).
#[test]
fn a_probe_two_percent_over_the_capacity_fails_though_every_request_met_the_slo() {
    let _timing = timing();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let cap = known_capacity();
    let out = sweep(
        dir.path(),
        &url,
        &[
            "--find-max-rate",
            "--slo",
            "time_to_first_token:10000",
            "--min-good-fraction",
            "0.95",
            "--request-rate",
            "109.375",
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "4s",
            "--max-runs",
            "1",
        ],
    );
    let doc = sweep_json(dir.path());
    let over = &doc["points"][0];
    assert!(over["value"].as_f64().unwrap() > 1.015 * cap, "{doc:#}");
    assert_eq!(over["good_fraction"], 1.0, "{over:#}");
    assert_eq!(over["passed"], false, "{over:#}");
    let verdict = over["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("fail: the server did not keep up"),
        "{verdict}"
    );
    let t = &point_summary(dir.path(), over)["ttft_trend"];
    let slope = t["slope_ms_per_s"].as_f64().unwrap();
    let se = t["slope_se_ms_per_s"].as_f64().unwrap();
    eprintln!("at {} req/s against {cap:.1}: {t}", over["value"]);
    assert!(slope - 3.0 * se > 10.0, "{t}");
    assert!(doc["capacity"]["max_passing_rate"].is_null(), "{doc:#}");
    // No rate passed.
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
}

// Under a 60-file limit, c64 ran with 15 requests in flight (summary.json's in_flight_cap)
// but was reported as 64 users: it passed, sat on the Pareto front and fed the knee, and
// neither sweep.json, sweep.csv nor the table said so.
#[test]
fn a_point_the_open_file_limit_capped_is_marked_and_left_out_of_knee_and_front() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let flags = ["--concurrency", "2,8,64", "--benchmark-duration", "1s"];
    let out = sweep_limited(dir.path(), &url, 60, &flags);
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    let points = doc["points"].as_array().unwrap();
    for p in &points[..2] {
        assert_eq!(p["in_flight_cap_source"], "concurrency", "{p:#}");
        assert_eq!(p["in_flight_cap"].as_f64(), p["value"].as_f64(), "{p:#}");
        assert!(p.get("capped").is_none(), "{p:#}");
    }
    let c64 = &points[2];
    let cap = point_summary(dir.path(), c64)["in_flight_cap"].clone();
    assert_eq!(cap["source"], "open_files", "{cap}");
    let limit = cap["limit"].as_u64().unwrap();
    assert!(limit < 64, "{cap}");
    assert_eq!(c64["in_flight_cap"], limit, "{c64:#}");
    assert_eq!(c64["in_flight_cap_source"], "open_files", "{c64:#}");
    assert_eq!(c64["capped"], true, "{c64:#}");
    assert!(
        c64["notes"][0].as_str().unwrap().starts_with(&format!(
            "capped by the open-file limit at {limit} requests"
        )),
        "{c64:#}"
    );
    // Neither the knee nor on the front.
    assert!(
        c64.get("pareto").is_none() && c64.get("knee").is_none(),
        "{c64:#}"
    );
    assert!(
        !doc["pareto"].as_array().unwrap().contains(&"c64".into()),
        "{doc:#}"
    );
    assert_ne!(doc["knee"]["label"], "c64", "{doc:#}");
    // sweep.csv and the table say so too.
    let csv = std::fs::read_to_string(dir.path().join("out/sweep.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row = lines.nth(2).unwrap();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let cells: Vec<&str> = row.split(',').collect();
    assert_eq!(cells[col("in_flight_cap")], limit.to_string(), "{row}");
    assert_eq!(cells[col("in_flight_cap_source")], "open_files", "{row}");
    assert_eq!(cells[col("capped")], "true", "{row}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("capped at {limit} (open files)")),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: 03 c64: capped by the open-file limit"),
        "{stdout}"
    );
    // `canaryd report` of the folder agrees: the knee and the front are sweep.json's, and
    // the capped point is tagged and crossed out, with the sweep's reason (it computed its
    // own and found a knee there).
    let report = canaryd(&["report", "out", "-o", "capped.html"], dir.path());
    assert!(report.status.success(), "{}", text(&report));
    let html = std::fs::read_to_string(dir.path().join("capped.html")).unwrap();
    let row = html
        .split("<tr>")
        .find(|r| r.contains("<td>point-03-c64</td>"))
        .and_then(|r| r.split("</tr>").next())
        .expect("c64's row");
    assert!(row.contains("left out: capped"), "{row}");
    assert!(!row.contains("knee") && !row.contains("Pareto"), "{row}");
    assert!(
        html.contains("point-03-c64: capped by the open-file limit"),
        "the reason is not listed"
    );
    assert_eq!(
        html.matches("data-name=\"left out of knee and front\"")
            .count(),
        2
    );
    let knee = doc["knee"]["label"].as_str().map(|k| {
        let p = points.iter().find(|p| p["label"] == k).unwrap();
        format!("Knee at {} (", p["dir"].as_str().unwrap())
    });
    let said = knee.unwrap_or_else(|| "No knee (sweep.json's)".to_string());
    assert!(html.contains(&said), "{said}");
}

#[test]
fn the_exit_status_says_when_no_rate_passed_or_a_point_measured_nothing() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    // No request is served in under 1 ms (an idle request takes 3.57 ms): nothing passes.
    let out = sweep(
        dir.path(),
        &url,
        &[
            "--find-max-rate",
            "--slo",
            "time_to_first_token:1",
            "--min-good-fraction",
            "0.9",
            "--request-count",
            "4",
            "--max-runs",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    let doc = sweep_json(dir.path());
    assert!(doc["capacity"]["max_passing_rate"].is_null());
    assert_eq!(doc["capacity"]["stopped_by"], "max_runs");
    assert_eq!(doc["points"].as_array().unwrap().len(), 2);
    assert!(text(&out).contains("no rate passed"), "{}", text(&out));

    // Nothing listens: the first point measures nothing, and the sweep stops there, as the
    // daemon's does: status 5, sweep.json records the point and names the one not run, and
    // one line says which point failed, why, and what was not run. (It ran on to c2 and
    // recorded both.) A port meant to have nothing listening (found free; no process to start
    // on port 0 and read back).
    let nothing = format!("http://127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        dir.path(),
        &nothing,
        &["--concurrency", "1,2", "--request-count", "2"],
    );
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let doc = sweep_json(dir.path());
    let points = doc["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{doc:#}");
    let verdict = points[0]["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("error"), "{doc:#}");
    assert_eq!(points[0]["completed"], 0);
    assert_eq!(doc["not_run"], serde_json::json!(["c2"]), "{doc:#}");
    assert!(doc.get("interrupted").is_none(), "{doc:#}");
    assert!(!dir.path().join("out/point-02-c2").exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = format!("point 1 (c1) failed: {verdict}; the sweep stopped there, not run: c2");
    assert!(stderr.contains(&line), "no {line:?} in\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "not run: c2 (point 1 c1 failed, its verdict an error, and the sweep stopped there)"
        ),
        "{stdout}"
    );
}

/// A target that dies between two points: the point after measures nothing and the sweep
/// stops there, as the daemon's sweep does, keeping the point measured before it and the
/// failed point's own figures (`canaryd sweep` ran on to every later point, each waiting on a
/// dead target, and the line that said a point failed came only at the end). The simulator is
/// killed during the cooldown after the first point, once its `summary.json` is written.
#[test]
fn a_target_that_dies_mid_sweep_stops_it_at_the_first_failed_point() {
    let _shared = shared();
    let setup = tempfile::tempdir().unwrap();
    let (sim, url) = capacity_sim(setup.path());
    let dir = tempfile::tempdir().unwrap();
    let (isl, osl) = (ISL.to_string(), OSL.to_string());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_canaryd"));
    cmd.args(["sweep", "--url", &url, "--model", "canary-sim"])
        .args(["--isl", &isl, "--osl", &osl, "--output-dir", "out"])
        .args(["--no-nvml", "--no-ebpf", "--warmup-request-count", "2"])
        .args(["--concurrency", "1,2,4", "--request-count", "4"])
        // Time to kill the target between the points, on a loaded host too.
        .args(["--cooldown", "10s"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CANARYD_REQUEST_WORKERS")
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
    let mut child = crate::common::Child(cmd.spawn().unwrap());
    let first = dir.path().join("out/point-01-c1/summary.json");
    crate::common::eventually(120, "the first point's summary.json", || {
        first.exists().then_some(())
    });
    // Killed and reaped: nothing listens on its port from here on.
    drop(sim);
    let code = child.wait_exit(std::time::Duration::from_secs(120));
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    let (stdout, stderr) = (read("stdout"), read("stderr"));
    let said = format!("{stdout}\n{stderr}");
    assert_eq!(code, Some(5), "{said}");
    let doc = sweep_json(dir.path());
    let points = doc["points"].as_array().unwrap();
    let labels: Vec<&str> = points
        .iter()
        .map(|p| p["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["c1", "c2"], "{doc:#}");
    // The point measured before the target died is kept whole.
    assert_eq!(points[0]["verdict"], "pass", "{doc:#}");
    assert_eq!(points[0]["completed"], 4, "{doc:#}");
    assert!(
        points[0]["request_throughput"].as_f64().is_some(),
        "{doc:#}"
    );
    let verdict = points[1]["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("error"), "{doc:#}");
    assert_eq!(points[1]["completed"], 0, "{doc:#}");
    assert_eq!(doc["not_run"], serde_json::json!(["c4"]), "{doc:#}");
    assert!(!dir.path().join("out/point-03-c4").exists(), "{said}");
    let line = format!("point 2 (c2) failed: {verdict}; the sweep stopped there, not run: c4");
    assert!(stderr.contains(&line), "no {line:?} in\n{stderr}");
    assert!(
        stdout.contains(
            "not run: c4 (point 2 c2 failed, its verdict an error, and the sweep stopped there)"
        ),
        "{stdout}"
    );
    // sweep.csv holds the two points measured.
    let csv = read("out/sweep.csv");
    assert_eq!(csv.lines().count(), 3, "{csv}");
}

#[test]
fn nonsensical_sweeps_are_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    // Never contacted (the sweeps are refused first): a port with nothing listening, so a
    // request sent by mistake fails rather than reaching some other test's server.
    let url = format!("http://127.0.0.1:{}", free_port());
    for (flags, code, says) in [
        (
            vec!["--concurrency", "1,2", "--request-rate", "5,10"],
            1,
            "--concurrency and --request-rate both list several values",
        ),
        (vec![], 1, "give the points"),
        (
            vec!["--find-max-rate", "--slo", "time_to_first_token:100"],
            2,
            "--min-good-fraction",
        ),
        (
            vec![
                "--find-max-rate",
                "--slo",
                "time_to_first_token:100",
                "--min-good-fraction",
                "0.9",
                "--request-rate",
                "5,10",
            ],
            1,
            "--find-max-rate picks its own rates",
        ),
        (
            vec!["--speedup", "1,2"],
            1,
            "--speedup applies to a --trace",
        ),
        // A ceiling holds requests in canaryd, where the SLOs do not time them: the search
        // passed rates it never offered.
        (
            vec![
                "--find-max-rate",
                "--slo",
                "time_to_first_token:100",
                "--min-good-fraction",
                "0.9",
                "--request-rate",
                "100",
                "--concurrency",
                "8",
            ],
            1,
            "--find-max-rate offers open-loop rates: --concurrency would cap",
        ),
        // No SLO: every probe passed, up to --max-runs.
        (
            vec!["--find-max-rate", "--slo", "", "--min-good-fraction", "0.9"],
            2,
            "expected at least one metric:threshold",
        ),
        // Later points that only the run's own check refuses: refused before c1 runs.
        (
            vec!["--concurrency", "1,4,16,64"],
            1,
            "point c16: --concurrency: 16 users for 10 requests",
        ),
        // Out of the flag's own range: clap's, exit 2, as --speedup 0 is.
        (
            vec!["--request-rate", "10,20,2000000"],
            2,
            "'--request-rate <RPS,RPS,…>': expected 0.000001 to 1000000 requests per second",
        ),
        // A repeated value made a "step" between two runs of one load: a knee of noise.
        (
            vec!["--concurrency", "1,8,8,16", "--request-count", "40"],
            1,
            "--concurrency lists 8 twice: a sweep's points are distinct loads",
        ),
        (
            vec!["--request-rate", "10,20.5,20.5"],
            1,
            "--request-rate lists 20.5 twice",
        ),
        (vec!["--concurrency", "4,4"], 1, "--runs N"),
    ] {
        let out = sweep(dir.path(), &url, &flags);
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{flags:?}: {}", text(&out));
        assert!(
            !dir.path().join("out").exists(),
            "{flags:?}: nothing written"
        );
    }
}

// `--start-at` was every point's: the second point was refused (the instant had passed) and
// the sweep ended there, exit 5. It is the first point's, as in the daemon's sweeps.
#[test]
fn start_at_is_the_first_points() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let at = (chrono::Utc::now() + chrono::Duration::seconds(4)).to_rfc3339();
    let flags = [
        "--concurrency",
        "1,2",
        "--request-count",
        "4",
        "--start-at",
        &at,
        // A loaded host may take seconds to start: late is fine here.
        "--max-late-start",
        "1m",
    ];
    let out = sweep(dir.path(), &url, &flags);
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    let clocks: Vec<Value> = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let folder = dir.path().join("out").join(p["dir"].as_str().unwrap());
            let s: Value =
                serde_json::from_slice(&std::fs::read(folder.join("summary.json")).unwrap())
                    .unwrap();
            s["clock"].clone()
        })
        .collect();
    assert_eq!(clocks.len(), 2, "{doc}");
    assert_eq!(clocks[0]["start_at"]["requested"], at, "{clocks:?}");
    assert!(clocks[1].get("start_at").is_none(), "{clocks:?}");
}

/// `canaryd compare` of two sweeps (issue 18: did the change move the knee?): the capacity
/// simulator swept over 1, 8 and 16 users, then again after every decode step became four
/// times slower (`POST /sim/profile`). Point by point, B's throughput falls and its latency
/// rises, seen by the per-point run rule but, one run a point, unconfirmed (its tests take
/// requests as independent); the knees are reported with their throughputs; a sweep against
/// a run is refused, naming it.
#[test]
fn compare_of_two_sweeps_shows_the_slower_server_point_by_point() {
    let _timing = timing();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let run_sweep = |out: &str| {
        let points = ["--concurrency", "1,8,16", "--benchmark-duration", "1s"];
        let o = sweep_into(dir.path(), &url, out, &points);
        assert!(o.status.success(), "{}", text(&o));
    };
    run_sweep("a");
    slow_down(&url);
    run_sweep("b");

    let o = canaryd(&["compare", "a", "b", "--json"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["axis"], "concurrency");
    let points = c["points"].as_array().unwrap();
    let labels: Vec<&str> = points
        .iter()
        .map(|p| p["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["c1", "c8", "c16"], "{c:#}");
    assert!(c["unmatched"].as_array().unwrap().is_empty());
    let row = |p: &Value, m: &str| -> Value {
        p["comparison"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == m)
            .unwrap()
            .clone()
    };
    for p in &points[1..] {
        // Four times the decode cost: well under the throughput, well over the latency.
        let tp = row(p, "throughput");
        assert!(tp["change"].as_f64().unwrap() < -0.4, "{tp}");
        let e2e = row(p, "e2e p50");
        assert_eq!(e2e["verdict"]["kind"], "unconfirmed", "{e2e}");
        assert_eq!(e2e["verdict"]["direction"], "regressed", "{e2e}");
    }
    // Each point's figures are its own run's: B's c8 is b's point-02-c8.
    let b8: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("b/point-02-c8/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(points[1]["comparison"]["b"]["requests"], b8["requests"]);
    // The knees, each with its own throughput; B's, where it has one, far lower.
    let knee = |side: &str| c["knee"][side]["request_throughput"].as_f64();
    if let (Some(a), Some(b)) = (knee("a"), knee("b")) {
        assert!(b < 0.6 * a, "{c:#}");
    }
    assert!(["earlier", "later", "same_point", "unknown"]
        .contains(&c["knee"]["moved"].as_str().unwrap()));

    let shown = String::from_utf8(canaryd(&["compare", "a", "b"], dir.path()).stdout).unwrap();
    assert!(shown.contains("sweep over concurrency"), "{shown}");
    assert!(shown.contains("knee: A "), "{shown}");
    // A 1 s point is too few requests to judge a p99 on its own tail, and the table says so
    // (the p50s above are tested, and unconfirmed: one run a side).
    assert!(shown.contains("too few to judge"), "{shown}");
    assert!(!shown.contains("yes:"), "{shown}");
    assert!(
        shown.contains("with one run on a side a difference they find is `unconfirmed`"),
        "{shown}"
    );
    assert!(
        shown.contains("too few to judge: 3 of 3 points had too few requests to judge a p99"),
        "{shown}"
    );

    // A sweep against one run: refused, naming what is not a sweep.
    let o = canaryd(&["compare", "a", "b/point-01-c1"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("b/point-01-c1: not a sweep, and a is one"),
        "{}",
        text(&o)
    );
}

/// `canaryd compare` of two sweeps marks each TTFT and e2e cell whose side's point is not exact
/// `*`, as `canaryd sweep`'s table does, and says what `*` means: B swept with
/// `--no-kernel-timestamps`, so every time of its is canaryd's read, an upper bound. The marks
/// were only in the rule line under the table, not in its cells nor on the page.
#[test]
fn compare_of_two_sweeps_marks_the_cells_that_are_bounds() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let run_sweep = |out: &str, extra: &[&str]| {
        let points = [&["--concurrency", "1,2", "--request-count", "8"], extra].concat();
        let o = sweep_into(dir.path(), &url, out, &points);
        assert!(o.status.success(), "{}", text(&o));
    };
    run_sweep("a", &[]);
    run_sweep("b", &["--no-kernel-timestamps"]);

    let o = canaryd(&["compare", "a", "b", "--json"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = c["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{c:#}");
    let named = |p: &Value, key: &str, m: &str| p[key].as_array().unwrap().contains(&m.into());
    for p in points {
        for m in [
            "time_to_first_token",
            "inter_token_latency",
            "request_latency",
        ] {
            assert!(named(p, "b_bounds", m), "{m}: {p:#}");
        }
        // A's are what its runs' summaries count.
        let a_bound = p["comparison"]["a"]["first_tokens"]["bound"].as_u64();
        assert_eq!(
            named(p, "a_bounds", "time_to_first_token"),
            a_bound.unwrap() > 0,
            "{p:#}"
        );
    }

    let o = canaryd(&["compare", "a", "b", "-o", "page.html"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let shown = String::from_utf8(o.stdout).unwrap();
    for p in points {
        let label = p["label"].as_str().unwrap();
        let row = shown
            .lines()
            .find(|l| l.starts_with(&format!("{label} ")))
            .unwrap_or_else(|| panic!("{label}: {shown}"));
        // Cells are two spaces apart; a figure has one (`45.0 ms`).
        let cells: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(cells.len(), 12, "{row}");
        assert!(
            cells[5].ends_with(" ms*") && cells[9].ends_with(" ms*"),
            "{row}"
        );
        assert_eq!(
            cells[4].ends_with('*'),
            named(p, "a_bounds", "time_to_first_token"),
            "{row}"
        );
        assert!(
            !cells[1].ends_with('*') && !cells[2].ends_with('*'),
            "{row}"
        );
    }
    assert!(
        shown.contains("\n*: not exact: some of that side's first tokens (TTFT) or ends (e2e)"),
        "{shown}"
    );
    let page = std::fs::read_to_string(dir.path().join("page.html")).unwrap();
    assert!(page.matches(" ms*</td>").count() >= 4, "{page}");
    assert!(page.contains("<p class=\"note\">*: not exact:"), "{page}");
}

/// A point whose `summary.json` does not say how its times were taken (one written before
/// receive timestamps, or before the ends, were counted) is marked as a bound in a comparison
/// of two sweeps, as `canaryd sweep`'s table and `canaryd compare`'s rows take it: its cells
/// read as exact, and `a_bounds`/`b_bounds` were empty.
#[test]
fn compare_of_two_sweeps_marks_the_cells_of_points_that_do_not_say_how_times_were_taken() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    for out in ["a", "b"] {
        let points = ["--concurrency", "1,2", "--request-count", "8"];
        let o = sweep_into(dir.path(), &url, out, &points);
        assert!(o.status.success(), "{}", text(&o));
    }
    // B's c1 as an older summary, without receive_timestamps; its c2 without their ends.
    let summary = dir.path().join("b/point-01-c1/summary.json");
    let mut s: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert!(s
        .as_object_mut()
        .unwrap()
        .remove("receive_timestamps")
        .is_some());
    std::fs::write(&summary, s.to_string()).unwrap();
    let summary = dir.path().join("b/point-02-c2/summary.json");
    let mut s: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let rx = s["receive_timestamps"].as_object_mut().unwrap();
    // With receive timestamps refused every end is canaryd's read, said by `state`.
    let stamped = rx["state"] == "on";
    assert!(rx.remove("end").is_some(), "{s:#}");
    std::fs::write(&summary, s.to_string()).unwrap();

    let o = canaryd(&["compare", "a", "b", "--json"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = c["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{c:#}");
    let b_bounds = |p: &Value| -> Vec<String> {
        let b = p["b_bounds"].as_array().unwrap();
        b.iter().map(|m| m.as_str().unwrap().to_string()).collect()
    };
    let (c1, c2) = (&points[0], &points[1]);
    assert_eq!(c1["label"], "c1");
    assert_eq!(
        b_bounds(c1),
        [
            "time_to_first_token",
            "inter_token_latency",
            "request_latency"
        ],
        "{c1:#}"
    );
    assert_eq!(c1["comparison"]["b"]["first_tokens"]["unknown_runs"], 1);
    assert_eq!(c1["comparison"]["b"]["token_events"]["unknown_runs"], 1);
    assert!(b_bounds(c2).contains(&"request_latency".into()), "{c2:#}");
    if stamped {
        assert_eq!(c2["comparison"]["b"]["ends"]["unknown_runs"], 1, "{c2:#}");
    }

    let o = canaryd(&["compare", "a", "b", "-o", "page.html"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let shown = String::from_utf8(o.stdout).unwrap();
    let page = std::fs::read_to_string(dir.path().join("page.html")).unwrap();
    // A point's cells in the terminal's table (two spaces apart; a figure has one) and in
    // the page's.
    let text_cells = |label: &str| -> Vec<String> {
        let row = shown
            .lines()
            .find(|l| l.starts_with(&format!("{label} ")))
            .unwrap_or_else(|| panic!("{label}: {shown}"));
        row.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect()
    };
    let page_cells = |label: &str| -> Vec<String> {
        let row = page
            .split(&format!("<tr><td>{label}</td>"))
            .nth(1)
            .unwrap_or_else(|| panic!("{label}: {page}"));
        let row = row.split("</tr>").next().unwrap();
        row.split("</td>")
            .filter_map(|c| c.split_once('>').map(|(_, v)| v.to_string()))
            .collect()
    };
    // TTFT p99 B and e2e p99 B: columns 5 and 9 of the text, 4 and 8 of the page's after
    // the label.
    for label in ["c1", "c2"] {
        let (t, h) = (text_cells(label), page_cells(label));
        assert_eq!(t.len(), 12, "{t:?}");
        assert!(
            t[9].ends_with(" ms*") && h[8].ends_with(" ms*"),
            "{t:?} {h:?}"
        );
        if label == "c1" {
            assert!(
                t[5].ends_with(" ms*") && h[4].ends_with(" ms*"),
                "{t:?} {h:?}"
            );
        }
    }
    assert!(
        shown.contains(
            "\n*: not exact: some of that side's first tokens (TTFT) or ends (e2e) at that point \
             were a later segment's stamp or canaryd's read (summary.json's receive_timestamps), \
             or its summary does not say how they were taken"
        ),
        "{shown}"
    );
    // Only B's c1 does not say (after B's count of bounds, when it has some).
    let rule = shown
        .lines()
        .find(|l| l.starts_with("Each point:"))
        .unwrap();
    let b_said = rule
        .split("; B: ")
        .nth(1)
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        b_said.starts_with("1 run does not say how its first tokens were timed")
            || b_said.contains("upper bounds, 1 run does not say how its first tokens were timed"),
        "{shown}"
    );
    assert!(page.contains("<p class=\"note\">*: not exact:"), "{page}");
}

/// `canaryd sweep --runs N` (issue 18: "is the difference real or noise?" at every load): each
/// point is an experiment of N runs in its folder, as `canaryd profile --runs N` makes one;
/// sweep.json's figures are the means of the runs' own with their intervals; and `canaryd
/// compare` of two repeated sweeps judges each point's figures by Welch's test on its runs.
#[test]
fn a_repeated_sweep_gives_each_point_its_runs_and_compare_judges_them_run_against_run() {
    let _timing = timing();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    // Four runs a point: Welch's test on two runs a side has one degree of freedom, and one
    // run slowed by a busy host (66.9 req/s beside 101.6) hid a fourfold regression; on three
    // (two degrees) one run at 60 % of the others still does (p 0.052 against 30 req/s). On
    // four, one A run at 40 % of the others keeps p at 0.035.
    let run_sweep = |out: &str| {
        let points = [
            "--concurrency",
            "1,8",
            "--benchmark-duration",
            "1s",
            "--runs",
            "4",
        ];
        let o = sweep_into(dir.path(), &url, out, &points);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let shown = run_sweep("a");
    assert!(shown.contains("(mean of 4 runs, ± 95% CI)"), "{shown}");
    assert!(shown.contains("repeated points (--runs)"), "{shown}");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("a/sweep.json")).unwrap()).unwrap();
    for p in doc["points"].as_array().unwrap() {
        let folder = dir.path().join("a").join(p["dir"].as_str().unwrap());
        let read = |f: &Path| -> Value {
            serde_json::from_slice(&std::fs::read(f).unwrap_or_else(|e| panic!("{f:?}: {e}")))
                .unwrap()
        };
        // The point's folder is an experiment: its summary names its four runs.
        let experiment = read(&folder.join("summary.json"));
        assert_eq!(experiment["repeats"]["runs"], 4, "{experiment:#}");
        assert_eq!(p["repeats"]["runs"], 4, "{p:#}");
        let runs: Vec<Value> = ["run-1", "run-2", "run-3", "run-4"]
            .iter()
            .map(|r| read(&folder.join(r).join("summary.json")))
            .collect();
        // Counts are the runs' sums, rates their means (each run's own exact figure).
        let sum = |k: &str| runs.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
        assert_eq!(p["completed"].as_u64().unwrap(), sum("completed"), "{p:#}");
        assert_eq!(p["requests"].as_u64().unwrap(), sum("requests"), "{p:#}");
        let tps: Vec<f64> = runs
            .iter()
            .map(|r| r["request_throughput"].as_f64().unwrap())
            .collect();
        let mean = tps.iter().sum::<f64>() / 4.0;
        let got = p["request_throughput"].as_f64().unwrap();
        assert!((got - mean).abs() < 1e-9 * mean, "{got} vs {tps:?}");
        // The interval beside it is over the same four values.
        let tp = p["repeats"]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == "request_throughput")
            .unwrap();
        assert_eq!(tp["values"].as_array().unwrap().len(), 4, "{tp}");
        assert!(
            (tp["mean"].as_f64().unwrap() - mean).abs() < 1e-9 * mean,
            "{tp}"
        );
        assert!(tp["half_width"].as_f64().unwrap() > 0.0, "{tp}");
    }
    // Audit F13: sweep.csv read as one run's figures; its last columns say how many runs
    // each row is the mean of, which columns are means, and the headline half-widths.
    let csv = std::fs::read_to_string(dir.path().join("a/sweep.csv")).unwrap();
    let mut lines = csv.lines();
    let header = csv_fields(lines.next().unwrap());
    assert_eq!(header[..3], ["index", "label", "value"], "{csv}");
    assert_eq!(
        header[38], "notes",
        "the older columns keep their places: {csv}"
    );
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("{name}: {csv}"))
    };
    for (row, p) in lines.map(csv_fields).zip(doc["points"].as_array().unwrap()) {
        assert_eq!(row.len(), header.len(), "{csv}");
        assert_eq!(row[col("runs")], "4", "{csv}");
        assert_eq!(row[col("runs_in_figures")], "4", "{csv}");
        let means: Vec<&str> = row[col("mean_of_runs")].split(';').collect();
        assert!(means.contains(&"request_throughput"), "{csv}");
        assert!(means.contains(&"ttft_p99_ms"), "{csv}");
        assert!(!means.contains(&"requests"), "counts are sums: {csv}");
        let tp = p["repeats"]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == "request_throughput")
            .unwrap();
        let hw: f64 = row[col("request_throughput_half_width")].parse().unwrap();
        assert_eq!(hw, tp["half_width"].as_f64().unwrap(), "{csv}");
    }
    // `canaryd report` of the folder draws one point per load, the mean of its runs, in the
    // sweep's table of points; every run keeps its own section.
    let o = canaryd(&["report", "a", "-o", "a.html"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(dir.path().join("a.html")).unwrap();
    assert!(html.contains("a series of 8 runs"), "{}", text(&o));
    assert!(html.contains("Estimates: each figure the mean of the point"));
    for run in [
        "point-01-c1/run-1",
        "point-01-c1/run-2",
        "point-02-c8/run-2",
    ] {
        assert!(html.contains(run), "{run} not in the page");
    }
    let table = html
        .split("<table")
        .find(|t| t.contains("<th>point</th>"))
        .expect("the table of points");
    let rows = table
        .split("</table>")
        .next()
        .unwrap()
        .matches("<tr>")
        .count();
    assert_eq!(rows, 3, "a header and one row per point: {table}");

    slow_down(&url);
    run_sweep("b");
    let o = canaryd(&["compare", "a", "b", "--json"], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    for p in c["points"].as_array().unwrap() {
        let cmp = &p["comparison"];
        assert_eq!(
            (cmp["a"]["runs"].as_u64(), cmp["b"]["runs"].as_u64()),
            (Some(4), Some(4))
        );
        for m in ["throughput", "e2e p50"] {
            let r = cmp["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["metric"] == m)
                .unwrap_or_else(|| panic!("{m}: {cmp}"));
            eprintln!(
                "{}: {m}: A {} B {}: {}",
                p["label"], r["runs"]["a_values"], r["runs"]["b_values"], r["verdict"]["how"]
            );
            // Four times the decode cost: judged worse run against run.
            assert_eq!(r["verdict"]["trend"], "regressed", "{m}: {r}");
            assert!(
                r["verdict"]["how"].as_str().unwrap().starts_with("Welch"),
                "{r}"
            );
            assert_eq!(r["runs"]["a_values"].as_array().unwrap().len(), 4, "{r}");
        }
    }
    let shown = String::from_utf8(canaryd(&["compare", "a", "b"], dir.path()).stdout).unwrap();
    assert!(
        shown.contains("its two experiments (--runs) compared"),
        "{shown}"
    );
    assert!(shown.contains("Welch"), "{shown}");
}

/// A server failing at every load (a bad replica: a quarter of its answers are 503s, `canaryd
/// sim --fault-rate 0.25 --fault status=503`): every point is over 5 % target errors, so the
/// knee leaves each out. The table said "knee: none (no step in load gained under 10% …)", as
/// of a series that never saturated; it says none of the points is evidence and names them,
/// and `sweep.json` lists them with why (audit F1).
#[test]
fn a_sweep_whose_points_all_failed_at_the_target_says_they_were_left_out() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let faults = ["--fault-rate", "0.25", "--fault", "status=503"];
    let (_sim, port) = sim_with_profile(dir.path(), r#"{"profile": "capacity"}"#, &faults);
    let url = format!("http://127.0.0.1:{port}");
    let flags = ["--concurrency", "1,4", "--request-count", "40"];
    let out = sweep(dir.path(), &url, &flags);
    // No gate given: a point's errors do not change the exit status.
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    assert!(doc["knee"].is_null(), "{doc:#}");
    let left = doc["left_out"].as_array().expect("left_out");
    let labels: Vec<&str> = left.iter().map(|l| l["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["c1", "c4"], "{doc:#}");
    for l in left {
        assert_eq!(l["why"], "target_errors", "{l}");
        let rate = l["error_rate"].as_f64().unwrap();
        assert!(rate > 0.05 && rate < 0.6, "{l}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "knee: none: 0 of the 2 points are evidence, and a knee is a step between two; \
             left out: c1 ("
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("% of its requests failed at the target)"),
        "{stdout}"
    );
    assert!(!stdout.contains("knee: none (no step"), "{stdout}");
}

/// A point whose verdict is an error though some requests completed ("canaryd was the
/// bottleneck": files ran out under it) exited 0 without `--runs` and 5 with `--runs 1`, the
/// same single run (audit F2). One rule now: 5 in both. Files run out as in
/// `files_running_out_mid_run_are_canaryds_own_errors_and_the_run_ends_cleanly`: the running
/// sweep's open-file limit is lowered (`prlimit(2)`) once its connections are open, and the
/// simulator closes every connection after its response, so most later connects fail.
#[test]
fn a_point_where_canaryd_was_the_bottleneck_fails_the_sweep_with_or_without_runs() {
    use super::file_limits::{limit_files, starve_of_files};
    use std::process::Stdio;
    let _shared = shared();
    let (_sim, port) = crate::common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    for runs in [None, Some("1")] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_canaryd"));
        cmd.args(["sweep", "--url", &url, "--model", "canary-sim"])
            .args(["--output-dir", "out", "--no-nvml", "--no-ebpf"])
            .args(["--no-server-metrics", "--isl", "16", "--osl", "8"])
            .args(["--concurrency", "20", "--max-error-rate", "0.05"])
            .args(["--benchmark-duration", "3s", "--request-count", "5000"])
            .args(["-H", "x-sim-fault: close_after"])
            .args(runs.map(|n| ["--runs", n]).iter().flatten())
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
        limit_files(&mut cmd, 256, 256);
        let mut child = cmd.spawn().unwrap();
        starve_of_files(child.id(), &format!("{runs:?}"));
        let status = child.wait().unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        let said = format!("{runs:?}: {}\n{}", read("stdout"), read("stderr"));
        let doc = sweep_json(dir.path());
        let p = &doc["points"][0];
        let verdict = p["verdict"].as_str().unwrap();
        assert!(
            verdict.contains("error: canaryd was the bottleneck"),
            "{verdict}\n{said}"
        );
        assert!(p["completed"].as_u64().unwrap() > 0, "{p:#}\n{said}");
        assert_eq!(status.code(), Some(5), "{said}");
    }
}

/// A dead target whose error body says "interrupted": every request is refused with a 400
/// quoting the bad item of its `x-sim-fault` header (`unknown item "interrupted"`; the whole
/// value, a header the user gave, is redacted), so no request completes and the point's
/// verdict, quoting the top cause, holds the word. The sweep read
/// the word as a signal's and exited 0; a signal is a typed fact of the run, and this exits 5
/// (audit F7).
#[test]
fn a_dead_target_whose_error_says_interrupted_still_fails_the_sweep() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    let flags = [
        "--concurrency",
        "1,2",
        "--request-count",
        "2",
        "-H",
        "x-sim-fault: no_done,interrupted",
    ];
    let out = sweep(dir.path(), &url, &flags);
    let doc = sweep_json(dir.path());
    let verdict = doc["points"][0]["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("error: target unusable") && verdict.contains("interrupted"),
        "{verdict}"
    );
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
}

// Audit findings 11 and 17. A point too short for a rate was left out as "no request throughput
// or TTFT p99" though it had a TTFT p99, with nothing suggesting --benchmark-duration; a
// sweep given no length warned of nothing; the Pareto front was listed in run order
// (`r50, r100, r112.5, r106.25` of a search), and an empty one as an empty list.
#[test]
fn a_point_without_a_rate_says_why_and_the_front_is_listed_by_load() {
    let _timing = timing();
    let setup = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(setup.path());

    // c2 runs before c1; each is on the front (c1 more tokens/s per user, c2 more in all).
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        dir.path(),
        &url,
        &["--concurrency", "2,1", "--benchmark-duration", "1s"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    assert_eq!(doc["pareto"], serde_json::json!(["c1", "c2"]), "{doc:#}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("): c1, c2\n"), "{stdout}");
    assert!(!text(&out).contains("profile's default of 10 requests"));

    // One measured request: a TTFT p99, but no rate (a rate needs two).
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        dir.path(),
        &url,
        &["--concurrency", "1", "--request-count", "1"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(dir.path());
    let point = &doc["points"][0];
    assert!(
        point["time_to_first_token_ms"]["p99"].is_number(),
        "{doc:#}"
    );
    assert!(point["request_throughput"].is_null(), "{doc:#}");
    let why = "1 measured request: a rate needs at least 2";
    assert_eq!(point["rate_unavailable"], why, "{doc:#}");
    assert_eq!(point_summary(dir.path(), point)["rate_unavailable"], why);
    let left = &doc["left_out"][0];
    assert_eq!(left["why"], "no_figures", "{doc:#}");
    assert_eq!(
        left["missing"],
        format!("no request rate: {why}"),
        "{doc:#}"
    );
    let notes = doc["notes"].to_string();
    assert!(notes.contains("c1 had no request rate") && notes.contains("--benchmark-duration"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains(&format!("left out: c1 (no request rate: {why})")),
        "{stdout}"
    );
    assert!(
        !stdout.contains("no request throughput or TTFT p99"),
        "{stdout}"
    );
    assert!(
        stdout.contains("): none (every point left out)\n"),
        "{stdout}"
    );

    // No length given: every point sends profile's default of 10 requests, said once.
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(dir.path(), &url, &["--concurrency", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        stderr
            .matches("each point sends profile's default of 10 requests")
            .count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("--benchmark-duration"), "{stderr}");
}

// Audit finding 17: `--find-max-rate` without `--slo` was refused as missing `--goodput
// <GOODPUT>`, a name the sweep's help and README do not use.
#[test]
fn find_max_rate_without_slos_names_slo() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = sweep(
        dir.path(),
        &url,
        &["--find-max-rate", "--min-good-fraction", "0.9"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("--slo <SLOS>"), "{said}");
    assert!(!said.contains("--goodput"), "{said}");
    // A point's plan refused for its SLOs names the flag as the sweep spells it.
    let out = sweep(
        dir.path(),
        &url,
        &[
            "--concurrency",
            "1",
            "--request-count",
            "2",
            "--no-streaming",
        ]
        .into_iter()
        .chain(["--goodput", "inter_token_latency:40"])
        .collect::<Vec<_>>(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("point c1: --slo: inter_token_latency needs streamed responses"),
        "{}",
        text(&out)
    );
    // `--goodput` is still taken.
    let help = canaryd(&["sweep", "--help"], dir.path());
    let help = text(&help);
    assert!(
        help.contains("--slo <SLOS>") && help.contains("[alias: --goodput]"),
        "{help}"
    );
}

// Audit finding 16: a sweep stopped by a signal wrote a sweep.json that read as a finished
// sweep of the points it ran: nothing said it was interrupted, nor which points never ran.
#[test]
fn an_interrupted_sweep_says_so_and_names_the_points_not_run() {
    let _timing = timing();
    let setup = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(setup.path());
    let dir = tempfile::tempdir().unwrap();
    let (isl, osl) = (ISL.to_string(), OSL.to_string());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_canaryd"));
    cmd.args(["sweep", "--url", &url, "--model", "canary-sim"])
        .args(["--isl", &isl, "--osl", &osl, "--output-dir", "out"])
        .args(["--no-nvml", "--no-ebpf", "--warmup-request-count", "2"])
        .args(["--concurrency", "1,2,4", "--benchmark-duration", "5s"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
    let mut child = crate::common::Child(cmd.spawn().unwrap());
    let first = dir.path().join("out/point-01-c1");
    for _ in 0..600 {
        if first.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(first.exists(), "the first point never started");
    std::thread::sleep(std::time::Duration::from_millis(500));
    child.signal(libc::SIGINT);
    let code = child.wait_exit(std::time::Duration::from_secs(60));
    let said = std::fs::read_to_string(dir.path().join("stdout")).unwrap();
    assert_eq!(code, Some(130), "{said}");
    let doc = sweep_json(dir.path());
    assert_eq!(doc["interrupted"], true, "{doc:#}");
    assert_eq!(doc["not_run"], serde_json::json!(["c2", "c4"]), "{doc:#}");
    assert_eq!(doc["points"].as_array().unwrap().len(), 1, "{doc:#}");
    assert!(
        said.contains("not run: c2, c4 (a signal stopped the sweep)"),
        "{said}"
    );
    // A sweep that ran to its end says neither.
    let done = tempfile::tempdir().unwrap();
    let out = sweep(
        done.path(),
        &url,
        &["--concurrency", "1", "--request-count", "4"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc = sweep_json(done.path());
    assert!(
        doc.get("interrupted").is_none() && doc.get("not_run").is_none(),
        "{doc:#}"
    );
}

// Hostile audit 2, F8: a metrics endpoint that is down is warned about once for the sweep, as
// the daemon does across its runs and the README says, not once per point (three here).
#[test]
fn a_metrics_endpoint_that_is_down_is_warned_about_once_per_sweep() {
    let _shared = shared();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = capacity_sim(dir.path());
    // A loopback port that refuses: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics = format!("http://{}/metrics", closed.local_addr().unwrap());
    drop(closed);
    let out = sweep(
        dir.path(),
        &url,
        &[
            "--concurrency",
            "1,2,3",
            "--request-count",
            "4",
            "--server-metrics-url",
            &metrics,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("metrics endpoint unavailable").count(),
        1,
        "{stderr}"
    );
    let doc = sweep_json(dir.path());
    assert_eq!(doc["points"].as_array().unwrap().len(), 3, "{stderr}");
}
