/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * The one event the socket programs send to userspace, mirrored by `abi::SocketEvent` in Rust
 * (a test there checks the size). Every field is read in the kernel at the moment of the event,
 * on CLOCK_MONOTONIC (bpf_ktime_get_ns), so userspace can join it to records on the same clock.
 */
#ifndef CANARY_SOCKET_H
#define CANARY_SOCKET_H

enum socket_event_kind {
	/* inet_sock_set_state: `state` is the new TCP state. */
	SOCKET_EVENT_STATE = 1,
	/* sock_send_length: a send call handed `bytes` to TCP. */
	SOCKET_EVENT_SEND = 2,
	/* sk_data_ready: TCP queued new bytes for the reader (`bytes_received` counts them). */
	SOCKET_EVENT_DATA = 3,
	/* tcp_destroy_sock: the socket is gone; its last counters. */
	SOCKET_EVENT_CLOSE = 4,
};

struct socket_event {
	__u64 ts_ns;
	/* bpf_get_socket_cookie == getsockopt(SO_COOKIE) on the same socket. */
	__u64 cookie;
	/* tcp_sock.bytes_received: payload bytes TCP has received on this socket so far. */
	__u64 bytes_received;
	/* SEND: bytes this call accepted. */
	__u32 bytes;
	__u32 kind;
	/* STATE: the new state (TCP_ESTABLISHED = 1, TCP_SYN_SENT = 2, TCP_CLOSE = 7, ...). */
	__u32 state;
	/* tcp_sock.srtt_us >> 3: smoothed RTT in microseconds. */
	__u32 srtt_us;
	/* tcp_sock.total_retrans: segments retransmitted on this socket so far. */
	__u32 total_retrans;
	__u32 _pad;
};

#endif
