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
        Some(TraceSource::File(
            "/etc/canaryd/traces/m.jsonl".into(),
            None
        ))
    );
    assert_eq!(
        chat.cadence,
        Cadence::Every {
            period: Duration::from_secs(900),
            jitter: Some(Duration::from_secs(30))
        }
    );
    assert_eq!(chat.slos.slos.len(), 1);
    assert_eq!(c.workloads[1].trace, Some(TraceSource::Bundled));
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
    // An empty spec is no SLO: its gates (and a capacity search's verdicts) passed everything.
    let e = parse(&GOOD.replace("time_to_first_token:400", ""))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("workloads.chat.slos") && e.contains("at least one metric:threshold"),
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

const OTLP: &str = r#"
[otlp]
endpoint = "http://127.0.0.1:4318"
metrics_endpoint = "http://127.0.0.1:8428/opentelemetry/v1/metrics"
timeout = "2s"
sample_ratio = 0.25
metrics_interval = "5s"
flush_timeout = "3s"
certificate = "otlp-ca.pem"

[otlp.headers]
x-org = "canary-PLAIN-77"
Authorization = { env = "CANARYD_TEST_OTLP_TOKEN", prefix = "Bearer " }
x-api-key = { file = "otlp-key" }
"#;

/// A folder holding `otlp-ca.pem`, the certificate [`OTLP`] names, as a real CA bundle.
fn with_otlp_ca() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("otlp-ca.pem"), canary_testkit::ca_pem().0).unwrap();
    dir
}

#[test]
fn otlp_settings_are_read_and_header_values_never_shown() {
    let dir = with_otlp_ca();
    let text = format!("{GOOD}{OTLP}");
    let c = Config::parse(&text, Path::new("canaryd.toml"), dir.path()).unwrap();
    let o = &c.otlp;
    assert_eq!(o.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
    assert_eq!(o.timeout, Some(Duration::from_secs(2)));
    assert_eq!(o.sample_ratio, Some(0.25));
    assert_eq!(
        o.certificate.as_deref(),
        Some(dir.path().join("otlp-ca.pem").as_path())
    );
    assert_eq!(o.metrics_interval, Some(Duration::from_secs(5)));
    assert_eq!(o.flush_timeout, Duration::from_secs(3));
    let names: Vec<&str> = o.headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["authorization", "x-api-key", "x-org"]);
    assert_eq!(
        o.headers[1].1,
        OtlpHeader::File(dir.path().join("otlp-key"), String::new())
    );
    let shown = format!("{c:?}");
    assert!(!shown.contains("canary-PLAIN-77"), "{shown}");
    assert!(shown.contains("CANARYD_TEST_OTLP_TOKEN"), "{shown}");
    assert_eq!(
        o.describe().unwrap(),
        "OTLP export to http://127.0.0.1:4318, metrics http://127.0.0.1:8428/opentelemetry/v1/metrics \
         with headers authorization, x-api-key, x-org"
    );
    // Without [otlp] nothing is set and the flush timeout has its default.
    assert_eq!(parse(GOOD).unwrap().otlp, Otlp::default());
}

#[test]
fn bad_otlp_settings_name_line_and_key() {
    let with = |from: &str, to: &str| {
        let text = format!("{GOOD}{}", OTLP.replace(from, to));
        parse(&text).unwrap_err().to_string()
    };
    let e = with("http://127.0.0.1:4318", "grpc://collector:4317");
    assert!(
        e.starts_with("canaryd.toml:22: otlp.endpoint: expected an http:// or https:// URL"),
        "{e}"
    );
    let e = with("\"http://127.0.0.1:8428", "\"ftp://user:pw@vm:8428");
    assert!(
        e.contains(":23: otlp.metrics_endpoint: expected an http:// or https:// URL"),
        "{e}"
    );
    assert!(!e.contains("pw@"), "{e}");
    // User info: hyper's pool logs it at debug; the base endpoint's query would come
    // before each signal's path.
    let e = with("\"http://127.0.0.1:8428", "\"http://user:pw-SECRET@vm:8428");
    assert!(
        e.contains(":23: otlp.metrics_endpoint: user info (user:password@) is not taken"),
        "{e}"
    );
    assert!(!e.contains("SECRET"), "{e}");
    let e = with(
        "http://127.0.0.1:4318",
        "http://127.0.0.1:4318/?token=SECRET",
    );
    assert!(
        e.contains(":22: otlp.endpoint: a base endpoint takes no query"),
        "{e}"
    );
    assert!(!e.contains("SECRET"), "{e}");
    let e = with("timeout = \"2s\"", "timeout = \"2 fortnights\"");
    assert!(e.contains(":24: otlp.timeout: invalid duration"), "{e}");
    let e = with("metrics_interval = \"5s\"", "metrics_interval = \"0s\"");
    assert!(
        e.contains(":26: otlp.metrics_interval: must be above zero"),
        "{e}"
    );
    // Zero dropped the last batch by design, where a zero timeout or interval was refused.
    let e = with("flush_timeout = \"3s\"", "flush_timeout = \"0s\"");
    assert!(
        e.contains(":27: otlp.flush_timeout: must be above zero"),
        "{e}"
    );
    // Each at its key's line, not the `[otlp]` header's (21).
    let e = with("timeout = \"2s\"", "timeout = \"0s\"");
    assert!(e.contains(":24: otlp.timeout: must be above zero"), "{e}");
    let e = with("0.25", "2.5");
    assert!(
        e.contains("otlp.sample_ratio") && e.contains("between 0 and 1"),
        "{e}"
    );
    let e = with(
        "{ file = \"otlp-key\" }",
        "{ file = \"otlp-key\", env = \"K\" }",
    );
    assert!(
        e.contains(":33: otlp.headers.x-api-key: expected exactly one of"),
        "{e}"
    );
    let e = with("{ file = \"otlp-key\" }", "{ path = \"otlp-key\" }");
    assert!(
        e.contains(":33: otlp.headers.x-api-key") && e.contains("path"),
        "{e}"
    );
    let e = with("x-org = \"canary-PLAIN-77\"", "x-org = 7");
    assert!(e.contains("otlp.headers.x-org: expected a string"), "{e}");
    let e = with("flush_timeout", "flush_timeot");
    assert!(e.contains(":27: otlp.flush_timeot"), "{e}");
    let e = with("x-org", "\"x org\"");
    assert!(
        e.contains("otlp.headers: the header name \"x\"… is not valid at its byte 1, a space"),
        "{e}"
    );
    assert!(!e.contains("canary-PLAIN-77"), "{e}");
    let e = with("x-org", "\"Authorization: Bearer SECRET-79\"");
    assert!(e.contains("the header name \"Authorization\"…"), "{e}");
    assert!(!e.contains("SECRET"), "{e}");
}

