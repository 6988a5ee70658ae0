//! `kind = "sweep"` workloads: their points, defaults and refusals, each named by line and
//! key path.

use super::{error_at, parse};
use crate::cli::sweep::point::Axis;
use crate::config::SweepSpec;
use std::time::Duration;

const SWEEP: &str = r#"
state_dir = "/tmp/canaryd-state"

[targets.local]
url = "http://127.0.0.1:8000"
model = "m"

[workloads.knee]
target = "local"
kind = "sweep"
cron = "0 3 * * *"
sweep_concurrency = [1, 4, 16, 64]
benchmark_duration = "30s"
cooldown = "5s"
warmup_requests = 4
"#;

#[test]
fn a_sweep_workload_gets_its_points_and_defaults() {
    let c = parse(SWEEP).unwrap();
    let w = &c.workloads[0];
    assert_eq!(
        w.sweep,
        Some(SweepSpec {
            axis: Axis::Concurrency,
            values: vec![1.0, 4.0, 16.0, 64.0],
            cooldown: Duration::from_secs(5),
            gpus: None,
            tolerance: 0.1,
        })
    );
    // Warm-up per point is the workload's: each point is a run.
    assert_eq!(w.warmup_requests, 4);
    assert_eq!(w.capacity, None);
    let rates = SWEEP
        .replace(
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_request_rate = [10, 20.5]",
        )
        .replace(
            "cooldown = \"5s\"",
            "request_rate = 10\ngpus = 2\nknee_tolerance = 0.2",
        );
    let s = parse(&rates).unwrap().workloads[0].sweep.clone().unwrap();
    assert_eq!(
        (s.axis, s.values, s.gpus, s.tolerance),
        (Axis::RequestRate, vec![10.0, 20.5], Some(2), 0.2)
    );
    let speedups = SWEEP
        .replace(
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_speedup = [1, 2, 4]",
        )
        .replace("benchmark_duration = \"30s\"", "trace = \"bundled\"");
    let s = parse(&speedups).unwrap().workloads[0]
        .sweep
        .clone()
        .unwrap();
    assert_eq!((s.axis, s.values), (Axis::Speedup, vec![1.0, 2.0, 4.0]));
}

#[test]
fn sweep_keys_are_refused_on_other_kinds_and_bad_points_named() {
    let replay = SWEEP.replace("kind = \"sweep\"\n", "");
    let e = error_at(
        &replay,
        "sweep_concurrency",
        "workloads.knee.sweep_concurrency: ",
    );
    assert!(e.contains("only taken by kind = \"sweep\""), "{e}");
    let replay = replay.replace("sweep_concurrency = [1, 4, 16, 64]\n", "");
    let e = error_at(&replay, "cooldown", "workloads.knee.cooldown: ");
    assert!(e.contains("only taken by kind = \"sweep\""), "{e}");
    // Capacity keys are not a sweep's.
    let probes = SWEEP.replace("cooldown = \"5s\"", "max_probes = 3");
    let e = error_at(&probes, "max_probes", "workloads.knee.max_probes: ");
    assert!(e.contains("only taken by kind = \"capacity\""), "{e}");
    for (from, to, at, key, says) in [
        (
            "sweep_concurrency = [1, 4, 16, 64]\n",
            "",
            "kind = ",
            "workloads.knee.kind: ",
            "needs its points",
        ),
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_concurrency = [8]",
            "sweep_concurrency",
            "workloads.knee.sweep_concurrency: ",
            "two or more",
        ),
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_concurrency = [1, 0]",
            "sweep_concurrency",
            "workloads.knee.sweep_concurrency: ",
            "",
        ),
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_concurrency = [1, 4]\nsweep_request_rate = [1, 2]",
            "sweep_request_rate",
            "workloads.knee.sweep_request_rate: ",
            "one axis",
        ),
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_request_rate = [1, 2]",
            "sweep_request_rate",
            "workloads.knee.sweep_request_rate: ",
            "request_rate",
        ),
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_request_rate = [1, -2]",
            "sweep_request_rate",
            "workloads.knee.sweep_request_rate: ",
            "",
        ),
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_speedup = [1, 2]",
            "sweep_speedup",
            "workloads.knee.sweep_speedup: ",
            "give a trace",
        ),
        // A repeated value made a "step" between two runs of one load: a knee of noise.
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_concurrency = [1, 8, 8, 16]",
            "sweep_concurrency",
            "workloads.knee.sweep_concurrency: ",
            "8 is listed twice",
        ),
        (
            "sweep_concurrency = [1, 4, 16, 64]",
            "request_rate = 10\nsweep_request_rate = [10, 20.5, 20.5]",
            "sweep_request_rate",
            "workloads.knee.sweep_request_rate: ",
            "20.5 is listed twice",
        ),
        (
            "cooldown = \"5s\"",
            "cooldown = \"5 fortnights\"",
            "cooldown",
            "workloads.knee.cooldown: ",
            "",
        ),
        (
            "cooldown = \"5s\"",
            "knee_tolerance = 1.5",
            "knee_tolerance",
            "workloads.knee.knee_tolerance: ",
            "",
        ),
    ] {
        let text = SWEEP.replace(from, to);
        let e = error_at(&text, at, key);
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn a_point_no_run_could_take_is_refused_at_the_list() {
    // Each point checked as `canaryd sweep` checks its points: 20 users for the default 10
    // requests, rates and users past their ranges.
    let closed = SWEEP
        .replace(
            "sweep_concurrency = [1, 4, 16, 64]",
            "sweep_concurrency = [1, 20]",
        )
        .replace("benchmark_duration = \"30s\"\n", "");
    let e = error_at(
        &closed,
        "sweep_concurrency",
        "workloads.knee.sweep_concurrency",
    );
    assert!(e.contains("point c20: 20 users for 10 requests"), "{e}");
    let users = SWEEP.replace("[1, 4, 16, 64]", "[1, 200000]");
    let e = error_at(
        &users,
        "sweep_concurrency",
        "workloads.knee.sweep_concurrency",
    );
    assert!(e.contains("point c200000"), "{e}");
    for rates in ["[1, 2000000]", "[1e-9, 1]"] {
        let open = SWEEP.replace(
            "sweep_concurrency = [1, 4, 16, 64]",
            &format!("request_rate = 5\nsweep_request_rate = {rates}"),
        );
        let e = error_at(
            &open,
            "sweep_request_rate",
            "workloads.knee.sweep_request_rate",
        );
        assert!(e.contains("requests per second"), "{e}");
    }
    // Points every run can take stay accepted.
    let fine = closed.replace("[1, 20]", "[1, 10]");
    assert!(parse(&fine).is_ok());
}

#[test]
fn a_concurrency_beside_sweep_concurrency_is_refused() {
    // Each point set it: the value written was overwritten at every point.
    let text = SWEEP.replace("cooldown = \"5s\"", "cooldown = \"5s\"\nconcurrency = 4");
    error_at(&text, "concurrency = 4", "workloads.knee.concurrency");
}
