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
