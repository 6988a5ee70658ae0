use super::super::{Config, ConfigError, Synthetic, WorkloadPlan};
use canary_replay::{ArrivalPattern, LoadShape, Plan};
use std::path::Path;
use std::time::Duration;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("canaryd.toml"), Path::new("/etc/canaryd"))
}

/// A config of one workload `s` with these keys.
fn with(keys: &str) -> String {
    format!(
        "state_dir = \"/tmp/canaryd-state\"\n\n[targets.local]\nurl = \"http://127.0.0.1:8000\"\n\
         model = \"m\"\n\n[workloads.s]\ntarget = \"local\"\nevery = \"15m\"\n{keys}\n"
    )
}

/// The error of `keys`: it must start with `canaryd.toml:LINE: KEY`, LINE the line holding
/// `at`, and say `says`.
#[track_caller]
fn refused(keys: &str, at: &str, key: &str, says: &str) {
    let text = with(keys);
    let line = text.lines().position(|l| l.contains(at)).unwrap() + 1;
    let e = parse(&text).unwrap_err().to_string();
    let want = format!("canaryd.toml:{line}: {key}");
    assert!(e.starts_with(&want), "want {want:?}, got {e}");
    assert!(e.contains(says), "{e}");
}

#[test]
fn a_workload_without_a_trace_is_a_closed_loop_of_its_concurrency() {
    let c = parse(&with(
        "isl = 200\nosl = 50\nconcurrency = 4\nrequest_count = 40\nrandom_seed = 9",
    ))
    .unwrap();
    let w = &c.workloads[0];
    assert_eq!(w.trace, None);
    let Some(Synthetic::ClosedLoop(users)) = &w.synthetic else {
        panic!("{:?}", w.synthetic)
    };
    assert_eq!(users.users, 4);
    assert_eq!(
        (users.requests.isl.mean, users.requests.osl.mean),
        (200, 50)
    );
    assert_eq!(users.requests.seed, 9);
    assert_eq!(users.extent.count, Some(40));
    let plan = Plan::try_from(WorkloadPlan {
        workload: w,
        target: &c.targets["local"],
    })
    .unwrap();
    assert!(matches!(plan.load, LoadShape::ClosedLoop(_)));
    plan.validate().unwrap();
    // The users are the ceiling, once.
    assert_eq!(plan.replay.concurrency, None);
    assert_eq!(plan.dispatcher_config().concurrency, Some(4));
}

#[test]
fn a_rate_workload_with_cancellation_mirrors_the_flags() {
    let c = parse(&with(
        "request_rate = 20.0\narrival_pattern = \"gamma\"\narrival_smoothness = 2.5\n\
         benchmark_duration = \"2m\"\nconcurrency = 8\nrequest_cancellation_rate = 10.0\n\
         request_cancellation_delay = \"500ms\"\nrandom_seed = 7",
    ))
    .unwrap();
    let w = &c.workloads[0];
    let Some(Synthetic::Rate(rate)) = &w.synthetic else {
        panic!("{:?}", w.synthetic)
    };
    assert_eq!(rate.rate, 20.0);
    assert_eq!(rate.arrival, ArrivalPattern::Gamma(2.5));
    assert_eq!(rate.extent.duration, Some(Duration::from_secs(120)));
    let cancel = w.cancellation.unwrap();
    assert_eq!(
        (cancel.rate_percent, cancel.delay, cancel.seed),
        (10.0, Duration::from_millis(500), 7)
    );
    let plan = Plan::try_from(WorkloadPlan {
        workload: w,
        target: &c.targets["local"],
    })
    .unwrap();
    assert_eq!(plan.replay.concurrency, Some(8), "a ceiling under a rate");
    assert_eq!(plan.replay.cancellation, Some(cancel));

    // Cancellation applies to a trace too.
    let c = parse(&with(
        "trace = \"bundled\"\nrequest_cancellation_rate = 5.0",
    ))
    .unwrap();
    assert_eq!(c.workloads[0].cancellation.unwrap().rate_percent, 5.0);
    assert!(c.workloads[0].synthetic.is_none());
}

