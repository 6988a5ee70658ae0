//! The cap on interim (1xx) responses before a request's final one, the same for every HTTP
//! client canaryd has: the replay's requests, `doctor`'s probe, the telemetry scrapes. hyper
//! reads past 1xx heads by itself, however many come: a server answering `100 Continue`
//! forever would have a request parse heads until its timeout, a core busy.
//!
//! [`InterimCount`] is the one count every client keeps. It knows no HTTP library: each
//! client hands it to hyper's `on_informational` hook and races [`InterimCount::over_cap`]
//! against the response, dropping the request when the cap is passed.

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::task::{Poll, Waker};

/// Interim responses a request may take before its final one. RFC 9110 allows several (a
/// `100 Continue`, then `103 Early Hints` with more links each); servers send one or two, so
/// 16 is far above any real answer and still bounds a flood to 16 heads, each within hyper's
/// head size cap.
pub const MAX_INTERIM: u32 = 16;

/// One request's interim responses, counted against [`MAX_INTERIM`] as its client parses
/// them (from another task: hyper's connection task calls the hook).
#[derive(Debug, Default)]
pub struct InterimCount {
    seen: AtomicU32,
    over: AtomicBool,
    /// The task waiting in [`InterimCount::over_cap`], woken when the cap is passed.
    waiter: Mutex<Option<Waker>>,
}

impl InterimCount {
    /// Counts one interim response; the one past [`MAX_INTERIM`] wakes the request's task.
    pub fn count(&self) {
        if self.seen.fetch_add(1, Ordering::Relaxed) == MAX_INTERIM {
            self.over.store(true, Ordering::Release);
            // Taken after the flag is set: a waiter that stored itself before this sees the
            // wake, one that stores itself later sees the flag (it checks after storing).
            if let Some(waker) = self.waiter().take() {
                waker.wake();
            }
        }
    }

    /// True once over [`MAX_INTERIM`] interim responses were counted.
    fn is_over(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    /// Returns once the request has taken over [`MAX_INTERIM`] interim responses (at once
    /// if it already has).
    pub fn over_cap(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            if self.is_over() {
                return Poll::Ready(());
            }
            *self.waiter() = Some(cx.waker().clone());
            if self.is_over() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    fn waiter(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        self.waiter.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Wake};

    /// A waker that records whether it was woken.
    #[derive(Default)]
    struct Woken(AtomicBool);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_response_past_the_cap_wakes_the_waiting_request_and_none_before() {
        let count = InterimCount::default();
        let woken = Arc::new(Woken::default());
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut over = pin!(count.over_cap());
        assert!(over.as_mut().poll(&mut cx).is_pending());
        for _ in 0..MAX_INTERIM {
            count.count();
        }
        assert!(
            !woken.0.load(Ordering::SeqCst),
            "woken at the cap, not past it"
        );
        assert!(over.as_mut().poll(&mut cx).is_pending());
        count.count();
        assert!(woken.0.load(Ordering::SeqCst));
        assert!(over.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_wait_that_begins_past_the_cap_ends_at_once_and_later_responses_change_nothing() {
        let count = InterimCount::default();
        for _ in 0..=MAX_INTERIM + 3 {
            count.count();
        }
        assert!(count.is_over());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(pin!(count.over_cap()).poll(&mut cx).is_ready());
        assert!(pin!(count.over_cap()).poll(&mut cx).is_ready());
    }
}
