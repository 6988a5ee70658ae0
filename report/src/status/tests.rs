use super::*;

fn line(id: &str, minutes_ago: i64, kind: &str, ttft_p99: Option<f64>) -> RunLine {
    RunLine {
        id: id.into(),
        target: "sim".into(),
        started_unix_ms: 10_000_000 - minutes_ago * 60_000,
        verdict_kind: kind.into(),
        reasons: if kind == "pass" {
            vec![]
        } else {
            vec!["TTFT <p99> over 5 ms".into()]
        },
        trend: Some("steady".into()),
        requests: Some(40),
        errors: Some(0),
        ttft_ms: (Some(1.0), ttft_p99),
        e2e_ms: (Some(3.0), Some(9.0)),
        diagnosis: (kind != "error").then(|| RunDiagnosis {
            class: "queueing".into(),
            confidence: "high".into(),
            why: "server queue <400 ms>".into(),
        }),
        report_href: format!("runs/{id}/report"),
        json_href: format!("api/runs/{id}"),
        ..Default::default()
    }
}

#[test]
fn a_page_lists_runs_charts_them_and_escapes_what_it_shows() {
    let p = StatusPage {
        now_unix_ms: 10_000_000,
        version: "0.1.0".into(),
        unhealthy: Vec::new(),
        workloads: vec![
            WorkloadRuns {
                name: "chat<b>".into(),
                running: true,
                runs: vec![
                    line("r3", 1, "fail", Some(20.0)),
                    line("r2", 2, "pass", Some(4.0)),
                    line("r1", 3, "error", None),
                ],
            },
            WorkloadRuns {
                name: "quiet".into(),
                running: false,
                runs: vec![],
            },
        ],
    };
    let html = render(&p).unwrap();
    assert!(html.contains("default-src 'none'") && !html.contains("<script"));
    assert!(html.contains("chat&lt;b&gt; (running now)"), "{html}");
    assert!(html.contains("Running now: chat&lt;b&gt;."));
    assert!(html.contains("TTFT &lt;p99&gt; over 5 ms"));
    assert!(html.contains("href=\"runs/r2/report\"") && html.contains("href=\"api/runs/r1\""));
    assert!(html.contains("id=\"trend-0\" data-series=\"4\""), "{html}");
    // The quiet workload has no chart, and says why.
    assert!(!html.contains("id=\"trend-1\""));
    assert!(html.contains("nothing to chart"));
    assert!(html.contains("3 run(s); each point"));
    // r1 errored without a TTFT p99: its cross's height is said not to be its own.
    assert!(
        html.contains("and 1 without one (no request completed) at the lowest TTFT p99 drawn"),
        "{html}"
    );
    // The diagnosis: class and confidence in each run's row, why on hover and under the
    // overview's; a run without one shows a dash.
    assert_eq!(
        html.matches("<span class=\"bottleneck queueing\" title=\"server queue &lt;400 ms&gt;\">queueing</span> <span class=\"confidence\">high</span>").count(),
        3,
        "{html}"
    );
    assert!(html.contains("<small class=\"why\">server queue &lt;400 ms&gt;</small>"));
}

#[test]
fn a_changed_context_shows_beside_the_trend() {
    let mut changed = line("r2", 1, "pass", Some(4.0));
    changed.context_changes = vec!["server.version 0.9 → <0.10>".into()];
    let p = StatusPage {
        now_unix_ms: 10_000_000,
        version: "0.1.0".into(),
        unhealthy: Vec::new(),
        workloads: vec![WorkloadRuns {
            name: "chat".into(),
            running: false,
            runs: vec![changed, line("r1", 2, "pass", Some(4.0))],
        }],
    };
    let html = render(&p).unwrap();
    let cell = "<span class=\"steady\">steady</span><br><small class=\"changed\">changed: \
                server.version 0.9 → &lt;0.10&gt;</small>";
    // In the overview (the last run) and in the run's row; the other run has none.
    assert_eq!(html.matches(cell).count(), 2, "{html}");
    assert_eq!(html.matches("class=\"changed\"").count(), 2, "{html}");
}

#[test]
fn an_empty_daemon_says_so() {
    let html = render(&StatusPage::default()).unwrap();
    assert!(html.contains("No run yet"), "{html}");
    assert!(!html.contains("<table"));
}

