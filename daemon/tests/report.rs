//! `canaryd report` and `canaryd compare` on real runs (the bundled trace replayed against the
//! simulator by `canaryd demo`), and their pages loaded in headless Chromium: no console
//! error, no network request, every chart drawn with data.

mod common;
#[path = "report/page_file.rs"]
mod page_file;

use canary_testkit::browser::{chromium, Browser};
use common::page::{chart, CHARTS};
use common::{canaryd, ok};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A real run: `canaryd demo` with `profile` at `speedup`, its first `n` requests, into
/// `dir/name`.
fn demo(dir: &Path, name: &str, profile: &str, speedup: &str, n: &str) -> PathBuf {
    let out = dir.join(name);
    ok(&canaryd(
        &[
            "demo",
            "--profile",
            profile,
            "--speedup",
            speedup,
            "--max-requests",
            n,
            "-o",
            out.to_str().unwrap(),
        ],
        dir,
    ));
    out
}

/// Loads the page file `page` in Chromium: [`common::page::check`].
fn check_page(b: &mut Browser, page: &Path, shot: &Path) -> Vec<(String, Vec<(String, u64)>)> {
    common::page::check(b, &format!("file://{}", page.display()), shot)
}

#[test]
fn a_run_a_series_and_a_comparison_render_in_chromium_with_every_chart_drawn() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A series of the bundled trace at rising speed: the load grows run by run.
    std::fs::create_dir(dir.join("series")).unwrap();
    let runs: Vec<PathBuf> = [("1-x10", "10"), ("2-x20", "20"), ("3-x40", "40")]
        .iter()
        .map(|(name, speedup)| demo(&dir.join("series"), name, "fast", speedup, "150"))
        .collect();
    let run = runs[0].to_str().unwrap();
    let said = ok(&canaryd(&["report", run, "-o", "run.html"], dir));
    assert!(said.contains("run.html (1 run(s), 150 requests"), "{said}");
    let said = ok(&canaryd(&["report", "series", "-o", "series.html"], dir));
    assert!(said.contains("(3 run(s), 450 requests"), "{said}");
    let said = ok(&canaryd(
        &[
            "compare",
            run,
            runs[2].to_str().unwrap(),
            "-o",
            "compare.html",
        ],
        dir,
    ));
    assert!(
        said.contains("TTFT p99") && said.contains("page: compare.html"),
        "{said}"
    );

    for page in ["run.html", "series.html", "compare.html"] {
        let html = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(
            html.contains("content=\"default-src 'none'"),
            "{page}: no CSP"
        );
        assert!(!html.contains("<script"), "{page}: has a script");
        assert!(
            !html.contains(" src=") && !html.contains("href=\"http"),
            "{page}: links out"
        );
    }

    let bin = match chromium() {
        Ok(bin) => bin,
        Err(why) => return canary_testkit::skip("chromium", &why),
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::launch(&bin).unwrap();

    let charts = check_page(&mut b, &dir.join("run.html"), &shots.join("run.png"));
    for id in [
        "ttft-cdf",
        "ttft-hist",
        "itl-cdf",
        "e2e-cdf",
        "e2e-hist",
        "lag-time",
        "queue-time",
    ] {
        chart(&charts, id);
    }
    // Every one of the 150 requests is a dot on the TTFT timeline (none failed). A host busy
    // enough to hold the release back also gets its band drawn (a CI run saw a client-bound one,
    // 3–6 s).
    let timeline = chart(&charts, "ttft-time");
    assert!(
        timeline.contains(&("TTFT".to_string(), 150)),
        "{timeline:?}"
    );
    // Besides the dots, at most that one band: which class a loaded host gets (client-bound,
    // once network) is the diagnosis tests' business, not this one's.
    let bands: Vec<_> = timeline.iter().filter(|(name, _)| name != "TTFT").collect();
    assert!(
        bands.len() <= 1
            && bands
                .iter()
                .all(|(name, n)| name.contains(" held (") && *n == 1),
        "{timeline:?}"
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(runs[0].join("summary.json")).unwrap()).unwrap();
    if summary["telemetry_sources"]["ebpf"]["state"] == "available" {
        assert!(chart(&charts, "kernel-parts").len() >= 3, "{charts:?}");
    }

    let charts = check_page(&mut b, &dir.join("series.html"), &shots.join("series.png"));
    // Three runs: three points per latency line (a vertex and a dot each), and each run's
    // own charts below.
    let sweep = chart(&charts, "sweep-latency");
    assert!(sweep.contains(&("TTFT p99".to_string(), 6)), "{sweep:?}");
    assert!(chart(&charts, "sweep-pareto").contains(&("runs".to_string(), 3)));
    assert_eq!(chart(&charts, "series-ttft-cdf").len(), 3);
    chart(&charts, "run2-ttft-time");

    let charts = check_page(
        &mut b,
        &dir.join("compare.html"),
        &shots.join("compare.png"),
    );
    for id in ["cmp-ttft-cdf", "cmp-itl-cdf", "cmp-e2e-cdf"] {
        assert_eq!(chart(&charts, id).len(), 2, "{id}: A and B");
    }
    eprintln!("screenshots: {}", shots.display());
}