/// `headers` written as a string (an `OTEL_EXPORTER_OTLP_HEADERS`-style line, a header line)
/// where a table belongs: the error names the line and key, never the value.
#[test]
fn headers_written_as_a_string_are_refused_without_their_value() {
    let target = "headers = \"Authorization: Bearer \\\"sk-TARGET-SECRET-82\\\"\"\n";
    let otlp = "[otlp]\nheaders = \"authorization=Bearer sk-OTLP-SECRET-81\"\n";
    for (key, in_target, tail) in [
        ("targets.t.headers", target, ""),
        ("otlp.headers", "", otlp),
    ] {
        let text = format!(
            "[targets.t]\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n{in_target}\
             [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\n{tail}"
        );
        let line = 1 + text.lines().position(|l| l.starts_with("headers")).unwrap();
        let e = Config::parse(&text, Path::new("canaryd.toml"), Path::new("/tmp"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("SECRET"), "{e}");
        assert!(
            e.contains(&format!(
                "canaryd.toml:{line}: {key}: invalid type: a string (not shown)"
            )),
            "{e}"
        );
    }
}

#[test]
fn otlp_header_values_are_read_when_the_exporter_starts() {
    let dir = with_otlp_ca();
    std::fs::write(dir.path().join("otlp-key"), "KEY-FROM-FILE\n").unwrap();
    let text =
        format!("{GOOD}{OTLP}").replace("CANARYD_TEST_OTLP_TOKEN", "CANARYD_TEST_UNSET_VAR_9");
    let c = Config::parse(&text, Path::new("canaryd.toml"), dir.path()).unwrap();
    // The variable is unset: a warning now, an error naming the key (not a value) at start.
    assert!(c
        .warnings()
        .iter()
        .any(|w| w.contains("otlp.headers.authorization: CANARYD_TEST_UNSET_VAR_9 is not set")));
    let e = c.otlp.exporter_config().unwrap_err();
    assert_eq!(
        e,
        "otlp.headers.authorization: CANARYD_TEST_UNSET_VAR_9 is not set"
    );
    let mut o = c.otlp.clone();
    o.headers.retain(|(k, _)| k != "authorization");
    let x = o.exporter_config().unwrap();
    assert!(x
        .headers
        .contains(&("x-api-key".to_string(), "KEY-FROM-FILE".to_string())));
    assert!(x
        .headers
        .contains(&("x-org".to_string(), "canary-PLAIN-77".to_string())));
    assert_eq!(x.sample_ratio, 0.25);
    assert_eq!(x.timeout, Duration::from_secs(2));
}

#[test]
fn a_bad_inherited_otel_variable_is_no_error_where_otlp_overrides_it() {
    let env = |k: &str| match k {
        "OTEL_METRIC_EXPORT_INTERVAL" | "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("0".to_string()),
        "OTEL_TRACES_SAMPLER" => Some("traceidratio".to_string()),
        "OTEL_TRACES_SAMPLER_ARG" => Some("7".to_string()),
        _ => None,
    };
    let mut o = Otlp {
        endpoint: Some("http://127.0.0.1:4318".into()),
        timeout: Some(Duration::from_secs(2)),
        sample_ratio: Some(0.25),
        metrics_interval: Some(Duration::from_secs(5)),
        ..Otlp::default()
    };
    let x = o.exporter_config_over(env).unwrap();
    assert_eq!(x.timeout, Duration::from_secs(2));
    assert_eq!(x.metrics_interval, Duration::from_secs(5));
    assert_eq!(x.sample_ratio, 0.25);
    // Not overridden, each is still read and its error named.
    o.metrics_interval = None;
    let e = o.exporter_config_over(env).unwrap_err();
    assert!(
        e.contains("OTEL_METRIC_EXPORT_INTERVAL: expected a positive number"),
        "{e}"
    );
    o.metrics_interval = Some(Duration::from_secs(5));
    o.sample_ratio = None;
    let e = o.exporter_config_over(env).unwrap_err();
    assert!(
        e.contains("OTEL_TRACES_SAMPLER_ARG: expected a ratio"),
        "{e}"
    );
}

/// The 1-based line of the first line of `text` that contains `needle`.
fn line(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in {text}"))
        + 1
}

/// The error of `text`, which must start with `canaryd.toml:LINE: KEY` where LINE is the line
/// holding `at`.
fn error_at(text: &str, at: &str, key: &str) -> String {
    let e = parse(text).unwrap_err().to_string();
    let want = format!("canaryd.toml:{}: {key}", line(text, at));
    assert!(e.starts_with(&want), "want {want:?}, got {e}");
    e
}

#[test]
fn absurd_durations_are_errors_naming_line_and_key_not_panics() {
    for (from, to, key) in [
        (
            "every = \"15m\"",
            "every = \"1e19\"",
            "workloads.chat.every",
        ),
        (
            "every = \"15m\"",
            "every = \"1e20\"",
            "workloads.chat.every",
        ),
        (
            "every = \"15m\"",
            "every = \"366d\"",
            "workloads.chat.every",
        ),
        (
            "jitter = \"30s\"",
            "jitter = \"1e19\"",
            "workloads.chat.jitter",
        ),
        (
            "model = \"m\"",
            "model = \"m\"\nrequest_timeout = \"1e19\"",
            "targets.local.request_timeout",
        ),
        (
            "slos = \"time_to_first_token:400\"",
            "slos = \"time_to_first_token:400\"\ngrace_period = \"1e19\"",
            "workloads.chat.grace_period",
        ),
    ] {
        let text = GOOD.replace(from, to);
        let at = to.lines().last().unwrap();
        let e = error_at(&text, at, key);
        assert!(e.contains("too long"), "{e}");
    }
    let text = GOOD.replace("model = \"m\"", "model = \"m\"\nrequest_timeout = \"0s\"");
    let e = error_at(&text, "request_timeout", "targets.local.request_timeout");
    assert!(e.contains("must be above zero"), "{e}");
    // A year is the most a period may be; retention may be longer.
    assert!(parse(&GOOD.replace("every = \"15m\"", "every = \"365d\"")).is_ok());
    // A second is the least: shorter, a run still going made the scheduler spin.
    let second = GOOD.replace("every = \"15m\"\njitter = \"30s\"", "every = \"1s\"");
    assert!(parse(&second).is_ok(), "{:?}", parse(&second).err());
    for short in ["999ms", "1us", "1ns"] {
        let line = format!("every = \"{short}\"");
        let text = GOOD.replace("every = \"15m\"", &line);
        let e = error_at(&text, &line, "workloads.chat.every");
        assert!(e.contains("at least 1s"), "{e}");
    }
    let text = format!("{GOOD}[export]\nretention_age = \"3650d\"\n");
    assert_eq!(
        parse(&text).unwrap().retention_age,
        Duration::from_secs(3650 * 86400)
    );
    // Shorter than a run: every run would be deleted as it finished.
    for short in ["0s", "59m"] {
        let line = format!("retention_age = \"{short}\"");
        let text = format!("{GOOD}[export]\n{line}\n");
        let e = error_at(&text, &line, "export.retention_age");
        assert!(e.contains("expected 1h or more"), "{e}");
    }
}

#[test]
fn zero_concurrency_is_refused() {
    let text = GOOD.replace("jitter = \"30s\"", "jitter = \"30s\"\nconcurrency = 0");
    let e = error_at(&text, "concurrency = 0", "workloads.chat.concurrency: ");
    assert!(e.contains("expected 1 or more, found 0"), "{e}");
    // It used to load, and every run then failed selecting nothing, not naming the key.
    let text = GOOD.replace("jitter = \"30s\"", "jitter = \"30s\"\nmax_requests = 0");
    let e = error_at(&text, "max_requests = 0", "workloads.chat.max_requests: ");
    assert!(e.contains("expected 1 or more, found 0"), "{e}");
    let text = GOOD.replace("jitter = \"30s\"", "jitter = \"30s\"\nconcurrency = 8");
    assert_eq!(parse(&text).unwrap().workloads[0].concurrency, Some(8));
}

// Warm-up requests are bounded (their ids count down from u32::MAX into the measured ones'
// past 3.3 billion, and their records are held until the measured phase): at the key.
#[test]
fn warmup_requests_are_bounded() {
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "jitter = \"30s\"\nwarmup_requests = 10001",
    );
    let e = error_at(
        &text,
        "warmup_requests = 10001",
        "workloads.chat.warmup_requests: ",
    );
    assert!(e.contains("from 0 to 10000"), "{e}");
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "jitter = \"30s\"\nwarmup_requests = 10000",
    );
    assert_eq!(parse(&text).unwrap().workloads[0].warmup_requests, 10000);
}

