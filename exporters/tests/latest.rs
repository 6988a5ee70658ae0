//! `canary.capacity.rate` and `canary.sweep.knee` hold each workload's latest figures: a figure
//! the latest run lacks stops being exported. The SDK ignores a NaN recorded on a gauge, so a
//! plain gauge went on showing the earlier run's figure (a failed bound below the latest
//! passed one).

use crate::receiver::{attrs, Receiver};
use canary_exporters::{Config, OtlpExporter, RunLabels};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric};
use std::time::{Duration, Instant};

/// The gauge `name`'s points in `metrics`: (workload, server address, figure, value), sorted.
fn points(metrics: &[Metric], name: &str, key: &str) -> Vec<(String, String, String, f64)> {
    let mut out = Vec::new();
    for m in metrics.iter().filter(|m| m.name == name) {
        let Some(metric::Data::Gauge(g)) = &m.data else {
            panic!("{name} is not a gauge: {m:?}")
        };
        for p in &g.data_points {
            let a = attrs(&p.attributes);
            let Some(number_data_point::Value::AsDouble(v)) = p.value else {
                panic!("{p:?}")
            };
            out.push((
                a["canary.workload"].clone(),
                a["server.address"].clone(),
                a[key].clone(),
                v,
            ));
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

/// An exporter to `receiver`, pushing metrics every 100 ms.
async fn start(receiver: &Receiver) -> OtlpExporter {
    let config = Config {
        endpoint: Some(receiver.url()),
        metrics_interval: Duration::from_millis(100),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    tokio::task::spawn_blocking(move || OtlpExporter::start(config).unwrap())
        .await
        .unwrap()
}

fn p(w: &str, host: &str, figure: &str, v: f64) -> (String, String, String, f64) {
    (w.into(), host.into(), figure.into(), v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_figure_the_latest_run_lacks_is_no_longer_exported() {
    let receiver = Receiver::start().await;
    let exporter = start(&receiver).await;
    let (nightly_a, other) = (
        RunLabels::new("nightly", "chat", "m", "10.0.0.1", 8000),
        RunLabels::new("other", "chat", "m", "10.0.0.1", 8000),
    );
    exporter.export_capacity(
        &nightly_a,
        &[("passed", Some(10.0)), ("failed", Some(20.0))],
    );
    exporter.export_capacity(&other, &[("passed", Some(5.0))]);
    exporter.export_knee(
        &nightly_a,
        &[("knee", Some(30.0)), ("baseline", Some(31.0))],
    );
    let first = [
        p("nightly", "10.0.0.1", "failed", 20.0),
        p("nightly", "10.0.0.1", "passed", 10.0),
        p("other", "10.0.0.1", "passed", 5.0),
    ];
    let started = Instant::now();
    while points(
        &receiver.last_metrics(),
        "canary.capacity.rate",
        "canary.capacity.bound",
    ) != first
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no export of {first:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The next search passed 40 and never failed, on a new target; its sweep found no knee.
    let nightly_b = RunLabels::new("nightly", "chat", "m", "10.0.0.2", 8000);
    exporter.export_capacity(
        &nightly_b,
        &[
            ("passed", Some(40.0)),
            ("failed", None),
            ("baseline", Some(f64::NAN)),
        ],
    );
    exporter.export_knee(&nightly_b, &[("knee", None), ("baseline", Some(31.0))]);
    let report = tokio::task::spawn_blocking(move || exporter.shutdown(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    let last = receiver.last_metrics();
    assert_eq!(
        points(&last, "canary.capacity.rate", "canary.capacity.bound"),
        [
            p("nightly", "10.0.0.2", "passed", 40.0),
            p("other", "10.0.0.1", "passed", 5.0),
        ]
    );
    assert_eq!(
        points(&last, "canary.sweep.knee", "canary.sweep.figure"),
        [p("nightly", "10.0.0.2", "baseline", 31.0)]
    );
}

/// The gauges that follow each request (GPU, the server's queue) held the last request's
/// value for the life of the process: flat lines between runs, and for ever under a target
/// the workload no longer has. Their series end with the run, after one more export has
/// carried the run's last values (a short one-shot run ends right before its final flush).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_that_follow_requests_end_with_the_run_after_one_more_export() {
    use canary_core::{MonoTime, Observer, RequestRecord, RequestTelemetry};
    let receiver = Receiver::start().await;
    let exporter = start(&receiver).await;
    let labels = RunLabels::new("nightly", "chat", "m", "10.0.0.1", 8000);
    let observer = exporter.run_observer(labels.clone());
    let mut rec = RequestRecord {
        telemetry: Some(RequestTelemetry {
            server_queue_depth_at_send: Some(3.0),
            gpu_util_avg_pct: Some(50.0),
            ..RequestTelemetry::default()
        }),
        ..RequestRecord::default()
    };
    let before = receiver.all_metrics().len();
    observer.annotate(&mut rec, MonoTime(0));
    // The run ends at once, before any export has seen its request.
    let verdict = canary_exporters::RunJudgement {
        verdict: "pass".into(),
        ..Default::default()
    };
    exporter.export_judged_run(&labels, None, &verdict);
    let queue = |metrics: &[Metric]| -> Vec<f64> {
        let mut values = Vec::new();
        for m in metrics
            .iter()
            .filter(|m| m.name == "canary.server.queue.depth")
        {
            let Some(metric::Data::Gauge(g)) = &m.data else {
                panic!("not a gauge: {m:?}")
            };
            for p in &g.data_points {
                if let Some(number_data_point::Value::AsDouble(v)) = p.value {
                    values.push(v);
                }
            }
        }
        values
    };
    // The metric exports after the request: the first carries its value, and once one does
    // not, none does again.
    let started = Instant::now();
    let after = loop {
        let after: Vec<Vec<f64>> = receiver.all_metrics()[before..]
            .iter()
            .map(|m| queue(m))
            .collect();
        if after.len() >= 2 && after.last().is_some_and(Vec::is_empty) {
            break after;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{after:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(after[0], [3.0], "{after:?}");
    let ended = after.iter().position(Vec::is_empty).unwrap();
    assert!(after[ended..].iter().all(Vec::is_empty), "{after:?}");
    let report = tokio::task::spawn_blocking(move || exporter.shutdown(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
}
