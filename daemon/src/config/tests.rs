use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("canaryd.toml"), Path::new("/etc/canaryd"))
}

const GOOD: &str = r#"
state_dir = "/tmp/canaryd-state"

[targets.local]
url = "http://127.0.0.1:8000"
model = "m"
api_key_env = "MY_KEY"

[workloads.chat]
target = "local"
trace = "traces/m.jsonl"
every = "15m"
jitter = "30s"
slos = "time_to_first_token:400"

[workloads.nightly]
target = "local"
trace = "bundled"
cron = "0 3 * * *"
"#;

#[test]
fn a_good_file_gets_its_defaults() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.status_listen.to_string(), "127.0.0.1:9464");
    assert_eq!(c.artifacts_dir, Path::new("/tmp/canaryd-state/artifacts"));
    let t = &c.targets["local"];
    assert_eq!(
        t.metrics_url.as_deref(),
        Some("http://127.0.0.1:8000/metrics")
    );
    assert_eq!(t.api_key, Some(ApiKeySource::Env("MY_KEY".into())));
    let chat = &c.workloads[0];
    assert_eq!(
        chat.trace,
        TraceSource::File("/etc/canaryd/traces/m.jsonl".into(), None)
    );
    assert_eq!(
        chat.cadence,
        Cadence::Every {
            period: Duration::from_secs(900),
            jitter: Some(Duration::from_secs(30))
        }
    );
    assert_eq!(chat.slos.slos.len(), 1);
    assert_eq!(c.workloads[1].trace, TraceSource::Bundled);
    assert!(matches!(c.workloads[1].cadence, Cadence::Cron { .. }));
}

#[test]
fn a_bad_duration_names_line_key_path_and_expectation() {
    let text = GOOD.replace("every = \"15m\"", "every = \"5 fortnights\"");
    let e = parse(&text).unwrap_err().to_string();
    assert!(
        e.starts_with("canaryd.toml:12: workloads.chat.every: "),
        "{e}"
    );
    assert!(e.contains("fortnights"), "{e}");
    let text = GOOD.replace("every = \"15m\"", "every = 15");
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains("workloads.chat.every"), "{e}");
    assert!(e.contains("expected a duration string"), "{e}");
}

#[test]
fn unknown_keys_and_missing_targets_are_named() {
    let text = GOOD.replace("jitter = \"30s\"", "jiter = \"30s\"");
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains(":13:"), "{e}");
    assert!(e.contains("workloads.chat.jiter"), "{e}");
    assert!(e.contains("jitter"), "the expected keys are listed: {e}");

    let text = GOOD.replace(
        "target = \"local\"\ntrace = \"bundled\"",
        "target = \"far\"\ntrace = \"bundled\"",
    );
    let e = parse(&text).unwrap_err().to_string();
    assert!(
        e.contains("workloads.nightly.target: no target \"far\""),
        "{e}"
    );
    assert!(e.contains(":17:"), "{e}");
}

#[test]
fn schedules_slos_and_fractions_are_checked() {
    let e = parse(&GOOD.replace("0 3 * * *", "61 * * * *"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("workloads.nightly.cron"), "{e}");
    let e = parse(&GOOD.replace("time_to_first_token:400", "ttft:400"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("workloads.chat.slos") && e.contains("ttft"),
        "{e}"
    );
    let e = parse(&GOOD.replace("cron = \"0 3 * * *\"", ""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("workloads.nightly: missing schedule"), "{e}");
    let text = format!("{GOOD}min_good_fraction = 1.5\n");
    let e = parse(&text).unwrap_err().to_string();
    assert!(
        e.contains("workloads.nightly.min_good_fraction") && e.contains("between 0 and 1"),
        "{e}"
    );
}

#[test]
fn api_keys_are_never_read_at_load_and_both_sources_conflict() {
    let text = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "api_key_env = \"MY_KEY\"\napi_key_file = \"/k\"",
    );
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains("not both"), "{e}");
    // Debug shows where a key is, never a key.
    let c = parse(GOOD).unwrap();
    assert!(format!("{c:?}").contains("Env(\"MY_KEY\")"));
}

#[test]
fn no_workload_is_an_error() {
    let e = parse("[targets.a]\nurl = \"http://x:1\"\nmodel = \"m\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("workloads: none defined"), "{e}");
}