#[test]
fn baseline_numbers_are_checked() {
    for (key, value, expected) in [
        ("alpha", "nan", "strictly between 0 and 1"),
        ("alpha", "0.0", "strictly between 0 and 1"),
        ("alpha", "1", "strictly between 0 and 1"),
        ("k_mad", "nan", "zero or more"),
        ("k_mad", "-1.0", "zero or more"),
        ("min_shift", "inf", "zero or more"),
        ("min_shift_ms", "-2", "zero or more"),
    ] {
        let text = format!("{GOOD}[baseline]\n{key} = {value}\n");
        let e = error_at(
            &text,
            &format!("{key} = {value}"),
            &format!("baseline.{key}: "),
        );
        assert!(e.contains(expected), "{e}");
    }
    let text = format!("{GOOD}[baseline]\nalpha = 0.01\nk_mad = 0\n");
    let b = parse(&text).unwrap().baseline;
    assert_eq!((b.alpha, b.k_mad), (0.01, 0.0));
    // min_runs above runs: the line of min_runs, or of runs when only runs is set.
    let text = format!("{GOOD}[baseline]\nruns = 5\nmin_runs = 6\n");
    let e = error_at(&text, "min_runs = 6", "baseline.min_runs (6)");
    assert!(e.contains("must not exceed baseline.runs (5)"), "{e}");
    let text = format!("{GOOD}[baseline]\nruns = 2\n");
    error_at(&text, "runs = 2", "baseline.min_runs (3)");
}

#[test]
fn target_errors_name_their_line() {
    let text = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "api_key_env = \"MY_KEY\"\napi_key_file = \"/k\"",
    );
    error_at(
        &text,
        "api_key_file",
        "targets.local: set api_key_env or api_key_file, not both",
    );
    let text = GOOD.replace("http://127.0.0.1:8000", "ftp://127.0.0.1:8000");
    let e = error_at(&text, "ftp://", "targets.local.url: ");
    assert!(e.contains("scheme must be http or https"), "{e}");
    // Issue 14, item 5: an unreadable port used to mean port 80.
    for port in ["99999", "abc", "-1", "0"] {
        let text = GOOD.replace("127.0.0.1:8000", &format!("127.0.0.1:{port}"));
        let e = error_at(&text, "url =", "targets.local.url: ");
        assert!(
            e.contains(&format!("port \"{port}\" is not a number from 1 to 65535")),
            "{e}"
        );
        let text = GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            &format!("metrics_url = \"http://127.0.0.1:{port}/metrics\""),
        );
        let e = error_at(&text, "metrics_url", "targets.local.metrics_url: ");
        assert!(e.contains(&format!("port \"{port}\"")), "{e}");
    }
    // README audit finding 12: a pasted endpoint URL is the API root when it names the
    // target's endpoint, and an error naming the line when it names the other one.
    let text = GOOD.replace("8000\"", "8000/v1/chat/completions\"");
    let c = parse(&text).unwrap();
    let t = &c.targets["local"];
    assert_eq!(
        t.metrics_url.as_deref(),
        Some("http://127.0.0.1:8000/metrics")
    );
    let text = GOOD.replace("8000\"", "8000/v1/completions\"");
    let e = error_at(&text, "url =", "targets.local.url: ");
    assert!(
        e.contains("names /v1/completions but requests go to /v1/chat/completions"),
        "{e}"
    );
    assert!(e.contains("`endpoint` in a config file"), "{e}");
    let text = text.replace("model = \"m\"", "model = \"m\"\nendpoint = \"completions\"");
    parse(&text).unwrap();
}

#[test]
fn urls_are_never_shown_with_user_info_or_query() {
    let text = GOOD.replace(
        "http://127.0.0.1:8000",
        "ftp://admin:pw-SECRET-1@127.0.0.1:8000/v1?key=Q-SECRET-2",
    );
    let e = error_at(&text, "ftp://", "targets.local.url: ");
    assert!(e.contains("ftp://127.0.0.1:8000/v1"), "{e}");
    assert!(!e.contains("SECRET"), "{e}");
    // User info is not sent, so it is refused rather than kept as a secret nobody uses.
    let text = GOOD.replace(
        "http://127.0.0.1:8000",
        "http://admin:pw-SECRET-1@127.0.0.1:8000",
    );
    let e = error_at(&text, "admin:", "targets.local.url: user info");
    assert!(!e.contains("SECRET"), "{e}");
}

