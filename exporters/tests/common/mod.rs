//! Runs of the exporter against the receiver of `receiver.rs`, shared by the test binaries
//! (`integration` and the binaries that set variables of their process).

use crate::receiver::{Post, Receiver};
use canary_exporters::{Config, OtlpExporter, RunLabels};
use std::time::Duration;

/// Exports a judged run named `name` through an exporter sending `header`, on a runtime of
/// its own (call it after setting the process's variables: no thread runs before), to a
/// receiver; checks the exporter reported no loss and that metrics and logs arrived, and
/// returns every post the receiver got.
pub fn judged_run_posts(name: &str, header: (&str, &str)) -> Vec<Post> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let receiver = Receiver::start().await;
        let config = Config {
            endpoint: Some(receiver.url()),
            headers: vec![(header.0.into(), header.1.into())],
            timeout: Duration::from_secs(5),
            ..Config::default()
        };
        let name = name.to_string();
        let report = tokio::task::spawn_blocking(move || {
            let exporter = OtlpExporter::start(config).unwrap();
            let labels = RunLabels::new(&name, "chat", "m", "127.0.0.1", 8000);
            exporter.export_judged_run(&labels, None, &Default::default());
            exporter.shutdown(Duration::from_secs(20))
        })
        .await
        .unwrap();
        assert!(report.is_clean(), "{report:?}");
        let posts = receiver.posts();
        let paths: Vec<&str> = posts.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"/v1/metrics"), "{paths:?}");
        assert!(paths.contains(&"/v1/logs"), "{paths:?}");
        posts
    })
}

/// Starts a receiver and an exporter to it reading its metrics every `metrics_interval`,
/// hands `export` the exporter and the labels of a run (`nightly` of `chat`, model `m` on
/// 10.0.0.1:8000), shuts the exporter down, checks it reported no loss, and returns the
/// receiver with what it got.
pub async fn exported(
    metrics_interval: Duration,
    export: impl FnOnce(&OtlpExporter, &RunLabels),
) -> Receiver {
    let receiver = Receiver::start().await;
    let config = Config {
        endpoint: Some(receiver.url()),
        metrics_interval,
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let exporter = tokio::task::spawn_blocking(move || OtlpExporter::start(config).unwrap())
        .await
        .unwrap();
    let labels = RunLabels::new("nightly", "chat", "m", "10.0.0.1", 8000);
    export(&exporter, &labels);
    let report = tokio::task::spawn_blocking(move || exporter.shutdown(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    receiver
}
