//! The end of a streamed response still to come after `[DONE]` (the chunked terminator),
//! kept with its connection instead of waited for.
//!
//! A body dropped before its end makes hyper close the connection, and a request racing that
//! close on a pooled connection fails with a reset, so a connection is reused only once its
//! last body ended cleanly. Waiting for that end under a timeout cost a tokio timer for
//! half the requests, and tokio wakes its time driver (an eventfd write that wakes the other
//! worker) for every timer earlier than all pending ones: 0.49 per request (perf, issue 21).
//! The end comes microseconds after `[DONE]`, long before the connection is taken again
//! (requests take theirs ahead of their deadline), so the pool looks at it then, without
//! waiting and without a timer.

use canary_core::MonoTime;
use hyper::body::{Body, Incoming};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// How long a body's end may be still to come before its connection is given up (closed).
pub(crate) const TAIL_LIMIT: Duration = Duration::from_millis(250);

/// A response body read past `[DONE]`, and since when.
pub(crate) struct Tail {
    body: Incoming,
    since: MonoTime,
}

/// Where a [`Tail`] stands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TailState {
    /// Ended with nothing but framing: the connection can carry another request.
    Clean,
    /// More than framing came, or the body failed, or its end is later than [`TAIL_LIMIT`]:
    /// the connection is closed.
    Spoilt,
    /// Its end may still come: the connection waits in the pool.
    Pending,
}

impl Tail {
    /// `body`, read past `[DONE]` at `since`.
    pub fn new(body: Incoming, since: MonoTime) -> Tail {
        Tail { body, since }
    }

    /// Where it stands at `now`, reading what came without waiting.
    pub fn check(&mut self, now: MonoTime) -> TailState {
        match read_now(&mut self.body) {
            Some(true) => TailState::Clean,
            Some(false) => TailState::Spoilt,
            None if now.since(self.since) > TAIL_LIMIT => TailState::Spoilt,
            None => TailState::Pending,
        }
    }
}

/// Reads what has come of `body` without waiting: `Some(true)` when it ended with nothing
/// but framing (whitespace) after what was read before, `Some(false)` when more came or it
/// failed, `None` when its end has not come yet.
pub(crate) fn read_now(body: &mut Incoming) -> Option<bool> {
    // Nothing waits on this body: whoever looks next polls it again.
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match Pin::new(&mut *body).poll_frame(&mut cx) {
            Poll::Pending => return None,
            Poll::Ready(None) => return Some(true),
            Poll::Ready(Some(Ok(f))) => {
                if f.data_ref()
                    .is_some_and(|d| !d.iter().all(u8::is_ascii_whitespace))
                {
                    return Some(false);
                }
            }
            Poll::Ready(Some(Err(_))) => return Some(false),
        }
    }
}
