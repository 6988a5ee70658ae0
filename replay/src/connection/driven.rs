//! hyper's side of a connection, driven by the task that uses the connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// hyper's side of a connection (it reads and writes the socket), driven by the task that
/// uses the connection rather than by a task of its own ([`driven`]).
pub(crate) type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `fut` (an exchange on the connection) and the connection's `driver` in one task.
///
/// With hyper's connection in a task of its own, every response chunk went from that task
/// to the request's and back (the body channel's "want"), and on a multi-thread runtime each
/// such wake-up tends to wake the other worker: the largest share of canaryd's context
/// switches per request after the release (issue 21). Wake-ups the two raise while this
/// task polls them are taken as one more turn of the loop here, not a rescheduling.
pub(crate) async fn driven<F: Future>(driver: &mut Option<Driver>, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let local = Arc::new(LocalWake::default());
    let waker = Waker::from(local.clone());
    std::future::poll_fn(move |cx| {
        local.set_outer(cx.waker());
        for _ in 0..LOCAL_TURNS {
            local.state.store(POLLING, Ordering::SeqCst);
            let mut inner = Context::from_waker(&waker);
            if let Some(d) = driver.as_mut() {
                if d.as_mut().poll(&mut inner).is_ready() {
                    *driver = None;
                }
            }
            if let Poll::Ready(v) = fut.as_mut().poll(&mut inner) {
                local.state.store(IDLE, Ordering::SeqCst);
                return Poll::Ready(v);
            }
            if local
                .state
                .compare_exchange(POLLING, IDLE, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Poll::Pending;
            }
            // Woken while polling: another turn.
        }
        local.state.store(IDLE, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// Turns [`driven`] takes in one poll before yielding to the runtime.
const LOCAL_TURNS: usize = 16;
const IDLE: u8 = 0;
const POLLING: u8 = 1;
const WOKEN: u8 = 2;

/// The waker [`driven`] gives the exchange and the driver: noted when it fires during their
/// poll, forwarded to the task's own waker otherwise.
#[derive(Default)]
struct LocalWake {
    state: AtomicU8,
    outer: Mutex<Option<Waker>>,
}

impl LocalWake {
    fn set_outer(&self, w: &Waker) {
        let mut outer = self.outer.lock().unwrap_or_else(|e| e.into_inner());
        if !outer.as_ref().is_some_and(|o| o.will_wake(w)) {
            *outer = Some(w.clone());
        }
    }
}

impl std::task::Wake for LocalWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) | Err(WOKEN) => {}
            Err(_) => {
                let outer = self.outer.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(w) = outer.as_ref() {
                    w.wake_by_ref();
                }
            }
        }
    }
}
