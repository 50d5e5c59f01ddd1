// SPDX-License-Identifier: GPL-2.0
/*
 * tcp: packet latency, smoothed RTT and its deviation (jitter), connect latency and
 * retransmits, from tracepoints only (Rezolus's tcp_packet_latency, tcp_receive,
 * tcp_connect_latency and tcp_retransmit samplers). User space: rezolus_ue/samplers/tcp/.
 * Bytes by direction need function hooks: tcp_traffic.bpf.c.
 *
 * Hooks, each in three variants of which user space loads one, chosen by probing the
 * kernel: tp_btf (tcp_btf_*) > raw_tp (tcp_raw_*) > tracepoint (tcp_tp_*):
 *   tcp:tcp_probe             a segment arrived on an established socket (in
 *                             tcp_rcv_established): srtt and mdev samples; if it carries
 *                             data, remember when (the first unread one per socket)
 *   tcp:tcp_rcv_space_adjust  user space read from the socket: packet latency
 *   tcp:tcp_destroy_sock      forget the socket
 *   sock:inet_sock_set_state  TCP SYN_SENT -> ESTABLISHED: connect latency
 *   tcp:tcp_retransmit_skb    a segment was retransmitted
 *
 * Maps (BPF_F_MMAPABLE arrays, read by user space through mmap):
 *   pktlat    H2 histogram, ns: data segment arrived until the application read it
 *   srtt      H2 histogram, ns: smoothed RTT (tcp_sock.srtt_us / 8) per received segment
 *   jitter    H2 histogram, ns: RTT mean deviation (tcp_sock.mdev_us / 4) per segment
 *   connlat   H2 histogram, ns: SYN_SENT until ESTABLISHED (active opens)
 *   counters  per CPU: retransmits (struct tcp_counters, one cache line per CPU)
 * Sockets are keyed by their address; the hash maps are not kept across unloads, so a
 * timestamp never outlives the attachment that took it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "maps.bpf.h"
#include "tcp.h"

char LICENSE[] SEC("license") = "GPL";

H2_HISTOGRAM(pktlat);
H2_HISTOGRAM(srtt);
H2_HISTOGRAM(jitter);
H2_HISTOGRAM(connlat);
PER_CPU_LINES(counters, struct tcp_counters);

/* socket -> when its oldest unread data segment arrived */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u64);
	__type(value, __u64);
	__uint(max_entries, TCP_MAX_SOCKETS);
} unread SEC(".maps");

/* socket -> when it entered SYN_SENT */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u64);
	__type(value, __u64);
	__uint(max_entries, TCP_MAX_CONNECTING);
} connecting SEC(".maps");

static __always_inline void on_rtt(__u32 srtt_us8, __u32 mdev_us4, bool have_mdev)
{
	if (!srtt_us8)
		return; /* no RTT sample yet */
	h2_record(&srtt, (__u64)srtt_us8 * 1000 >> 3);
	if (have_mdev)
		h2_record(&jitter, (__u64)mdev_us4 * 1000 >> 2);
}

static __always_inline void on_data(__u64 sk, __u32 payload)
{
	__u64 now;

	/*
	 * Keep the oldest unread segment's time: latency is to the read that drains it. Look
	 * up first: an LRU update takes a free node before it checks the key.
	 */
	if (!payload || bpf_map_lookup_elem(&unread, &sk))
		return;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&unread, &sk, &now, BPF_NOEXIST);
}

static __always_inline void on_read(__u64 sk)
{
	__u64 *ts = bpf_map_lookup_elem(&unread, &sk);
	__u64 now;

	if (!ts)
		return;
	now = bpf_ktime_get_ns();
	if (now > *ts)
		h2_record(&pktlat, now - *ts);
	bpf_map_delete_elem(&unread, &sk);
}

static __always_inline void on_destroy(__u64 sk)
{
	bpf_map_delete_elem(&unread, &sk);
}

static __always_inline void on_state(__u64 sk, __u16 protocol, int oldstate, int newstate)
{
	__u64 now, *ts;

	if (protocol != IPPROTO_TCP)
		return;
	if (newstate == TCP_SYN_SENT) {
		now = bpf_ktime_get_ns();
		bpf_map_update_elem(&connecting, &sk, &now, BPF_ANY);
		return;
	}
	if (oldstate != TCP_SYN_SENT)
		return;
	ts = bpf_map_lookup_elem(&connecting, &sk);
	if (!ts)
		return;
	now = bpf_ktime_get_ns();
	if (newstate == TCP_ESTABLISHED && now > *ts)
		h2_record(&connlat, now - *ts);
	bpf_map_delete_elem(&connecting, &sk); /* established, or failed (CLOSE) */
}

static __always_inline void on_retransmit(int err)
{
	struct tcp_counters *c = this_cpu_line(&counters);

	if (!c)
		return;
	if (err)
		c->retransmit_errors++;
	else
		c->retransmits++;
}

