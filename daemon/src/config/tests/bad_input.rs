//! Input the config audit found accepted and then ignored, misread or refused at every run:
//! each refused at load, naming the file, the line and the key.

use super::{error_at, parse, GOOD};

#[test]
fn min_good_fraction_without_slos_is_refused_at_its_line() {
    // `nightly` has no slos; `canaryd replay --min-good-fraction` without `--slo` is refused too.
    let text = GOOD.replace(
        "cron = \"0 3 * * *\"",
        "cron = \"0 3 * * *\"\nmin_good_fraction = 0.99",
    );
    let e = error_at(
        &text,
        "min_good_fraction",
        "workloads.nightly.min_good_fraction",
    );
    assert!(e.contains("slos"), "{e}");
    // With slos it is taken.
    let text = GOOD.replace(
        "jitter = \"30s\"",
        "jitter = \"30s\"\nmin_good_fraction = 0.99",
    );
    assert_eq!(parse(&text).unwrap().workloads[0].min_good_fraction, 0.99);
}

#[test]
fn target_names_and_models_must_be_printable_and_not_empty() {
    let text = GOOD
        .replace("[targets.local]", "[targets.\"a\\nFAKE LOG LINE\"]")
        .replace("target = \"local\"", "target = \"a\\nFAKE LOG LINE\"");
    let e = error_at(&text, "[targets.", "targets.a\\nFAKE LOG LINE:");
    assert!(!e.contains('\n'), "{e}");
    let text = GOOD
        .replace("[targets.local]", "[targets.\"\"]")
        .replace("target = \"local\"", "target = \"\"");
    error_at(&text, "[targets.", "targets.: a target name");
    for model in ["\"\"", "\" \"", "\"m\\r\\nX-Injected: 1\""] {
        let text = GOOD.replace("model = \"m\"", &format!("model = {model}"));
        error_at(&text, "model =", "targets.local.model:");
    }
}

#[test]
fn an_authorization_header_beside_an_api_key_is_refused() {
    // GOOD's target reads its key from MY_KEY: the header would replace it, unsent.
    let text = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "api_key_env = \"MY_KEY\"\nheaders = { authorization = \"Bearer other\" }",
    );
    let e = error_at(&text, "headers", "targets.local.headers.authorization");
    assert!(e.contains("api_key_env") && !e.contains("other"), "{e}");
    // Without a key the header is how a gateway's own scheme is sent: taken.
    let text = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "headers = { Authorization = \"Basic abc\" }",
    );
    assert_eq!(parse(&text).unwrap().targets["local"].headers.len(), 1);
}

#[test]
fn header_names_differing_only_in_case_are_refused() {
    let text = GOOD.replace(
        "api_key_env = \"MY_KEY\"",
        "[targets.local.headers]\nX-Tenant = \"a\"\nx-tenant = \"b\"",
    );
    let e = error_at(&text, "x-tenant", "targets.local.headers.x-tenant");
    let first = super::line(&text, "X-Tenant");
    assert!(e.contains(&format!("as X-Tenant on line {first}")), "{e}");
    let text = format!(
        "{GOOD}\n[otlp]\nendpoint = \"http://127.0.0.1:4318\"\n[otlp.headers]\n\
         Authorization = \"Bearer a\"\nauthorization = \"Bearer b\"\n"
    );
    let e = error_at(&text, "authorization =", "otlp.headers.authorization");
    assert!(!e.contains("Bearer"), "{e}");
}

#[test]
fn byte_sizes_as_numbers_have_the_cap_of_strings() {
    for key in [
        "max_held_bytes",
        "max_body_bytes",
        "max_event_bytes",
        "max_header_bytes",
    ] {
        let text = GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            &format!("{key} = 9223372036854775807"),
        );
        let e = error_at(&text, key, &format!("targets.local.{key}"));
        assert!(e.contains("at most 1 TiB"), "{e}");
        // 1 TiB itself, as a number, is taken as "1TiB" is.
        let text = GOOD.replace(
            "api_key_env = \"MY_KEY\"",
            &format!("{key} = 1099511627776"),
        );
        assert!(parse(&text).is_ok(), "{key}");
    }
}

#[test]
fn a_bad_otlp_header_prefix_is_the_files_error_not_the_variables() {
    // No variable is set or read: the prefix alone is wrong.
    let text = format!(
        "{GOOD}\n[otlp]\nendpoint = \"http://127.0.0.1:4318\"\n[otlp.headers]\n\
         Authorization = {{ env = \"CANARY_TOK_UNSET\", prefix = \"Bearer\\n\" }}\n"
    );
    let e = error_at(&text, "prefix", "otlp.headers.Authorization.prefix");
    assert!(!e.contains("CANARY_TOK_UNSET"), "{e}");
    let good = text.replace("Bearer\\n", "Bearer ");
    assert!(parse(&good).is_ok());
}

#[test]
fn settings_that_were_dropped_without_a_word_are_refused() {
    // `nightly` replays the bundled trace, which has its own format.
    let text = GOOD.replace(
        "trace = \"bundled\"",
        "trace = \"bundled\"\nformat = \"burstgpt\"",
    );
    error_at(&text, "trace = \"bundled\"", "workloads.nightly.format");
    // One replica listed twice had twice the share of requests.
    let text = GOOD.replace(
        "url = \"http://127.0.0.1:8000\"",
        "url = [\"http://127.0.0.1:8000\", \"http://127.0.0.1:8001\", \"http://127.0.0.1:8000\"]",
    );
    let e = error_at(&text, "url =", "targets.local.url[2]");
    assert!(e.contains("listed before"), "{e}");
}
