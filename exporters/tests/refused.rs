//! A collector refusing an export (4xx, 5xx) says why in its body, a `google.rpc.Status`
//! or plain text: the warning said only "HTTP export failed with status code: 400". And a
//! collector's text was scrubbed of the OTLP headers only: the replay target's API key,
//! quoted back, reached the log in clear.

use crate::logs;
use crate::one_run::{bearer, refused_warnings};
use crate::receiver::Answer;

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
        let scrub = target_key(key);
        let warned = refused_warnings(
            answer,
            "refused",
            |url| bearer(url, token),
            |e| e.scrub_also("sim", scrub),
        )
        .await;
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
        let leaked = logs::lines_with_any(&[&token[..7], &key[..7]]);
        assert!(leaked.is_empty(), "{leaked:#?}");
    }
}

// The audit's case: a partial success quoting the OTLP token and the target's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_is_scrubbed_of_the_targets_key_too() {
    logs::capture();
    let (token, key) = ("TOKpartk-5e61", "KEYpartk-0c3f7a");
    let message = format!("invalid token {token} and api key {key} from Bearer%20{token}");
    let scrub = target_key(key);
    let warned = refused_warnings(
        Answer::Rejected { items: 1, message },
        "partial-key",
        |url| bearer(url, token),
        |e| e.scrub_also("sim", scrub),
    )
    .await;
    assert!(
        warned
            .iter()
            .any(|l| l
                .contains("\"invalid token <redacted> and api key <redacted> from <redacted>\"")),
        "{warned:#?}"
    );
    let leaked = logs::lines_with_any(&["TOKpartk", "KEYpartk"]);
    assert!(leaked.is_empty(), "{leaked:#?}");
}
