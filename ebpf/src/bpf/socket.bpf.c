// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Socket timing for canaryd's own TCP connections.
 *
 * A socket is tracked from the moment canaryd's process moves it to SYN_SENT (connect), keyed
 * by its cookie; every later event on it (state changes, sends, data arriving, destruction) is
 * written to a ring buffer. Everything else on the host costs one map lookup and is dropped in
 * the kernel. The pid is only used in connect, which runs in the caller's context: data arrives
 * in softirq context, where the current task is whoever happened to run.
 *
 * Only tp_btf programs: fentry/fexit and kprobes are unavailable under kernel lockdown or
 * without CONFIG_KPROBES, tp_btf works wherever BTF does (5.5+; sk_data_ready needs 6.4).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "socket.h"

/* Only the fields read, relocated by CO-RE against the running kernel's BTF. */
struct sock {
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 srtt_us;
	__u32 total_retrans;
	__u64 bytes_received;
} __attribute__((preserve_access_index));

#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2

/* Set by the loader: canaryd's process id. */
const volatile __u32 target_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* Cookies of canaryd's sockets. LRU: a socket whose destroy event was missed ages out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u8);
} tracked SEC(".maps");

/* [0]: events lost because the ring buffer was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

static __always_inline void emit(struct sock *sk, __u64 cookie, __u32 kind, __u32 state,
				 __u32 bytes)
{
	__u64 now = bpf_ktime_get_ns();
	struct socket_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
		return;
	}
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	e->ts_ns = now;
	e->cookie = cookie;
	e->bytes_received = BPF_CORE_READ(tp, bytes_received);
	e->bytes = bytes;
	e->kind = kind;
	e->state = state;
	e->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	e->total_retrans = BPF_CORE_READ(tp, total_retrans);
	e->_pad = 0;
	/* No wakeup: userspace drains on a timer and never sleeps on the ring, so the default
	 * (an irq_work whenever the consumer has caught up, i.e. almost every event) is wasted. */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state, struct sock *sk, int oldstate, int newstate)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	if (newstate == TCP_SYN_SENT) {
		if ((__u32)(bpf_get_current_pid_tgid() >> 32) != target_tgid)
			return 0;
		__u8 one = 1;
		bpf_map_update_elem(&tracked, &cookie, &one, BPF_ANY);
	} else if (!bpf_map_lookup_elem(&tracked, &cookie)) {
		return 0;
	}
	emit(sk, cookie, SOCKET_EVENT_STATE, newstate, 0);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_send, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	if (!bpf_map_lookup_elem(&tracked, &cookie))
		return 0;
	emit(sk, cookie, SOCKET_EVENT_SEND, 0, ret);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(on_data, struct sock *sk)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	if (!bpf_map_lookup_elem(&tracked, &cookie))
		return 0;
	emit(sk, cookie, SOCKET_EVENT_DATA, 0, 0);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(on_destroy, struct sock *sk)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	if (!bpf_map_lookup_elem(&tracked, &cookie))
		return 0;
	emit(sk, cookie, SOCKET_EVENT_CLOSE, 0, 0);
	bpf_map_delete_elem(&tracked, &cookie);
	return 0;
}

/* The kernel requires a GPL-compatible license for these helpers; this file is dual-licensed. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
