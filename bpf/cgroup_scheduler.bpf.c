// SPDX-License-Identifier: GPL-2.0
/*
 * cgroup_scheduler: per-cgroup CPU time, run-queue latency histogram, run-queue wait and
 * off-CPU time, context switches (Rezolus's cgroup_cpu_usage and cgroup_scheduler_*),
 * for a bounded set of cgroups. User space: rezolus_ue/samplers/cgroup_scheduler/.
 *
 * Hooks, each in three variants of which user space loads one: tp_btf (cgs_btf_*) >
 * raw_tp (cgs_raw_*) > tracepoint (cgs_tp_*):
 *   sched_wakeup, sched_wakeup_new  a task became runnable: remember when, per thread id
 *   sched_switch                    prev (current) leaves the CPU, next gets it
 *   sched_stat_runtime              the scheduler charged runtime ns to a task (each
 *                                   tick and switch; every class since Linux 6.8, CFS
 *                                   only before)
 *
 * Cardinality is bounded by slots: cgroup_slots maps a cgroup id (the kernfs id of its
 * cgroup v2 directory, its inode number) to a slot 1..max_cgroups; user space fills it
 * from its include/exclude globs. Every other cgroup counts in slot 0 ("other").
 * A task's cgroup is read from its task_struct (tp_btf, raw_tp); the classic tracepoints
 * carry only pids, so there it is the current task's, remembered per thread at each
 * switch-out. Run-queue waits are charged to the cgroup the task was last seen in.
 *
 * Maps (BPF_F_MMAPABLE arrays, read by user space through mmap; sized by user space):
 *   counters  per slot: struct cgroup_sched_counters, one cache line per slot
 *   runqlat   per slot: an H2 histogram of run-queue latency, ns (row = slot)
 * Timestamps older than attached_ns (set by user space before each attach) are from an
 * earlier attachment and ignored.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "core_fixes.bpf.h"
#include "h2.bpf.h"
#include "maps.bpf.h"
#include "cgroup_scheduler.h"

char LICENSE[] SEC("license") = "GPL";

/* The classic sched_switch tracepoint reports a preempted task's state as TASK_REPORT_MAX. */
#define TASK_REPORT_MAX 0x100

/* Per thread: when it became runnable (0: not waiting), when it left a CPU, its cgroup. */
struct task_info {
	__u64 enqueued_ns;
	__u64 offcpu_ns;
	__u64 cgroup_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct cgroup_sched_counters);
	__uint(max_entries, CGROUP_SCHED_SLOTS);
} counters SEC(".maps");

H2_HISTOGRAMS(runqlat, CGROUP_SCHED_SLOTS);

/* cgroup id -> slot, written by user space only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u32);
	__uint(max_entries, CGROUP_SCHED_SLOTS);
} cgroup_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, struct task_info);
	__uint(max_entries, CGROUP_SCHED_MAX_TASKS);
} tasks SEC(".maps");

/* CLOCK_MONOTONIC time of the current attachment; written by user space through mmap. */
volatile __u64 attached_ns = 0;

/* Return the id of task p's cgroup v2 (kernfs_node::id: the 64-bit inode since 5.5). */
static __always_inline __u64 task_cgroup_id(struct task_struct *p)
{
	return BPF_CORE_READ(p, cgroups, dfl_cgrp, kn, id);
}

static __always_inline struct cgroup_sched_counters *slot_counters(__u64 cgroup_id,
								   __u32 *slot)
{
	__u32 *s = bpf_map_lookup_elem(&cgroup_slots, &cgroup_id);

	*slot = s ? *s : CGROUP_SCHED_OTHER;
	return bpf_map_lookup_elem(&counters, slot);
}

/* p: the woken task where the hook gives it (its cgroup is read only for a new entry). */
static __always_inline void on_wakeup(__u32 pid, struct task_struct *p, __u64 cgroup_id)
{
	struct task_info *t, fresh = {};
	__u64 now;

	if (!pid)
		return;
	now = bpf_ktime_get_ns();
	t = bpf_map_lookup_elem(&tasks, &pid);
	if (t) {
		t->enqueued_ns = now;
		return;
	}
	fresh.enqueued_ns = now;
	fresh.cgroup_id = p ? task_cgroup_id(p) : cgroup_id;
	bpf_map_update_elem(&tasks, &pid, &fresh, BPF_NOEXIST);
}

