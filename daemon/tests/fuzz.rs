//! The config file parser fed mutations of the real configs in `deploy/` (canary_testkit's
//! fuzzer: a fixed seed and count in CI, longer by hand with `CANARYD_FUZZ_SECS`). A bad file
//! is an error naming the file (and the line, when one is to blame), never a panic.

use canary_testkit::fuzz::fuzz;
use canaryd::config::Config;
use std::path::Path;

fn deploy(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `canaryd.toml` inside the DaemonSet's ConfigMap, dedented.
fn configmap_toml() -> String {
    let yaml = deploy("k8s/daemonset.yaml");
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "canaryd.toml: |");
    let header = lines.next().expect("a `canaryd.toml: |` block");
    let indent = header.len() - header.trim_start().len() + 2;
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

const WORDS: &[&[u8]] = &[
    b"[workloads.",
    b"[targets.",
    b"[[",
    b"]]",
    b"[otlp]",
    b"[telemetry]",
    b" = ",
    b"\"",
    b"'''",
    b"\"\"\"",
    b"{ ",
    b" }",
    b"[",
    b"]",
    b",",
    b"#",
    b"\n",
    b".",
    b"true",
    b"false",
    b"every",
    b"speedup",
    b"url",
    b"trace",
    b"target",
    b"slo",
    b"\"5m\"",
    b"\"0s\"",
    b"\"-1s\"",
    b"\"1e400ms\"",
    b"\"http://\"",
    b"\"https://[::1]:0/v1\"",
    b"api_key_env",
    b"api_key_file",
    b"max_requests",
    b"concurrency",
    b"cron",
    b"\"* * * * *\"",
    b"\\u0000",
    b"1979-05-27",
];

#[test]
fn mutated_configs_never_panic_and_errors_name_the_file() {
    let base = tempfile::tempdir().unwrap();
    let seeds: Vec<Vec<u8>> = [deploy("canaryd.example.toml"), configmap_toml()]
        .into_iter()
        .map(String::into_bytes)
        .collect();
    for seed in &seeds {
        Config::parse(
            std::str::from_utf8(seed).unwrap(),
            Path::new("seed.toml"),
            base.path(),
        )
        .expect("the seeds are valid configs");
    }
    let report = fuzz("config", seeds, WORDS, 100_000, |bytes| {
        // A config file that is not UTF-8 fails before parsing (`read_to_string`).
        let text = String::from_utf8_lossy(bytes);
        match Config::parse(&text, Path::new("fuzz.toml"), base.path()) {
            Ok(c) => format!("ok {} workloads", c.workloads.len().min(3)),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with("fuzz.toml"), "{msg}");
                assert!(!e.message.is_empty(), "{msg}");
                // The kind of complaint: its first words after the key path, which varies.
                let what = e.message.split_once(": ").map_or(&*e.message, |(_, w)| w);
                let kind: Vec<&str> = what
                    .split(|c: char| !c.is_ascii_alphabetic())
                    .filter(|w| !w.is_empty())
                    .take(2)
                    .collect();
                format!("error line={} {}", e.line.is_some(), kind.join(" "))
            }
        }
    });
    assert!(report.outcomes >= 20, "{report}");
}
