//! The status endpoint's HTML: `GET /` (recent runs per workload, drawn by
//! [`canary_report::status`]) and `GET /runs/{id}/report` (a run's report, made from its
//! artifacts when asked). Both pages are self-contained like a report file: no script,
//! nothing fetched, and the same Content-Security-Policy sent as a header too.

use super::brief::RunBrief;
use super::StatusMetrics;
use crate::judge::baseline::Trend;
use crate::service::history::History;
use bytes::Bytes;
use canary_report::status::{
    RunCapacity, RunDiagnosis, RunKnee, RunLine, StatusPage, WorkloadRuns,
};
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Runs listed per workload.
const RUNS_PER_WORKLOAD: usize = 20;

/// Reports made at once: each reads a run's records and draws its charts (a 100,000-request
/// run takes about half a second and a few hundred MB at most), so a reloading browser
/// queues rather than piling work on the daemon.
static REPORTS: Semaphore = Semaphore::const_new(2);

/// The status page.
pub fn status(metrics: &StatusMetrics, history: &History) -> Response<Full<Bytes>> {
    match status_page(metrics, history).and_then(|p| Ok(canary_report::status::render(&p)?)) {
        Ok(html) => html_response(StatusCode::OK, html),
        Err(e) => html_error(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
    }
}

fn status_page(metrics: &StatusMetrics, history: &History) -> anyhow::Result<StatusPage> {
    let running = metrics.running();
    let mut names = history.workloads()?;
    for w in &running {
        if !names.contains(w) {
            names.push(w.clone());
        }
    }
    names.sort();
    let mut workloads = Vec::with_capacity(names.len());
    for name in names {
        let runs = history
            .recent(Some(&name), RUNS_PER_WORKLOAD)?
            .iter()
            .map(|row| line(&RunBrief::from(row)))
            .collect();
        workloads.push(WorkloadRuns {
            running: running.contains(&name),
            name,
            runs,
        });
    }
    // As /healthz says it; the history's reason with what it means for this page.
    let mut unhealthy = metrics.restart_cures();
    unhealthy.extend(metrics.history_failing().map(|why| {
        format!(
            "{why}. The runs that finished since are not listed here (each writes its \
             verdict.json when the disk allows, and the next start records it): /metrics has \
             each workload's last run"
        )
    }));
    Ok(StatusPage {
        now_unix_ms: crate::service::history::now_unix_ms(),
        version: env!("CARGO_PKG_VERSION").into(),
        workloads,
        unhealthy,
    })
}

fn line(b: &RunBrief) -> RunLine {
    let f = b.figures.clone().unwrap_or_default();
    let q = |q: Option<super::brief::Quantiles>| q.map_or((None, None), |q| (q.p50, q.p99));
    let id = encode(&b.id);
    RunLine {
        id: b.id.clone(),
        target: b.target.clone(),
        started_unix_ms: b.started_unix_ms,
        verdict_kind: b.verdict_kind.as_str().into(),
        reasons: b.reasons.clone(),
        trend: b.trend.map(|t| trend_said(t, b.unconfirmed)),
        trend_class: b.trend.map(|t| t.as_str().to_string()),
        context_changes: b
            .context_changes
            .iter()
            .flat_map(|c| c.changes.iter().map(|c| c.to_string()))
            .collect(),
        requests: f.requests,
        errors: f.errors,
        good_fraction: f.good_request_fraction,
        ttft_ms: q(f.time_to_first_token),
        itl_ms: q(f.inter_token_latency),
        e2e_ms: q(f.request_latency),
        bounds: f.bounds.iter().map(|b| b.to_string()).collect(),
        diagnosis: b.diagnosis.as_ref().map(|d| RunDiagnosis {
            class: d.class.clone(),
            confidence: d.confidence.clone(),
            why: d.why.clone(),
        }),
        // A rate sweep has a capacity bracket too; its baseline is the knee's, shown there.
        capacity: b
            .capacity
            .as_ref()
            .map(|c| RunCapacity {
                max_passing_rate: c.found.max_passing_rate,
                min_failing_rate: c.found.min_failing_rate,
                baseline: c.baseline.as_ref().map(|b| (b.capacity, b.spread)),
                not_established: c.found.not_established.clone(),
            })
            .or_else(|| {
                let c = b.sweep.as_ref()?.capacity.as_ref()?;
                Some(RunCapacity {
                    max_passing_rate: c.max_passing_rate,
                    min_failing_rate: c.min_failing_rate,
                    baseline: None,
                    not_established: c.not_established.clone(),
                })
            }),
        sweep: b.sweep.as_ref().map(|s| RunKnee {
            knee: s
                .knee
                .as_ref()
                .map(|k| (k.label.clone(), k.request_throughput)),
            no_knee: s.knee.is_none().then(|| s.knee_said()),
            baseline: s.baseline.as_ref().map(|b| (b.knee, b.spread)),
        }),
        report_href: format!("runs/{id}/report"),
        json_href: format!("api/runs/{id}"),
    }
}

/// A run's trend as the page shows it: `steady`, or `insufficient (unconfirmed: regressed)`
/// when the baseline was too thin to confirm the direction its rule found (as the run's log
/// line and verdict.json's `comparison.unconfirmed` say).
fn trend_said(trend: Trend, unconfirmed: Option<Trend>) -> String {
    match unconfirmed {
        Some(u) if trend == Trend::Insufficient => {
            format!("{} (unconfirmed: {})", trend.as_str(), u.as_str())
        }
        _ => trend.as_str().into(),
    }
}

/// A run's report, made from its artifacts folder now (off the async threads).
pub async fn report(
    history: Arc<History>,
    id: String,
    busy: &Arc<AtomicUsize>,
) -> Response<Full<Bytes>> {
    // Held by the blocking work itself: a client that hangs up drops this future, and the
    // permit with it, while the report goes on being made.
    let permit = REPORTS.acquire().await;
    // Its connection is not closed for a newer one while the report is being made, only.
    let _working = super::InProgress::new(busy);
    let made = tokio::task::spawn_blocking(move || -> Result<String, (StatusCode, String)> {
        let _permit = permit;
        let row = match history.get(&id) {
            Ok(Some(row)) => row,
            Ok(None) => return Err((StatusCode::NOT_FOUND, format!("no run {id:?}"))),
            Err(e) => return Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))),
        };
        canary_report::load(std::slice::from_ref(&row.run.artifacts))
            .and_then(|loaded| canary_report::render_report(&loaded))
            .map_err(|e| match e {
                // A run that never started has no records; a pruned one, no folder.
                canary_report::ReportError::NoRun { .. }
                | canary_report::ReportError::Io { .. } => (
                    StatusCode::NOT_FOUND,
                    format!("no report for run {id:?}: {e}"),
                ),
                e => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the report of run {id:?}: {e}"),
                ),
            })
    })
    .await;
    match made {
        Ok(Ok(html)) => html_response(StatusCode::OK, html),
        Ok(Err((code, why))) => html_error(code, &why),
        Err(e) => html_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("making the report: {e}"),
        ),
    }
}

fn html_response(status: StatusCode, html: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(html)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(canary_report::CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn html_error(status: StatusCode, why: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<h1>{}</h1>\n<p>{}</p>\n<p><a href=\"/\">status page</a></p>\n",
        status,
        canary_report::esc(why)
    );
    html_response(
        status,
        canary_report::page(&status.to_string(), "error", &body),
    )
}

/// Percent-encodes all but unreserved characters, for an id inside a link.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Trend;

    #[test]
    fn an_unconfirmed_direction_shows_beside_insufficient() {
        let said = super::trend_said;
        assert_eq!(
            said(Trend::Insufficient, Some(Trend::Regressed)),
            "insufficient (unconfirmed: regressed)"
        );
        assert_eq!(said(Trend::Insufficient, None), "insufficient");
        assert_eq!(said(Trend::Steady, None), "steady");
    }

    #[test]
    fn ids_in_links_are_percent_encoded() {
        assert_eq!(super::encode("20260101T000002Z-2"), "20260101T000002Z-2");
        assert_eq!(super::encode("a b/\"<"), "a%20b%2F%22%3C");
    }
}
