//! Headers from the environment that canaryd did not take (a flag gave its own, or a
//! per-signal variable it does not read) must not reach the collector: the OTLP exporter
//! reads `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS` itself, after
//! the headers it is given, and let them win. A test binary of its own: it sets variables of
//! the process, which no other test may see.

#[allow(dead_code)] // the integration tests use the rest of it
mod common;
#[allow(dead_code)]
mod receiver;

#[test]
fn only_the_configured_headers_reach_the_collector() {
    // Before any thread starts: the variables of a running process are not safe to change.
    std::env::set_var("OTEL_EXPORTER_OTLP_HEADERS", "authorization=FROM-ENV");
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "authorization=FROM-TRACES-ENV,x-extra=FROM-TRACES-ENV",
    );
    // As `--otlp-header authorization=FROM-FLAG` gives it: the variable is not read.
    let posts = common::judged_run_posts("env-headers", ("authorization", "FROM-FLAG"));
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
}
