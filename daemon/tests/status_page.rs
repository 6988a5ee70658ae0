//! The daemon's status page (`GET /`) and its on-demand run reports (`GET /runs/{id}/report`),
//! served by `canaryd run` against `canaryd sim`, loaded in headless Chromium like a reader's
//! browser: no console error, no request but the page's own, every chart drawn with data.

mod common;

use canary_testkit::browser::{chromium, Browser};
use common::page::{chart, check};
use common::{api_runs as runs, eventually, http};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;

/// The response head of `GET path` (status line and headers), lower-cased.
fn head(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").unwrap().0.to_lowercase()
}

#[test]
fn the_status_page_lists_runs_per_workload_and_serves_each_report_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    // Two workloads: one that passes, one whose SLO no request can meet (a fail verdict).
    let workload = |name: &str, extra: &str| {
        format!(
            "[workloads.{name}]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 30\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"2s\"\n{extra}\n"
        )
    };
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n{}{}",
            dir.path().join("state").display(),
            workload("chat", ""),
            workload(
                "strict",
                "slos = \"request_latency:0.001\"\nmin_good_fraction = 0.99"
            ),
        ),
    )
    .unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let listed = eventually(120, "two runs of each workload", || {
        let all = runs(status);
        let n = |w: &str| all.iter().filter(|r| r["workload"] == w).count();
        (n("chat") >= 2 && n("strict") >= 2).then_some(all)
    });
    assert!(listed
        .iter()
        .filter(|r| r["workload"] == "strict")
        .all(|r| r["verdict_kind"] == "fail"));

    // The page and a report, over plain HTTP: HTML with the offline policy as a header too.
    let (code, page) = http(status, "GET", "/", "");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<h1>canaryd status</h1>") && !page.contains("<script"));
    let h = head(status, "/");
    assert!(h.contains("content-type: text/html; charset=utf-8"), "{h}");
    assert!(
        h.contains("content-security-policy: default-src 'none'"),
        "{h}"
    );
    let id = listed[0]["id"].as_str().unwrap();
    let (code, report) = http(status, "GET", &format!("/runs/{id}/report"), "");
    assert_eq!(code, 200, "{report}");
    assert!(report.contains("canaryd report") && report.contains("id=\"ttft-cdf\""));
    let (code, body) = http(status, "GET", "/runs/no-such-run/report", "");
    assert_eq!(code, 404);
    assert!(body.contains("no run \"no-such-run\""), "{body}");
    assert_eq!(http(status, "POST", "/", "").0, 405, "read-only");

    let bin = match chromium() {
        Ok(bin) => bin,
        Err(why) => return canary_testkit::skip("chromium", &why),
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::launch(&bin).unwrap();
    let url = format!("http://127.0.0.1:{status}/");
    let charts = check(&mut b, &url, &shots.join("status.png"));
    // One trend chart per workload, each with a point per listed run (at least two).
    for id in ["trend-0", "trend-1"] {
        let series = chart(&charts, id);
        let p99 = series
            .iter()
            .find(|s| s.0 == "TTFT p99")
            .unwrap_or_else(|| panic!("{id}: {series:?}"));
        assert!(
            p99.1 >= 4,
            "{id}: two runs, a vertex and a dot each: {series:?}"
        );
    }
    // Every `strict` run failed, and is marked so on its chart.
    assert!(chart(&charts, "trend-1")
        .iter()
        .any(|s| s.0 == "not a pass"));

    // What the reader sees, counted in the DOM: a line per workload in the overview, a row and
    // a report link per run listed, the failing verdict.
    let load = b.open(&url, 1240).unwrap();
    let seen: Value = serde_json::from_str(
        b.eval(
            &load,
            r#"JSON.stringify({
              overview: [...document.querySelectorAll('table.overview tbody tr')].map(r => r.cells[0].textContent),
              rows: document.querySelectorAll('table.runs tbody tr').length,
              reports: [...document.querySelectorAll('a.report')].map(a => a.href),
              fails: document.querySelectorAll('span.verdict.fail').length,
              diagnoses: [...document.querySelectorAll('table.runs tbody tr')].map(r => {
                const d = r.querySelector('.bottleneck');
                return [r.querySelector('a.report').href, d && d.textContent, d && d.title];
              }),
              overview_why: [...document.querySelectorAll('table.overview small.why')].length,
              sections: [...document.querySelectorAll('section h2')].map(h => h.textContent)
            })"#,
        )
        .unwrap()
        .as_str()
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        seen["overview"],
        serde_json::json!(["chat", "strict"]),
        "{seen}"
    );
    let rows = seen["rows"].as_u64().unwrap();
    assert!(rows >= 4, "{seen}");
    let reports = seen["reports"].as_array().unwrap();
    assert_eq!(reports.len() as u64, rows, "{seen}");
    assert!(seen["fails"].as_u64().unwrap() >= 2, "{seen}");
    // Each run's diagnosis class, with its why on hover, as the API has it for that run; the
    // overview prints the why of each workload's last run.
    for row in seen["diagnoses"].as_array().unwrap() {
        let href = row[0].as_str().unwrap();
        let id = href
            .rsplit_once("/runs/")
            .and_then(|(_, r)| r.strip_suffix("/report"))
            .unwrap();
        let (code, body) = http(status, "GET", &format!("/api/runs/{id}"), "");
        assert_eq!(code, 200, "{body}");
        let api: Value = serde_json::from_str(&body).unwrap();
        let d = &api["diagnosis"];
        assert!(d["class"].is_string(), "run {id} has no diagnosis: {api}");
        assert_eq!(row[1], d["class"], "{id}: {seen}");
        assert_eq!(row[2], d["why"], "{id}: {seen}");
    }
    assert_eq!(seen["overview_why"], 2, "{seen}");
    assert!(
        seen["sections"][0].as_str().unwrap().starts_with("chat"),
        "{seen}"
    );

    // A run's report, followed from the page's own link: a full report, offline.
    let link = reports[0].as_str().unwrap();
    assert!(link.starts_with(&format!("{url}runs/")), "{link}");
    let charts = check(&mut b, link, &shots.join("status-run-report.png"));
    chart(&charts, "ttft-cdf");
    assert!(chart(&charts, "ttft-time")[0].1 > 0);
    eprintln!("screenshots: {}", shots.display());
}