/// A run whose diagnosis is known (the capacity profile overloaded 60×: `queueing`, as in
/// `diagnosis.rs`): its report shows the class, the evidence figures with kind and source,
/// and the interval where the queue held, shaded on the TTFT timeline.
#[test]
fn a_queueing_run_shows_its_diagnosis_evidence_and_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim_with_profile(dir, r#"{"profile": "capacity"}"#, &[]);
    let trace = common::shared("traces/mooncake_conversation_first2000.jsonl");
    let url = format!("http://127.0.0.1:{port}");
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", &url];
    args.extend(["--model", "canary-sim", "--no-ebpf", "--no-nvml"]);
    args.extend(["--server-metrics-interval", "100ms", "--output-dir", "q"]);
    args.extend(["--speedup", "60", "--max-requests", "300"]);
    args.extend(["--max-input-tokens", "32", "--max-output-tokens", "16"]);
    ok(&canaryd(&args, dir));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.join("q/summary.json")).unwrap()).unwrap();
    let d = &summary["diagnosis"];
    assert_eq!(d["class"], "queueing", "{d:#}");
    ok(&canaryd(&["report", "q", "-o", "q.html"], dir));

    let html = std::fs::read_to_string(dir.join("q.html")).unwrap();
    assert!(
        html.contains("<span class=\"bottleneck queueing\">queueing</span>"),
        "no class"
    );
    let bin = match chromium() {
        Ok(bin) => bin,
        Err(why) => return canary_testkit::skip("chromium", &why),
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::launch(&bin).unwrap();
    let page = dir.join("q.html");
    let charts = check_page(&mut b, &page, &shots.join("run-diagnosis.png"));
    // The interval is a shaded band (one rectangle) under the TTFT dots, named for the class.
    let ttft = chart(&charts, "ttft-time");
    assert!(
        ttft[0].0.starts_with("queueing held (") && ttft[0].1 == 1,
        "{ttft:?}"
    );
    assert!(ttft.iter().any(|s| s.0 == "TTFT" && s.1 > 0), "{ttft:?}");

    // What the reader sees in the diagnosis section, from the DOM.
    let load = b.open(&format!("file://{}", page.display()), 1240).unwrap();
    let seen: Value = serde_json::from_str(
        b.eval(
            &load,
            r#"JSON.stringify({
              class: document.querySelector('#diagnosis .bottleneck').textContent,
              confidence: document.querySelector('#diagnosis .confidence').textContent,
              why: document.querySelector('#diagnosis p.why').textContent,
              evidence: [...document.querySelectorAll('#diagnosis table.evidence tbody tr')]
                .map(r => [...r.cells].map(c => c.textContent)),
              thresholds: [...document.querySelectorAll('#diagnosis table.thresholds tbody tr')]
                .map(r => r.cells[0].textContent),
              start: Number(document.querySelector('#diagnosis p.interval').dataset.startS),
              end: Number(document.querySelector('#diagnosis p.interval').dataset.endS)
            })"#,
        )
        .unwrap()
        .as_str()
        .unwrap(),
    )
    .unwrap();
    assert_eq!(seen["class"], "queueing", "{seen}");
    assert_eq!(
        seen["confidence"],
        format!("{} confidence", d["confidence"].as_str().unwrap())
    );
    assert_eq!(seen["why"], d["why"], "{seen}");
    // Each evidence figure is a row: name, value, unit, kind, source as summary.json has them.
    let rows = seen["evidence"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        d["evidence"].as_array().unwrap().len(),
        "{seen}"
    );
    let queue = rows
        .iter()
        .find(|r| r[0] == "server_queue_time_mean")
        .unwrap_or_else(|| panic!("no queue evidence: {seen}"));
    let e = d["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "server_queue_time_mean")
        .unwrap();
    assert_eq!(queue[2], e["unit"], "{seen}");
    assert_eq!(queue[3], e["kind"], "{seen}");
    assert_eq!(queue[4], "server_metrics", "{seen}");
    assert!(
        seen["thresholds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "queue_share_of_ttft"),
        "{seen}"
    );
    for (at, key) in [("start", "start_s"), ("end", "end_s")] {
        assert_eq!(
            seen[at].as_f64(),
            d["interval"][key].as_f64(),
            "{key}: {seen}"
        );
    }
}

/// One run a side: a slowdown hundreds of times over is seen by every test, but those tests
/// are over requests, which one run's share (batches, its moment on the server), so none is
/// called real: `unconfirmed: worse`, never `yes` (audit F10: two identical runs read `yes:
/// better (p 3.4e-6)`). A run against itself: nothing.
#[test]
fn compare_sees_a_slowdown_unconfirmed_with_one_run_a_side_and_none_between_a_run_and_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fast = demo(dir, "fast", "fast", "20", "100");
    // The illustrative profile's prefill and decode are hundreds of times slower.
    let slow = demo(dir, "slow", "illustrative", "20", "100");
    let (a, b) = (fast.to_str().unwrap(), slow.to_str().unwrap());

    let json: Value =
        serde_json::from_str(&ok(&canaryd(&["compare", a, b, "--json"], dir))).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let row = |m: &str| {
        rows.iter()
            .find(|r| r["metric"] == m)
            .unwrap_or_else(|| panic!("{m}"))
    };
    for m in ["TTFT p50", "TTFT p90", "ITL p50", "e2e p90"] {
        let v = &row(m)["verdict"];
        assert_eq!(v["kind"], "unconfirmed", "{m}: {}", row(m));
        assert_eq!(v["direction"], "regressed", "{m}: {}", row(m));
        assert_eq!(v["because"], serde_json::json!(["one_run"]), "{m}: {v}");
        assert!(v["trend"].is_null(), "{m}: {v}");
        assert!(v["p_value"].as_f64().unwrap() < 1e-3, "{m}: {v}");
        assert!(row(m)["change"].as_f64().unwrap() > 1.0, "{m}: {}", row(m));
    }
    // The distribution lines carry it too: one reference run.
    for s in json["shifts"].as_array().unwrap() {
        assert_eq!(s[1]["reference_runs"], 1, "{s}");
    }
    let shown = ok(&canaryd(&["compare", a, b], dir));
    assert!(!shown.contains("yes:"), "{shown}");
    assert!(shown.contains("unconfirmed: worse (p "), "{shown}");
    assert!(
        shown.contains("; one run a side: run-to-run variation not measured)"),
        "{shown}"
    );
    // … and the rule line why, with what to do.
    assert!(
        shown.contains(
            "with one run a side a difference they find is `unconfirmed`, not real (run-to-run \
             variation is not measured; --runs N on both sides judges on the runs' figures)"
        ),
        "{shown}"
    );
    assert!(
        shown.contains(
            "TTFT: unconfirmed: regressed (reference is 1 run: run-to-run variation not measured)"
        ),
        "{shown}"
    );
    // A p99 is judged on its own tail, which 100 requests a side cannot bound.
    for m in ["TTFT p99", "e2e p99"] {
        assert!(row(m)["change"].as_f64().unwrap() > 1.0, "{m}: {}", row(m));
        assert_eq!(row(m)["verdict"]["kind"], "not_judged", "{m}: {}", row(m));
        let why = row(m)["verdict"]["why"].as_str().unwrap();
        assert!(why.contains("too few requests"), "{m}: {why}");
    }
    assert_eq!(row("throughput")["verdict"]["kind"], "not_judged");
    assert_eq!(row("error rate")["verdict"]["trend"], "steady");
    // Two runs always differ in their ids: not a difference in context, and each side is
    // named by its id.
    assert!(
        !json["context_diff"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d[0] == "run_id"),
        "{}",
        json["context_diff"]
    );
    assert!(
        json["a"]["name"].as_str().unwrap().starts_with("run-"),
        "{}",
        json["a"]
    );

    // Each side's diagnosis, as its summary.json has it, and whether the class changed.
    let class = |run: &Path| {
        let s: Value =
            serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
        format!(
            "{} ({})",
            s["diagnosis"]["class"].as_str().unwrap(),
            s["diagnosis"]["confidence"].as_str().unwrap()
        )
    };
    let d = &json["diagnosis"];
    assert_eq!(d["a"], serde_json::json!([class(&fast)]), "{d}");
    assert_eq!(d["b"], serde_json::json!([class(&slow)]), "{d}");
    let strip = |c: String| c.split(' ').next().unwrap().to_string();
    assert_eq!(
        d["changed"],
        strip(class(&fast)) != strip(class(&slow)),
        "{d}"
    );

    // A run against itself: the same values, nothing real.
    let text = ok(&canaryd(&["compare", a, a], dir));
    assert!(
        text.contains(&format!(
            "diagnosis: A {c}; B {c}: the same class",
            c = class(&fast)
        )),
        "{text}"
    );
    assert!(!text.contains("yes:"), "{text}");
    // p50, p90 of TTFT, ITL and e2e, and the error rate; the p99s are 100 requests a side.
    assert_eq!(
        text.matches("no: not significant (p 1.0000)").count(),
        7,
        "{text}"
    );
    assert_eq!(
        text.matches("not judged: too few requests for a p99 test")
            .count(),
        3,
        "{text}"
    );
}