#[test]
fn metrics_and_dcgm_urls_are_checked_at_load() {
    let with_metrics = |url: &str| {
        GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            &format!("api_key_env = \"MY_KEY\"\nmetrics_url = \"{url}\""),
        )
    };
    for (url, expected) in [
        (
            "ftp://127.0.0.1:8000/metrics",
            "expected an http:// or https:// URL",
        ),
        (
            "127.0.0.1:8000/metrics",
            "expected an http:// or https:// URL",
        ),
        ("http://", "no host"),
        ("http://u:pw-SECRET@127.0.0.1:8000/metrics", "user info"),
        ("http://u:pw/SECRET@127.0.0.1:8000/metrics", "user info"),
        ("http://u:pw?SECRET@127.0.0.1:8000/metrics", "user info"),
    ] {
        let text = with_metrics(url);
        let e = error_at(&text, "metrics_url", "targets.local.metrics_url: ");
        assert!(e.contains(expected), "{url}: {e}");
        assert!(!e.contains("SECRET"), "{e}");
    }
    let c = parse(&with_metrics(
        "http://127.0.0.1:8000/metrics?format=prometheus",
    ))
    .unwrap();
    assert!(c.targets["local"].metrics_url.is_some());
    let c = parse(&with_metrics("https://vllm.internal/metrics")).unwrap();
    assert!(c.targets["local"].metrics_url.is_some());
    assert_eq!(
        parse(&with_metrics("")).unwrap().targets["local"].metrics_url,
        None
    );

    let text = format!("{GOOD}[telemetry]\ndcgm_url = \"dcgm:9400\"\n");
    let e = error_at(&text, "dcgm_url", "telemetry.dcgm_url: ");
    assert!(e.contains("expected an http:// or https:// URL"), "{e}");
    let text = format!("{GOOD}[telemetry]\ndcgm_url = \"http://127.0.0.1:9400/metrics\"\n");
    assert_eq!(
        parse(&text).unwrap().telemetry.dcgm_url.as_deref(),
        Some("http://127.0.0.1:9400/metrics")
    );
}

#[test]
fn target_headers_are_checked_and_their_values_never_shown() {
    let with = |headers: &str| {
        GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            &format!("api_key_env = \"MY_KEY\"\nheaders = {{ {headers} }}"),
        )
    };
    let c = parse(&with("X-Api-Key = \"hdr-SECRET-77\", x-canary = \"1\"")).unwrap();
    let names: Vec<&str> = c.targets["local"]
        .headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(names, ["x-api-key", "x-canary"]);
    assert!(!format!("{c:?}").contains("hdr-SECRET-77"), "{c:?}");

    let e = error_at(
        &with("\"X Api Key\" = \"hdr-SECRET-77\""),
        "headers",
        "targets.local.headers: the header name \"X\"… is not valid at its byte 1, a space",
    );
    assert!(!e.contains("SECRET"), "{e}");
    // A number where the value belongs: serde quoted it ("invalid type: integer `…`").
    let e = error_at(
        &with("x-api-key = 7761234567"),
        "headers",
        "targets.local.headers.x-api-key: expected a string, found an integer",
    );
    assert!(!e.contains("7761234567"), "{e}");
    // A credential pasted into the name is cut at the first character a name cannot hold.
    let e = error_at(
        &with("\"Authorization: Bearer hdr-SECRET-78\" = \"\""),
        "headers",
        "targets.local.headers: the header name \"Authorization\"… is not valid at its byte 13, ':'",
    );
    assert!(!e.contains("SECRET"), "{e}");
    let e = error_at(
        &with("x-api-key = \"hdr-SECRET-77\\n\""),
        "headers",
        "targets.local.headers.x-api-key: the value is not a valid HTTP header value",
    );
    assert!(!e.contains("SECRET"), "{e}");
    // Issue 14, item 10: framing headers broke every request of the target.
    for key in [
        "Content-Length",
        "transfer-encoding",
        "Host",
        "Connection",
        "Upgrade",
        "TE",
    ] {
        let e = error_at(
            &with(&format!("{key} = \"hdr-SECRET-77\"")),
            "headers",
            &format!("targets.local.headers.{key}: set by canaryd itself: "),
        );
        assert!(!e.contains("SECRET"), "{e}");
    }
}

// Issue 14, item 1: the response caps are per target, with defaults.
#[test]
fn response_caps_are_read_with_units_and_checked() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        c.targets["local"].limits,
        canary_replay::ResponseLimits::default()
    );
    let with = |keys: &str| {
        GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            &format!("api_key_env = \"MY_KEY\"\n{keys}"),
        )
    };
    let c = parse(&with(
        "max_header_bytes = 32768\nmax_event_bytes = \"2MiB\"\n\
         max_body_bytes = \"64 MiB\"\nmax_output_ratio = 3",
    ))
    .unwrap();
    let l = c.targets["local"].limits;
    assert_eq!(
        (l.header_bytes, l.event_bytes, l.body_bytes, l.output_ratio),
        (32768, 2 << 20, 64 << 20, 3.0)
    );
    for (key, value, expected) in [
        ("max_event_bytes", "\"5 parsecs\"", "unknown unit"),
        (
            "max_event_bytes",
            "100",
            "expected at least 1 KiB, found 100 bytes",
        ),
        ("max_body_bytes", "-5", "expected a size"),
        ("max_header_bytes", "true", "expected a size"),
        ("max_output_ratio", "0.5", "expected a number of 1 or more"),
    ] {
        let text = with(&format!("{key} = {value}"));
        let e = error_at(&text, key, &format!("targets.local.{key}: "));
        assert!(e.contains(expected), "{key} = {value}: {e}");
    }
}

// Issue 16: kernel receive timestamps are on unless a target turns them off.
#[test]
fn kernel_timestamps_are_on_unless_a_target_says_false() {
    let c = parse(GOOD).unwrap();
    assert!(c.targets["local"].kernel_timestamps);
    let text = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "api_key_env = \"MY_KEY\"\nkernel_timestamps = false",
    );
    let off = parse(&text).unwrap();
    assert!(!off.targets["local"].kernel_timestamps);
    // …and the run plan carries it to the replay (the plan redesign once dropped it).
    let plan = |c: &Config| {
        let w = &c.workloads[0];
        let t = &c.targets[&w.target];
        canary_replay::Plan::try_from(WorkloadPlan {
            workload: w,
            target: t,
        })
        .unwrap()
    };
    assert!(plan(&c).replay.target.kernel_timestamps);
    assert!(!plan(&off).replay.target.kernel_timestamps);
    let text = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "api_key_env = \"MY_KEY\"\nkernel_timestamps = \"no\"",
    );
    let e = error_at(&text, "kernel_timestamps", "targets.local");
    assert!(e.contains("kernel_timestamps"), "{e}");
}

