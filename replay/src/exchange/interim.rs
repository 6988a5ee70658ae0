//! A cap on the interim (1xx) responses before a request's final one. hyper reads past them
//! by itself, however many come: a server answering `100 Continue` forever had a request
//! parse hundreds of MiB of heads until its timeout, a core busy. Requests and `doctor`'s
//! probe take the same cap as telemetry's scrapes, canary-core's [`MAX_INTERIM`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

pub use canary_core::MAX_INTERIM;

/// Counts one request's interim responses ([`watch`]).
#[derive(Debug, Default)]
pub struct Interim {
    seen: AtomicU32,
    over: Notify,
}

impl Interim {
    /// Returns once the request has taken over [`MAX_INTERIM`] interim responses.
    pub async fn over_cap(&self) {
        self.over.notified().await;
    }
}

/// Counts the interim responses to `request` as hyper parses them.
pub fn watch<B>(request: &mut http::Request<B>) -> Arc<Interim> {
    let interim = Arc::new(Interim::default());
    let counter = interim.clone();
    hyper::ext::on_informational(request, move |_| {
        if counter.seen.fetch_add(1, Ordering::Relaxed) == MAX_INTERIM {
            // A stored permit: the request's future sees it at its next poll.
            counter.over.notify_one();
        }
    });
    interim
}
