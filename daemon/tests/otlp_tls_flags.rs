//! OTLP export to a collector behind a private CA that requires a client certificate, set up
//! by flags alone (`--otlp-certificate`, `--otlp-client-certificate`, `--otlp-client-key`):
//! a real receiver behind a TLS terminator on loopback, with a CA and certificates made at
//! test time (rcgen, `canary_testkit`), and `canaryd replay` of a real trace against
//! `canaryd sim`. Without the settings export fails, said once, and the run goes on; a bad
//! file is an error at start naming its flag or variable.

mod common;
#[allow(dead_code)]
#[path = "../../exporters/tests/receiver.rs"]
mod receiver;

use canary_testkit::{ClientPki, TlsOptions};
use common::{shared, text, CANARYD};
use std::path::Path;
use std::process::{Command, Output};

/// The OTEL variables a developer's shell may hold: none of them reaches these runs.
const OTEL_VARS: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
];

/// `canaryd replay` of the 20-row Mooncake arXiv trace against the sim at `sim_port` into
/// `dir/out`, exporting to `otlp`, with `extra` flags and `env` variables.
fn replay(dir: &Path, sim_port: u16, otlp: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(CANARYD);
    c.args(["replay", "--trace"])
        .arg(shared("traces/mooncake_arxiv_first20.jsonl"))
        .args(["--url", &format!("http://127.0.0.1:{sim_port}")])
        .args([
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
            "--overwrite",
        ])
        .args(["--speedup", "50", "--no-nvml", "--otlp-endpoint", otlp])
        .args(["--otlp-timeout", "5s"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .current_dir(dir);
    for v in OTEL_VARS {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("canaryd runs")
}

/// A receiver behind a terminator that requires a client certificate `pki`'s CA signed. The
/// terminator's CA goes to `dir/otlp-ca.pem`, the client's certificate and key (mode 0600)
/// to `dir/client.pem` and `dir/client.key`. Returns the receiver and the https URL.
fn collector(
    runtime: &tokio::runtime::Runtime,
    pki: &ClientPki,
    dir: &Path,
) -> (receiver::Receiver, String) {
    let receiver = runtime.block_on(receiver::Receiver::start());
    let options = TlsOptions {
        client_ca: Some(pki.ca_pem.clone()),
        ..TlsOptions::default()
    };
    let (port, ca) = runtime.block_on(canary_testkit::tls_terminator_with(receiver.addr, options));
    std::fs::write(dir.join("otlp-ca.pem"), ca).unwrap();
    std::fs::write(dir.join("client.pem"), &pki.cert_pem).unwrap();
    std::fs::write(dir.join("client.key"), &pki.key_pem).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("client.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    (receiver, format!("https://localhost:{port}"))
}

fn paths(receiver: &receiver::Receiver) -> Vec<String> {
    receiver.posts().into_iter().map(|p| p.path).collect()
}

/// The lines saying an export failed.
fn failures(said: &str) -> Vec<&str> {
    said.lines()
        .filter(|l| l.contains("OTLP ") && l.contains(" export to ") && l.contains(" failed"))
        .collect()
}

#[test]
fn the_collectors_ca_and_client_certificate_given_by_flags_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pki = ClientPki::new();
    let (receiver, otlp) = collector(&runtime, &pki, dir.path());
    let tls = [
        "--otlp-certificate",
        "otlp-ca.pem",
        "--otlp-client-certificate",
        "client.pem",
        "--otlp-client-key",
        "client.key",
    ];
    let out = replay(dir.path(), sim_port, &otlp, &tls, &[]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(failures(&said).is_empty(), "{said}");
    let got = paths(&receiver);
    for p in ["/v1/traces", "/v1/metrics", "/v1/logs"] {
        assert!(
            got.iter().any(|g| g == p),
            "{p} not received: {got:?}\n{said}"
        );
    }
}

#[test]
fn without_the_collectors_ca_or_client_certificate_export_fails_once_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pki = ClientPki::new();
    let (receiver, otlp) = collector(&runtime, &pki, dir.path());
    let summary = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap()
    };

    // No CA: the collector's certificate is unknown, and the hint names the OTLP setting.
    let out = replay(dir.path(), sim_port, &otlp, &[], &[]);
    let said = text(&out);
    assert!(out.status.success(), "the run goes on: {said}");
    assert_eq!(summary()["completed"], 20, "{said}");
    let failed = failures(&said);
    assert!(!failed.is_empty(), "no failure said: {said}");
    for signal in ["traces", "metrics", "logs"] {
        let n = failed
            .iter()
            .filter(|l| l.contains(&format!("OTLP {signal} export")))
            .count();
        assert!(n <= 1, "{signal} said {n} times: {said}");
    }
    assert!(
        failed.iter().all(|l| l.contains("(UnknownIssuer)")
            && l.contains("give the collector's CA certificate with --otlp-certificate")),
        "{said}"
    );

    // The CA but no client certificate: the collector's demand is said.
    let out = replay(
        dir.path(),
        sim_port,
        &otlp,
        &["--otlp-certificate", "otlp-ca.pem"],
        &[],
    );
    let said = text(&out);
    assert!(out.status.success(), "the run goes on: {said}");
    assert_eq!(summary()["completed"], 20, "{said}");
    let failed = failures(&said);
    assert!(!failed.is_empty(), "no failure said: {said}");
    assert!(
        failed
            .iter()
            .all(|l| l.contains("requires a client certificate")),
        "{said}"
    );
    assert!(paths(&receiver).is_empty(), "{:?}", paths(&receiver));
}

#[test]
fn a_bad_otlp_tls_file_is_an_error_at_start_naming_its_flag_or_variable() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pki = ClientPki::new();
    let (receiver, otlp) = collector(&runtime, &pki, dir.path());
    // A key cut short, its PEM broken; its contents are never shown.
    let cut = &pki.key_pem[..pki.key_pem.len() / 2];
    std::fs::write(dir.path().join("cut.key"), cut).unwrap();
    let key_body: String = cut.lines().nth(1).unwrap().chars().take(24).collect();
    let identity = |key: &'static str| {
        [
            "--otlp-certificate",
            "otlp-ca.pem",
            "--otlp-client-cert",
            "client.pem",
            "--otlp-client-key",
            key,
        ]
    };
    for (flags, env, says) in [
        (
            &["--otlp-certificate", "typo.pem"][..],
            &[][..],
            "--otlp-certificate typo.pem: No such file or directory",
        ),
        // The client key where the bundle is due.
        (
            &["--otlp-certificate", "client.key"][..],
            &[][..],
            "--otlp-certificate client.key: holds a private key and no certificate",
        ),
        (
            &identity("cut.key")[..],
            &[][..],
            "--otlp-client-key cut.key: ",
        ),
        // The certificate where the key is due: the hint names the OTLP flag.
        (
            &identity("client.pem")[..],
            &[][..],
            "--otlp-client-key client.pem: holds a certificate and no private key (the \
             certificate goes in the certificate file: --otlp-client-cert)",
        ),
        (
            &identity("typo.key")[..],
            &[][..],
            "--otlp-client-key typo.key: No such file or directory",
        ),
        (
            &[][..],
            &[("OTEL_EXPORTER_OTLP_CERTIFICATE", "typo.pem")][..],
            "OTEL_EXPORTER_OTLP_CERTIFICATE=typo.pem: No such file or directory",
        ),
        // A key without its certificate.
        (
            &["--otlp-client-key", "client.key"][..],
            &[][..],
            "--otlp-client-cert",
        ),
        (
            &[][..],
            &[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "client.key")][..],
            "OTEL_EXPORTER_OTLP_CLIENT_KEY: set without OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        ),
    ] {
        let _ = std::fs::remove_dir_all(dir.path().join("out"));
        let out = replay(dir.path(), sim_port, &otlp, flags, env);
        let said = text(&out);
        assert!(!out.status.success(), "{flags:?} {env:?}: {said}");
        assert!(said.contains(says), "{flags:?} {env:?}: {said}");
        assert!(!said.contains(&key_body), "quotes the key: {said}");
        // Refused before the run: nothing replayed, nothing exported.
        assert!(
            !dir.path().join("out/records.jsonl").exists(),
            "{flags:?} {env:?}: {said}"
        );
    }
    assert!(paths(&receiver).is_empty(), "{:?}", paths(&receiver));
}

// TLS audit L6: with the system's store unreadable, the scrapers' warning said "using the
// system's roots", the very store that had failed, as if the scrapes went on.
#[test]
fn the_scrapers_warning_says_when_the_system_store_is_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = format!("127.0.0.1:{sim_port}").parse().unwrap();
    let (port, ca) = runtime.block_on(canary_testkit::tls_terminator(backend));
    std::fs::write(dir.path().join("ca.pem"), ca).unwrap();
    let out = Command::new(CANARYD)
        .args(["replay", "--trace"])
        .arg(shared("traces/mooncake_arxiv_first20.jsonl"))
        .args(["--url", &format!("https://localhost:{port}")])
        .args([
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
            "--speedup",
            "50",
        ])
        .args(["--no-nvml", "--ca-bundle", "ca.pem"])
        .env("SSL_CERT_DIR", dir.path().join("no-such-dir"))
        .env_remove("SSL_CERT_FILE")
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .current_dir(dir.path())
        .output()
        .expect("canaryd runs");
    let said = text(&out);
    assert!(!said.contains("using the system's roots"), "{said}");
    assert!(
        said.contains("metrics over https: SSL_CERT_DIR=")
            && said.contains("the system's store is what failed, so scrapes over https"),
        "{said}"
    );
}