static __always_inline void on_switch(bool involuntary, __u32 prev, __u32 next)
{
	struct cgroup_sched_counters *c;
	struct task_info *t, fresh = {};
	__u64 now = bpf_ktime_get_ns(), since = attached_ns, cg;
	__u32 slot;

	if (prev) {
		/* At sched_switch the current task is still prev. */
		cg = bpf_get_current_cgroup_id();
		c = slot_counters(cg, &slot);
		if (c) {
			if (involuntary)
				__sync_fetch_and_add(&c->involuntary, 1);
			else
				__sync_fetch_and_add(&c->voluntary, 1);
		}
		t = bpf_map_lookup_elem(&tasks, &prev);
		if (t) {
			t->enqueued_ns = involuntary ? now : 0;
			t->offcpu_ns = now;
			t->cgroup_id = cg;
		} else {
			fresh.enqueued_ns = involuntary ? now : 0;
			fresh.offcpu_ns = now;
			fresh.cgroup_id = cg;
			bpf_map_update_elem(&tasks, &prev, &fresh, BPF_NOEXIST);
		}
	}
	if (!next)
		return;
	t = bpf_map_lookup_elem(&tasks, &next);
	if (!t)
		return;
	c = slot_counters(t->cgroup_id, &slot);
	if (c) {
		if (t->enqueued_ns >= since && now > t->enqueued_ns) {
			__sync_fetch_and_add(&c->runqueue_wait_ns, now - t->enqueued_ns);
			h2_record_row(&runqlat, slot, now - t->enqueued_ns);
		}
		if (t->offcpu_ns >= since && now > t->offcpu_ns)
			__sync_fetch_and_add(&c->offcpu_ns, now - t->offcpu_ns);
	}
	t->enqueued_ns = 0;
}

static __always_inline void on_runtime(__u64 cgroup_id, __u64 runtime)
{
	struct cgroup_sched_counters *c;
	__u32 slot;

	c = slot_counters(cgroup_id, &slot);
	if (c)
		__sync_fetch_and_add(&c->cpu_ns, runtime);
}

/* tp_btf: BTF-typed arguments. */

SEC("tp_btf/sched_wakeup")
int BPF_PROG(cgs_btf_wakeup, struct task_struct *p)
{
	on_wakeup(p->pid, p, 0);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(cgs_btf_wakenew, struct task_struct *p)
{
	on_wakeup(p->pid, p, 0);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(cgs_btf_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt || task_state(prev) == TASK_RUNNING, prev->pid, next->pid);
	return 0;
}

SEC("tp_btf/sched_stat_runtime")
int BPF_PROG(cgs_btf_runtime, struct task_struct *p, __u64 runtime)
{
	if (p->pid)
		on_runtime(task_cgroup_id(p), runtime);
	return 0;
}

/* raw_tp: the same arguments, read with CO-RE probe reads. */

SEC("raw_tp/sched_wakeup")
int BPF_PROG(cgs_raw_wakeup, struct task_struct *p)
{
	on_wakeup(BPF_CORE_READ(p, pid), p, 0);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(cgs_raw_wakenew, struct task_struct *p)
{
	on_wakeup(BPF_CORE_READ(p, pid), p, 0);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(cgs_raw_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt || task_state(prev) == TASK_RUNNING, BPF_CORE_READ(prev, pid),
		  BPF_CORE_READ(next, pid));
	return 0;
}

SEC("raw_tp/sched_stat_runtime")
int BPF_PROG(cgs_raw_runtime, struct task_struct *p, __u64 runtime)
{
	if (BPF_CORE_READ(p, pid))
		on_runtime(task_cgroup_id(p), runtime);
	return 0;
}

/* tracepoint: the classic formatted records (pids only). */

SEC("tp/sched/sched_wakeup")
int cgs_tp_wakeup(struct trace_event_raw_sched_wakeup_template *ctx)
{
	on_wakeup(ctx->pid, NULL, 0);
	return 0;
}

SEC("tp/sched/sched_wakeup_new")
int cgs_tp_wakenew(struct trace_event_raw_sched_wakeup_template *ctx)
{
	/* Called by the parent in fork(): the child starts in the parent's cgroup. */
	on_wakeup(ctx->pid, NULL, bpf_get_current_cgroup_id());
	return 0;
}

SEC("tp/sched/sched_switch")
int cgs_tp_switch(struct trace_event_raw_sched_switch *ctx)
{
	long state = ctx->prev_state;

	on_switch(state == TASK_RUNNING || (state & TASK_REPORT_MAX), ctx->prev_pid, ctx->next_pid);
	return 0;
}

SEC("tp/sched/sched_stat_runtime")
int cgs_tp_runtime(struct trace_event_raw_sched_stat_runtime *ctx)
{
	__u32 pid = ctx->pid;
	struct task_info *t;

	if (!pid)
		return 0;
	/* Mostly the current task; else (a remote run queue's) the cgroup last seen. */
	if (pid == (__u32)bpf_get_current_pid_tgid()) {
		on_runtime(bpf_get_current_cgroup_id(), ctx->runtime);
		return 0;
	}
	t = bpf_map_lookup_elem(&tasks, &pid);
	on_runtime(t ? t->cgroup_id : 0, ctx->runtime);
	return 0;
}
