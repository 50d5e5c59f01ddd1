/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by network_traffic.bpf.c and rezolus_ue/samplers/network_traffic/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_NETWORK_TRAFFIC_H
#define REZOLUS_UE_NETWORK_TRAFFIC_H

/*
 * Drop reason slots per CPU: slot r counts kfree_skb drops with enum skb_drop_reason r;
 * slot 0 (SKB_NOT_DROPPED_YET, never a drop) counts drops whose reason is unknown: the
 * kernel has no reasons (before 5.17) or the reason is outside the table (subsystem
 * reasons have high bits set). Linux 6.18 uses 2..127.
 */
#define NETWORK_DROP_REASONS 256

/* One CPU's traffic counters (cumulative), padded to a cache line. */
struct network_traffic_counters {
	__u64 rx_bytes;		/* netif_receive_skb: skb->len */
	__u64 tx_bytes;		/* net_dev_start_xmit: skb->len */
	__u64 rx_packets;
	__u64 tx_packets;
	__u64 __pad[4];
};

/* One CPU's drops by reason (cumulative): 32 cache lines. */
struct network_drop_reasons {
	__u64 drops[NETWORK_DROP_REASONS];
};

#endif /* REZOLUS_UE_NETWORK_TRAFFIC_H */