// Issue 18: a workload's runs in timeslices, as `--slice-duration` gives a one-shot run.
#[test]
fn slice_duration_reaches_the_run_plan_and_under_a_millisecond_is_refused() {
    let with = |v: &str| {
        GOOD.replace(
            "slos = \"time_to_first_token:400\"",
            &format!("slos = \"time_to_first_token:400\"\nslice_duration = {v}"),
        )
    };
    let c = parse(&with("\"10s\"")).unwrap();
    let w = &c.workloads[0];
    assert_eq!(w.slice_duration, Some(Duration::from_secs(10)));
    assert_eq!(c.workloads[1].slice_duration, None);
    let plan = canary_replay::Plan::try_from(WorkloadPlan {
        workload: w,
        target: &c.targets[&w.target],
    })
    .unwrap();
    assert_eq!(plan.replay.slice_duration, Some(Duration::from_secs(10)));
    // Before, 1ns was taken (as 1 µs) and its table read 0.0-0.0 on every line.
    for narrow in ["\"0s\"", "\"1ns\"", "\"999us\""] {
        let e = error_at(
            &with(narrow),
            "slice_duration",
            "workloads.chat.slice_duration",
        );
        assert!(
            e.contains("too narrow for a timeslice: at least 1ms"),
            "{e}"
        );
    }
    assert!(parse(&with("\"1ms\"")).is_ok());
}

#[test]
fn a_cron_that_never_fires_is_refused_naming_line_and_key() {
    let text = GOOD.replace("0 3 * * *", "0 0 31 2 *");
    let e = error_at(&text, "cron = ", "workloads.nightly.cron: ");
    assert!(e.contains("never fires"), "{e}");
}

#[test]
fn jitter_must_be_shorter_than_the_gap_between_runs() {
    let text = GOOD.replace("jitter = \"30s\"", "jitter = \"20m\"");
    let e = error_at(&text, "jitter = ", "workloads.chat.jitter: ");
    assert!(e.contains("not shorter than every (900s)"), "{e}");
    // As long as the period is refused too: the run lands on the next due time.
    let text = GOOD.replace("jitter = \"30s\"", "jitter = \"15m\"");
    error_at(&text, "jitter = ", "workloads.chat.jitter: ");
    // Cron: against the shortest gap between firings (15 minutes here).
    let text = GOOD.replace(
        "cron = \"0 3 * * *\"",
        "cron = \"*/15 * * * *\"\njitter = \"16m\"",
    );
    let e = error_at(&text, "jitter = \"16m\"", "workloads.nightly.jitter: ");
    assert!(e.contains("shortest gap") && e.contains("900s"), "{e}");
    let ok = GOOD.replace(
        "cron = \"0 3 * * *\"",
        "cron = \"*/15 * * * *\"\njitter = \"14m\"",
    );
    assert!(parse(&ok).is_ok());
}

#[test]
fn retention_below_the_baseline_minimum_is_refused_and_below_its_size_warned() {
    let text = format!("{GOOD}[export]\nretention_runs = 0\n");
    let e = error_at(&text, "retention_runs", "export.retention_runs: ");
    assert!(
        e.contains("fewer runs than baseline.min_runs (3)") && e.contains("3 or more"),
        "{e}"
    );
    let text = format!("{GOOD}[baseline]\nruns = 10\nmin_runs = 5\n[export]\nretention_runs = 4\n");
    let e = error_at(&text, "retention_runs", "export.retention_runs: ");
    assert!(e.contains("baseline.min_runs (5)"), "{e}");
    // Enough for a baseline, if a smaller one than baseline.runs: loaded, with a warning.
    let text = format!("{GOOD}[export]\nretention_runs = 5\n");
    let c = parse(&text).unwrap();
    assert_eq!(c.retention_runs, 5);
    let warnings = c.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("export.retention_runs (5) is below baseline.runs (20)")),
        "{warnings:?}"
    );
}

/// Issue 14: `scale_lengths = 1e30` was accepted, and every run then aborted on a 30 GB
/// allocation. Lengths have a limit, which a workload can raise.
#[test]
fn scale_lengths_cannot_pass_the_length_limit() {
    let text = GOOD.replace("jitter = \"30s\"", "jitter = \"30s\"\nscale_lengths = 1e30");
    let e = error_at(&text, "scale_lengths", "workloads.chat.scale_lengths: ");
    assert!(
        e.ends_with(
            "1e30 takes every length over the length limit of 10000000 tokens (length_limit)"
        ),
        "{e}"
    );
    let c =
        parse(&GOOD.replace("jitter = \"30s\"", "jitter = \"30s\"\nscale_lengths = 0.5")).unwrap();
    assert_eq!(
        (c.workloads[0].length_limit, c.workloads[0].max_line_bytes),
        (10_000_000, 16 << 20)
    );
    let raised =
        "jitter = \"30s\"\nscale_lengths = 2e7\nlength_limit = 100000000\nmax_line_bytes = 100";
    let c = parse(&GOOD.replace("jitter = \"30s\"", raised)).unwrap();
    assert_eq!(c.workloads[0].scale_lengths, Some(2e7));
    assert_eq!(
        (c.workloads[0].length_limit, c.workloads[0].max_line_bytes),
        (100_000_000, 100)
    );
    // At most 100M: a prompt is sized by it (4e9 was taken, and a run aborted on a 28 GB
    // allocation).
    let e = error_at(
        &GOOD.replace(
            "jitter = \"30s\"",
            "jitter = \"30s\"\nlength_limit = 4000000000",
        ),
        "length_limit = 4000000000",
        "workloads.chat.length_limit: ",
    );
    assert!(e.contains("from 1 to 100000000"), "{e}");
    for (bad, key) in [
        ("length_limit = 0", "workloads.chat.length_limit: "),
        ("length_limit = 100000001", "workloads.chat.length_limit: "),
        ("length_limit = 5000000000", "workloads.chat.length_limit: "),
        ("max_line_bytes = 0", "workloads.chat.max_line_bytes: "),
        // A line is held whole: the flag's 1 GiB ceiling holds for the key too.
        (
            "max_line_bytes = 1073741825",
            "workloads.chat.max_line_bytes: ",
        ),
    ] {
        let text = GOOD.replace("jitter = \"30s\"", &format!("jitter = \"30s\"\n{bad}"));
        error_at(&text, bad, key);
    }
    for bad in ["inf", "nan", "-1.0", "0"] {
        let text = GOOD.replace(
            "jitter = \"30s\"",
            &format!("jitter = \"30s\"\nspeedup = {bad}"),
        );
        let e = error_at(&text, "speedup", "workloads.chat.speedup: ");
        assert!(e.contains("expected a positive number"), "{e}");
    }
}

