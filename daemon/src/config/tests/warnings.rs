//! What is legal but does nothing or surprises: warned at load, naming the file, the line
//! and the key, among `Config::warnings` (check-config's `warning:` lines, the daemon's log).

use super::*;

/// `url_strategy` chooses among replicas: with one `url`, it was taken without a word and
/// did nothing.
#[test]
fn a_url_strategy_with_one_url_is_warned_at_its_line() {
    let one = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "api_key_env = \"MY_KEY\"\nurl_strategy = \"least-in-flight\"",
    );
    let c = parse(&one).unwrap();
    let warned: Vec<&String> = c
        .load_warnings
        .iter()
        .filter(|w| w.contains("url_strategy"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", c.load_warnings);
    assert!(
        warned[0].starts_with(
            "canaryd.toml:8: targets.local.url_strategy: \"least-in-flight\" has no effect \
             with one url"
        ),
        "{}",
        warned[0]
    );
    assert!(c.warnings().contains(warned[0]), "{:?}", c.warnings());
    // With replicas it chooses among them: no warning.
    let several = one.replace(
        "url = \"http://127.0.0.1:8000\"",
        "url = [\"http://127.0.0.1:8000\", \"http://127.0.0.1:8001\"]",
    );
    let c = parse(&several).unwrap();
    assert!(
        !c.load_warnings.iter().any(|w| w.contains("url_strategy")),
        "{:?}",
        c.load_warnings
    );
}

/// A run's length where it is known before it runs: a bound (a `benchmark_duration`, a
/// trace's schedule), an estimate (requests over a rate), a sweep's points and cooldowns;
/// none for a closed loop of a request count (the server's pace).
#[test]
fn a_runs_length_is_a_bound_or_an_estimate_or_not_known() {
    use crate::config::run_length::{overrun_warning, run_length};
    let workload = |keys: &str| {
        let text = format!(
            "[targets.t]\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n[workloads.w]\n\
             target = \"t\"\nevery = \"1m\"\n{keys}"
        );
        parse(&text).unwrap().workloads.remove(0)
    };
    let w = workload("request_rate = 4\nrequest_count = 100\n");
    let r = run_length(&w, None).unwrap();
    assert_eq!((r.length, r.bound), (Duration::from_secs(25), false));
    assert_eq!(overrun_warning(&w, None), None);
    // The first of a count and a duration ends it.
    let w = workload("request_rate = 1\nrequest_count = 1000\nbenchmark_duration = \"2m\"\n");
    let r = run_length(&w, None).unwrap();
    assert_eq!((r.length, r.bound), (Duration::from_secs(120), true));
    assert!(overrun_warning(&w, None).unwrap().starts_with(
        "workloads.w.every: one run takes at least 120 s (benchmark_duration 120 s; not counted: \
         the answers still in flight after the last send, at the server's pace), not less than \
         its period, 60 s"
    ));
    let w = workload("concurrency = 4\nrequest_count = 1000\n");
    assert_eq!(run_length(&w, None), None);
    // Three points of 20 s and two cooldowns of 5 s.
    let w = workload(
        "kind = \"sweep\"\nrequest_rate = 1\nbenchmark_duration = \"20s\"\n\
         sweep_request_rate = [1, 2, 4]\ncooldown = \"5s\"\n",
    );
    let r = run_length(&w, None).unwrap();
    assert_eq!((r.length, r.bound), (Duration::from_secs(70), true));
    assert_eq!(r.how, "its 3 points and 2 cooldowns");
    assert!(overrun_warning(&w, None)
        .unwrap()
        .contains("at least 70 s (its 3 points"));
    // A trace's schedule, at each point's speedup: 10 s at 1, then 5 s at 2.
    let w = workload("trace = \"bundled\"\nkind = \"sweep\"\nsweep_speedup = [1, 2]\n");
    let r = run_length(&w, Some(Duration::from_secs(10))).unwrap();
    assert_eq!((r.length, r.bound), (Duration::from_secs(15), true));
    assert_eq!(run_length(&w, None), None);
}

/// The overrun warning's figure leaves out what a run spends at the server's pace, its
/// warm-up requests (each sweep point has its own) and the answers in flight after its last
/// send: it says so, with the warm-up's exact count, and stays "at least" (a bound) or
/// "about" (an estimate). A stop's grace period is not a run's: never in it.
#[test]
fn the_overrun_warning_says_what_its_figure_leaves_out() {
    use crate::config::run_length::overrun_warning;
    let workload = |keys: &str| {
        let text = format!(
            "[targets.t]\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n[workloads.w]\n\
             target = \"t\"\nevery = \"1m\"\ngrace_period = \"20s\"\n{keys}"
        );
        parse(&text).unwrap().workloads.remove(0)
    };
    let w = workload("request_rate = 1\nbenchmark_duration = \"2m\"\nwarmup_requests = 8\n");
    let got = overrun_warning(&w, None).unwrap();
    assert!(
        got.starts_with(
            "workloads.w.every: one run takes at least 120 s (benchmark_duration 120 s; not \
             counted: 8 warm-up requests sent one at a time before it, and the answers still in \
             flight after the last send, at the server's pace), not less than its period, 60 s"
        ),
        "{got}"
    );
    // An estimate stays one; one warm-up request is one.
    let w = workload("request_rate = 1\nrequest_count = 90\nwarmup_requests = 1\n");
    let got = overrun_warning(&w, None).unwrap();
    assert!(
        got.starts_with(
            "workloads.w.every: one run takes about 90 s (90 requests at 1 req/s, an estimate; \
             not counted: 1 warm-up request sent one at a time before it, and the answers"
        ),
        "{got}"
    );
    // Each of a sweep's points warms up: 3 points of 4 requests.
    let w = workload(
        "kind = \"sweep\"\nrequest_rate = 1\nbenchmark_duration = \"20s\"\n\
         sweep_request_rate = [1, 2, 4]\ncooldown = \"5s\"\nwarmup_requests = 4\n",
    );
    let got = overrun_warning(&w, None).unwrap();
    assert!(
        got.contains(
            "at least 70 s (its 3 points and 2 cooldowns; not counted: 12 warm-up requests sent \
             one at a time before each point (4 each),"
        ),
        "{got}"
    );
    assert!(!got.contains("grace"), "{got}");
}
