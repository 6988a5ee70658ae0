//! A cap on the interim (1xx) responses before a request's final one. hyper reads past them
//! by itself, however many come: a server answering `100 Continue` forever had a request
//! parse hundreds of MiB of heads until its timeout, a core busy. Requests and `doctor`'s
//! probe take the same cap, and the same count, as telemetry's scrapes: canary-core's
//! [`InterimCount`] against [`MAX_INTERIM`].

use std::sync::Arc;

pub use canary_core::{InterimCount, MAX_INTERIM};

/// Counts the interim responses to `request` as hyper parses them: race
/// [`InterimCount::over_cap`] against the response.
pub fn watch<B>(request: &mut http::Request<B>) -> Arc<InterimCount> {
    let interim = Arc::new(InterimCount::default());
    let counter = interim.clone();
    hyper::ext::on_informational(request, move |_| counter.count());
    interim
}
