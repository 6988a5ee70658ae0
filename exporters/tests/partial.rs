//! A collector's 2xx answer says more than its status: a `partial_success` naming items it
//! rejected, which the exporter only logged to its own diagnostics (every span was counted
//! as exported), and a body past the 4 MiB cap, which made an acknowledged export count as
//! lost.

use crate::receiver::{Answer, Receiver};
use canary_core::{MonoTime, Observer, RequestRecord};
use canary_exporters::{Config, ExportReport, OtlpExporter, RunJudgement, RunLabels};
use std::time::Duration;

/// Three spans, the run's metrics and its log event, to a receiver answering `answer`.
async fn export_to(answer: Answer) -> ExportReport {
    let receiver = Receiver::start_answering(0, answer).await;
    let config = Config {
        endpoint: Some(receiver.url()),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || {
        let exporter = OtlpExporter::start(config).unwrap();
        let labels = RunLabels::new("partial", "chat", "m", "127.0.0.1", 8000);
        let observer = exporter.run_observer(labels.clone());
        for i in 1..=3u8 {
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
    })
    .await
    .unwrap();
    assert_eq!(receiver.spans().len(), 3, "{report:?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_items_in_a_partial_success_count_as_dropped() {
    let report = export_to(Answer::Rejected {
        items: 2,
        message: "2 spans had no name".into(),
    })
    .await;
    assert_eq!((report.spans_exported, report.spans_dropped), (1, 2));
    // The unit of metrics is the export: one with data points rejected failed.
    assert_eq!(report.metric_exports, 0, "{report:?}");
    assert!(report.metric_exports_failed >= 1, "{report:?}");
    assert_eq!((report.logs_exported, report.logs_dropped), (0, 1));
    assert!(!report.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_in_otlp_json_is_read_too() {
    let report = export_to(Answer::RejectedJson {
        items: 5,
        message: "quota".into(),
    })
    .await;
    // More rejected than sent: all of them, no more.
    assert_eq!((report.spans_exported, report.spans_dropped), (0, 3));
    assert_eq!((report.logs_exported, report.logs_dropped), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_rejecting_nothing_is_a_success() {
    let report = export_to(Answer::Rejected {
        items: 0,
        message: "a note".into(),
    })
    .await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.spans_exported, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2xx_answer_past_the_response_cap_is_an_acknowledgement() {
    let report = export_to(Answer::Huge(5 * 1024 * 1024)).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((report.spans_exported, report.logs_exported), (3, 1));
}
