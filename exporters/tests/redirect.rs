//! A collector that answers with a redirect: the export fails, counted, and the configured
//! headers (API keys) never reach the place it points to. reqwest followed redirects by
//! default and stripped only `Authorization` and cookies from them.

use crate::receiver::Receiver;
use bytes::Bytes;
use canary_exporters::{Config, OtlpExporter};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

/// Answers every request with `307` to the same path at `to`.
async fn redirector(to: SocketAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| async move {
                    Ok::<_, hyper::Error>(
                        Response::builder()
                            .status(307)
                            .header("location", format!("http://{to}{}", req.uri().path()))
                            .body(Full::new(Bytes::new()))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed_with_the_configured_headers() {
    let elsewhere = Receiver::start().await;
    let front = redirector(elsewhere.addr).await;
    let config = Config {
        endpoint: Some(format!("http://{front}")),
        headers: vec![("x-api-key".into(), "key-SECRET".into())],
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || {
        let exporter = OtlpExporter::start(config).unwrap();
        let labels = canary_exporters::RunLabels::new("redirect", "chat", "m", "127.0.0.1", 8000);
        exporter.export_judged_run(&labels, None, &Default::default());
        exporter.shutdown(Duration::from_secs(20))
    })
    .await
    .unwrap();
    assert!(!report.is_clean(), "{report:?}");
    assert!(
        elsewhere.posts().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.posts()
    );
}
