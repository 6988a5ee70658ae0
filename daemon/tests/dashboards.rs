//! Every PromQL query of every Grafana dashboard in `deploy/grafana/dashboards/`, run against
//! a real metrics store holding a real replay's export: VictoriaMetrics (it ingests OTLP at
//! `/opentelemetry/v1/metrics` and answers PromQL). A panel that shows nothing is a bug. The
//! panels of the daemon's own state read its real `/metrics`, scraped and written in as the
//! Collector's scrape would.
//!
//! Needs `CANARYD_VICTORIA_METRICS` (set by `scripts/setup/victoria-metrics.sh`); skips,
//! saying so, without it.

mod common;

use canary_testkit::skip;
use common::{fake_nvml, shared, spawn_reading_port, CANARYD};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET on loopback; returns (status line, body).
fn get(port: u16, path_and_query: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// `cmd` (a canaryd command) run to its end in `dir`, exporting its metrics to the
/// VictoriaMetrics on `vm_port` and nowhere else, logging warnings only.
fn to_vm(cmd: &mut Command, vm_port: u16, dir: &Path) -> Output {
    cmd.env(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        format!("http://127.0.0.1:{vm_port}/opentelemetry/v1/metrics"),
    )
    .env("RUST_LOG", "warn")
    .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
    .current_dir(dir)
    .output()
    .unwrap()
}

/// Unix time, whole seconds.
fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The series a PromQL range query returns from two minutes ago to a minute ahead (the
/// last export is a fraction of a second old: a range ending at the current whole second
/// can end before it).
fn query_range(port: u16, expr: &str) -> Vec<serde_json::Value> {
    let end = now_s() + 60;
    let (status, body) = get(
        port,
        &format!(
            "/api/v1/query_range?query={}&start={}&end={end}&step=1s",
            percent_encode(expr),
            end - 180
        ),
    );
    let v: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{status}: {e}: {body} for {expr}"));
    assert_eq!(v["status"], "success", "{expr}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The series a PromQL instant query returns now (what a Grafana stat panel with an
/// instant query shows).
fn query_instant(port: u16, expr: &str) -> Vec<serde_json::Value> {
    // At the next whole second: VictoriaMetrics takes an instant query's time to the whole
    // second, and the last export is a fraction of a second old, so "now" can miss it.
    query_at(port, expr, now_s() + 1)
}

/// The series a PromQL instant query returns at Unix second `at`.
fn query_at(port: u16, expr: &str, at: u64) -> Vec<serde_json::Value> {
    let (status, body) = get(
        port,
        &format!("/api/v1/query?query={}&time={at}", percent_encode(expr)),
    );
    let v: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{status}: {e}: {body} for {expr}"));
    assert_eq!(v["status"], "success", "{expr}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// A series' value at an instant query's time.
fn value(series: &serde_json::Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value: {series}"))
}

/// Each series' value beside its label `label`, sorted by the label.
fn by_label(series: &[serde_json::Value], label: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = series
        .iter()
        .map(|s| (s["metric"][label].as_str().unwrap().to_string(), value(s)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Writes samples in Prometheus' text format (`name{labels} value unix_ms` lines) into
/// VictoriaMetrics, searchable at once: the series of a second node, which one test host
/// cannot export (canaryd names its resource after the kernel's host name).
fn import(port: u16, lines: &str) {
    let (status, body) = common::http(port, "POST", "/api/v1/import/prometheus", lines);
    assert_eq!(status, 204, "{body}");
    let (status, _) = get(port, "/internal/force_flush");
    assert!(status.contains("200"), "{status}");
}

/// Writes what the daemon's `/metrics` said (`text`, as scraped) into VictoriaMetrics as the
/// Collector's scrape delivers it: each series with the `host_name` of the host and the
/// scrape's job, the samples at the time of writing.
fn import_scrape(port: u16, text: &str, host: &str) {
    let path = format!(
        "/api/v1/import/prometheus?extra_label={}&extra_label=job%3Dcanaryd",
        percent_encode(&format!("host_name={host}"))
    );
    let (status, body) = common::http(port, "POST", &path, text);
    assert_eq!(status, 204, "{body}");
    let (status, _) = get(port, "/internal/force_flush");
    assert!(status.contains("200"), "{status}");
}

/// The value of `series` (its name and labels, as written) in a `/metrics` text.
fn scraped_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{text}"))
}

/// The queries of the overview panel titled `title`.
fn overview_queries(all: &[(PathBuf, serde_json::Value)], title: &str) -> Vec<serde_json::Value> {
    panel_queries(all, "canaryd-overview.json", title)
}

/// The queries of the panel titled `title` in the dashboard file `dashboard`.
fn panel_queries(
    all: &[(PathBuf, serde_json::Value)],
    dashboard: &str,
    title: &str,
) -> Vec<serde_json::Value> {
    let (_, d) = all
        .iter()
        .find(|(p, _)| p.ends_with(dashboard))
        .unwrap_or_else(|| panic!("no dashboard {dashboard}"));
    let p = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title}"));
    p["targets"].as_array().unwrap().clone()
}

/// The one query of the overview panel titled `title`.
fn overview_query(all: &[(PathBuf, serde_json::Value)], title: &str) -> serde_json::Value {
    let targets = overview_queries(all, title);
    assert_eq!(targets.len(), 1, "{title}");
    targets[0].clone()
}

/// The metric names a PromQL expression selects (each written `name{...}`).
fn metrics(expr: &str) -> impl Iterator<Item = &str> {
    let mut pieces = expr.split('{');
    pieces.next_back();
    pieces.map(|before| {
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |i| i + 1);
        &before[start..]
    })
}

/// A run's bounds of its goodput or good share (`canary.run.goodput.bound`,
/// `canary.run.good_request.ratio.bound`), exported only where a judgement rested on a bound.
fn is_bound_series(metric: &str) -> bool {
    matches!(
        metric,
        "canary_run_goodput_bound_per_second" | "canary_run_good_request_bound_ratio"
    )
}

fn dashboards() -> Vec<(PathBuf, serde_json::Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/dashboards");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let v = serde_json::from_slice(&std::fs::read(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_replay() {
    let Some(vm_bin) = std::env::var_os("CANARYD_VICTORIA_METRICS").map(PathBuf::from) else {
        return skip("victoria-metrics", "CANARYD_VICTORIA_METRICS is not set (source scripts/setup/victoria-metrics.sh); dashboard queries were not checked against a metrics store");
    };
    if !vm_bin.exists() {
        return skip(
            "victoria-metrics",
            &format!(
                "CANARYD_VICTORIA_METRICS={} does not exist",
                vm_bin.display()
            ),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // On a port it binds itself, read from its log ("started server at http://ADDR/", an
    // info line): a port found free and let go can be taken by another test's process first.
    let (_vm, vm_port) = spawn_reading_port(
        Command::new(&vm_bin)
            .arg("-httpListenAddr=127.0.0.1:0")
            .arg(format!(
                "-storageDataPath={}",
                dir.path().join("vm").display()
            ))
            // The names the OTel Collector's Prometheus exporters produce, which the
            // dashboards query: gen_ai_client_operation_duration_seconds_bucket, *_total.
            .arg("-opentelemetry.usePrometheusNaming")
            // Answer with what was just written (default: hide the last 30 s).
            .arg("-search.latencyOffset=0s")
            // No result cache: a query a moment after the export sees all of it.
            .arg("-search.disableCache")
            .arg("-loggerLevel=INFO"),
        "started server at http://",
        "victoria-metrics",
    );

    // Faults so the error panels have errors, and requests cancelled on purpose, which the
    // error rate leaves out; the fake NVML library so the GPU panels have a GPU (none exists
    // on the test machines).
    let (_sim, sim_port) = common::sim(&[
        "--fault-rate",
        "0.3",
        "--fault",
        "status=503",
        "--seed",
        "7",
    ]);
    let nvml = fake_nvml(dir.path());
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let workload = "dashboard-test";
    // `profile --trace`: `replay` with the load-shape flags, cancellation among them.
    let out = to_vm(
        Command::new(CANARYD)
            .args(["profile", "--trace", trace.to_str().unwrap()])
            .args([
                "--url",
                &format!("http://127.0.0.1:{sim_port}"),
                "--model",
                "canary-sim",
            ])
            // The 20 rows span 3.1 s of trace time: several metric exports at 500 ms.
            .args([
                "--speedup",
                "1",
                "--output-dir",
                "out",
                "--workload",
                workload,
            ])
            // Generous SLOs: the goodput panel needs good requests however loaded the machine
            // is (50 ms once left none on a busy CI host, and the panel had no data). One per
            // latency panel, each of which draws its SLO.
            .args([
                "--goodput",
                "time_to_first_token:5000 inter_token_latency:5000 request_latency:60000 \
                 time_to_first_output_token:5000",
                "--otlp-metrics-interval",
                "500ms",
            ])
            .args([
                "--nvml-lib",
                nvml.to_str().unwrap(),
                "--gpu-interval",
                "20ms",
            ])
            .args(["--server-metrics-interval", "100ms"])
            // Timeslices for the slice panel: several over the 3.1 s of the trace.
            .args(["--slice-duration", "1s"])
            // Picked by a hash of the seed and the index: the same requests every time.
            .args(["--request-cancellation-rate", "20"]),
        vm_port,
        dir.path(),
    );
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    assert!(
        !log.contains("OTLP metrics export"),
        "exports failed: {log}"
    );
    let records = std::fs::read_to_string(dir.path().join("out/records.jsonl")).unwrap();
    assert!(
        records.contains("\"status\":\"error\""),
        "the faults produced no error"
    );
    let have_kernel = records.contains("\"kernel\":");
    // A capacity search of the same workload, for the capacity panel: two short probes
    // against a simulator without faults, addressed as `localhost` so that its runs stay
    // out of the replay's panels (they select server_address 127.0.0.1).
    let (_plain_sim, plain_port) = common::sim(&[]);
    let out = to_vm(
        Command::new(CANARYD)
            .args(["sweep", "--find-max-rate", "--max-runs", "2"])
            .args([
                "--url",
                &format!("http://localhost:{plain_port}"),
                "--model",
                "canary-sim",
                "--workload",
                workload,
            ])
            .args(["--request-rate", "10", "--benchmark-duration", "1s"])
            .args([
                "--slo",
                "request_latency:60000",
                "--min-good-fraction",
                "0.5",
            ])
            .args(["--isl", "32", "--osl", "8", "--output-dir", "capacity"])
            .args(["--no-nvml", "--no-ebpf"]),
        vm_port,
        dir.path(),
    );
    assert!(out.status.success(), "{}", common::text(&out));
    // A daemon's sweep workload of the same name, for the knee panel: closed loops of 8 and
    // 32 users against the capacity profile (8 slots, so the knee is at 8), one short run.
    let (_knee_sim, knee_port) =
        common::sim_with_profile(dir.path(), r#"{"profile": "capacity"}"#, &[]);
    // Beside it, for the skip panel, a workload whose runs (102 s of trace) outlast its
    // cadence, so its schedules are skipped, on a target of its own (its own turn).
    let skipper = "dashboard-skips";
    let cfg = dir.path().join("sweep.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [otlp]\nmetrics_endpoint = \"http://127.0.0.1:{vm_port}/opentelemetry/v1/metrics\"\n\
             metrics_interval = \"500ms\"\n\
             [targets.sim]\nurl = \"http://localhost:{knee_port}\"\nmodel = \"canary-sim\"\n\
             [targets.plain]\nurl = \"http://localhost:{plain_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.{workload}]\ntarget = \"sim\"\nkind = \"sweep\"\nevery = \"1h\"\n\
             sweep_concurrency = [8, 32]\nbenchmark_duration = \"1s\"\nisl = 32\nosl = 16\n\
             [workloads.{skipper}]\ntarget = \"plain\"\ntrace = \"bundled\"\nspeedup = 1\n\
             scale_lengths = 0.05\nevery = \"1s\"\ngrace_period = \"1s\"\n",
            dir.path().join("sweep-state").display()
        ),
    )
    .unwrap();
    let (mut daemon, status_port) = common::daemon_on_own_port(dir.path(), &cfg, "sweep.log", &[]);
    let knee_run = common::eventually(60, "the sweep workload's first run", || {
        common::api_runs(status_port)
            .into_iter()
            .find(|r| r["sweep"]["knee"]["label"] == "c8")
    });
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    // The panels fed by the daemon's own /metrics: its state scraped as the Collector's
    // prometheus/canaryd receiver does (each series labelled with the host's name), once a
    // schedule was skipped and a SIGHUP brought a config that does not validate.
    // Shown at 0 from the start: a skip is a count above it.
    let skip_line = format!("canaryd_skips_total{{workload=\"{skipper}\",reason=\"overrun\"}} ");
    common::eventually(60, "a skipped schedule", || {
        get(status_port, "/metrics")
            .1
            .lines()
            .any(|l| l.starts_with(&skip_line) && !l.ends_with(" 0"))
            .then_some(())
    });
    let good_cfg = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{good_cfg}no_such_key = 1\n")).unwrap();
    daemon.signal(1);
    common::eventually(30, "the reload to be rejected", || {
        get(status_port, "/metrics")
            .1
            .contains("canaryd_config_reloads_total{result=\"rejected\"} 1\n")
            .then_some(())
    });
    // Two scrapes a second apart, as a scrape interval gives a counter two samples.
    let mut scraped = String::new();
    for i in 0..2 {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let (status, text) = get(status_port, "/metrics");
        assert!(status.contains("200"), "{status}");
        import_scrape(vm_port, &text, &host);
        scraped = text;
    }
    // SIGTERM: the daemon flushes its export on the way out.
    daemon.signal(15);
    assert_eq!(
        daemon.wait_exit(std::time::Duration::from_secs(30)),
        Some(0)
    );
    let (status, _) = get(vm_port, "/internal/force_flush");
    assert!(status.contains("200"), "{status}");

    // `hosts`: the host variable's regex (several hosts selected: `a|b`).
    let fill_hosts = |q: &str, hosts: &str| {
        q.replace("$workload", workload)
            .replace("$target", "127.0.0.1")
            .replace("$host", hosts)
            .replace("$__rate_interval", "30s")
            // The dashboard's time range (an instant stat's window).
            .replace("$__range", "3m")
            // Grafana's step for the range (a subquery's resolution).
            .replace("$__interval", "1s")
    };
    let fill = |q: &str| fill_hosts(q, &host);
    let mut checked = 0;
    let mut empty = Vec::new();
    let mut unchecked = Vec::new();
    let mut on_bound = Vec::new();
    let all = dashboards();
    assert!(all.len() >= 2, "{all:?}");
    for (path, d) in &all {
        let name = path.file_name().unwrap().to_string_lossy();
        // Template variables: label_values(selector, label) must offer this run's value.
        for v in d["templating"]["list"].as_array().unwrap() {
            let q = v["query"]["query"].as_str().unwrap();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{name}: variable query {q}"));
            let (selector, label) = inner.rsplit_once(',').unwrap();
            let (_, body) = get(
                vm_port,
                &format!(
                    "/api/v1/label/{}/values?match[]={}",
                    label.trim(),
                    percent_encode(&fill(selector.trim()))
                ),
            );
            let want = match label.trim() {
                "canary_workload" => workload.to_string(),
                "server_address" => "127.0.0.1".to_string(),
                "host_name" => host.clone(),
                other => panic!("{name}: unexpected variable label {other}"),
            };
            assert!(
                body.contains(&format!("\"{want}\"")),
                "{name}: {q} -> {body}"
            );
        }
        for p in d["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap();
            let needs_ebpf = p["description"]
                .as_str()
                .is_some_and(|s| s.starts_with("Needs eBPF"));
            for t in p["targets"].as_array().unwrap() {
                let mut expr = fill(t["expr"].as_str().unwrap());
                if title == "Capacity at SLO" || title == "Sweep knee" {
                    expr = expr.replace("\"127.0.0.1\"", "\"localhost\"");
                }
                if needs_ebpf && !have_kernel {
                    unchecked.push(format!("{name} / {title}"));
                    continue;
                }
                // A run's goodput bounds exist only where a judgement rested on a bound:
                // checked below, after a run whose judgements all do.
                if metrics(&expr).any(is_bound_series) {
                    on_bound.push((title.to_string(), t.clone()));
                    continue;
                }
                checked += 1;
                if query_range(vm_port, &expr).is_empty() {
                    empty.push(format!("{name} / {title} / {}: {expr}", t["refId"]));
                }
            }
        }
    }
    assert!(checked >= 25, "only {checked} queries checked");

    // The diagnosis panels show the class and confidence this run was diagnosed with.
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    let class = summary["diagnosis"]["class"].as_str().unwrap();
    let confidence = summary["diagnosis"]["confidence"].as_str().unwrap();
    let last = overview_query(&all, "Last diagnosis");
    assert_eq!(last["instant"], true, "a stat of the current state");
    let series = query_instant(vm_port, &fill(last["expr"].as_str().unwrap()));
    assert_eq!(series.len(), 1, "one workload, one class: {series:?}");
    let m = &series[0]["metric"];
    assert_eq!(m["canary_workload"], workload, "{series:?}");
    assert_eq!(m["canary_run_bottleneck"], class, "{series:?}");
    assert_eq!(
        m["canary_run_bottleneck_confidence"], confidence,
        "{series:?}"
    );
    assert_eq!(series[0]["value"][1], "1", "{series:?}");
    let timeline = overview_query(&all, "Diagnosis per run");
    let series = query_range(vm_port, &fill(timeline["expr"].as_str().unwrap()));
    let classes: Vec<_> = series
        .iter()
        .map(|s| s["metric"]["canary_run_bottleneck"].clone())
        .collect();
    assert_eq!(classes, [class], "{series:?}");
    // The last verdict is a stat of the current state too: the replay's own, `pass` (it
    // exited 0; the 503s stay within its error budget).
    let verdict = overview_query(&all, "Last verdict");
    assert_eq!(verdict["instant"], true);
    let series = query_instant(vm_port, &fill(verdict["expr"].as_str().unwrap()));
    assert_eq!(series.len(), 1, "{series:?}");
    assert_eq!(series[0]["metric"]["canary_run_verdict"], "pass");

    // The end-to-end panel's histogram holds the completed requests, as the summary's
    // request_latency does (the run had errors, whose durations carry error.type).
    let e2e = &overview_queries(&all, "End-to-end latency")[0];
    let e2e = e2e["expr"].as_str().unwrap();
    let selector = e2e
        .split("gen_ai_client_operation_duration_seconds_bucket")
        .nth(1)
        .and_then(|r| r.split_inclusive('}').next())
        .unwrap_or_else(|| panic!("no duration selector in {e2e}"));
    let count = format!(
        "sum(last_over_time(gen_ai_client_operation_duration_seconds_count{selector}[10m]))"
    );
    let series = query_instant(vm_port, &fill(&count));
    assert_eq!(series.len(), 1, "{count}: {series:?}");
    assert_eq!(
        value(&series[0]),
        summary["completed"].as_f64().unwrap(),
        "{count}: {series:?}"
    );

    // Energy per output token: every GPU's energy over canaryd's completed requests' output
    // tokens (the description's upper bound per canaryd token). VictoriaMetrics keeps about
    // 12 significant digits of a float, hence the relative 1e-9.
    let energy = &panel_queries(&all, "canaryd-correlation.json", "Energy per output token")[0];
    let series = query_instant(vm_port, &fill(energy["expr"].as_str().unwrap()));
    assert_eq!(series.len(), 1, "{series:?}");
    let joules = summary["gpu"]["energy"]["joules"].as_f64().unwrap();
    let tokens = summary["total_output_tokens"].as_f64().unwrap();
    let want = joules / tokens;
    assert!(
        (value(&series[0]) - want).abs() <= want * 1e-9,
        "{series:?}: {joules} J over {tokens} output tokens"
    );
    // The server's TTFT beside the client's only for a run whose counts matched.
    let vs = &panel_queries(
        &all,
        "canaryd-correlation.json",
        "Client vs server TTFT per run",
    )[0];
    let series = query_range(vm_port, &fill(vs["expr"].as_str().unwrap()));
    let mut by: Vec<_> = series
        .iter()
        .map(|s| s["metric"]["canary_measured_by"].as_str().unwrap_or(""))
        .collect();
    by.sort();
    let server = &summary["server"];
    let matched = server["comparison"]["state"] == "matched" && !server["ttft_s"].is_null();
    let want: &[&str] = if matched {
        &["client", "server"]
    } else {
        &["client"]
    };
    assert_eq!(by, want, "comparison {}", server["comparison"]);

    // The slice panel has a line per slice of summary.json's timeslices that has a TTFT, at
    // that slice's start and with its p99.
    let slices = &overview_queries(&all, "TTFT per timeslice of the last run")[0];
    let slices = fill(slices["expr"].as_str().unwrap());
    let mut got: Vec<(f64, f64)> = query_instant(vm_port, &slices)
        .iter()
        .filter(|s| s["metric"]["canary_statistic"] == "p99")
        .map(|s| {
            let start = s["metric"]["canary_slice_start_s"].as_str().unwrap_or("");
            let start = start.parse().unwrap_or_else(|_| panic!("{s}"));
            (start, value(s))
        })
        .collect();
    got.sort_by(|a, b| a.0.total_cmp(&b.0));
    let want: Vec<(f64, f64)> = summary["timeslices"]["slices"]
        .as_array()
        .unwrap_or_else(|| panic!("no timeslices in summary.json"))
        .iter()
        .filter(|s| !s["time_to_first_token"].is_null())
        .map(|s| {
            let p99 = s["time_to_first_token"]["p99"].as_f64().unwrap() / 1e3;
            (s["start_s"].as_f64().unwrap(), p99)
        })
        .collect();
    assert!(
        !want.is_empty(),
        "no slice with a TTFT: the check below would test nothing"
    );
    assert_eq!(
        got.len(),
        want.len(),
        "{slices}: {got:?}, summary.json {want:?}"
    );
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g.0 - w.0).abs() < 1e-9 && (g.1 - w.1).abs() <= w.1 * 1e-9,
            "{slices}: {got:?}, summary.json {want:?}"
        );
    }

    // The error rate is summary.json's, the verdict's: the target's errors over the requests
    // it was sent and not cancelled. Over the whole run (each counter's last value: the run's
    // process counted from 0) the panel's selectors count what the summary counted, so the
    // quotient is the same.
    let (errors, cancelled) = (&summary["errors"], &summary["cancelled"]);
    assert!(
        errors.as_u64() > Some(0) && cancelled.as_u64() > Some(0),
        "errors {errors}, cancelled {cancelled}: the check below would test nothing"
    );
    let error_rate = overview_query(&all, "Error rate");
    let error_rate = error_rate["expr"].as_str().unwrap();
    let whole_run = error_rate
        .replace("rate(", "last_over_time(")
        .replace("$__rate_interval", "10m");
    let series = query_instant(vm_port, &fill(&whole_run));
    assert_eq!(series.len(), 1, "{whole_run}: {series:?}");
    assert_eq!(
        series[0]["metric"]["host_name"],
        host.as_str(),
        "{series:?}"
    );
    let want = summary["error_rate"].as_f64().unwrap();
    assert!(
        (value(&series[0]) - want).abs() < 1e-12,
        "{whole_run}: {series:?}, summary.json's error_rate {want}"
    );
    // canaryd's own failures (client_resources) are no error of the target's either. This
    // host cannot easily make some, so a second node's counters are written directly, 0, n
    // and 2n at three points 10 s apart: 6 ok, 2 http_status, 3 client_resources, 4
    // cancelled. The summary's definition gives 2 / (15 - 3 - 4) = 1/4; errors over all
    // would be 5/15, leaving out only the cancelled 5/11, only the client errors 2/12.
    let other = "other-node";
    let at = now_s() - 10;
    let mut lines = String::new();
    for (labels, n) in [
        (r#"canary_request_status="ok""#, 6),
        (
            r#"canary_request_status="error",error_type="http_status""#,
            2,
        ),
        (
            r#"canary_request_status="error",error_type="client_resources""#,
            3,
        ),
        (r#"canary_request_status="cancelled""#, 4),
    ] {
        for i in 0..3 {
            lines += &format!(
                "canary_requests_total{{canary_workload=\"{workload}\",server_address=\"127.0.0.1\",\
                 host_name=\"{other}\",{labels}}} {} {}\n",
                n * i,
                (at - 20 + 10 * i) * 1000
            );
        }
    }
    import(vm_port, &lines);
    let series = query_at(vm_port, &fill_hosts(error_rate, other), at);
    assert_eq!(series.len(), 1, "{series:?}");
    assert!(
        (value(&series[0]) - 0.25).abs() < 1e-12,
        "{error_rate}: {series:?}"
    );

    // Every node of the DaemonSet runs the same workload, only host.name differs: the
    // per-run panels show each host's own figures. The second node failed its last run,
    // with another class and confidence than this one's.
    let other_class = if class == "queueing" {
        "network"
    } else {
        "queueing"
    };
    let other_confidence = if confidence == "low" { "high" } else { "low" };
    let mut lines = String::new();
    for (metric, label, states) in [
        (
            "canary_run_verdict_state",
            "canary_run_verdict",
            &[("fail", 1), ("pass", 0)][..],
        ),
        (
            "canary_run_bottleneck_state",
            "canary_run_bottleneck",
            &[(other_class, 1), (class, 0)],
        ),
        (
            "canary_run_bottleneck_confidence_state",
            "canary_run_bottleneck_confidence",
            &[(other_confidence, 1), (confidence, 0)],
        ),
        ("canary_run_good_request_ratio", "", &[("", 1)]),
    ] {
        for &(state, v) in states {
            let state = match label {
                "" => String::new(),
                l => format!(",{l}=\"{state}\""),
            };
            lines += &format!(
                "{metric}{{canary_workload=\"{workload}\",server_address=\"127.0.0.1\",\
                 host_name=\"{other}\"{state}}} {v} {}\n",
                at * 1000
            );
        }
    }
    import(vm_port, &lines);
    let both = format!("{host}|{other}");
    let by_host = |series: &[serde_json::Value]| {
        let mut hosts: Vec<String> = series
            .iter()
            .map(|s| s["metric"]["host_name"].as_str().unwrap_or("").to_string())
            .collect();
        hosts.sort();
        hosts
    };
    let mut want_hosts = vec![host.clone(), other.to_string()];
    want_hosts.sort();
    let last = overview_query(&all, "Last diagnosis");
    let series = query_instant(vm_port, &fill_hosts(last["expr"].as_str().unwrap(), &both));
    assert_eq!(by_host(&series), want_hosts, "{series:?}");
    for s in &series {
        let m = &s["metric"];
        let want = if m["host_name"] == other {
            (other_class, other_confidence)
        } else {
            (class, confidence)
        };
        assert_eq!(
            (
                m["canary_run_bottleneck"].as_str(),
                m["canary_run_bottleneck_confidence"].as_str()
            ),
            (Some(want.0), Some(want.1)),
            "{series:?}"
        );
    }
    let series = query_instant(
        vm_port,
        &fill_hosts(verdict["expr"].as_str().unwrap(), &both),
    );
    assert_eq!(by_host(&series), want_hosts, "{series:?}");
    for s in &series {
        let want = if s["metric"]["host_name"] == other {
            "fail"
        } else {
            "pass"
        };
        assert_eq!(s["metric"]["canary_run_verdict"], want, "{series:?}");
    }
    // The judged share (the panel's first query; its second, the bounds, is checked below).
    let ratio = &overview_queries(&all, "Good-request ratio per run")[0];
    let series = query_range(vm_port, &fill_hosts(ratio["expr"].as_str().unwrap(), &both));
    assert_eq!(by_host(&series), want_hosts, "{series:?}");

    // The daemon's own panels show what its /metrics said. Every family they read is one it
    // renders.
    for (_, d) in &all {
        for p in d["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().unwrap() {
                for m in metrics(t["expr"].as_str().unwrap()) {
                    if m.starts_with("canaryd_") {
                        assert!(
                            scraped.contains(&format!("\n# TYPE {m} ")),
                            "{m} ({}) is not on /metrics:\n{scraped}",
                            p["title"]
                        );
                    }
                }
            }
        }
    }
    let one = |title: &str, expr: &str| -> f64 {
        let series = query_instant(vm_port, expr);
        assert_eq!(series.len(), 1, "{title}: {expr}: {series:?}");
        assert_eq!(
            series[0]["metric"]["host_name"],
            host.as_str(),
            "{series:?}"
        );
        value(&series[0])
    };
    // Time since the sweep workload's run finished, at the query's time.
    let since = overview_query(&all, "Time since last run");
    let at = now_s() + 1;
    let series = query_at(vm_port, &fill(since["expr"].as_str().unwrap()), at);
    assert_eq!(series.len(), 1, "{series:?}");
    assert_eq!(series[0]["metric"]["workload"], workload, "{series:?}");
    let finished_ms = knee_run["finished_unix_ms"].as_f64().unwrap();
    let want = at as f64 - finished_ms / 1e3;
    // VictoriaMetrics keeps about 12 significant digits: 10 ms of a Unix time in seconds.
    assert!(
        (value(&series[0]) - want).abs() < 0.05,
        "{series:?}: the run finished at {finished_ms} ms, queried at {at} s"
    );
    // Skips: the overlapping workload's, and 0 for the sweep workload, which skipped none.
    let skips = overview_query(&all, "Skipped runs (per hour)");
    let expr = fill(skips["expr"].as_str().unwrap()).replace(
        &format!("\"{workload}\""),
        &format!("\"{workload}|{skipper}\""),
    );
    let series = query_instant(vm_port, &expr);
    let got = by_label(&series, "workload");
    let skipped = scraped_value(
        &scraped,
        &format!("canaryd_skips_total{{workload=\"{skipper}\",reason=\"overrun\"}}"),
    );
    assert!(skipped >= 1.0, "{scraped}");
    assert_eq!(got.len(), 2, "{expr}: {series:?}");
    // The increase the store sees over the two scrapes: at least 1, at most the count
    // (VictoriaMetrics counts a new series' first value from 0 only when it is small next to
    // the step to the second).
    assert_eq!(got[0].0, skipper, "{expr}: {series:?}");
    assert!(
        got[0].1 >= 1.0 && got[0].1 <= skipped,
        "{expr}: {series:?}, /metrics said {skipped}"
    );
    assert_eq!(
        (got[1].0.as_str(), got[1].1),
        (workload, 0.0),
        "{expr}: {series:?}"
    );
    // Export on (the daemon had an endpoint), one reload rejected, no history write failed,
    // nothing dropped: what /metrics said.
    for (title, series) in [
        ("OTLP export", "canaryd_export_enabled"),
        (
            "Rejected config reloads since start",
            "canaryd_config_reloads_total{result=\"rejected\"}",
        ),
        (
            "History write errors (per hour)",
            "canaryd_history_write_errors_total",
        ),
    ] {
        let q = overview_query(&all, title);
        let want = scraped_value(&scraped, series);
        assert_eq!(
            one(title, &fill(q["expr"].as_str().unwrap())),
            want,
            "{title}"
        );
    }
    assert_eq!(scraped_value(&scraped, "canaryd_export_enabled"), 1.0);
    let drops = overview_query(&all, "Export drops counted by the daemon");
    let series = query_instant(vm_port, &fill(drops["expr"].as_str().unwrap()));
    let got = by_label(&series, "signal");
    let want: Vec<(String, f64)> = ["logs", "metrics", "spans"]
        .iter()
        .map(|s| {
            let v = scraped_value(
                &scraped,
                &format!("canaryd_export_drops_total{{signal=\"{s}\"}}"),
            );
            (s.to_string(), v)
        })
        .collect();
    assert_eq!(got, want, "{series:?}");

    // The workload's label set changes on this host (another target and model: another
    // server_port and gen_ai_request_model): a server without faults, where the new run
    // fails an SLO no request can meet. Both label sets' last samples are within the range;
    // the stats show the newest one's state alone, once per workload and host (two
    // confidences on the joined side would fail the whole query).
    // Each run of that label set fails its gate (exit 3) and is flushed into the store; its
    // summary.json is what the panels must show.
    let failing_run = |out: &str, extra: &[&str]| -> serde_json::Value {
        let o = to_vm(
            Command::new(CANARYD)
                .args(["profile", "--trace", trace.to_str().unwrap()])
                .args([
                    "--url",
                    &format!("http://127.0.0.1:{plain_port}"),
                    "--model",
                    "canary-sim-2",
                ])
                .args([
                    "--speedup",
                    "1",
                    "--output-dir",
                    out,
                    "--workload",
                    workload,
                ])
                .args([
                    "--goodput",
                    "time_to_first_token:0.001",
                    "--min-good-fraction",
                    "0.5",
                    "--otlp-metrics-interval",
                    "500ms",
                ])
                .args(extra),
            vm_port,
            dir.path(),
        );
        assert_eq!(
            o.status.code(),
            Some(3),
            "a failed gate: {}",
            common::text(&o)
        );
        // Its export reached the store: a lost one would leave the previous run's points.
        assert!(
            !common::text(&o).contains("OTLP metrics export"),
            "exports failed: {}",
            common::text(&o)
        );
        let (status, _) = get(vm_port, "/internal/force_flush");
        assert!(status.contains("200"), "{status}");
        common::json(&dir.path().join(out).join("summary.json"))
    };
    let summary2 = failing_run("out2", &["--no-nvml"]);
    let series = query_instant(vm_port, &fill(verdict["expr"].as_str().unwrap()));
    assert_eq!(series.len(), 1, "{series:?}");
    assert_eq!(
        series[0]["metric"]["canary_run_verdict"], "fail",
        "{series:?}"
    );
    let class2 = summary2["diagnosis"]["class"].as_str();
    assert_ne!(
        class2,
        Some(class),
        "the second run has the first's class: the join below would not see two"
    );
    let series = query_instant(vm_port, &fill(last["expr"].as_str().unwrap()));
    assert_eq!(series.len(), 1, "{series:?}");
    let m = &series[0]["metric"];
    assert_eq!(
        (
            m["canary_run_bottleneck"].as_str(),
            m["canary_run_bottleneck_confidence"].as_str()
        ),
        (
            summary2["diagnosis"]["class"].as_str(),
            summary2["diagnosis"]["confidence"].as_str()
        ),
        "{series:?}"
    );
    // What the queries resolve: both label sets are in the range, each with a state at 1.
    let sets = query_instant(
        vm_port,
        &fill(
            "count by (gen_ai_request_model) (last_over_time(canary_run_verdict_state{canary_workload=~\"$workload\", server_address=~\"$target\", host_name=~\"$host\"}[$__range]) == 1)",
        ),
    );
    assert_eq!(sets.len(), 2, "{sets:?}");

    // The goodput panels' bound bands: a run whose every judgement rests on a bound (receive
    // timestamps off, so each TTFT is canaryd's read, an upper bound, against an SLO no
    // request meets: each miss might be a meet), as the second run's label set.
    let summary3 = failing_run(
        "out3",
        &["--no-kernel-timestamps", "--no-nvml", "--no-ebpf"],
    );
    let g = &summary3["goodput"];
    let (low, high) = (
        g["good_requests_at_least"].as_f64().unwrap(),
        g["good_requests_at_most"].as_f64().unwrap(),
    );
    assert!(low < high, "no judgement rests on a bound: {g}");
    let judged = summary3["requests"].as_f64().unwrap()
        - summary3["client_errors"].as_f64().unwrap_or(0.0)
        - summary3["cancelled"].as_f64().unwrap_or(0.0);
    let duration = summary3["duration_s"].as_f64().unwrap();
    // Each goodput panel draws its bounds beside the judged figure, with this run's values.
    for (title, per) in [
        ("Goodput per run", duration),
        ("Good-request ratio per run", judged),
    ] {
        let targets = overview_queries(&all, title);
        assert!(
            targets
                .iter()
                .any(|t| !metrics(t["expr"].as_str().unwrap()).any(is_bound_series)),
            "{title}: no judged figure"
        );
        let bounds: Vec<_> = on_bound.iter().filter(|(t, _)| t == title).collect();
        assert_eq!(bounds.len(), 1, "{title}: no bound band");
        // This run's series alone: the first run's, of another model, may have bounds too,
        // and the panel's max over the range would take the higher.
        let expr = fill(bounds[0].1["expr"].as_str().unwrap()).replace(
            "canary_workload=~",
            "gen_ai_request_model=\"canary-sim-2\", canary_workload=~",
        );
        let want = [("at_least", low / per), ("at_most", high / per)];
        let read = || {
            let mut got: Vec<(String, f64)> = query_instant(vm_port, &expr)
                .iter()
                .map(|s| {
                    (
                        s["metric"]["canary_statistic"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                        value(s),
                    )
                })
                .collect();
            got.sort_by(|a, b| a.0.cmp(&b.0));
            got
        };
        let this_runs = |got: &[(String, f64)]| {
            got.len() == 2
                && got
                    .iter()
                    .zip(want)
                    .all(|((g, v), (w, x))| g == w && (v - x).abs() <= x.abs() * 1e-9)
        };
        // The second run of this label set (out2) may have bounds too: until out3's points
        // are searchable the series holds out2's (CI once read out2's at_most here). Read
        // again for a while; what is read last is checked below.
        let mut got = read();
        for _ in 0..30 {
            if this_runs(&got) {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
            let (status, _) = get(vm_port, "/internal/force_flush");
            assert!(status.contains("200"), "{status}");
            got = read();
        }
        assert_eq!(
            got.len(),
            2,
            "{title}: {expr}: {got:?}; the store has {:?}",
            query_instant(
                vm_port,
                "count by (__name__, gen_ai_request_model, canary_statistic) \
                 ({__name__=~\"canary_run_good.*\"})"
            )
        );
        for ((g, v), (w, x)) in got.iter().zip(want) {
            assert!(
                g == w && (v - x).abs() <= x.abs() * 1e-9,
                "{title}: {expr}: {got:?}, summary.json {want:?}"
            );
        }
    }
    for (title, t) in &on_bound {
        let expr = fill(t["expr"].as_str().unwrap());
        if query_range(vm_port, &expr).is_empty() {
            empty.push(format!("{title} / {}: {expr}", t["refId"]));
        }
    }

    assert!(
        empty.is_empty(),
        "panels with no data:\n{}",
        empty.join("\n")
    );
    // The rest was checked, but the test as a whole did not run here: it counts as a skip.
    if !unchecked.is_empty() {
        skip(
            "ebpf",
            &format!(
                "no eBPF timing on this host, so {} panel queries were not checked: {}",
                unchecked.len(),
                unchecked.join(", ")
            ),
        );
    }
}

#[test]
fn dashboards_offer_workload_target_and_host_and_every_query_uses_them() {
    let all = dashboards();
    // The families the daemon's /metrics renders (each name a literal there).
    let status_metrics = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/service/status/metrics.rs"),
    )
    .unwrap();
    assert!(all.len() >= 2);
    for (path, d) in &all {
        let name = path.file_name().unwrap().to_string_lossy();
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(vars, ["workload", "target", "host"], "{name}");
        let mut ids = std::collections::HashSet::new();
        for p in d["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap();
            assert!(
                ids.insert(p["id"].as_u64().unwrap()),
                "{name}: duplicate panel id"
            );
            assert!(
                p["description"].as_str().is_some_and(|s| !s.is_empty()),
                "{name} / {title}: no description"
            );
            let description = p["description"].as_str().unwrap_or("");
            for t in p["targets"].as_array().unwrap() {
                let expr = t["expr"].as_str().unwrap();
                // A percentile interpolated within a bucket is an estimate, and says so.
                assert!(
                    !expr.contains("histogram_quantile") || description.contains("estimate"),
                    "{name} / {title}: a histogram_quantile not called an estimate"
                );
                // Failed requests' durations (they carry error.type) are no latency.
                if expr.contains("gen_ai_client_operation_duration_seconds") {
                    assert!(
                        expr.contains(
                            r#"gen_ai_client_operation_duration_seconds_bucket{error_type="", "#
                        ),
                        "{name} / {title}: durations of failed requests in {expr}"
                    );
                }
                // The daemon's own /metrics (scraped, not OTLP) names its workload label
                // `workload`; a selector copied from the OTLP panels would match nothing.
                let daemon_own = metrics(expr).any(|m| m.starts_with("canaryd_"));
                if daemon_own {
                    assert!(
                        !expr.contains("canary_workload") && !expr.contains("$target"),
                        "{name} / {title}: OTLP labels on the daemon's /metrics series: {expr}"
                    );
                    for m in metrics(expr) {
                        assert!(
                            status_metrics.contains(&format!("\"{m}\"")),
                            "{name} / {title}: {m} is no family of the daemon's /metrics"
                        );
                    }
                }
                // The process-wide counters have no workload (nor target); everything else
                // has all three.
                let with_workload = metrics(expr).any(|m| {
                    [
                        "canaryd_last_run_",
                        "canaryd_skips_",
                        "canaryd_running",
                        "canaryd_runs_",
                        "canaryd_telemetry_",
                    ]
                    .iter()
                    .any(|p| m.starts_with(p))
                });
                let needed: &[&str] = if expr.contains("canary_exporter_dropped") {
                    &["$host"]
                } else if daemon_own && with_workload {
                    &["workload=~\"$workload\"", "$host"]
                } else if daemon_own {
                    &["$host"]
                } else {
                    &["$workload", "$target", "$host"]
                };
                for v in needed {
                    assert!(expr.contains(v), "{name} / {title}: {expr} ignores {v}");
                }
                // Each node of a DaemonSet runs the same workloads: a run's figures are
                // aggregated and joined by host too, and the legend names it, so one node's
                // figure neither hides another's nor pairs with it.
                // So is a node's own GPU and server, and the daemon's own state.
                let per_run = metrics(expr).any(|m| {
                    [
                        "canary_run_",
                        "canary_slice_",
                        "canary_capacity_",
                        "canary_sweep_",
                        "canary_gpu_",
                        "canary_server_",
                        "canaryd_",
                    ]
                    .iter()
                    .any(|p| m.starts_with(p))
                });
                if per_run {
                    for clause in expr.split("by (").skip(1).chain(expr.split("on (").skip(1)) {
                        let labels = clause.split(')').next().unwrap();
                        assert!(
                            labels.contains("host_name"),
                            "{name} / {title}: ({labels}) without host_name in {expr}"
                        );
                    }
                    let legend = t["legendFormat"].as_str().unwrap_or("");
                    assert!(
                        legend.contains("{{host_name}}"),
                        "{name} / {title}: legend {legend}"
                    );
                }
            }
        }
    }
}

/// Every trend state the daemon exports has its own colour on the trend panel: `insufficient`
/// had none and took the palette's next colour, as if it were news (it now also stands for a
/// move against fewer than 3 baseline runs, not confirmed).
#[test]
fn the_trend_panel_colours_every_trend_state() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/grafana/dashboards/canaryd-overview.json");
    let board: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let panel = board["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == "Baseline trend per run")
        .expect("the trend panel");
    let coloured: Vec<&str> = panel["fieldConfig"]["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["properties"][0]["id"] == "color")
        .filter_map(|o| o["matcher"]["options"].as_str())
        .collect();
    for trend in canary_core::compare::Trend::ALL {
        let series = format!(".*: {}", trend.as_str());
        assert!(
            coloured.contains(&series.as_str()),
            "{series} in {coloured:?}"
        );
    }
}

/// Every verdict a run can have is named in the verdict panels' descriptions and has its own
/// colour on the last-verdict panel: `interrupted` (a signal stopped the run), once written
/// `error: interrupted`, was in neither and took the palette's next colour.
#[test]
fn the_verdict_panels_name_and_colour_every_verdict() {
    use canaryd::judge::verdict::VerdictKind;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/grafana/dashboards/canaryd-overview.json");
    let board: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let panel = |title: &str| {
        board["panels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["title"] == title)
            .unwrap_or_else(|| panic!("the panel {title:?}"))
            .clone()
    };
    let last = panel("Last verdict");
    let per_hour = panel("Run verdicts (runs per hour)");
    // The verdicts each colour override matches: `.*: kind` or `.*: (kind|kind…)`, the forms
    // the panel uses (another form is a matcher this test cannot read, and fails it).
    let coloured: Vec<String> = last["fieldConfig"]["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["properties"][0]["id"] == "color")
        .filter_map(|o| o["matcher"]["options"].as_str())
        .flat_map(|m| {
            let kinds = m
                .strip_prefix(".*: ")
                .unwrap_or_else(|| panic!("a matcher this test does not read: {m}"));
            let kinds = kinds
                .strip_prefix('(')
                .and_then(|k| k.strip_suffix(')'))
                .unwrap_or(kinds);
            kinds.split('|').map(str::to_owned).collect::<Vec<_>>()
        })
        .collect();
    for kind in VerdictKind::ALL.map(VerdictKind::as_str) {
        assert!(
            coloured.iter().any(|c| c == kind),
            "{kind} has no colour: {coloured:?}"
        );
        for p in [&last, &per_hour] {
            let description = p["description"].as_str().unwrap();
            assert!(
                description.contains(kind),
                "{}: {kind} not named in {description}",
                p["title"]
            );
        }
    }
}
