/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by tcp_traffic.bpf.c and rezolus_ue/samplers/tcp_traffic/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_TCP_TRAFFIC_H
#define REZOLUS_UE_TCP_TRAFFIC_H

/* One CPU's TCP payload counters (cumulative), padded to a cache line. */
struct tcp_traffic_counters {
	__u64 rx_bytes;		/* copied to user space (tcp_cleanup_rbuf's copied) */
	__u64 tx_bytes;		/* accepted from user space (tcp_sendmsg's return value) */
	__u64 rx_packets;	/* reads that copied data */
	__u64 tx_packets;	/* sends that accepted data */
	__u64 __pad[4];
};

#endif /* REZOLUS_UE_TCP_TRAFFIC_H */
