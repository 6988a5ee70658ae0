//! Kernel software receive timestamps on a TCP socket, for canaryd's client (the response
//! events, `canary-replay`'s `rx_stamp`) and its simulator (a request's arrival,
//! `canary-sim`'s truth).
//!
//! Linux stamps every received segment in software when any socket asks for it, and with
//! `SO_TIMESTAMPING` (`SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE`) `recvmsg`
//! returns, with each read, the stamp of the last segment that read consumed: no privilege
//! needed. On loopback the stamp is taken when the sender's segment enters the receive path
//! (`netif_rx`), inside the sender's `write`.
//!
//! The stamp is `CLOCK_REALTIME`; canaryd's times are `CLOCK_MONOTONIC`, and the map between
//! the two is `canary_core::RealtimeMap` (each user measures and refreshes its own).
//!
//! A stamp is the arrival of the *last* segment a read consumed, and no earlier one can be
//! recovered: the kernel merges segments queued behind an unread one into it
//! (`tcp_try_coalesce`) and moves its stamp to the latest. So a stamp is never earlier than the
//! arrival of any byte the read returned, and is that arrival exactly only when nothing came
//! after it before the read.

mod probe;
mod recv;
mod stream;

pub use probe::{wait_until_stamped, StampingHold};
#[cfg(feature = "count-calls")]
pub use recv::recvmsg_calls;
pub use recv::{enable, recv_stamped};
pub use stream::{poll_recv, Received};
