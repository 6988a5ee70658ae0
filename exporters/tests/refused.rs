//! A collector refusing an export (4xx, 5xx) says why in its body, a `google.rpc.Status`
//! or plain text: the warning said only "HTTP export failed with status code: 400". And a
//! collector's text was scrubbed of the OTLP headers only: the replay target's API key,
//! quoted back, reached the log in clear.

use crate::logs;
use crate::one_run::export_with;
use crate::receiver::{Answer, Receiver};
use canary_exporters::Config;
use std::time::Duration;

/// The target's secrets, as the replay's scrub knows them: its API key.
fn target_key(key: &str) -> canary_core::Secrets {
    let mut s = canary_core::Secrets::default();
    s.add_secret(key.as_bytes());
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_says_the_collectors_reason_scrubbed_of_every_secret() {
    logs::capture();
    for (proto, token, key) in [
        (true, "TOKrefpb-41c9", "KEYrefpb-7d2e0f"),
        (false, "TOKreftx-83aa", "KEYreftx-19b0c4"),
    ] {
        let message = format!(
            "tenant quota exceeded for Bearer {token}; the api key {key} is not ours either"
        );
        let answer = Answer::Refused {
            code: 400,
            message,
            proto,
        };
        let receiver = Receiver::start_answering(0, answer).await;
        let config = Config {
            endpoint: Some(receiver.url()),
            headers: vec![("authorization".into(), format!("Bearer {token}"))],
            timeout: Duration::from_secs(5),
            ..Config::default()
        };
        let scrub = target_key(key);
        let report = tokio::task::spawn_blocking(move || {
            export_with(config, "refused", 1, |e| e.scrub_also("sim", scrub))
        })
        .await
        .unwrap();
        assert_eq!(report.spans_dropped, 1, "{report:?}");
        let warned = logs::lines_with(&receiver.addr.to_string());
        let said = "status code: 400 (the collector said: \"tenant quota exceeded for \
                    <redacted>; the api key <redacted> is not ours either\")";
        for signal in ["traces", "logs"] {
            assert!(
                warned
                    .iter()
                    .any(|l| l.contains(&format!("OTLP {signal} export")) && l.contains(said)),
                "{proto}, {signal}: {warned:#?}"
            );
        }
        let leaked: Vec<String> = [&token[..7], &key[..7]]
            .iter()
            .flat_map(|s| logs::lines_with(s))
            .collect();
        assert!(leaked.is_empty(), "{leaked:#?}");
    }
}

// The audit's case: a partial success quoting the OTLP token and the target's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_is_scrubbed_of_the_targets_key_too() {
    logs::capture();
    let (token, key) = ("TOKpartk-5e61", "KEYpartk-0c3f7a");
    let message = format!("invalid token {token} and api key {key} from Bearer%20{token}");
    let receiver = Receiver::start_answering(0, Answer::Rejected { items: 1, message }).await;
    let config = Config {
        endpoint: Some(receiver.url()),
        headers: vec![("authorization".into(), format!("Bearer {token}"))],
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let scrub = target_key(key);
    let report = tokio::task::spawn_blocking(move || {
        export_with(config, "partial-key", 1, |e| e.scrub_also("sim", scrub))
    })
    .await
    .unwrap();
    assert_eq!(report.spans_dropped, 1, "{report:?}");
    let warned = logs::lines_with(&receiver.addr.to_string());
    assert!(
        warned
            .iter()
            .any(|l| l
                .contains("\"invalid token <redacted> and api key <redacted> from <redacted>\"")),
        "{warned:#?}"
    );
    let leaked: Vec<String> = ["TOKpartk", "KEYpartk"]
        .iter()
        .flat_map(|s| logs::lines_with(s))
        .collect();
    assert!(leaked.is_empty(), "{leaked:#?}");
}
