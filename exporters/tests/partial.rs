//! A collector's 2xx answer says more than its status: a `partial_success` naming items it
//! rejected, which the exporter only logged to its own diagnostics (every span was counted
//! as exported), and a body past the 4 MiB cap, which made an acknowledged export count as
//! lost.

use crate::one_run::export;
use crate::receiver::{Answer, Receiver};
use canary_core::{MonoTime, Observer, RequestRecord};
use canary_exporters::{Config, ExportReport, OtlpExporter, RunLabels};
use std::time::Duration;

/// Three spans, the run's metrics and its log event, to a receiver answering `answer`.
async fn export_to(answer: Answer) -> ExportReport {
    let receiver = Receiver::start_answering(0, answer).await;
    let config = Config {
        endpoint: Some(receiver.url()),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || export(config, "partial", 3))
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

/// The span of request `i`, annotated (handed to the exporter) by `observer`.
fn one_span(observer: &canary_exporters::RunObserver, i: u8) {
    let mut rec = RequestRecord {
        trace_id: format!("0af7651916cd43dd8448eb211c8032{i:02x}"),
        span_id: format!("b7ad6b71692034{i:02x}"),
        sent_at_ms: 1.0,
        ended_at_ms: 2.0,
        ..RequestRecord::default()
    };
    observer.annotate(&mut rec, MonoTime(0));
}

// A partial success rejecting nothing is the collector's warning (the OTLP spec's words). It
// was told as "rejected 0 spans … they count as dropped", and used up the once-only report:
// a real rejection later was never told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_is_told_as_one_and_leaves_the_rejection_report_for_a_rejection() {
    crate::logs::capture();
    let receiver = Receiver::start_answering(
        0,
        Answer::Series(vec![
            Answer::Rejected {
                items: 0,
                message: "note: attribute truncated".into(),
            },
            Answer::Rejected {
                items: 2,
                message: "quota exceeded".into(),
            },
        ]),
    )
    .await;
    let config = Config {
        traces_endpoint: Some(format!("{}/v1/traces", receiver.url())),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let spans = |n: usize| {
        let r = &receiver;
        move || r.spans().len() >= n
    };
    let exporter = OtlpExporter::start(config).unwrap();
    let observer = exporter.run_observer(RunLabels::new("warned", "chat", "m", "127.0.0.1", 8000));
    one_span(&observer, 1);
    wait_for(spans(1)).await;
    one_span(&observer, 2);
    one_span(&observer, 3);
    wait_for(spans(3)).await;
    let report = tokio::task::spawn_blocking(move || exporter.shutdown(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!((report.spans_exported, report.spans_dropped), (1, 2));
    let said = crate::logs::lines_with(&receiver.addr.to_string());
    let warned: Vec<_> = said
        .iter()
        .filter(|l| l.contains("with a warning"))
        .collect();
    assert_eq!(warned.len(), 1, "{said:#?}");
    assert!(
        warned[0].contains("\"note: attribute truncated\""),
        "{said:#?}"
    );
    assert!(!warned[0].contains("dropped"), "{said:#?}");
    let rejected: Vec<_> = said
        .iter()
        .filter(|l| l.contains("rejected 2 spans"))
        .collect();
    assert_eq!(rejected.len(), 1, "{said:#?}");
    assert!(rejected[0].contains("\"quota exceeded\""), "{said:#?}");
    assert!(!said.iter().any(|l| l.contains("rejected 0")), "{said:#?}");
}

// A collector claiming 2^62 rejected spans of the 3 it was sent: the warning said "rejected
// 4611686018427387904 spans" (the counts were already bounded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_count_is_told_at_most_what_was_sent() {
    crate::logs::capture();
    let claimed = 1i64 << 62;
    let receiver = Receiver::start_answering(
        0,
        Answer::Rejected {
            items: claimed,
            message: "over quota".into(),
        },
    )
    .await;
    let config = Config {
        traces_endpoint: Some(format!("{}/v1/traces", receiver.url())),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let exporter = OtlpExporter::start(config).unwrap();
    let observer = exporter.run_observer(RunLabels::new("claims", "chat", "m", "127.0.0.1", 8000));
    for i in 1..=3 {
        one_span(&observer, i);
    }
    let report = tokio::task::spawn_blocking(move || exporter.shutdown(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(receiver.spans().len(), 3, "{report:?}");
    assert_eq!((report.spans_exported, report.spans_dropped), (0, 3));
    let said = crate::logs::lines_with(&receiver.addr.to_string());
    assert!(
        said.iter().any(|l| l.contains(&format!(
            "rejected 3 spans, all that were sent (it claimed {claimed}; partial success: \"over quota\")"
        ))),
        "{said:#?}"
    );
}

/// Waits (at most 20 s, then fails) until `done`: an event, not a time, is what is awaited.
async fn wait_for(done: impl Fn() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not done within 20 s");
}

// A collector that accepts and never answers, with the export timeout not shorter than the
// flush deadline (10 s each by default): the closing line said only that the flush stopped
// at its deadline with so many items held, naming no endpoint and no cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_collector_is_named_at_the_flush_deadline() {
    crate::logs::capture();
    let silent = crate::receiver::Silent::start();
    let config = Config {
        endpoint: Some(silent.url()),
        timeout: Duration::from_secs(30),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || {
        let exporter = OtlpExporter::start(config).unwrap();
        let labels = RunLabels::new("silent", "chat", "m", "127.0.0.1", 8000);
        one_span(&exporter.run_observer(labels.clone()), 9);
        exporter.shutdown(Duration::from_secs(1))
    })
    .await
    .unwrap();
    assert!(!report.flushed_in_time, "{report:?}");
    let said = crate::logs::lines_with(&format!("{}/v1/traces", silent.addr));
    let closing: Vec<_> = said.iter().filter(|l| l.contains("lost data")).collect();
    assert_eq!(closing.len(), 1, "{said:#?}");
    assert!(
        closing[0].contains(&format!(
            "unanswered: 1 spans to http://{}/v1/traces",
            silent.addr
        )),
        "{said:#?}"
    );
    assert!(
        closing[0]
            .contains("no answer came (the export timeout, 30s, is not shorter than the deadline"),
        "{said:#?}"
    );
}