// `speedup = "fast"` said `invalid type: string "fast", expected f64` (audit L4): a Rust type,
// where every other message says what the key takes.
#[test]
fn a_number_key_of_the_wrong_type_says_what_it_takes_in_words() {
    for (bad, key, says) in [
        (
            "speedup = \"fast\"",
            "workloads.chat.speedup: ",
            "expected a positive number, found string \"fast\"",
        ),
        (
            "min_good_fraction = true",
            "workloads.chat.min_good_fraction: ",
            "expected a fraction between 0 and 1, found a boolean",
        ),
        (
            "request_rate = \"10/s\"",
            "workloads.chat.request_rate: ",
            "invalid type: string \"10/s\", expected a number",
        ),
        (
            "isl = \"long\"",
            "workloads.chat.isl: ",
            "invalid type: string \"long\", expected a whole number, 0 or more",
        ),
        (
            "osl = -5",
            "workloads.chat.osl: ",
            "invalid value: integer `-5`, expected a whole number, 0 or more",
        ),
    ] {
        let text = GOOD.replace("jitter = \"30s\"", &format!("jitter = \"30s\"\n{bad}"));
        let e = error_at(&text, bad, key);
        assert!(e.ends_with(says), "{e}");
        assert!(!e.contains("f64") && !e.contains("u32"), "{e}");
    }
}

// A huge number was quoted back as `{}` prints it: `speedup = -1e300` as 302 characters
// (audit L4).
#[test]
fn a_huge_number_is_quoted_back_compactly() {
    for (bad, key, says) in [
        (
            "speedup = -1e300",
            "workloads.chat.speedup: ",
            "found -1e300",
        ),
        (
            "min_good_fraction = 1e300",
            "workloads.chat.min_good_fraction: ",
            "found 1e300",
        ),
    ] {
        let text = GOOD.replace("jitter = \"30s\"", &format!("jitter = \"30s\"\n{bad}"));
        let e = error_at(&text, bad, key);
        assert!(e.ends_with(says), "{e}");
    }
}

// A cron value out of range gave the cron crate's words: the expression in its 6-field form, a
// caret, and "Minutes must be less than 59" (audit L4).
#[test]
fn a_cron_value_out_of_range_is_named_with_its_line_field_and_range() {
    let text = GOOD.replace("cron = \"0 3 * * *\"", "cron = \"61 * * * *\"");
    let e = error_at(&text, "cron = ", "workloads.nightly.cron: ");
    assert!(
        e.ends_with(
            "invalid cron expression \"61 * * * *\": the minute field holds 61; minutes are 0 \
             to 59"
        ),
        "{e}"
    );
}

#[test]
fn start_at_is_an_rfc3339_instant_named_by_line_and_key() {
    for (bad, key, says) in [
        (
            "start_at = \"tomorrow\"",
            "workloads.chat.start_at: ",
            "RFC 3339",
        ),
        (
            "start_at = \"2026-11-24T12:00:00\"",
            "workloads.chat.start_at: ",
            "RFC 3339",
        ),
        (
            "max_late_start = \"10s\"",
            "workloads.chat.max_late_start: ",
            "only meaningful with start_at",
        ),
    ] {
        let text = GOOD.replace("jitter = \"30s\"", bad);
        let e = error_at(&text, bad, key);
        assert!(e.contains(says), "{e}");
    }
    // A random delay per run would undo the grid every daemon shares.
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "jitter = \"30s\"\nstart_at = \"2026-11-24T12:00:00+01:00\"",
    );
    let e = error_at(&text, "jitter = ", "workloads.chat.jitter: ");
    assert!(e.contains("not taken with start_at"), "{e}");
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "start_at = \"2026-11-24T12:00:00+01:00\"\nmax_late_start = \"5s\"",
    );
    let c = parse(&text).unwrap();
    let s = c.workloads[0].start_at.clone().expect("start_at kept");
    assert_eq!(s.unix_ns, 1_795_518_000 * 1_000_000_000);
    assert_eq!(s.max_late, std::time::Duration::from_secs(5));
}
mod bad_input;
mod capacity;
mod client_identity;
mod files_named;
mod otlp_header_values;
mod otlp_tls_files;
mod secret_keys;
mod sweep;
mod warnings;

/// The 1-based line of the first line of `text` that starts with `start`.
fn line_starting(text: &str, start: &str) -> usize {
    text.lines().position(|l| l.starts_with(start)).unwrap() + 1
}

#[test]
fn every_bad_workload_is_named_in_one_pass() {
    // Three distinct mistakes: a value that does not parse, a target that does not exist, a
    // key that does not exist; and a good workload between them.
    let text = format!(
        "{GOOD}\n[workloads.a]\ntarget = \"local\"\ntrace = \"bundled\"\nevery = \"5 fortnights\"\n\
         \n[workloads.b]\ntarget = \"nowhere\"\ntrace = \"bundled\"\nevery = \"1h\"\n\
         \n[workloads.c]\ntarget = \"local\"\ntrace = \"bundled\"\nevery = \"1h\"\ncolour = \"blue\"\n"
    );
    let e = parse(&text).unwrap_err();
    assert_eq!(e.more.len(), 2, "{e}");
    let lines = [
        line_starting(&text, "every = \"5 fortnights\""),
        line_starting(&text, "target = \"nowhere\""),
        line_starting(&text, "colour"),
    ];
    let got: Vec<Option<usize>> = std::iter::once(&e).chain(&e.more).map(|e| e.line).collect();
    assert_eq!(got, lines.map(Some));
    let msg = e.to_string();
    let mut at = 0;
    for (line, what) in lines.iter().zip([
        "workloads.a.every: invalid duration \"5 fortnights\"",
        "workloads.b.target: no target \"nowhere\"",
        "workloads.c.colour: unknown field `colour`",
    ]) {
        let one = format!("\n  canaryd.toml:{line}: {what}");
        let found = msg[at..]
            .find(&one)
            .unwrap_or_else(|| panic!("{one:?} in order in {msg}"));
        at += found + one.len();
    }
    assert!(msg.starts_with("canaryd.toml: 3 errors:\n"), "{msg}");
}

