/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by cpu_softirq_time.bpf.c and rezolus_ue/samplers/cpu_softirq_time/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_CPU_SOFTIRQ_TIME_H
#define REZOLUS_UE_CPU_SOFTIRQ_TIME_H

/* Softirq vectors, HI_SOFTIRQ (0) to RCU_SOFTIRQ (9): NR_SOFTIRQS since Linux 3.x. */
#define SOFTIRQ_KINDS 10

/*
 * One CPU's softirq time (cumulative), written only by that CPU. Ten kinds are 80 bytes
 * and the in-flight state 16 more: padded to 128, two whole cache lines, so no CPU's line
 * shares a cache line with another's.
 */
struct softirq_time {
	__u64 time_ns[SOFTIRQ_KINDS];	/* ns spent in each kind's handlers */
	__u64 entered_ns;		/* internal: when the running handler started (0: none) */
	__u32 entered_vec;		/* internal: its vector */
	__u32 __pad0;
	__u64 __pad[4];
};

#endif /* REZOLUS_UE_CPU_SOFTIRQ_TIME_H */
