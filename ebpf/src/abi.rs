//! The event the kernel programs write to the ring buffer: a mirror of `struct socket_event`
//! in `bpf/socket.h`. Keep the two in step; the size test below catches a field added on one
//! side only.

/// `enum socket_event_kind` in `bpf/socket.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The socket's TCP state changed (`state` is the new one).
    State,
    /// A send call handed `bytes` to TCP.
    Send,
    /// TCP queued newly received bytes for the reader.
    Data,
    /// The socket was destroyed.
    Close,
}

/// TCP states as the kernel numbers them (`include/net/tcp_states.h`).
pub mod tcp_state {
    /// Connection open.
    pub const ESTABLISHED: u32 = 1;
    /// `connect()` sent the SYN.
    pub const SYN_SENT: u32 = 2;
    /// Closed.
    pub const CLOSE: u32 = 7;
    /// The peer's FIN arrived.
    pub const CLOSE_WAIT: u32 = 8;
    /// Peer's FIN arrived, then ours was sent.
    pub const LAST_ACK: u32 = 9;
    /// Both sides' FINs crossed.
    pub const CLOSING: u32 = 11;

    /// States reached only after the peer's FIN arrived (which TCP counts as one byte in
    /// `bytes_received`).
    pub fn after_peer_fin(state: u32) -> bool {
        matches!(state, CLOSE_WAIT | LAST_ACK | CLOSING)
    }
}

/// One socket event, as written by the kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketEvent {
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, the clock of `canary_core::MonoTime`.
    pub ts_ns: u64,
    /// The socket cookie (`SO_COOKIE`).
    pub cookie: u64,
    /// Payload bytes TCP had received on the socket so far (`tcp_sock.bytes_received`).
    pub bytes_received: u64,
    /// For sends: bytes this call accepted.
    pub bytes: u32,
    /// `enum socket_event_kind`.
    pub kind: u32,
    /// For state events: the new TCP state.
    pub state: u32,
    /// Smoothed RTT in µs at the event.
    pub srtt_us: u32,
    /// Segments retransmitted on the socket so far.
    pub total_retrans: u32,
    _pad: u32,
}

impl SocketEvent {
    /// Size of the C struct.
    pub const SIZE: usize = std::mem::size_of::<SocketEvent>();

    /// Decodes one ring-buffer record; `None` when it is too short (a kernel/userspace
    /// mismatch, never expected).
    pub fn from_bytes(b: &[u8]) -> Option<SocketEvent> {
        if b.len() < Self::SIZE {
            return None;
        }
        // SAFETY: SocketEvent is repr(C), every bit pattern is valid, and the length is
        // checked; read_unaligned because ring-buffer records are only 8-byte aligned.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<SocketEvent>()) })
    }

    /// An event built in userspace (tests, replayed logs).
    pub fn new(ts_ns: u64, cookie: u64, kind: EventKind, state: u32, bytes: u32) -> SocketEvent {
        SocketEvent {
            ts_ns,
            cookie,
            kind: match kind {
                EventKind::State => 1,
                EventKind::Send => 2,
                EventKind::Data => 3,
                EventKind::Close => 4,
            },
            state,
            bytes,
            ..Default::default()
        }
    }

    /// The kind, `None` for a number this build does not know.
    pub fn kind(&self) -> Option<EventKind> {
        match self.kind {
            1 => Some(EventKind::State),
            2 => Some(EventKind::Send),
            3 => Some(EventKind::Data),
            4 => Some(EventKind::Close),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_c_struct() {
        // struct socket_event: 3 × u64 + 6 × u32, no padding.
        assert_eq!(SocketEvent::SIZE, 48);
        assert_eq!(std::mem::align_of::<SocketEvent>(), 8);
        assert_eq!(std::mem::offset_of!(SocketEvent, bytes), 24);
        assert_eq!(std::mem::offset_of!(SocketEvent, total_retrans), 40);
    }

    #[test]
    fn decodes_what_it_encodes_and_rejects_short_records() {
        let e = SocketEvent::new(5, 7, EventKind::Send, 0, 100);
        // SAFETY: viewing a repr(C) POD struct as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&e as *const SocketEvent).cast::<u8>(), SocketEvent::SIZE)
        };
        assert_eq!(SocketEvent::from_bytes(bytes), Some(e));
        assert_eq!(SocketEvent::from_bytes(&bytes[..40]), None);
        assert_eq!(e.kind(), Some(EventKind::Send));
    }
}
