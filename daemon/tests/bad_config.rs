//! The real binary given input the config audit found misread: a cron expression with extra
//! spaces (a panic, exit 101), a sweep point no run could take (check-config said ok), and
//! `canaryd replay` flags that dropped the API key or echoed `--extra-inputs` whole. Each is
//! refused with exit 1, naming the file and line or the flag, before anything is sent.

mod common;

use common::CANARYD;
use std::process::Command;

fn check_config(workload: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("canaryd.toml");
    let text = format!(
        "state_dir = \"{}\"\n[targets.t]\nurl = \"http://127.0.0.1:{}\"\nmodel = \"m\"\n\
         [workloads.w]\ntarget = \"t\"\n{workload}",
        dir.path().join("state").display(),
        common::free_port()
    );
    std::fs::write(&path, text).unwrap();
    let o = Command::new(CANARYD)
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    (o.status.code(), common::text(&o))
}

#[test]
fn a_cron_syntax_error_with_extra_spaces_is_an_error_at_its_column_not_a_panic() {
    let (rc, text) = check_config("cron = \"0  3  *  1-  *\"\n");
    assert_eq!(rc, Some(1), "{text}");
    assert!(
        text.contains(
            "canaryd.toml:7: workloads.w.cron: invalid cron expression \"0  3  *  1-  *\": \
             cannot be read from column 11 on"
        ),
        "{text}"
    );
}

#[test]
fn a_sweep_point_no_run_could_take_fails_check_config() {
    // 20 users for the default 10 requests: every scheduled run was an error.
    let (rc, text) = check_config(
        "every = \"1h\"\nkind = \"sweep\"\nisl = 20\nosl = 5\nsweep_concurrency = [1, 20]\n",
    );
    assert_eq!(rc, Some(1), "{text}");
    assert!(
        text.contains("canaryd.toml:11: workloads.w.sweep_concurrency: point c20: 20 users"),
        "{text}"
    );
}

fn replay(extra: &[&str]) -> (Option<i32>, String) {
    // Its own output folder: a build that ran it anyway writes nowhere in the repository.
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(CANARYD)
        .arg("replay")
        .arg("-o")
        .arg(out.path().join("out"))
        .arg("--trace")
        .arg(common::shared("traces/mooncake_arxiv_first20.jsonl"))
        .args([
            "--url",
            &format!("http://127.0.0.1:{}", common::free_port()),
        ])
        .args(["-m", "m"])
        .args(extra)
        .env("CANARY_TEST_KEY", "sk-KEYNEVERSHOWN")
        .output()
        .unwrap();
    (o.status.code(), common::text(&o))
}

#[test]
fn extra_inputs_that_are_not_an_object_are_named_by_type_not_echoed() {
    let (rc, text) = replay(&["--extra-inputs", r#"["sk-EXTRASECRET1"]"#]);
    assert_eq!(rc, Some(1), "{text}");
    assert!(
        text.contains("must be a JSON object, got an array"),
        "{text}"
    );
    assert!(!text.contains("EXTRASECRET"), "{text}");
}

#[test]
fn an_authorization_header_beside_an_api_key_flag_is_refused() {
    let (rc, text) = replay(&[
        "--api-key-env",
        "CANARY_TEST_KEY",
        "-H",
        "Authorization: Bearer sk-HEADERSECRET",
    ]);
    assert_eq!(rc, Some(1), "{text}");
    assert!(
        text.contains("--header #1 sets Authorization") && text.contains("--api-key-env"),
        "{text}"
    );
    assert!(
        !text.contains("SECRET") && !text.contains("NEVERSHOWN"),
        "{text}"
    );
}

#[test]
fn doctor_refuses_target_flags_without_a_target() {
    // They were read only with --url: without it they were ignored, exit 0.
    for flags in [
        &["--server-metrics-url", "http://127.0.0.1:1/metrics"][..],
        &["--ca-bundle", "/nonexistent"],
        &["-H", "X-A: b"],
        &["--api-key-env", "CANARY_TEST_KEY"],
    ] {
        let o = Command::new(CANARYD)
            .arg("doctor")
            .args(flags)
            .output()
            .unwrap();
        let text = common::text(&o);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {text}");
        assert!(text.contains("--url"), "{flags:?}: {text}");
    }
}

#[test]
fn a_capacity_search_whose_floor_is_above_its_start_is_refused() {
    // It ran one probe at the start rate and, that failing, said "stopped by the floor" of a
    // floor it never tried. Refused before anything is sent: no server is needed.
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(CANARYD)
        .current_dir(tmp.path())
        .args(["sweep", "--url", "http://127.0.0.1:9", "--model", "m"])
        .args(["--isl", "64", "--osl", "8", "--request-rate", "5"])
        .args(["--find-max-rate", "--min-rate", "100"])
        .args([
            "--slo",
            "time_to_first_token:200",
            "--min-good-fraction",
            "0.9",
        ])
        .args(["--no-nvml", "--no-ebpf", "-o", "cap"])
        .output()
        .unwrap();
    let text = common::text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("--min-rate 100 req/s is above --request-rate (5 req/s)"),
        "{text}"
    );
    assert!(!tmp.path().join("cap").exists(), "{text}");
}
