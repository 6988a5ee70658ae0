//! `https://` metrics endpoints: a real TLS terminator on loopback, with a CA made by the test,
//! in front of the plain server serving a real capture.

use std::sync::Arc;
use std::time::Duration;

use canary_telemetry::{
    DcgmConfig, DcgmScraper, Engine, ServerMetricsConfig, ServerMetricsScraper, SourceState,
};
use rustls::pki_types::{pem::PemObject, CertificateDer};
use tokio_util::sync::CancellationToken;

/// TLS for `localhost` in front of `backend` (`http://127.0.0.1:port`). Returns the https base
/// URL and a client config trusting the test CA.
async fn tls_in_front_of(backend: &str) -> (String, Arc<rustls::ClientConfig>) {
    let backend = backend.trim_start_matches("http://").parse().unwrap();
    let (port, ca_pem) = canary_testkit::tls_terminator(backend).await;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    (format!("https://localhost:{port}"), Arc::new(client))
}

#[tokio::test]
async fn server_metrics_over_https_with_a_private_ca() {
    let page = fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom");
    let plain = crate::scraper::serve(move |_| page.clone()).await;
    let (base, tls) = tls_in_front_of(&plain).await;
    let url = format!("{base}/metrics");

    let mut c = ServerMetricsConfig::new(url.clone());
    c.tls = Some(tls);
    let s = ServerMetricsScraper::new(c)
        .unwrap()
        .handle()
        .scrape_now()
        .await
        .expect("scraped over TLS");
    assert_eq!(s.engine, Some(Engine::VllmV0));
    assert_eq!(s.prompt_tokens_total, Some(148.0));

    // Without the CA the system's roots are used: the certificate is unknown, and the error
    // says TLS, with the URL. (A host with no system roots at all fails up front instead.)
    match ServerMetricsScraper::new(ServerMetricsConfig::new(url.clone())) {
        Ok(scraper) => {
            let handle = scraper.handle();
            let err = handle.scrape_now().await.unwrap_err().to_string();
            assert!(
                err.contains(&url) && err.contains("TLS handshake failed"),
                "{err}"
            );
            match handle.state() {
                SourceState::Unavailable { reason } => {
                    assert!(reason.contains("certificate"), "{reason}")
                }
                other => panic!("{other}"),
            }
        }
        Err(e) => assert!(e.to_string().contains("cannot scrape over https"), "{e}"),
    }
}

#[tokio::test]
async fn dcgm_over_https() {
    let page = fixture!("dcgm_exporter_metrics_rtx4000ada.prom");
    let plain = crate::scraper::serve(move |_| page.clone()).await;
    let (base, tls) = tls_in_front_of(&plain).await;
    let scraper = DcgmScraper::new(DcgmConfig {
        url: format!("{base}/metrics"),
        tls: Some(tls),
        interval: Duration::from_millis(20),
        timeout: Some(Duration::from_secs(5)),
        capacity: 10,
        ..DcgmConfig::default()
    })
    .unwrap();
    let ring = scraper.samples();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(scraper.run(shutdown.clone()));
    crate::scraper::wait_for("a DCGM scrape over TLS", || !ring.is_empty()).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    let g = ring.latest().unwrap();
    assert_eq!(
        g.model_name.as_deref(),
        Some("NVIDIA RTX 4000 Ada Generation")
    );
}
