//! TLS audit M2: the OTLP exporter followed `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY`
//! silently, even to a collector on loopback: the configured headers (credentials) went to
//! the proxy, and the proxy's answers were blamed on the collector. The target and the
//! scrapers connect directly; so does the exporter now. A test binary of its own: it sets
//! variables of the process, which no other test may see.

#[allow(dead_code)] // the integration tests use the rest of it
mod common;
#[allow(dead_code)]
mod receiver;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A "proxy" on loopback that keeps whatever reaches it and answers 502: the exporter must
/// send it nothing.
fn proxy() -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            kept.lock().unwrap().extend_from_slice(b"<connection>");
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 4096];
            if let Ok(n) = stream.read(&mut buf) {
                kept.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            let _ = stream.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
        }
    });
    (url, got)
}

#[test]
fn the_exporter_ignores_proxy_variables_and_connects_to_the_collector() {
    let (proxy_url, got) = proxy();
    // Before any other thread starts: the variables of a running process are not safe to
    // change.
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        std::env::set_var(var, &proxy_url);
    }
    std::env::remove_var("NO_PROXY");
    std::env::remove_var("no_proxy");
    let posts =
        common::judged_run_posts("proxy-env", ("authorization", "Bearer OTLP-PROXY-SECRET"));
    for p in &posts {
        assert!(
            p.headers
                .iter()
                .any(|(k, v)| k == "authorization" && v == "Bearer OTLP-PROXY-SECRET"),
            "{}: {:?}",
            p.path,
            p.headers
        );
    }
    let got = got.lock().unwrap();
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
}
