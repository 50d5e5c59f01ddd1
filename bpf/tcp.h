/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by tcp.bpf.c and rezolus_ue/samplers/tcp/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_TCP_H
#define REZOLUS_UE_TCP_H

/* Sockets with unread data tracked at once (LRU: the oldest are forgotten first). */
#define TCP_MAX_SOCKETS 16384
/* Connections in SYN_SENT tracked at once (LRU). */
#define TCP_MAX_CONNECTING 8192

/* One CPU's TCP counters (cumulative), padded to a cache line. */
struct tcp_counters {
	__u64 retransmits;	 /* segments retransmitted (tcp_retransmit_skb, err == 0) */
	__u64 retransmit_errors; /* failed retransmissions (where the tracepoint has an
				  * err argument: 6.18 has, 6.12 has not) */
	__u64 __pad[6];
};

#endif /* REZOLUS_UE_TCP_H */
