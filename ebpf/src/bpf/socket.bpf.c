// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Socket timing for canaryd's own TCP connections.
 *
 * A socket is tracked from the moment canaryd's process moves it to SYN_SENT (connect): it gets
 * a socket-local storage entry holding its cookie, and every later event on it (state changes,
 * sends, data arriving, destruction) is written to a ring buffer keyed by that cookie. Every
 * other socket on the host costs one socket-storage lookup (a pointer test when the socket has
 * no storage at all) and is dropped in the kernel. The pid is only used in connect, which runs
 * in the caller's context: data arrives in softirq context, where the current task is whoever
 * happened to run. It is compared as canaryd's own PID namespace numbers it, so a container
 * without the host's PID namespace is followed too.
 *
 * Only tp_btf programs: fentry/fexit and kprobes are unavailable under kernel lockdown or
 * without CONFIG_KPROBES, tp_btf works wherever BTF does (5.5+; sk_data_ready needs 6.4).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

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

/* Set by the loader: canaryd's process id as its own PID namespace numbers it, and that
 * namespace (the device, in the kernel's encoding, and inode of /proc/self/ns/pid). With no
 * namespace given (inode 0) the id is compared as the initial namespace numbers it. */
const volatile __u32 target_tgid = 0;
const volatile __u64 target_pidns_dev = 0;
const volatile __u64 target_pidns_ino = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* canaryd's sockets: their cookie, stored on the socket itself, so it goes when the socket does
 * and untracked sockets never get a cookie generated. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} tracked SEC(".maps");

/* [0]: events lost because the ring buffer was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Whether the current task belongs to canaryd's process. */
static __always_inline int is_target(void)
{
	if (!target_pidns_ino)
		return (__u32)(bpf_get_current_pid_tgid() >> 32) == target_tgid;
	struct bpf_pidns_info ns = {};
	/* Fails (-EINVAL) for a task in another PID namespace: not canaryd's. */
	if (bpf_get_ns_current_pid_tgid(target_pidns_dev, target_pidns_ino, &ns, sizeof(ns)))
		return 0;
	return ns.tgid == target_tgid;
}

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
	e->ts_ns = now;
	e->cookie = cookie;
	e->bytes = bytes;
	e->kind = kind;
	e->state = state;
	e->_pad = 0;
	/* A typed pointer: plain loads, relocated by CO-RE, no probe-read helper calls. */
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		e->bytes_received = tp->bytes_received;
		e->srtt_us = tp->srtt_us >> 3;
		e->total_retrans = tp->total_retrans;
	} else {
		e->bytes_received = 0;
		e->srtt_us = 0;
		e->total_retrans = 0;
	}
	/* No wakeup: userspace drains on a timer and never sleeps on the ring, so the default
	 * (an irq_work whenever the consumer has caught up, i.e. almost every event) is wasted. */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state, struct sock *sk, int oldstate, int newstate)
{
	__u64 *cookie;
	if (newstate == TCP_SYN_SENT) {
		if (!is_target())
			return 0;
		cookie = bpf_sk_storage_get(&tracked, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!cookie)
			return 0;
		*cookie = bpf_get_socket_cookie(sk);
	} else {
		cookie = bpf_sk_storage_get(&tracked, sk, 0, 0);
		if (!cookie)
			return 0;
	}
	emit(sk, *cookie, SOCKET_EVENT_STATE, newstate, 0);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_send, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	__u64 *cookie = bpf_sk_storage_get(&tracked, sk, 0, 0);
	if (!cookie)
		return 0;
	emit(sk, *cookie, SOCKET_EVENT_SEND, 0, ret);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(on_data, struct sock *sk)
{
	__u64 *cookie = bpf_sk_storage_get(&tracked, sk, 0, 0);
	if (!cookie)
		return 0;
	emit(sk, *cookie, SOCKET_EVENT_DATA, 0, 0);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(on_destroy, struct sock *sk)
{
	__u64 *cookie = bpf_sk_storage_get(&tracked, sk, 0, 0);
	if (!cookie)
		return 0;
	emit(sk, *cookie, SOCKET_EVENT_CLOSE, 0, 0);
	return 0;
}

/* The kernel requires a GPL-compatible license for these helpers; this file is dual-licensed. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
