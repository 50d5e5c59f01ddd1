/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by scheduler_runqueue.bpf.c and rezolus_ue/samplers/scheduler_runqueue/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_SCHEDULER_RUNQUEUE_H
#define REZOLUS_UE_SCHEDULER_RUNQUEUE_H

/* Most threads tracked at once (LRU: the least recently switched are forgotten first). */
#define RUNQUEUE_MAX_TASKS 65536

/* One CPU's context switch counters (cumulative), padded to a cache line. */
struct runqueue_switches {
	__u64 voluntary;	/* the task left the CPU to sleep or wait */
	__u64 involuntary;	/* the task was preempted (or yielded) and stays runnable */
	__u64 idle;		/* switches away from the idle task */
	__u64 running_since_ns;	/* internal: when the current task got this CPU */
	__u64 __pad[4];
};

#endif /* REZOLUS_UE_SCHEDULER_RUNQUEUE_H */