#[test]
fn nonsense_is_refused_with_the_line_and_key_path() {
    refused(
        "trace = \"bundled\"\nisl = 100",
        "isl = 100",
        "workloads.s.isl",
        "a trace brings its own lengths",
    );
    refused(
        "speedup = 2.0",
        "[workloads.s]",
        "workloads.s.speedup",
        "applies to a trace",
    );
    refused(
        "arrival_pattern = \"poisson\"",
        "arrival_pattern",
        "workloads.s.arrival_pattern",
        "request_rate, which is not set",
    );
    refused(
        "request_rate = 5.0\narrival_pattern = \"zipf\"",
        "zipf",
        "workloads.s.arrival_pattern",
        "expected constant, poisson or gamma",
    );
    refused(
        "request_rate = 5.0\narrival_smoothness = 2.0",
        "arrival_smoothness",
        "workloads.s.arrival_smoothness",
        "gamma",
    );
    refused(
        "request_rate = 0.0",
        "request_rate",
        "workloads.s.request_rate",
        "expected 0.000001 to 1000000 requests per second",
    );
    refused(
        "request_rate = 5.0\nisl = 0",
        "isl = 0",
        "workloads.s.isl",
        "expected 1 to",
    );
    // At the `concurrency` line (it was placed at the workload's header).
    refused(
        "concurrency = 20\nrequest_count = 10",
        "concurrency = 20",
        "workloads.s.concurrency",
        "20 users for 10 requests",
    );
    refused(
        "request_cancellation_rate = 150.0",
        "request_cancellation_rate",
        "workloads.s.request_cancellation_rate 150",
        "expected a percentage",
    );
    refused(
        "request_cancellation_delay = \"1s\"",
        "request_cancellation_delay",
        "workloads.s.request_cancellation_delay",
        "request_cancellation_rate, which picks them, is not set",
    );
    refused("isl = -3", "isl = -3", "workloads.s.isl", "");
}

/// A config whose target `local` has these keys, and a bundled workload on it.
fn target_with(keys: &str) -> String {
    format!(
        "state_dir = \"/tmp/canaryd-state\"\n\n[targets.local]\nmodel = \"m\"\n{keys}\n\n\
         [workloads.s]\ntarget = \"local\"\nevery = \"15m\"\ntrace = \"bundled\"\n"
    )
}

#[test]
fn a_target_of_several_urls_spreads_the_plan_over_them() {
    let c = parse(&target_with(
        "url = [\"http://127.0.0.1:8000\", \"http://127.0.0.1:8001\"]\n\
         url_strategy = \"least-in-flight\"",
    ))
    .unwrap();
    let t = &c.targets["local"];
    assert_eq!(t.url, "http://127.0.0.1:8000");
    assert_eq!(t.replica_urls, ["http://127.0.0.1:8001"]);
    let plan = Plan::try_from(WorkloadPlan {
        workload: &c.workloads[0],
        target: t,
    })
    .unwrap();
    assert_eq!(plan.replay.replicas.len(), 1);
    assert_eq!(
        plan.replay.replicas[0].url(),
        "http://127.0.0.1:8001/v1/chat/completions"
    );
    assert_eq!(plan.replay.balance, canary_replay::Balance::LeastInFlight);
    // One URL, as before: no replicas, round-robin.
    let c = parse(&target_with("url = \"http://127.0.0.1:8000\"")).unwrap();
    assert!(c.targets["local"].replica_urls.is_empty());

    for (keys, at, says) in [
        (
            "url = []",
            "url = []",
            "targets.local.url: expected at least one URL",
        ),
        (
            "url = [\"http://127.0.0.1:8000\", \"ftp://x\"]",
            "ftp://",
            "targets.local.url[1]:",
        ),
        (
            "url = \"http://127.0.0.1:8000\"\nurl_strategy = \"random\"",
            "random",
            "targets.local.url_strategy:",
        ),
    ] {
        let text = target_with(keys);
        let line = text.lines().position(|l| l.contains(at)).unwrap() + 1;
        let e = parse(&text).unwrap_err().to_string();
        let want = format!("canaryd.toml:{line}: {says}");
        assert!(e.starts_with(&want), "want {want:?}, got {e}");
    }
}
