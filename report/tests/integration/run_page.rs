//! What a run's page says of the run: a merged run's time axis, the bounds in its latencies, a summary of a newer canaryd.

use crate::fixtures::{json_file, records, report, run, text, Load};
use serde_json::json;

/// A merged run of two shards on one host: shard 1/2 started 3 s after 0/2; each wrote its
/// records on its own clock, 1 s of requests each.
fn merged(dir: &std::path::Path, bound: serde_json::Value) {
    let mut lines = Vec::new();
    for shard in ["0/2", "1/2"] {
        for mut r in Load::new(20.0, 10.0).records().into_iter().take(21) {
            r.as_object_mut()
                .unwrap()
                .insert("shard".into(), json!(shard));
            lines.push(r);
        }
    }
    records(dir, &lines);
    json_file(
        &dir.join("summary.json"),
        &json!({"schema_version": 2, "merged": {
            "shard_count": 2,
            "inputs": [
                {"dir": "s0", "shard": "0/2", "records": 21, "t0_offset_ms": 0.0,
                 "offset_basis": "monotonic"},
                {"dir": "s1", "shard": "1/2", "records": 21, "t0_offset_ms": 3000.0,
                 "offset_basis": "wall_clock"}],
            "alignment": bound}}),
    );
}

// `canaryd merge` writes each shard's records on its own t0; the report read them as one
// clock: the shards overlaid, 42 requests over 1.01 s (41.6 req/s) where the merged run
// spans 4.01 s, under a note calling them exact.
#[test]
fn a_merged_runs_records_are_placed_on_the_merged_axis_within_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("merged");
    merged(
        &m,
        json!({"bound_ms": 2.5, "start_spread_ms": 3000.0, "basis": "wall clocks of 2 hosts"}),
    );
    let (html, _) = report(&[&m]);
    let page = text(&html);
    // 42 requests from 0 to 4020 ms: 4.02 s.
    assert!(page.contains("4.02 s first send to last end"), "{page}");
    assert!(page.contains("10.4 req/s"), "{page}");
    assert!(page.contains("Merged from 2 shards"), "{page}");
    assert!(page.contains("within ±2.50 ms"), "{page}");
    // No bound: said so.
    merged(
        &m,
        json!({"bound_ms": null, "unbounded_because": "shard 1/2's wall clock is not synchronized",
               "basis": "wall clocks of 2 hosts"}),
    );
    let page = text(&report(&[&m]).0);
    assert!(page.contains("4.02 s first send to last end"), "{page}");
    assert!(
        page.contains("with no bound: shard 1/2's wall clock is not synchronized"),
        "{page}"
    );
}

// The headline called TTFT exact when most first tokens were only upper bounds (kernel_bound:
// the read also carried later bytes).
#[test]
fn ttft_upper_bounds_are_counted_and_the_figure_called_a_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let recs: Vec<_> = Load::new(20.0, 10.0)
        .records()
        .into_iter()
        .take(8)
        .enumerate()
        .map(|(i, mut r)| {
            let kind = match i {
                0 => "kernel",
                1 => "userspace",
                _ => "kernel_bound",
            };
            let end = if i == 7 { "kernel_bound" } else { "kernel" };
            let o = r.as_object_mut().unwrap();
            o.insert("rx".into(), json!({"first_token": kind, "end": end}));
            // 10 chunks, 10 ms from the first token to the end.
            o.insert("itl_ms".into(), json!(10.0 / 9.0));
            r
        })
        .collect();
    records(&dir, &recs);
    let page = text(&report(&[&dir]).0);
    assert!(
        page.contains("TTFT: 7 of 8 are upper bounds (6 kernel_bound, 1 userspace)"),
        "{page}"
    );
    assert!(page.contains("TTFT (upper bound) 8"), "{page}");
    assert!(
        page.contains("e2e: 1 of 8 are upper bounds (1 kernel_bound)"),
        "{page}"
    );
    // ITL is (e2e − TTFT)/(n − 1): a bound wherever its first token or end is (the audit's
    // finding 3: it was called exact here).
    assert!(
        page.contains(
            "ITL: 7 of 8 are bounds, (e2e − TTFT)/(n − 1) over a first token or end not exact \
             (6 lower (first token a bound), 1 in neither direction (both))"
        ),
        "{page}"
    );
    assert!(page.contains("ITL (bound) 8"), "{page}");
    assert!(!page.contains("Exact: from every completed"), "{page}");
    // All exact: the figure is exact and said so.
    let recs: Vec<_> = recs
        .into_iter()
        .map(|mut r| {
            r["rx"] = json!({"first_token": "kernel", "end": "kernel"});
            r
        })
        .collect();
    records(&dir, &recs);
    let page = text(&report(&[&dir]).0);
    // (The duration tile's "an upper bound", to the last end as canaryd read it, is no
    // latency's.)
    assert!(!page.contains("(upper bound)"), "{page}");
    assert!(!page.contains("are upper bounds"), "{page}");
    assert!(!page.contains("ITL (bound)"), "{page}");
    assert!(page.contains("Exact: from every completed"), "{page}");
}