/// Clients that connect and say nothing cannot take the daemon's descriptors nor lock a
/// probe out: with more silent connections open than the endpoint serves (256, 64 from one
/// address), `/healthz` still answers 200, each new connection closing the oldest silent one
/// (said in the log); the silent ones left are closed 10 s after they were accepted, and the
/// endpoint answers as before.
#[test]
fn silent_clients_are_capped_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.chat]\ntarget = \"sim\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
             max_requests = 5\nspeedup = 20\nscale_lengths = 0.05\n",
            dir.path().join("state").display(),
        ),
    )
    .unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    let mut silent: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", status)).unwrap())
        .collect();
    for s in &silent {
        s.set_nonblocking(true).unwrap();
    }
    // A probe, while they are open: served.
    for _ in 0..3 {
        let (code, body) = http(status, "GET", "/healthz", "");
        assert_eq!(code, 200, "{body}");
    }
    // Every one is closed by the daemon in the end: most at once for newer ones, the rest
    // when their time to send a request runs out.
    eventually(120, "every silent connection closed by the daemon", || {
        silent.retain_mut(|s| {
            matches!(s.read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        silent.is_empty().then_some(())
    });
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains(
            "64 from 127.0.0.1 connections open: closed the oldest that had sent no request"
        ),
        "{log}"
    );
    let (code, body) = http(status, "GET", "/healthz", "");
    assert_eq!(code, 200, "{body}");
}
