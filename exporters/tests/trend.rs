//! A run whose shift was seen against a reference of one or two runs reads `insufficient`,
//! its direction kept as unconfirmed (the log: `insufficient (unconfirmed: regressed; …)`).
//! Over OTLP it read a bare `insufficient`: the direction was in no exported body.

use crate::common;
use crate::receiver::attrs;
use canary_exporters::RunJudgement;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_direction_goes_out_beside_its_insufficient_trend() {
    let receiver = common::exported(Duration::from_secs(60), |exporter, labels| {
        let judgement = RunJudgement {
            verdict: "pass".into(),
            trend: Some("insufficient".into()),
            trend_unconfirmed: Some("regressed".into()),
            ..Default::default()
        };
        exporter.export_judged_run(labels, None, &judgement);
    })
    .await;

    // The run event.
    let events: Vec<HashMap<String, String>> = receiver
        .logs()
        .into_iter()
        .filter(|l| l.event_name == "canary.run")
        .map(|l| attrs(&l.attributes))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["canary.run.trend"], "insufficient");
    assert_eq!(events[0]["canary.run.trend.unconfirmed"], "regressed");

    // The trend state set: the `insufficient` point that holds carries the direction, the
    // others do not; and `canary.runs` counts the run with it.
    let last = receiver.last_metrics();
    let gauge = last
        .iter()
        .find(|m| m.name == "canary.run.trend.state")
        .expect("canary.run.trend.state");
    let Some(metric::Data::Gauge(g)) = &gauge.data else {
        panic!("{gauge:?}")
    };
    let mut held = Vec::new();
    for p in &g.data_points {
        let a = attrs(&p.attributes);
        let v = match p.value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            other => panic!("{other:?}"),
        };
        let unconfirmed = a.get("canary.run.trend.unconfirmed").cloned();
        assert_eq!(unconfirmed.is_some(), v == 1.0, "{a:?} = {v}");
        if v == 1.0 {
            held.push((a["canary.run.trend"].clone(), unconfirmed.unwrap()));
        }
    }
    assert_eq!(held, [("insufficient".into(), "regressed".into())]);
    let runs = last.iter().find(|m| m.name == "canary.runs").unwrap();
    let Some(metric::Data::Sum(s)) = &runs.data else {
        panic!("{runs:?}")
    };
    assert_eq!(s.data_points.len(), 1);
    let a = attrs(&s.data_points[0].attributes);
    assert_eq!(a["canary.run.trend.unconfirmed"], "regressed", "{a:?}");
}
