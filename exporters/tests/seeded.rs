//! The daemon's last-run state sets after a restart and after a recovered run: a stored run
//! seeds them without being counted or sent as a run, and a run that is not its workload's
//! last (recovered after a newer one) is counted and sent without replacing them.

use crate::common;
use crate::receiver::attrs;
use canary_core::{Bottleneck, Confidence};
use canary_exporters::RunJudgement;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric};
use std::time::Duration;

/// The points of `name` in `metrics`: (the value of `key`, value), sorted.
fn points(metrics: &[Metric], name: &str, key: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for m in metrics.iter().filter(|m| m.name == name) {
        let data = match &m.data {
            Some(metric::Data::Gauge(g)) => &g.data_points,
            Some(metric::Data::Sum(s)) => &s.data_points,
            _ => panic!("{name}: {m:?}"),
        };
        for p in data {
            let v = match p.value {
                Some(number_data_point::Value::AsDouble(v)) => v,
                Some(number_data_point::Value::AsInt(i)) => i as f64,
                None => panic!("{p:?}"),
            };
            out.push((attrs(&p.attributes)[key].clone(), v));
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

/// The value of `key` whose point of state set `name` is 1.
fn holds(metrics: &[Metric], name: &str, key: &str) -> Vec<String> {
    points(metrics, name, key)
        .into_iter()
        .filter(|(_, v)| *v == 1.0)
        .map(|(k, _)| k)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_run_is_not_counted_and_an_earlier_run_does_not_replace_it() {
    let receiver = common::exported(Duration::from_millis(100), |exporter, labels| {
        // The history's last run: a regressed failure, diagnosed as queueing.
        let stored = RunJudgement {
            verdict: "fail".into(),
            reasons: vec!["TTFT p99 regressed".into()],
            trend: Some("regressed".into()),
            trend_unconfirmed: None,
        };
        exporter.seed_last_run(
            labels,
            &stored,
            Some((Bottleneck::Queueing, Confidence::High)),
        );
        // A run recovered after its process died, older than the stored one.
        let recovered = RunJudgement {
            verdict: "error".into(),
            reasons: vec!["no verdict.json".into()],
            trend: None,
            trend_unconfirmed: None,
        };
        exporter.export_earlier_run(labels, None, &recovered);
    })
    .await;

    let last = receiver.last_metrics();
    let state = |name: &str, key: &str| holds(&last, name, key);
    assert_eq!(
        state("canary.run.verdict.state", "canary.run.verdict"),
        ["fail"]
    );
    assert_eq!(
        state("canary.run.trend.state", "canary.run.trend"),
        ["regressed"]
    );
    assert_eq!(
        state("canary.run.bottleneck.state", "canary.run.bottleneck"),
        ["queueing"]
    );
    assert_eq!(
        state(
            "canary.run.bottleneck.confidence.state",
            "canary.run.bottleneck.confidence"
        ),
        ["high"]
    );
    // Only the recovered run is counted, and only it sent an event.
    assert_eq!(
        points(&last, "canary.runs", "canary.run.verdict"),
        [("error".to_string(), 1.0)]
    );
    let events: Vec<_> = receiver
        .logs()
        .into_iter()
        .filter(|l| l.event_name == "canary.run")
        .map(|l| attrs(&l.attributes)["canary.run.verdict"].clone())
        .collect();
    assert_eq!(events, ["error"]);
}
