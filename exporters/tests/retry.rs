//! The one retry after a throttling answer. A 429 or 503 whose `Retry-After` the exporter
//! could parse (25 s, 600 s) was not retried at all: the wait did not fit the export timeout,
//! so the export failed at once, where the one retry was promised.

use crate::one_run::export;
use crate::receiver::{Answer, Receiver};
use canary_exporters::Config;
use std::time::Duration;

/// Every signal's first export answered `first`, the next ones with a full success: what the
/// exporter reported, and the posts per signal path.
async fn throttled_once(first: Answer) -> (canary_exporters::ExportReport, [usize; 3]) {
    let receiver = Receiver::start_answering(0, Answer::Series(vec![first, Answer::Empty])).await;
    let config = Config {
        endpoint: Some(receiver.url()),
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let report = tokio::task::spawn_blocking(move || export(config, "throttled", 1))
        .await
        .unwrap();
    let posts = receiver.posts();
    let to = |path: &str| posts.iter().filter(|p| p.path == path).count();
    (
        report,
        [to("/v1/traces"), to("/v1/metrics"), to("/v1/logs")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_asking_for_ten_minutes_is_retried_once_after_the_cap() {
    let (report, posts) = throttled_once(Answer::Status {
        code: 503,
        retry_after: Some("600".into()),
    })
    .await;
    assert!(report.is_clean(), "{report:?} {posts:?}");
    assert_eq!(posts, [2, 2, 2], "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_a_date_is_retried_once_after_the_cap() {
    let (report, posts) = throttled_once(Answer::Status {
        code: 429,
        retry_after: Some("Fri, 31 Dec 2100 23:59:59 GMT".into()),
    })
    .await;
    assert!(report.is_clean(), "{report:?} {posts:?}");
    assert_eq!(posts, [2, 2, 2], "{report:?}");
}

/// A 500 is not one of OTLP/HTTP's retryable answers (429, 502, 503, 504), whatever its
/// `Retry-After`: each export is sent once and counted as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_is_not_retried() {
    for retry_after in [None, Some("99999999999999999999"), Some("1")] {
        let (report, posts) = throttled_once(Answer::Status {
            code: 500,
            retry_after: retry_after.map(str::to_string),
        })
        .await;
        assert!(!report.is_clean(), "{retry_after:?}: {report:?}");
        assert_eq!(posts, [1, 1, 1], "{retry_after:?}: {report:?}");
    }
}