/* Payload bytes of a received segment: skb->len past the TCP header (data at the header). */
static __always_inline __u32 payload_len(__u32 len, const unsigned char *data)
{
	const struct tcphdr *th = (const struct tcphdr *)data;
	__u32 hdr = BPF_CORE_READ_BITFIELD_PROBED(th, doff) * 4;

	return len > hdr ? len - hdr : 0;
}

/* The retransmit tracepoint got its err argument when it started tracing failures. */
#define HAVE_RETRANSMIT_ERR bpf_core_field_exists(struct trace_event_raw_tcp_retransmit_skb, err)

/* tp_btf: BTF-typed arguments, direct access. */

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_btf_probe, struct sock *sk, struct sk_buff *skb)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);

	if (!tp)
		return 0;
	on_rtt(tp->srtt_us, tp->mdev_us, true);
	on_data((__u64)sk, payload_len(skb->len, skb->data));
	return 0;
}

SEC("tp_btf/tcp_rcv_space_adjust")
int BPF_PROG(tcp_btf_rcvspc, struct sock *sk)
{
	on_read((__u64)sk);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tcp_btf_destroy, struct sock *sk)
{
	on_destroy((__u64)sk);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tcp_btf_state, struct sock *sk, int oldstate, int newstate)
{
	on_state((__u64)sk, BPF_CORE_READ_BITFIELD_PROBED(sk, sk_protocol), oldstate, newstate);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_btf_retrans, struct sock *sk, struct sk_buff *skb)
{
	on_retransmit(HAVE_RETRANSMIT_ERR ? (int)ctx[2] : 0);
	return 0;
}

/* raw_tp: the same arguments, read with CO-RE probe reads. */

SEC("raw_tp/tcp_probe")
int BPF_PROG(tcp_raw_probe, struct sock *sk, struct sk_buff *skb)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	on_rtt(BPF_CORE_READ(tp, srtt_us), BPF_CORE_READ(tp, mdev_us), true);
	on_data((__u64)sk, payload_len(BPF_CORE_READ(skb, len), BPF_CORE_READ(skb, data)));
	return 0;
}

SEC("raw_tp/tcp_rcv_space_adjust")
int BPF_PROG(tcp_raw_rcvspc, struct sock *sk)
{
	on_read((__u64)sk);
	return 0;
}

SEC("raw_tp/tcp_destroy_sock")
int BPF_PROG(tcp_raw_destroy, struct sock *sk)
{
	on_destroy((__u64)sk);
	return 0;
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(tcp_raw_state, struct sock *sk, int oldstate, int newstate)
{
	on_state((__u64)sk, BPF_CORE_READ_BITFIELD_PROBED(sk, sk_protocol), oldstate, newstate);
	return 0;
}

SEC("raw_tp/tcp_retransmit_skb")
int BPF_PROG(tcp_raw_retrans, struct sock *sk, struct sk_buff *skb)
{
	on_retransmit(HAVE_RETRANSMIT_ERR ? (int)ctx[2] : 0);
	return 0;
}

/* tracepoint: the classic formatted records. */

SEC("tp/tcp/tcp_probe")
int tcp_tp_probe(struct trace_event_raw_tcp_probe *ctx)
{
	struct tcp_sock *tp;

	/* The record has srtt in us (not x8); older kernels have no socket address in it. */
	if (!bpf_core_field_exists(ctx->skaddr)) {
		on_rtt(ctx->srtt << 3, 0, false);
		return 0;
	}
	tp = (struct tcp_sock *)ctx->skaddr;
	on_rtt(BPF_CORE_READ(tp, srtt_us), BPF_CORE_READ(tp, mdev_us), true);
	on_data((__u64)ctx->skaddr, ctx->data_len);
	return 0;
}

SEC("tp/tcp/tcp_rcv_space_adjust")
int tcp_tp_rcvspc(struct trace_event_raw_tcp_event_sk *ctx)
{
	on_read((__u64)ctx->skaddr);
	return 0;
}

SEC("tp/tcp/tcp_destroy_sock")
int tcp_tp_destroy(struct trace_event_raw_tcp_event_sk *ctx)
{
	on_destroy((__u64)ctx->skaddr);
	return 0;
}

SEC("tp/sock/inet_sock_set_state")
int tcp_tp_state(struct trace_event_raw_inet_sock_set_state *ctx)
{
	on_state((__u64)ctx->skaddr, ctx->protocol, ctx->oldstate, ctx->newstate);
	return 0;
}

SEC("tp/tcp/tcp_retransmit_skb")
int tcp_tp_retrans(struct trace_event_raw_tcp_retransmit_skb *ctx)
{
	int err = 0;

	if (bpf_core_field_exists(ctx->err))
		err = ctx->err;
	on_retransmit(err);
	return 0;
}
