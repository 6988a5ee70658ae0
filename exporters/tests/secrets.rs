//! A collector that quotes a credential back ("invalid token T") quotes its own cut of it:
//! the token without its `Bearer ` scheme, or the value as it came in
//! `OTEL_EXPORTER_OTLP_HEADERS`, percent-encoded. Only whole values were scrubbed, so the
//! token reached the log in clear.

use crate::logs;
use crate::one_run::export;
use crate::receiver::{Answer, Receiver};
use canary_exporters::Config;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_echoing_a_token_does_not_get_it_logged() {
    logs::capture();
    let (token, key, env_token) = ("TOKecho-7f3a9", "KEYecho/91c", "ENVTOKecho-55");
    let message = format!(
        "invalid token {token} for tenant; unknown key KEYecho%2F91c (or KEYecho%2f91c? \
         KEYecho/91c); as sent: Bearer%20{token}, Bearer+{token}; and {env_token}"
    );
    let receiver = Receiver::start_answering(0, Answer::Rejected { items: 1, message }).await;
    let headers =
        format!("authorization=Bearer%20{token},x-api-key=KEYecho%2F91c,x-env=Token {env_token}");
    let vars = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(receiver.url()),
        "OTEL_EXPORTER_OTLP_HEADERS" => Some(headers.clone()),
        _ => None,
    };
    let config = Config {
        timeout: Duration::from_secs(5),
        ..Config::from_vars(vars).unwrap()
    };
    assert_eq!(config.headers[1].1, key);
    let report = tokio::task::spawn_blocking(move || export(config, "secrets", 1))
        .await
        .unwrap();
    assert_eq!(report.spans_dropped, 1, "{report:?}");
    let warned = logs::lines_with(&receiver.addr.to_string());
    assert!(
        warned
            .iter()
            .any(|l| l.contains("invalid token <redacted>")),
        "{warned:#?}"
    );
    let leaked: Vec<String> = ["TOKecho", "KEYecho", "ENVTOKecho"]
        .iter()
        .flat_map(|s| logs::lines_with(s))
        .collect();
    assert!(leaked.is_empty(), "{leaked:#?}");
}
