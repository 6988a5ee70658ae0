//! `kind = "capacity"` workloads: their search keys, defaults and refusals.

use super::{error_at, parse};
use crate::config::CapacitySearch;

const CAPACITY: &str = r#"
state_dir = "/tmp/canaryd-state"

[targets.local]
url = "http://127.0.0.1:8000"
model = "m"

[workloads.capacity]
target = "local"
kind = "capacity"
cron = "0 3 * * *"
request_rate = 50
benchmark_duration = "30s"
slos = "time_to_first_token:400"
min_good_fraction = 0.95
max_probes = 8
"#;

#[test]
fn a_capacity_workload_gets_its_search_and_defaults() {
    let c = parse(CAPACITY).unwrap();
    assert_eq!(
        c.workloads[0].capacity,
        Some(CapacitySearch {
            max_probes: 8,
            precision: 0.1,
            min_rate: 0.1,
            tolerance: 0.1,
        })
    );
    let text = CAPACITY.replace("kind = \"capacity\"", "kind = \"replay\"");
    let e = error_at(&text, "max_probes", "workloads.capacity.max_probes: ");
    assert!(e.contains("only taken by kind = \"capacity\""), "{e}");
    let text = text.replace("max_probes = 8", "");
    assert_eq!(parse(&text).unwrap().workloads[0].capacity, None);
}

#[test]
fn a_capacity_search_needs_a_rate_and_slos_and_no_trace() {
    let no_rate = CAPACITY.replace("request_rate = 50\n", "");
    let e = error_at(&no_rate, "kind = ", "workloads.capacity.kind: ");
    assert!(e.contains("needs request_rate"), "{e}");
    let trace = CAPACITY
        .replace("request_rate = 50\n", "")
        .replace("benchmark_duration = \"30s\"\n", "trace = \"bundled\"\n");
    let e = error_at(&trace, "kind = ", "workloads.capacity.kind: ");
    assert!(e.contains("not a trace"), "{e}");
    let no_slos = CAPACITY.replace("slos = \"time_to_first_token:400\"\n", "");
    let e = error_at(
        &no_slos,
        "[workloads.capacity]",
        "workloads.capacity.slos: ",
    );
    assert!(e.contains("needs the SLOs"), "{e}");
    let bad = CAPACITY.replace("kind = \"capacity\"", "kind = \"search\"");
    let e = error_at(&bad, "kind = ", "workloads.capacity.kind: ");
    assert!(e.contains("capacity"), "{e}");
    let zero = CAPACITY.replace("max_probes = 8", "max_probes = 0");
    error_at(&zero, "max_probes", "workloads.capacity.max_probes: ");
}

// An in-flight ceiling held requests in canaryd once reached, where TTFT (timed from the send)
// does not see them: a search under one passed rates it never offered.
#[test]
fn a_capacity_search_refuses_an_in_flight_ceiling() {
    let capped = CAPACITY.replace(
        "request_rate = 50\n",
        "request_rate = 50\nconcurrency = 8\n",
    );
    let e = error_at(
        &capped,
        "[workloads.capacity]",
        "workloads.capacity.concurrency: ",
    );
    assert!(e.contains("open-loop rates"), "{e}");
    assert!(e.contains("leave concurrency out"), "{e}");
}

#[test]
fn a_floor_above_the_first_rate_is_refused() {
    // The search starts at request_rate (50): a floor of 100 stopped it "by the floor" at
    // its first failure, the floor never tried.
    let text = CAPACITY.replace("max_probes = 8", "max_probes = 8\nmin_rate = 100");
    let e = error_at(&text, "min_rate", "workloads.capacity.min_rate");
    assert!(e.contains("above request_rate (50 req/s)"), "{e}");
    let text = CAPACITY.replace("max_probes = 8", "max_probes = 8\nmin_rate = 50");
    assert_eq!(
        parse(&text).unwrap().workloads[0]
            .capacity
            .unwrap()
            .min_rate,
        50.0
    );
}
