/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by cgroup_scheduler.bpf.c and rezolus_ue/samplers/cgroup_scheduler/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_CGROUP_SCHEDULER_H
#define REZOLUS_UE_CGROUP_SCHEDULER_H

/* The slot of every cgroup user space gave none (cgroup_slots has no entry for it). */
#define CGROUP_SCHED_OTHER 0
/* Default slots: "other" and 64 cgroups; user space resizes the maps to max_cgroups + 1. */
#define CGROUP_SCHED_SLOTS 65
/* Most threads tracked at once (LRU: the least recently switched are forgotten first). */
#define CGROUP_SCHED_MAX_TASKS 65536

/* One slot's scheduler counters (cumulative), padded to a cache line; added atomically. */
struct cgroup_sched_counters {
	__u64 cpu_ns;		/* on-CPU time of the group's tasks (sched_stat_runtime) */
	__u64 runqueue_wait_ns;	/* time its tasks waited runnable for a CPU */
	__u64 offcpu_ns;	/* time its tasks spent off-CPU between two runs */
	__u64 voluntary;	/* its tasks left a CPU to sleep or wait */
	__u64 involuntary;	/* its tasks were preempted (or yielded) and stayed runnable */
	__u64 __pad[3];
};

#endif /* REZOLUS_UE_CGROUP_SCHEDULER_H */
