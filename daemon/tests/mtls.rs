//! Client certificates (mutual TLS) through the `canaryd` binary: a replay against an
//! `https://` target whose TLS terminator (in front of `canaryd sim`) requires a client
//! certificate its test CA signed, the scrapes of its `/metrics` through the same terminator,
//! and OTLP export to a receiver behind another such terminator.

mod common;
#[allow(dead_code)]
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;

use canary_testkit::{ClientPki, TlsOptions};
use common::{shared, text, CANARYD};
use std::path::Path;
use std::process::{Command, Output};

fn canaryd(args: &[&str], cwd: &Path) -> Output {
    Command::new(CANARYD)
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CANARYD_REQUEST_WORKERS")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
        .env_remove("OTEL_EXPORTER_OTLP_CLIENT_KEY")
        .output()
        .expect("canaryd runs")
}

/// A terminator requiring client certificates of `pki` in front of `backend`; its CA is
/// written to `dir/ca_file`, the client's certificate and key to `dir/client.pem` and
/// `dir/client.key`. Returns its port.
fn mtls_terminator(
    runtime: &tokio::runtime::Runtime,
    backend: std::net::SocketAddr,
    pki: &ClientPki,
    dir: &Path,
    ca_file: &str,
) -> u16 {
    let options = TlsOptions {
        client_ca: Some(pki.ca_pem.clone()),
        ..TlsOptions::default()
    };
    let (port, ca) = runtime.block_on(canary_testkit::tls_terminator_with(backend, options));
    std::fs::write(dir.join(ca_file), ca).unwrap();
    std::fs::write(dir.join("client.pem"), &pki.cert_pem).unwrap();
    std::fs::write(dir.join("client.key"), &pki.key_pem).unwrap();
    // As a key file should be: no warning about who may read it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("client.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    port
}

/// `canaryd replay` of the 20-row Mooncake arXiv trace against `url` into `DIR/out`.
fn replay(dir: &Path, url: &str, extra: &[&str]) -> Output {
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", url];
    args.extend([
        "--model",
        "canary-sim",
        "--output-dir",
        "out",
        "--speedup",
        "50",
    ]);
    args.extend(["--no-nvml", "--overwrite", "--ca-bundle", "ca.pem"]);
    args.extend_from_slice(extra);
    canaryd(&args, dir)
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("out/summary.json")).unwrap()).unwrap()
}

#[test]
fn a_replay_presents_its_client_certificate_to_the_target_and_its_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = format!("127.0.0.1:{sim_port}").parse().unwrap();
    let pki = ClientPki::new();
    let port = mtls_terminator(&runtime, backend, &pki, dir.path(), "ca.pem");
    let url = format!("https://localhost:{port}");
    let identity = ["--client-cert", "client.pem", "--client-key", "client.key"];

    let out = replay(dir.path(), &url, &identity);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let s = summary(dir.path());
    assert_eq!(s["errors"], 0, "{}", s["errors_by_kind"]);
    assert_eq!(s["completed"], 20, "{s}");
    // `/metrics` on the target, through the same terminator: scraped with the same identity.
    assert_eq!(
        s["telemetry_sources"]["server_metrics"]["state"], "available",
        "{}",
        s["telemetry_sources"]
    );
    assert!(!said.contains("readable by its group"), "{said}");

    // Without it every request is a connect error saying what the server wants.
    let out = replay(dir.path(), &url, &[]);
    let s = summary(dir.path());
    assert_eq!(s["completed"], 0, "{}", text(&out));
    let records = std::fs::read_to_string(dir.path().join("out/records.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = records
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records.iter().all(|r| r["error"]["kind"] == "connect"),
        "{records:#?}"
    );
    // A TLS 1.3 client finishes its handshake before the server refuses it, so a request can
    // find its connection closed by the refusal before hyper hands it the alert (a CI run's
    // first record said only "connection closed before the request was sent"): the
    // connection's own error still names the server's reason, on every record.
    let said = |r: &serde_json::Value| {
        let message = r["error"]["message"].as_str().unwrap_or_default();
        message.contains("the server requires a client certificate and canaryd presented none")
            && message.contains("--client-cert and --client-key")
    };
    assert_eq!(records.len(), 20, "{records:#?}");
    assert!(records.iter().all(said), "{records:#?}");
    // The summary's cause (and the `top error cause` line) keeps canaryd's hint whole: cut
    // at 200 characters it ended `give one with --client-cert and…` (README audit, 12).
    let cause = s["error_causes"][0]["message"].as_str().unwrap_or_default();
    assert!(
        cause.contains("--client-cert and --client-key") && !cause.ends_with('…'),
        "{cause}"
    );
    // Its `/metrics`, scraped without one, says so in the same plain words (it quoted
    // rustls' alert).
    let metrics = &s["telemetry_sources"]["server_metrics"];
    assert_eq!(metrics["state"], "unavailable", "{metrics}");
    assert!(
        metrics["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("the server requires a client certificate and canaryd presented none"),
        "{metrics}"
    );
}

#[test]
fn a_client_certificate_without_its_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), canary_testkit::ca_pem().0).unwrap();
    for (flag, missing) in [
        ("--client-cert", "--client-key"),
        ("--client-key", "--client-cert"),
    ] {
        let out = replay(dir.path(), "https://127.0.0.1:9", &[flag, "x.pem"]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(said.contains(missing), "{flag}: {said}");
    }
    // A key that is not the certificate's: named before anything is sent, never quoted.
    let pki = ClientPki::new();
    std::fs::write(dir.path().join("client.pem"), &pki.cert_pem).unwrap();
    std::fs::write(dir.path().join("other.key"), ClientPki::new().key_pem).unwrap();
    let out = replay(
        dir.path(),
        "https://127.0.0.1:9",
        &["--client-cert", "client.pem", "--client-key", "other.key"],
    );
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("client key other.key does not match client certificate client.pem"),
        "{said}"
    );
    assert!(!said.contains("PRIVATE KEY"), "{said}");
    assert!(!dir.path().join("out/records.jsonl").exists(), "{said}");
}

