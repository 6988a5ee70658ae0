//! `canaryd report` and `canaryd compare` on real runs (the bundled trace replayed against the
//! simulator by `canaryd demo`), and their pages loaded in headless Chromium: no console
//! error, no network request, every chart drawn with data.

mod common;

use canary_testkit::browser::{chromium, Browser};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn canaryd(args: &[&str], cwd: &Path) -> Output {
    Command::new(common::CANARYD)
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .output()
        .expect("canaryd runs")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", common::text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

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

/// What each chart of a page drew, counted in the browser's DOM: per `figure.chart`, its id,
/// the series it declares, and per `g.series` the marks drawn (points of polylines, circles,
/// rectangles, polygons, lines).
const CHARTS: &str = r#"JSON.stringify([...document.querySelectorAll('figure.chart')].map(f => ({
  id: f.id,
  declared: Number(f.dataset.series),
  width: f.querySelector('svg').getBoundingClientRect().width,
  series: [...f.querySelectorAll('svg g.series')].map(g => ({
    name: g.dataset.name,
    marks: g.querySelectorAll('circle,rect,polygon,line').length
      + [...g.querySelectorAll('polyline')].reduce((n, p) => n + p.points.numberOfItems, 0)
  }))
})))"#;

/// Loads `page` in Chromium and checks it as a reader's browser would; returns the charts
/// by id with their series' mark counts, and saves a screenshot as `shot`.
fn check_page(b: &mut Browser, page: &Path, shot: &Path) -> Vec<(String, Vec<(String, u64)>)> {
    let url = format!("file://{}", page.display());
    let load = b.open(&url, 1240).unwrap();
    assert!(
        load.errors.is_empty(),
        "{}: {:?}",
        page.display(),
        load.errors
    );
    assert_eq!(
        load.requests,
        vec![url.clone()],
        "only the page itself is loaded"
    );
    let resources = b
        .eval(&load, "performance.getEntriesByType('resource').length")
        .unwrap();
    assert_eq!(resources, 0, "{}: resources fetched", page.display());
    let charts: Value =
        serde_json::from_str(b.eval(&load, CHARTS).unwrap().as_str().unwrap()).unwrap();
    let mut out = Vec::new();
    for c in charts.as_array().unwrap() {
        let id = c["id"].as_str().unwrap().to_string();
        let series = c["series"].as_array().unwrap();
        assert!(c["declared"].as_u64().unwrap() >= 1, "{id}: no series");
        assert_eq!(
            series.len() as u64,
            c["declared"].as_u64().unwrap(),
            "{id}: {c}"
        );
        assert!(
            c["width"].as_f64().unwrap() > 300.0,
            "{id} is not laid out: {c}"
        );
        let counted: Vec<(String, u64)> = series
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    s["marks"].as_u64().unwrap(),
                )
            })
            .collect();
        for (name, marks) in &counted {
            assert!(*marks > 0, "{id}: series {name} drew nothing");
        }
        out.push((id, counted));
    }
    b.screenshot(&load, shot, 12_000).unwrap();
    assert!(
        std::fs::metadata(shot).unwrap().len() > 10_000,
        "{}",
        shot.display()
    );
    out
}

fn chart<'a>(charts: &'a [(String, Vec<(String, u64)>)], id: &str) -> &'a [(String, u64)] {
    let ids: Vec<&String> = charts.iter().map(|c| &c.0).collect();
    &charts
        .iter()
        .find(|c| c.0 == id)
        .unwrap_or_else(|| panic!("no chart {id} among {ids:?}"))
        .1
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
    // Every one of the 150 requests is a dot on the TTFT timeline (none failed).
    assert_eq!(chart(&charts, "ttft-time"), [("TTFT".to_string(), 150)]);
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

#[test]
fn compare_finds_a_real_slowdown_and_none_between_a_run_and_itself() {
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
    for m in ["TTFT p50", "TTFT p99", "ITL p50", "e2e p99"] {
        assert_eq!(row(m)["verdict"]["trend"], "regressed", "{m}: {}", row(m));
        assert!(row(m)["change"].as_f64().unwrap() > 1.0, "{m}: {}", row(m));
    }
    assert_eq!(row("throughput")["verdict"]["kind"], "not_judged");
    assert_eq!(row("error rate")["verdict"]["trend"], "steady");
    assert!(
        json["context_diff"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d[0] == "run_id"),
        "{}",
        json["context_diff"]
    );

    // A run against itself: the same values, nothing real.
    let text = ok(&canaryd(&["compare", a, a], dir));
    assert!(!text.contains("yes:"), "{text}");
    assert_eq!(
        text.matches("no: not significant (p 1.0000)").count(),
        10,
        "{text}"
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
