// SPDX-License-Identifier: GPL-2.0
/*
 * tcp_traffic: TCP payload bytes and calls by direction, as the application sees them
 * (Rezolus's tcp_traffic sampler). User space: rezolus_ue/samplers/tcp_traffic/.
 *
 * No tracepoint carries these, so the hooks are kernel functions, each in two variants of
 * which user space loads one, chosen by probing: fentry/fexit (tt_fentry_*, tt_fexit_*:
 * BPF trampolines, need dynamic ftrace) > kprobe/kretprobe (tt_kprobe_*, tt_kret_*: need
 * CONFIG_KPROBES):
 *   tcp_sendmsg (return)   bytes accepted by a send (sendmsg, write, sendfile/splice)
 *   tcp_cleanup_rbuf       bytes a read copied (recvmsg, read, and tcp_read_sock users)
 * (Rezolus counts the requested size at tcp_sendmsg's entry; the return value counts what
 * was really queued, and only TCP sockets reach either function.)
 *
 * Maps (BPF_F_MMAPABLE array, read by user space through mmap):
 *   counters  per CPU: struct tcp_traffic_counters, one cache line per CPU
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "maps.bpf.h"
#include "tcp_traffic.h"

char LICENSE[] SEC("license") = "GPL";

PER_CPU_LINES(counters, struct tcp_traffic_counters);

static __always_inline void on_send(int sent)
{
	struct tcp_traffic_counters *c;

	if (sent <= 0)
		return;
	c = this_cpu_line(&counters);
	if (!c)
		return;
	c->tx_bytes += sent;
	c->tx_packets++;
}

static __always_inline void on_recv(int copied)
{
	struct tcp_traffic_counters *c;

	if (copied <= 0)
		return;
	c = this_cpu_line(&counters);
	if (!c)
		return;
	c->rx_bytes += copied;
	c->rx_packets++;
}

/* fentry/fexit: BPF trampolines, typed arguments (and the return value in fexit). */

SEC("fexit/tcp_sendmsg")
int BPF_PROG(tt_fexit_send, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	on_send(ret);
	return 0;
}

SEC("fentry/tcp_cleanup_rbuf")
int BPF_PROG(tt_fentry_recv, struct sock *sk, int copied)
{
	on_recv(copied);
	return 0;
}

/* kprobe/kretprobe: registers. */

SEC("kretprobe/tcp_sendmsg")
int BPF_KRETPROBE(tt_kret_send, int ret)
{
	on_send(ret);
	return 0;
}

SEC("kprobe/tcp_cleanup_rbuf")
int BPF_KPROBE(tt_kprobe_recv, struct sock *sk, int copied)
{
	on_recv(copied);
	return 0;
}
