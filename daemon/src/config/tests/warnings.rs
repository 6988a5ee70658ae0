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
    assert!(overrun_warning(&w, None)
        .unwrap()
        .starts_with("workloads.w.every: one run takes at least 120 s (benchmark_duration 120 s)"));
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
