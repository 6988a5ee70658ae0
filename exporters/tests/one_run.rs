//! One run's export, as canaryd makes it: a span per request, the run's metrics and its
//! judged log event, then the exporter's shutdown and what it reported. Blocking: call it
//! off the async threads (`refused_warnings` does).

use crate::logs;
use crate::receiver::{Answer, Receiver};
use canary_core::{MonoTime, Observer, RequestRecord};
use canary_exporters::{Config, ExportReport, OtlpExporter, RunJudgement, RunLabels};
use std::time::Duration;

/// Exports a passing run named `name` of `requests` requests through an exporter of
/// `config`.
pub fn export(config: Config, name: &str, requests: u8) -> ExportReport {
    export_with(config, name, requests, |_| {})
}

/// [`export`], with `prepare` given the exporter before anything is exported.
pub fn export_with(
    config: Config,
    name: &str,
    requests: u8,
    prepare: impl FnOnce(&OtlpExporter),
) -> ExportReport {
    let exporter = OtlpExporter::start(config).unwrap();
    prepare(&exporter);
    let labels = RunLabels::new(name, "chat", "m", "127.0.0.1", 8000);
    let observer = exporter.run_observer(labels.clone());
    for i in 1..=requests {
        let mut rec = RequestRecord {
            trace_id: format!("0af7651916cd43dd8448eb211c8031{i:02x}"),
            span_id: format!("b7ad6b71692033{i:02x}"),
            sent_at_ms: 1.0,
            ended_at_ms: 2.0,
            ..RequestRecord::default()
        };
        observer.annotate(&mut rec, MonoTime(0));
    }
    let verdict = RunJudgement {
        verdict: "pass".into(),
        ..Default::default()
    };
    exporter.export_judged_run(&labels, None, &verdict);
    exporter.shutdown(Duration::from_secs(20))
}

/// The configuration of an exporter to `url` that authorises with `Bearer {token}`.
pub fn bearer(url: String, token: &str) -> Config {
    Config {
        endpoint: Some(url),
        headers: vec![("authorization".into(), format!("Bearer {token}"))],
        timeout: Duration::from_secs(5),
        ..Config::default()
    }
}

/// Starts a collector answering `answer`, and exports a run named `name` of one request to it
/// through an exporter of `config(the collector's URL)`, handed to `prepare` first; checks the
/// request's span was dropped, and returns the captured warnings that name the collector
/// (call `logs::capture` first).
pub async fn refused_warnings(
    answer: Answer,
    name: &str,
    config: impl FnOnce(String) -> Config,
    prepare: impl FnOnce(&OtlpExporter) + Send + 'static,
) -> Vec<String> {
    let receiver = Receiver::start_answering(0, answer).await;
    let config = config(receiver.url());
    let name = name.to_string();
    let report = tokio::task::spawn_blocking(move || export_with(config, &name, 1, prepare))
        .await
        .unwrap();
    assert_eq!(report.spans_dropped, 1, "{report:?}");
    logs::lines_with(&receiver.addr.to_string())
}