fn capacity_run(
    id: &str,
    minutes_ago: i64,
    kind: &str,
    bracket: (Option<f64>, Option<f64>),
    baseline: Option<(f64, f64)>,
) -> RunLine {
    RunLine {
        capacity: Some(RunCapacity {
            max_passing_rate: bracket.0,
            min_failing_rate: bracket.1,
            baseline,
            ..RunCapacity::default()
        }),
        ..line(id, minutes_ago, kind, Some(4.0))
    }
}

fn series<'a>(html: &'a str, chart: &str, name: &str) -> Option<&'a str> {
    let chart = html.split(&format!("id=\"{chart}\"")).nth(1)?;
    let chart = chart.split("</figure>").next()?;
    let group = chart.split(&format!("data-name=\"{name}\"")).nth(1)?;
    group.split("</g>").next()
}

#[test]
fn a_capacity_workload_charts_its_brackets_and_baseline_and_tabulates_them() {
    let p = StatusPage {
        now_unix_ms: 10_000_000,
        version: "0.1.0".into(),
        unhealthy: Vec::new(),
        workloads: vec![WorkloadRuns {
            name: "capacity".into(),
            running: false,
            runs: vec![
                capacity_run(
                    "r4",
                    1,
                    "fail",
                    (Some(31.25), Some(37.5)),
                    Some((100.0, 25.0)),
                ),
                capacity_run(
                    "r3",
                    2,
                    "pass",
                    (Some(106.6), Some(109.375)),
                    Some((100.0, 25.0)),
                ),
                capacity_run("r2", 3, "pass", (Some(100.0), Some(125.0)), None),
                capacity_run("r1", 4, "pass", (Some(200.0), None), None),
            ],
        }],
    };
    let html = render(&p).unwrap();
    assert!(html.contains("id=\"capacity-0\""), "{html}");
    // Three closed brackets, one open one (a dot at its passing end), the baseline of the two
    // runs that met one, and the failed run crossed.
    let marks = |name: &str| {
        series(&html, "capacity-0", name)
            .unwrap_or_else(|| panic!("no {name} in {html}"))
            .split('>')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        marks("capacity bracket (passing to failing rate)"),
        " data-marks=\"3\""
    );
    assert_eq!(marks("at least (no rate failed)"), " data-marks=\"1\"");
    assert_eq!(marks("baseline capacity ± spread"), " data-marks=\"2\"");
    assert_eq!(marks("baseline capacity"), " data-marks=\"2\"");
    assert_eq!(marks("not a pass"), " data-marks=\"1\"");
    assert!(series(&html, "capacity-0", "below (no rate passed)").is_none());
    assert!(series(&html, "capacity-0", "knee").is_none());
    // Each bracket is a bar and two caps.
    let bars = series(
        &html,
        "capacity-0",
        "capacity bracket (passing to failing rate)",
    )
    .unwrap();
    assert_eq!(bars.matches("<polyline").count(), 9, "{bars}");
    assert!(html.contains("each bar is that pair of bounds, not a measured point"));
    // The latency chart stays, saying what its points are.
    assert!(
        html.contains("<b>Latency at each run's capacity probe</b>"),
        "{html}"
    );
    assert!(html.contains("the highest rate that passed"));
    // The table: the bracket rounded outward, exact on hover, the baseline under it.
    assert!(html.contains("<th>capacity at SLO, req/s</th>"), "{html}");
    assert!(!html.contains("<th>knee, req/s</th>"));
    assert!(
        html.contains(
            "<span class=\"bracket\" title=\"at least 31.25, below 37.5 req/s\">31.25 to 37.5</span>\
             <br><small class=\"baseline\">baseline 100 ± 25</small>"
        ),
        "{html}"
    );
    assert!(html.contains("title=\"at least 106.6, below 109.375 req/s\">106 to 110</span>"));
    assert!(html.contains("title=\"at least 200 req/s\">≥ 200 (no rate failed)</span>"));
}