// A run with receive timestamps off or refused writes no `rx`: every time is canaryd's read,
// an upper bound. Its page said "Exact".
#[test]
fn records_without_rx_are_canaryds_reads_and_called_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let recs: Vec<_> = Load::new(20.0, 10.0)
        .records()
        .into_iter()
        .take(8)
        .map(|mut r| {
            r["itl_ms"] = json!(10.0 / 9.0);
            r
        })
        .collect();
    assert!(recs.iter().all(|r| r.get("rx").is_none()));
    records(&dir, &recs);
    let page = text(&report(&[&dir]).0);
    assert!(
        page.contains("TTFT: 8 of 8 are upper bounds (8 userspace)"),
        "{page}"
    );
    assert!(page.contains("TTFT (upper bound) 8"), "{page}");
    assert!(
        page.contains("e2e: 8 of 8 are upper bounds (8 userspace)"),
        "{page}"
    );
    assert!(page.contains("ITL (bound) 8"), "{page}");
    assert!(page.contains("(8 in neither direction (both))"), "{page}");
    assert!(!page.contains("Exact: from every completed"), "{page}");
}

// A summary.json of a newer canaryd (schema_version 99) was read without a word; merge
// refuses it.
#[test]
fn a_newer_summary_schema_is_noted_not_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = run(
        &tmp.path().join("run"),
        &Load::new(20.0, 10.0),
        Some(json!({"schema_version": 99, "run": {"run_id": "r"}})),
    );
    let page = text(&report(&[&dir]).0);
    assert!(
        page.contains(&format!(
            "summary.json has schema_version 99, newer than this canaryd reads ({})",
            canary_core::SUMMARY_SCHEMA_VERSION
        )),
        "{page}"
    );
    let dir = run(
        &tmp.path().join("ok"),
        &Load::new(20.0, 10.0),
        Some(
            json!({"schema_version": canary_core::SUMMARY_SCHEMA_VERSION,
                    "run": {"run_id": "r"}}),
        ),
    );
    assert!(!text(&report(&[&dir]).0).contains("newer than this canaryd"));
    // An older version's file is read as before, without a word.
    let dir = run(
        &tmp.path().join("old"),
        &Load::new(20.0, 10.0),
        Some(json!({"schema_version": 1, "run": {"run_id": "r"}})),
    );
    let page = text(&report(&[&dir]).0);
    assert!(
        !page.contains("newer than this canaryd") && !page.contains("may be misread"),
        "{page}"
    );
    // An experiment's own summary.json too.
    let exp = tmp.path().join("exp");
    run(&exp.join("run-1"), &Load::new(20.0, 10.0), None);
    json_file(
        &exp.join("summary.json"),
        &json!({"schema_version": 99, "repeats": {"per_run": [{"dir": "run-1"}]}}),
    );
    let page = text(&report(&[&exp]).0);
    assert!(
        page.contains("exp: summary.json has schema_version 99, newer than this canaryd reads"),
        "{page}"
    );
}

// The eBPF TTFT split said "Exact per request (kernel timestamps on canaryd's clock)" whatever
// the run's receive timestamps: with them off every TTFT is canaryd's read, an upper bound,
// and so is the remainder it leaves.
#[test]
fn the_kernel_split_says_which_ttfts_are_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let parts = json!({"request_write_ms": 0.1, "server_wait_ms": 8.0, "remainder_ms": 1.5,
                       "client_overhead_ms": 0.4});
    let with = |rx: Option<&str>| -> Vec<_> {
        Load::new(20.0, 10.0)
            .records()
            .into_iter()
            .take(8)
            .enumerate()
            .map(|(i, mut r)| {
                r["kernel"] = parts.clone();
                if let Some(kind) = rx {
                    let kind = if i == 0 { "kernel_bound" } else { kind };
                    r["rx"] = json!({"first_token": kind, "end": "kernel"});
                }
                r
            })
            .collect()
    };
    // Off (no `rx`): every one a bound.
    records(&dir, &with(None));
    let page = text(&report(&[&dir]).0);
    assert!(!page.contains("Exact per request"), "{page}");
    assert!(
        page.contains("is an upper bound for 8 of these 8 requests"),
        "{page}"
    );
    // Stamped, one kernel_bound: said so.
    records(&dir, &with(Some("kernel")));
    let page = text(&report(&[&dir]).0);
    assert!(
        page.contains("is an upper bound for 1 of these 8 requests"),
        "{page}"
    );
    // Every first token stamped by the kernel: exact.
    let all: Vec<_> = with(Some("kernel"))
        .into_iter()
        .map(|mut r| {
            r["rx"] = json!({"first_token": "kernel", "end": "kernel"});
            r
        })
        .collect();
    records(&dir, &all);
    let page = text(&report(&[&dir]).0);
    assert!(page.contains("Exact per request"), "{page}");
}

