//! `https://` metrics endpoints: a real TLS terminator on loopback, with a CA made by the test,
//! in front of the plain server serving a real capture.

use std::sync::Arc;
use std::time::Duration;

use canary_telemetry::{
    DcgmConfig, DcgmScraper, Engine, ServerMetricsConfig, ServerMetricsScraper, SourceState,
};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// TLS for `localhost` in front of `backend` (`http://127.0.0.1:port`). Returns the https base
/// URL and a client config trusting the test CA.
async fn tls_in_front_of(backend: &str) -> (String, Arc<rustls::ClientConfig>) {
    let backend = backend.trim_start_matches("http://").to_owned();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "canaryd telemetry test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut upstream) = TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.der().to_vec())).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
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