#[test]
fn a_sweep_workload_charts_its_knees() {
    // Without a knee, the sweep's own reason (the daemon's `SweepRun::knee_said`).
    let knee = |id: &str, ago: i64, kind: &str, k: Option<f64>| RunLine {
        sweep: Some(RunKnee {
            knee: k.map(|v| ("c8".to_string(), v)),
            no_knee: k.is_none().then(|| {
                "no knee: 1 of the 2 points is evidence, and a knee is a step between two; \
                 left out: c8 (20.0% of its requests failed at the target) <&>"
                    .to_string()
            }),
            baseline: Some((103.0, 0.0)),
        }),
        ..line(id, ago, kind, Some(4.0))
    };
    let p = StatusPage {
        now_unix_ms: 10_000_000,
        version: "0.1.0".into(),
        unhealthy: Vec::new(),
        workloads: vec![WorkloadRuns {
            name: "sweep".into(),
            running: false,
            runs: vec![
                knee("r3", 1, "fail", Some(28.99)),
                knee("r2", 2, "pass", None),
                knee("r1", 3, "pass", Some(102.7)),
            ],
        }],
    };
    let html = render(&p).unwrap();
    let marks = |name: &str| {
        series(&html, "capacity-0", name).map(|g| g.split('>').next().unwrap().to_string())
    };
    assert_eq!(
        marks("knee").as_deref(),
        Some(" data-marks=\"2\""),
        "{html}"
    );
    assert_eq!(marks("baseline knee").as_deref(), Some(" data-marks=\"3\""));
    assert_eq!(marks("not a pass").as_deref(), Some(" data-marks=\"1\""));
    assert!(marks("capacity bracket (passing to failing rate)").is_none());
    assert!(html.contains("<th>knee, req/s</th>") && !html.contains("<th>capacity at SLO"));
    assert!(html.contains("<span title=\"28.99 req/s\">28.99 at c8</span><br><small class=\"baseline\">baseline 103 ± 0</small>"), "{html}");
    // A knee left out of the series is no series that did not saturate.
    assert!(
        html.contains(
            "<span class=\"no-knee\">no knee: 1 of the 2 points is evidence, and a knee is a \
             step between two; left out: c8 (20.0% of its requests failed at the target) \
             &lt;&amp;&gt;</span>"
        ),
        "{html}"
    );
    assert!(!html.contains("did not saturate"), "{html}");
    assert!(html.contains("Latency at each run"));
}

// A run whose times were bounds (no kernel stamps, or a later segment's) showed its TTFT,
// ITL and e2e like exact ones; its cells are marked and the lead says what `*` means.
#[test]
fn latencies_that_are_bounds_are_marked() {
    let mut bound = line("r2", 1, "pass", Some(20.0));
    bound.bounds = vec!["time_to_first_token".into(), "request_latency".into()];
    let exact = line("r1", 2, "pass", Some(30.0));
    let p = StatusPage {
        now_unix_ms: 10_000_000,
        version: "0.1.0".into(),
        unhealthy: Vec::new(),
        workloads: vec![WorkloadRuns {
            name: "chat".into(),
            running: false,
            runs: vec![bound, exact],
        }],
    };
    let html = render(&p).unwrap();
    assert!(html.contains("A latency marked * is not exact"), "{html}");
    let (r2, r1) = (
        html.split("runs/r2/report").next().unwrap(),
        html.split("runs/r1/report").next().unwrap(),
    );
    let r2_row = r2.rsplit("<tr>").next().unwrap();
    assert!(
        r2_row.contains(&format!("{}*", crate::sections::ms(20.0))),
        "{r2_row}"
    );
    assert!(
        r2_row.contains(&format!("{}*", crate::sections::ms(9.0))),
        "{r2_row}"
    );
    let r1_row = r1.rsplit("<tr>").next().unwrap();
    assert!(!r1_row.contains('*'), "{r1_row}");
}

/// An unhealthy daemon's reasons head the page, escaped: a history that cannot be written
/// leaves the runs below stale, and the page must not pass them off as the latest.
#[test]
fn an_unhealthy_daemons_reasons_head_the_page() {
    let p = StatusPage {
        now_unix_ms: 10_000_000,
        version: "0.1.0".into(),
        unhealthy: vec!["history /s/<h>.sqlite: a run could not be written".into()],
        workloads: vec![WorkloadRuns {
            name: "chat".into(),
            running: false,
            runs: vec![line("r1", 1, "pass", Some(4.0))],
        }],
    };
    let html = render(&p).unwrap();
    let warn = html
        .find("<p class=\"warn\">Unhealthy: history /s/&lt;h&gt;.sqlite: a run could not be written</p>")
        .expect(&html);
    assert!(warn < html.find("r1").unwrap(), "{html}");
    let p = StatusPage {
        unhealthy: Vec::new(),
        ..p
    };
    assert!(!render(&p).unwrap().contains("Unhealthy"));
}
