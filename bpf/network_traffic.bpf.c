// SPDX-License-Identifier: GPL-2.0
/*
 * network_traffic: bytes and packets received and transmitted by every interface, and
 * dropped packets by reason (Rezolus's network traffic sampler, plus drops). User space:
 * rezolus_ue/samplers/network_traffic/.
 *
 * Hooks, each in three variants of which user space loads one, chosen by probing the
 * kernel: tp_btf (nt_btf_*) > raw_tp (nt_raw_*) > tracepoint (nt_tp_*):
 *   net:netif_receive_skb    a packet enters the stack (after GRO): rx bytes, packets
 *   net:net_dev_start_xmit   a packet goes to a driver: tx bytes, packets
 *   skb:kfree_skb            a packet is dropped: by enum skb_drop_reason where the kernel
 *                            has it (5.17+, probed by CO-RE), else in the "unknown" slot
 *
 * Maps (BPF_F_MMAPABLE arrays, one entry per CPU written only by that CPU, summed by user
 * space through mmap):
 *   traffic  struct network_traffic_counters (one cache line per CPU)
 *   drops    struct network_drop_reasons (NETWORK_DROP_REASONS counters per CPU)
 * Bytes are skb->len: the L2 header is included on transmit, not on receive; a GSO/GRO
 * super-packet counts as one packet. A packet crossing several devices (veth, bridge,
 * bond, lo) is counted on each.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "maps.bpf.h"
#include "network_traffic.h"

char LICENSE[] SEC("license") = "GPL";

PER_CPU_LINES(traffic, struct network_traffic_counters);
PER_CPU_LINES(drops, struct network_drop_reasons);

static __always_inline void count_rx(__u32 len)
{
	struct network_traffic_counters *c = this_cpu_line(&traffic);

	if (!c)
		return;
	c->rx_bytes += len;
	c->rx_packets++;
}

static __always_inline void count_tx(__u32 len)
{
	struct network_traffic_counters *c = this_cpu_line(&traffic);

	if (!c)
		return;
	c->tx_bytes += len;
	c->tx_packets++;
}

static __always_inline void count_drop(__u32 reason)
{
	struct network_drop_reasons *d;

	/* Freed, not dropped (kfree_skb_reason with SKB_CONSUMED, kernels that trace it). */
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_CONSUMED) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_CONSUMED))
		return;
	d = this_cpu_line(&drops);
	if (!d)
		return;
	if (reason >= NETWORK_DROP_REASONS)
		reason = 0;
	d->drops[reason & (NETWORK_DROP_REASONS - 1)]++;
}

/* The reason argument arrived with enum skb_drop_reason (Linux 5.17). */
#define HAVE_DROP_REASON bpf_core_type_exists(enum skb_drop_reason)

/* tp_btf: BTF-typed arguments, direct access. */

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(nt_btf_rx, struct sk_buff *skb)
{
	count_rx(skb->len);
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(nt_btf_tx, struct sk_buff *skb)
{
	count_tx(skb->len);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(nt_btf_drop, struct sk_buff *skb, void *location)
{
	/* ctx[2] only where it exists: the dead branch is never verified on old kernels. */
	count_drop(HAVE_DROP_REASON ? (__u32)ctx[2] : 0);
	return 0;
}

/* raw_tp: the same arguments, read with CO-RE probe reads. */

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(nt_raw_rx, struct sk_buff *skb)
{
	count_rx(BPF_CORE_READ(skb, len));
	return 0;
}

SEC("raw_tp/net_dev_start_xmit")
int BPF_PROG(nt_raw_tx, struct sk_buff *skb)
{
	count_tx(BPF_CORE_READ(skb, len));
	return 0;
}

SEC("raw_tp/kfree_skb")
int BPF_PROG(nt_raw_drop, struct sk_buff *skb, void *location)
{
	count_drop(HAVE_DROP_REASON ? (__u32)ctx[2] : 0);
	return 0;
}

/* tracepoint: the classic formatted records. */

SEC("tp/net/netif_receive_skb")
int nt_tp_rx(struct trace_event_raw_net_dev_template *ctx)
{
	count_rx(ctx->len);
	return 0;
}

SEC("tp/net/net_dev_start_xmit")
int nt_tp_tx(struct trace_event_raw_net_dev_start_xmit *ctx)
{
	count_tx(ctx->len);
	return 0;
}

SEC("tp/skb/kfree_skb")
int nt_tp_drop(struct trace_event_raw_kfree_skb *ctx)
{
	__u32 reason = 0;

	if (bpf_core_field_exists(ctx->reason))
		reason = ctx->reason;
	count_drop(reason);
	return 0;
}