#[test]
fn check_config_checks_a_targets_and_otlps_client_identity() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ClientPki::new();
    std::fs::write(dir.path().join("client.pem"), &pki.cert_pem).unwrap();
    std::fs::write(dir.path().join("client.key"), &pki.key_pem).unwrap();
    let config = |target: &str, otlp: &str| {
        format!(
            "[targets.t]\nurl = \"https://127.0.0.1:9\"\nmodel = \"m\"\n{target}\n\
             [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
             [otlp]\nendpoint = \"https://127.0.0.1:4318\"\n{otlp}\n"
        )
    };
    let pair = "client_cert = \"client.pem\"\nclient_key = \"client.key\"";
    let otlp_pair = "client_certificate = \"client.pem\"\nclient_key = \"client.key\"";
    for (text_, code, says) in [
        (config(pair, otlp_pair), 0, "ok"),
        (
            config("client_cert = \"client.pem\"", ""),
            1,
            "canaryd.toml:4: targets.t.client_cert: set without client_key",
        ),
        (
            config(pair, "client_certificate = \"client.pem\""),
            1,
            "otlp.client_certificate: set without client_key",
        ),
    ] {
        std::fs::write(dir.path().join("canaryd.toml"), &text_).unwrap();
        let out = canaryd(&["check-config", "canaryd.toml"], dir.path());
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(code), "{text_}\n{msg}");
        assert!(msg.contains(says), "{text_}\n{msg}");
    }
}

#[test]
fn otlp_export_presents_its_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = runtime.block_on(receiver::Receiver::start());
    let pki = ClientPki::new();
    let port = mtls_terminator(&runtime, receiver.addr, &pki, dir.path(), "otlp-ca.pem");
    let target = format!("http://127.0.0.1:{sim_port}");
    let otlp = format!("https://localhost:{port}");
    let out = Command::new(CANARYD)
        .args(["replay", "--trace"])
        .arg(shared("traces/mooncake_arxiv_first20.jsonl"))
        .args([
            "--url",
            &target,
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
        ])
        .args(["--speedup", "50", "--no-nvml", "--otlp-endpoint", &otlp])
        .args([
            "--otlp-client-cert",
            "client.pem",
            "--otlp-client-key",
            "client.key",
        ])
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", "otlp-ca.pem")
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .current_dir(dir.path())
        .output()
        .expect("canaryd runs");
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("OTLP"), "no export failed: {said}");
    let paths: Vec<String> = receiver.posts().into_iter().map(|p| p.path).collect();
    assert!(paths.iter().any(|p| p == "/v1/traces"), "{paths:?}");
    assert!(paths.iter().any(|p| p == "/v1/logs"), "{paths:?}");
}