// The server's gauge maxima and means were shown bare, though each was sampled at N scrapes:
// the max is only a lower bound (the gauge may peak between scrapes), the mean an estimate.
#[test]
fn sampled_server_gauges_say_what_their_max_and_mean_are() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = json!({"schema_version": 3, "server": {"scrapes": 12,
        "queue_depth": {"mean": 1.5, "max": 4.0, "samples": 12},
        "kv_cache_usage": {"mean": 0.25, "mean_kind": "estimate", "max": 0.5,
                           "max_kind": "lower_bound", "samples": 12}}});
    let dir = run(
        &tmp.path().join("run"),
        &Load::new(20.0, 10.0),
        Some(summary),
    );
    let page = text(&report(&[&dir]).0);
    assert!(page.contains("its max is a lower bound"), "{page}");
    assert!(
        page.contains("queue_depth.max 4 (lower bound: the largest scraped)"),
        "{page}"
    );
    assert!(
        page.contains("kv_cache_usage.mean 0.250 (estimate)"),
        "{page}"
    );
    assert!(!page.contains("max_kind"), "{page}");
}

// Audit finding 15: a client − server mean whose client times were bounds (`mean_kind:
// upper_bound`) showed bare, its kind a raw row of its own, where the CLI says "at most"; and
// the gauges' labels were fixed words, whatever their `mean_kind` / `max_kind` said.
#[test]
fn server_means_and_maxima_are_shown_with_their_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = json!({"schema_version": 3, "server": {"scrapes": 12,
        "comparison": {"state": "matched", "requests": 20,
            "ttft_ms": {"mean": 0.512, "mean_kind": "upper_bound",
                        "client_times": {"of": 20, "kernel": 5, "kernel_bound": 15,
                                         "userspace": 0, "none": 0},
                        "p50": {"lower_bound": 0.2, "upper_bound": 5.2}},
            "e2e_ms": {"mean": 1.25, "mean_kind": "exact"}},
        "running_requests": {"mean": 2.0, "mean_kind": "exact", "max": 3.0,
                             "max_kind": "exact", "samples": 12},
        "queue_depth": {"mean": 1.5, "max": 4.0, "samples": 12}}});
    let dir = run(
        &tmp.path().join("run"),
        &Load::new(20.0, 10.0),
        Some(summary),
    );
    let page = text(&report(&[&dir]).0);
    assert!(
        page.contains("comparison.ttft_ms.mean at most 0.512 ms (upper bound)"),
        "{page}"
    );
    assert!(
        page.contains("comparison.e2e_ms.mean 1.25 ms (exact)"),
        "{page}"
    );
    // Read from the summary, not assumed from the gauge's name.
    assert!(page.contains("running_requests.mean 2 (exact)"), "{page}");
    assert!(page.contains("running_requests.max 3 (exact)"), "{page}");
    // A summary from before the kinds: a gauge's are what they always were.
    assert!(page.contains("queue_depth.mean 1.50 (estimate)"), "{page}");
    assert!(
        page.contains("queue_depth.max 4 (lower bound: the largest scraped)"),
        "{page}"
    );
    assert!(
        !page.contains("mean_kind") && !page.contains("max_kind"),
        "{page}"
    );
}

// The GPU's clocks and memory utilization are readings at sample instants: the table says
// which figure is an estimate and which a bound, overall and per GPU; a summary from before
// they were written shows its GPU rows as before.
#[test]
fn gpu_clocks_and_memory_utilization_say_what_they_are() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = json!({"schema_version": 3, "gpu": {"util_avg_pct": 80.0, "gpus": 1,
        "sources": ["nvml"], "throttle_reasons": ["sw_power_cap"],
        "sm_clock_min_mhz": 1200.0, "sm_clock_avg_mhz": 1850.0, "mem_clock_avg_mhz": 2619.0,
        "util_mem_avg_pct": 35.0, "util_mem_max_pct": 50.0,
        "per_gpu": [{"source": "nvml", "gpu": 0, "samples": 6,
                     "sm_clock_min_mhz": 1200.0, "sm_clock_avg_mhz": 1720.0}]}});
    let dir = run(
        &tmp.path().join("run"),
        &Load::new(20.0, 10.0),
        Some(summary),
    );
    let page = text(&report(&[&dir]).0);
    for row in [
        "sm_clock_min_mhz at most 1,200 (upper bound)",
        "sm_clock_avg_mhz 1,850 (estimate)",
        "mem_clock_avg_mhz 2,619 (estimate)",
        "util_mem_avg_pct 35 (estimate)",
        "util_mem_max_pct at least 50 (lower bound)",
        "per_gpu[0].sm_clock_min_mhz at most 1,200 (upper bound)",
        "per_gpu[0].sm_clock_avg_mhz 1,720 (estimate)",
        "throttle_reasons sw_power_cap",
    ] {
        assert!(page.contains(row), "{row}: {page}");
    }
}