#[test]
fn one_mistake_reads_as_it_always_did() {
    let text = format!("{GOOD}\n[workloads.a]\ntarget = \"nowhere\"\ntrace = \"bundled\"\n");
    let e = parse(&text).unwrap_err();
    assert!(e.more.is_empty(), "{e}");
    let line = line_starting(&text, "target = \"nowhere\"");
    assert_eq!(
        e.to_string(),
        format!("canaryd.toml:{line}: workloads.a.target: no target \"nowhere\"; expected one of [local]")
    );
    let text = format!("{GOOD}\n[workloads.a]\ntarget = \"local\"\ntrace = \"bundled\"\nevery = \"5 fortnights\"\n");
    let e = parse(&text).unwrap_err().to_string();
    let line = line_starting(&text, "every = \"5");
    assert!(
        e.starts_with(&format!(
            "canaryd.toml:{line}: workloads.a.every: invalid duration"
        )),
        "{e}"
    );
}

#[test]
fn a_target_that_does_not_parse_is_named_once_and_the_sections_too() {
    // A bad key in a target: its own error, not a "no target" for each workload naming it;
    // and a section's mistake beside a workload's.
    let text = GOOD.replace("api_key_env = \"MY_KEY\"", "api_key_env = \"MY_KEY\"\nurll = \"x\"")
        + "\n[baseline]\nruns = 2\nmin_runs = 5\n\n[workloads.b]\ntarget = \"local\"\ntrace = \"bundled\"\n";
    let e = parse(&text).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.more.len(), 1, "{msg}");
    assert!(
        msg.contains(&format!(
            "canaryd.toml:{}: targets.local.urll: unknown field",
            line_starting(&text, "urll")
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "canaryd.toml:{}: baseline.min_runs (5) must not exceed",
            line_starting(&text, "min_runs")
        )),
        "{msg}"
    );
    assert!(!msg.contains("no target"), "{msg}");
}

#[test]
fn realtime_workers_is_off_unless_asked_and_a_bad_value_names_line_and_key() {
    assert!(!parse(GOOD).unwrap().realtime_workers);
    let on = format!("realtime_workers = true\n{GOOD}");
    assert!(parse(&on).unwrap().realtime_workers);
    let bad = format!("realtime_workers = \"yes\"\n{GOOD}");
    let e = error_at(&bad, "realtime_workers", "realtime_workers");
    assert!(e.contains("bool"), "{e}");
}

#[test]
fn a_workload_name_that_cannot_be_a_folder_is_refused_naming_its_line() {
    // They used to load; every run then failed creating its folder, with no history row.
    let long = "w".repeat(300);
    for bad in [
        r#""a\u0000b""#,
        r#""tab\there""#,
        &format!("\"{long}\""),
        r#"".hidden""#,
        r#""a/b""#,
    ] {
        let text = GOOD.replace("[workloads.chat]", &format!("[workloads.{bad}]"));
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("a name must be usable as a folder name"),
            "{bad}: {e}"
        );
        assert!(!e.contains('\0') && !e.contains('\t'), "{e}");
        assert!(e.len() < 600, "{e}");
    }
    let fine = GOOD.replace("[workloads.chat]", "[workloads.\"chat-é 2\"]");
    assert!(parse(&fine).is_ok(), "{:?}", parse(&fine).err());
}

// `check-config /dev/zero` grew until the kernel killed it, and a FIFO hung: a config is read
// only as a small regular file.
#[test]
fn a_config_that_is_not_a_small_regular_file_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(MAX_CONFIG_BYTES + 1).unwrap();
    let e = Config::load(&big).unwrap_err().to_string();
    assert!(
        e.contains("big.toml") && e.contains("larger than 1048576 bytes"),
        "{e}"
    );
    let fifo = dir.path().join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Config::load(&fifo).unwrap_err().to_string();
    assert!(
        e.contains("fifo.toml") && e.contains("not a regular file"),
        "{e}"
    );
}

// Audit f5, item 4: `check-config` passed a `ca_bundle` or `[otlp] certificate` that is
// missing or a private key; the daemon then failed every run of the target without naming the
// key, and started with OTLP export off.
#[test]
fn a_bad_ca_bundle_or_otlp_certificate_names_key_and_line() {
    let dir = with_otlp_ca();
    let (ca, key) = canary_testkit::ca_pem();
    std::fs::write(dir.path().join("ca.pem"), ca).unwrap();
    std::fs::write(dir.path().join("ca.key"), key).unwrap();
    let parse_in = |text: &str| Config::parse(text, Path::new("canaryd.toml"), dir.path());
    let bundle = |file: &str| {
        GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            &format!("api_key_env = \"MY_KEY\"\nca_bundle = \"{file}\""),
        )
    };
    let c = parse_in(&bundle("ca.pem")).unwrap();
    assert_eq!(
        c.targets["local"].ca_bundle.as_deref(),
        Some(dir.path().join("ca.pem").as_path())
    );
    let e = parse_in(&bundle("typo.pem")).unwrap_err().to_string();
    let want = format!(
        "canaryd.toml:8: targets.local.ca_bundle: CA bundle {}: No such file or directory",
        dir.path().join("typo.pem").display()
    );
    assert!(e.starts_with(&want), "{e}");
    let e = parse_in(&bundle("ca.key")).unwrap_err().to_string();
    assert!(
        e.starts_with("canaryd.toml:8: targets.local.ca_bundle: CA bundle")
            && e.contains("ca.key: holds a private key and no certificate"),
        "{e}"
    );
    assert!(!e.contains("PRIVATE KEY"), "{e}");
    // `[otlp] certificate` the same.
    let otlp = format!("{GOOD}{OTLP}");
    for (file, says) in [
        ("typo.pem", "No such file or directory"),
        ("ca.key", "holds a private key"),
    ] {
        let text = otlp.replace("otlp-ca.pem", file);
        let e = parse_in(&text).unwrap_err().to_string();
        assert!(
            e.starts_with("canaryd.toml:28: otlp.certificate: CA bundle") && e.contains(says),
            "{e}"
        );
    }
}

