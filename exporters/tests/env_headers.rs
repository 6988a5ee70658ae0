//! Headers from the environment that canaryd did not take (a flag gave its own, or a
//! per-signal variable it does not read) must not reach the collector: the OTLP exporter
//! reads `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS` itself, after
//! the headers it is given, and let them win. A test binary of its own: it sets variables of
//! the process, which no other test may see.

#[allow(dead_code)]
mod receiver;

use canary_exporters::{Config, OtlpExporter, RunLabels};
use receiver::Receiver;
use std::time::Duration;

#[test]
fn only_the_configured_headers_reach_the_collector() {
    // Before any thread starts: the variables of a running process are not safe to change.
    std::env::set_var("OTEL_EXPORTER_OTLP_HEADERS", "authorization=FROM-ENV");
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "authorization=FROM-TRACES-ENV,x-extra=FROM-TRACES-ENV",
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let receiver = Receiver::start().await;
        // As `--otlp-header authorization=FROM-FLAG` gives it: the variable is not read.
        let config = Config {
            endpoint: Some(receiver.url()),
            headers: vec![("authorization".into(), "FROM-FLAG".into())],
            timeout: Duration::from_secs(5),
            ..Config::default()
        };
        let report = tokio::task::spawn_blocking(move || {
            let exporter = OtlpExporter::start(config).unwrap();
            let labels = RunLabels::new("env-headers", "chat", "m", "127.0.0.1", 8000);
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
        for p in &posts {
            let auth: Vec<&str> = p
                .headers
                .iter()
                .filter(|(k, _)| k == "authorization")
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(auth, ["FROM-FLAG"], "{}: {:?}", p.path, p.headers);
            assert!(
                !p.headers.iter().any(|(_, v)| v.contains("ENV")),
                "{}: {:?}",
                p.path,
                p.headers
            );
        }
    });
}