/// Two reference runs measure no run-to-run variation either: the MAD of their two medians
/// is half their one difference, whatever the runs' spread, so the daemon's baseline calls a
/// trend against 2 runs `insufficient (unconfirmed: …)`, and `compare` by the same rule
/// (`canary_core::compare::SPREAD_MIN_RUNS`, 3) calls a p50 moved against A's 2 runs
/// `unconfirmed`, saying the reference is 2 runs. Real runs: the 20-row Mooncake trace
/// replayed twice (`--runs 2`) against a `fast` sim for A, once against an `illustrative`
/// one (milliseconds of prefill and decode) for B, the same requests.
#[test]
fn compare_against_two_reference_runs_reads_a_clear_slowdown_unconfirmed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let replay = |url: &str, out: &str, extra: &[&str]| {
        let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
        let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", url];
        args.extend(["--model", "canary-sim", "--output-dir", out, "--no-nvml"]);
        args.extend(["--no-ebpf", "--speedup", "10", "--scale-lengths", "0.05"]);
        args.extend_from_slice(extra);
        ok(&canaryd(&args, dir));
    };
    let (_fast, fast) = common::sim(&[]);
    replay(&format!("http://127.0.0.1:{fast}"), "a", &["--runs", "2"]);
    let (_slow, slow) = common::sim_with_profile(dir, r#"{"profile": "illustrative"}"#, &[]);
    replay(&format!("http://127.0.0.1:{slow}"), "b", &[]);

    let json: Value =
        serde_json::from_str(&ok(&canaryd(&["compare", "a", "b", "--json"], dir))).unwrap();
    assert_eq!(
        (json["a"]["runs"].as_u64(), json["b"]["runs"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(
        json["different_requests"].is_null(),
        "{}",
        json["different_requests"]
    );
    let ttft = json["shifts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s[0] == "TTFT")
        .unwrap_or_else(|| panic!("{}", json["shifts"]));
    assert_eq!(ttft[1]["reference_runs"], 2, "{ttft}");
    // The rule saw a clear slowdown (its trend is the rule's alone)…
    assert_eq!(ttft[1]["trend"], "regressed", "{ttft}");
    assert!(ttft[1]["p_value"].as_f64().unwrap() < 1e-3, "{ttft}");
    assert!(ttft[1]["shift_ratio"].as_f64().unwrap() > 1.0, "{ttft}");
    // … which the p50 row does not call real: A's 2 runs measured no spread.
    let row = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "TTFT p50")
        .unwrap();
    let v = &row["verdict"];
    assert_eq!(v["kind"], "unconfirmed", "{row}");
    assert_eq!(v["direction"], "regressed", "{row}");
    assert_eq!(v["because"], serde_json::json!(["one_run"]), "{v}");
    assert_eq!(
        v["why"], "reference is 2 runs: run-to-run variation not measured",
        "{v}"
    );
    let shown = ok(&canaryd(&["compare", "a", "b"], dir));
    assert!(!shown.contains("yes:"), "{shown}");
    assert!(
        shown.contains(
            "TTFT: unconfirmed: regressed (reference is 2 runs: run-to-run variation not measured)"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("the MAD of A's 2 run medians, half their one difference"),
        "{shown}"
    );
}

#[test]
fn report_and_compare_say_which_folder_is_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("empty")).unwrap();
    let o = canaryd(&["report", "empty", "-o", "r.html"], dir);
    assert_eq!(o.status.code(), Some(1), "{}", common::text(&o));
    assert!(
        common::text(&o).contains("empty: no run here"),
        "{}",
        common::text(&o)
    );
    assert!(!dir.join("r.html").exists());
    // A record with a field of the wrong type: named by file, line and field.
    std::fs::create_dir(dir.join("bad")).unwrap();
    std::fs::write(
        dir.join("bad/records.jsonl"),
        "{\"sent_at_ms\":1,\"status\":\"ok\"}\n{\"e2e_ms\":[1]}\n",
    )
    .unwrap();
    let o = canaryd(&["compare", "bad", "bad"], dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        common::text(&o).contains("bad/records.jsonl:2: field \"e2e_ms\": invalid type"),
        "{}",
        common::text(&o)
    );
}

#[test]
fn the_browser_check_sees_requests_errors_and_undrawn_series() {
    let bin = match chromium() {
        Ok(bin) => bin,
        Err(why) => return canary_testkit::skip("chromium", &why),
    };
    let tmp = tempfile::tempdir().unwrap();
    // A page that fetches (from a closed loopback port), logs an error, and declares a series
    // it never draws: each is what the checks above must catch.
    let page = tmp.path().join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><img src=\"http://127.0.0.1:9/x.png\">\
         <figure class=\"chart\" id=\"c\" data-series=\"2\"><svg><g class=\"series\"></g></svg></figure>\
         <script>console.error('boom')</script></body></html>",
    )
    .unwrap();
    let mut b = Browser::launch(&bin).unwrap();
    let url = format!("file://{}", page.display());
    let load = b.open(&url, 800).unwrap();
    assert!(
        load.requests
            .iter()
            .any(|r| r.starts_with("http://127.0.0.1:9/")),
        "{:?}",
        load.requests
    );
    assert!(
        load.errors.iter().any(|e| e.contains("boom")),
        "{:?}",
        load.errors
    );
    let charts: Value =
        serde_json::from_str(b.eval(&load, CHARTS).unwrap().as_str().unwrap()).unwrap();
    assert_eq!(charts[0]["declared"], 2);
    assert_eq!(charts[0]["series"].as_array().unwrap().len(), 1);
    assert_eq!(charts[0]["series"][0]["marks"], 0);
}

// Audit finding 1: the report judged goodput again from records.jsonl without each request's
// token count, so a response whose tokens came in one read (ITL 0) met any ITL threshold on a
// 0 ms ITL and failed any per-user rate for want of a rate, where summary.json judges both
// on the bound e2e / (n − 1): the page said 59 % good where summary.json said 91 %. A real
// replay against the simulator, whose small answers often arrive in one read: the page's and
// compare's good fraction are summary.json's, and the page says how many terms were met only
// on a bound and which requests had no value.
#[test]
fn the_reports_and_compares_good_fraction_are_summary_jsons_on_one_read_responses() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    // The bundled trace (the one `canaryd demo` replays).
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mooncake_conversation_first300.jsonl");
    let mut one_read_seen = 0;
    for (name, slos) in [
        ("rate", "output_token_throughput_per_user:100"),
        ("itl", "inter_token_latency:0.5"),
    ] {
        let out = dir.join(name);
        ok(&canaryd(
            &[
                "replay",
                "--trace",
                trace.to_str().unwrap(),
                "--url",
                &format!("http://127.0.0.1:{port}"),
                "--model",
                "canary-sim",
                "--speedup",
                "20",
                "--scale-lengths",
                "0.05",
                "--max-requests",
                "100",
                "--goodput",
                slos,
                "-o",
                out.to_str().unwrap(),
            ],
            dir,
        ));
        let summary: Value =
            serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let g = &summary["goodput"];
        let fraction = g["good_request_fraction"].as_f64().unwrap();
        let records = std::fs::read_to_string(out.join("records.jsonl")).unwrap();
        one_read_seen += records
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["itl_ms"] == 0.0 && r["chunks"].as_u64() > Some(1))
            .count();

        let page = dir.join(format!("{name}.html"));
        ok(&canaryd(
            &[
                "report",
                out.to_str().unwrap(),
                "-o",
                page.to_str().unwrap(),
            ],
            dir,
        ));
        let html = std::fs::read_to_string(&page).unwrap();
        let tile = html
            .split("<div class=\"tile\"><b>")
            .find(|t| t.contains("<span>goodput against"))
            .unwrap_or_else(|| panic!("no goodput tile: {html}"));
        let shown = format!("({:.2} %)", fraction * 100.0);
        assert!(
            tile.contains(&shown),
            "{slos}: summary.json {fraction}: {tile}"
        );
        assert!(
            html.contains("Goodput as summary.json judged it"),
            "{slos}: {html}"
        );
        // The terms met only on a bound, and the no-value counts, as the CLI table has them.
        let on_bound: u64 = g["met_on_bound"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
        if on_bound > 0 {
            assert!(
                html.contains(&format!(
                    "<b>{on_bound}</b><span>SLO terms met only on a bound"
                )),
                "{slos}: {on_bound}: {html}"
            );
        }
        for v in g["no_value"].as_array().unwrap() {
            let n = v["requests"].as_u64().unwrap();
            assert!(html.contains(&format!("): {n}")), "{slos}: {v}: {html}");
        }

        // compare reads the same figures, and judges the same requests good.
        let json: Value = serde_json::from_str(&ok(&canaryd(
            &[
                "compare",
                out.to_str().unwrap(),
                out.to_str().unwrap(),
                "--json",
            ],
            dir,
        )))
        .unwrap();
        let row = json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == "good fraction")
            .unwrap_or_else(|| panic!("{json}"))
            .clone();
        assert_eq!(row["a"].as_f64(), Some(fraction), "{slos}: {row}");
        assert_eq!(row["b"].as_f64(), Some(fraction), "{slos}: {row}");
    }
    // What the test is for: the simulator's small answers came in one read here (the audit's
    // run had 32 of 100). Without any, the pages would agree on the old code too.
    assert!(one_read_seen > 0, "no one-read response in either run");
}

// `canaryd report a a` drew one run as two points of a series without a word (audit L3):
// a folder named twice, however spelled, is refused naming it, and no page is written.
#[test]
fn a_folder_named_twice_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    demo(dir, "run", "fast", "20", "20");
    for twice in [["run", "run"], ["run", "./run/"]] {
        let out = canaryd(&["report", twice[0], twice[1], "-o", "page.html"], dir);
        let said = common::text(&out);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(
            said.contains(&format!(
                "{}: named twice (folders 1 and 2 of those given)",
                twice[1]
            )),
            "{said}"
        );
        assert!(!dir.join("page.html").exists(), "{said}");
    }
    // Compared with itself, a run is still fine (compare's two sides are not a series).
    ok(&canaryd(&["compare", "run", "run"], dir));
}