// Secrets audit, item 4: a key pasted where its variable's name or its file's path is due was
// quoted by the warnings about it ("targets.local.api_key_env: sk-… is not set here"), which
// reach logs, verdicts, history and /api/runs.
#[test]
fn a_key_pasted_for_a_variable_or_a_file_is_never_quoted() {
    let pasted = |to: &str| GOOD.replace("api_key_env = \"MY_KEY\"", to);
    // No variable's name: refused, and not quoted.
    let text = pasted("api_key_env = \"sk-ZQ1xPASTEDKEY\"");
    let e = error_at(&text, "api_key_env", "targets.local.api_key_env: ");
    assert!(
        e.ends_with("does not look like a variable name; is it the key itself? (not shown)"),
        "{e}"
    );
    assert!(!e.contains("ZQ1x"), "{e}");
    let text = format!(
        "{GOOD}{}",
        OTLP.replace(
            "env = \"CANARYD_TEST_OTLP_TOKEN\"",
            "env = \"sk-ZQ1xPASTEDKEY\""
        )
    );
    let e = error_at(&text, "Authorization", "otlp.headers.Authorization.env: ");
    assert!(
        e.contains("is it the key itself?") && !e.contains("ZQ1x"),
        "{e}"
    );
    // A name a variable may have, or a file's, that looks like a key: warned of, unquoted.
    for to in [
        "api_key_env = \"hf_ZQ1xPASTEDKEY0123456789\"",
        "api_key_file = \"sk-ZQ1xPASTEDKEY7\"",
    ] {
        let text = format!(
            "{}{}",
            pasted(to),
            OTLP.replace("CANARYD_TEST_OTLP_TOKEN", "hf_ZQ1xPASTEDKEY0123456789")
                .replace("\"otlp-key\"", "\"sk-ZQ1xPASTEDKEY8\"")
        );
        let dir = with_otlp_ca();
        let c = Config::parse(&text, Path::new("canaryd.toml"), dir.path()).unwrap();
        let warnings = c.warnings();
        assert_eq!(
            warnings
                .iter()
                .filter(|w| w.contains("(its name is not shown: it looks like a key itself)"))
                .count(),
            3,
            "{warnings:?}"
        );
        assert!(
            !format!("{warnings:?}{c:?}").contains("ZQ1x"),
            "{warnings:?}"
        );
        let e = c.otlp.exporter_config().unwrap_err();
        assert!(!e.contains("ZQ1x"), "{e}");
    }
    // Names are still named.
    let c = parse(&pasted("api_key_env = \"CANARYD_TEST_UNSET_KEY_VAR_3\"")).unwrap();
    let warnings = c.warnings();
    assert!(
        warnings.contains(
            &"targets.local.api_key_env: CANARYD_TEST_UNSET_KEY_VAR_3 is not set here".to_string()
        ),
        "{warnings:?}"
    );
}

#[test]
fn run_deadline_is_checked_at_its_line_and_defaults_from_the_schedule() {
    use crate::run_deadline::default_for;
    let w = |c: &Config, name: &str| c.workloads.iter().find(|w| w.name == name).unwrap().clone();
    let c = parse(GOOD).unwrap();
    // No key: the default, from each workload's period (and planned length, when known).
    assert_eq!(w(&c, "chat").run_deadline, None);
    let timeout = canary_replay::DEFAULT_REQUEST_TIMEOUT;
    // A trace whose length is not known here: no finite bound, so no default deadline.
    assert_eq!(default_for(&w(&c, "chat"), None, timeout), None);
    // A trace of 1 min every 15 min: the 1 h floor.
    assert_eq!(
        default_for(&w(&c, "chat"), Some(Duration::from_secs(60)), timeout),
        Some(Duration::from_secs(3600))
    );
    // Daily: twice the period.
    assert_eq!(
        default_for(&w(&c, "nightly"), Some(Duration::from_secs(60)), timeout),
        Some(Duration::from_secs(2 * 86_400))
    );
    // A trace whose schedule takes 2 h at its speedup: twice that plus the 30 s grace.
    assert_eq!(
        default_for(&w(&c, "chat"), Some(Duration::from_secs(7200)), timeout),
        Some(Duration::from_secs(4 * 3600 + 30))
    );
    let given = GOOD.replace("every = \"15m\"", "every = \"15m\"\nrun_deadline = \"20m\"");
    let c = parse(&given).unwrap();
    assert_eq!(w(&c, "chat").run_deadline, Some(Duration::from_secs(1200)));
    for (value, says) in [
        ("\"0s\"", "must be above zero"),
        ("\"soon\"", "invalid duration \"soon\""),
        (
            "20",
            "expected a duration string such as \"90s\" or \"15m\"",
        ),
        ("\"1e19\"", "too long"),
    ] {
        let line = format!("run_deadline = {value}");
        let text = GOOD.replace("every = \"15m\"", &format!("every = \"15m\"\n{line}"));
        let e = error_at(&text, &line, "workloads.chat.run_deadline");
        assert!(e.contains(says), "{e}");
    }
    // One that cannot outlast the run's own benchmark_duration would cut every run.
    let synthetic = "[workloads.s]\ntarget = \"local\"\nevery = \"1h\"\nrequest_rate = 2\n\
                     benchmark_duration = \"10m\"\n";
    let line = "run_deadline = \"10m\"";
    let text = format!("{GOOD}{synthetic}{line}\n");
    let e = error_at(&text, line, "workloads.s.run_deadline");
    assert!(e.contains("not longer than benchmark_duration 10m"), "{e}");
    assert!(parse(&format!("{GOOD}{synthetic}run_deadline = \"11m\"\n")).is_ok());
}

#[test]
fn on_overrun_is_skip_or_start_when_free_named_by_line_and_key() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.workloads[0].on_overrun, cadence::OnOverrun::Skip);
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "jitter = \"30s\"\non_overrun = \"start_when_free\"",
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.workloads[0].on_overrun, cadence::OnOverrun::StartWhenFree);
    let text = GOOD.replace("jitter = \"30s\"", "on_overrun = \"queue\"");
    let e = error_at(&text, "on_overrun", "workloads.chat.on_overrun");
    assert!(e.contains("start_when_free"), "{e}");
    // A start_at grid's runs start on their instant or not at all.
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "start_at = \"2026-11-24T12:00:00+01:00\"\non_overrun = \"start_when_free\"",
    );
    let e = error_at(&text, "on_overrun", "workloads.chat.on_overrun: ");
    assert!(e.contains("not taken with start_at"), "{e}");
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "start_at = \"2026-11-24T12:00:00+01:00\"\non_overrun = \"skip\"",
    );
    parse(&text).unwrap();
}
