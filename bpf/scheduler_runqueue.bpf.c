// SPDX-License-Identifier: GPL-2.0
/*
 * scheduler_runqueue: run-queue latency, running time, off-CPU time and context switches
 * (Rezolus's scheduler/runqueue sampler). User space: rezolus_ue/samplers/scheduler_runqueue.
 *
 * Hooks, each in three variants of which user space loads one, chosen by probing the
 * kernel: tp_btf (rq_btf_*) > raw_tp (rq_raw_*) > tracepoint (rq_tp_*):
 *   sched_wakeup, sched_wakeup_new  a task became runnable: remember when, per thread id
 *   sched_switch                    prev leaves the CPU, next gets it
 *
 * Maps (BPF_F_MMAPABLE arrays, read by user space through mmap):
 *   runqlat   H2 histogram, ns: runnable (woken, or preempted) until running
 *   running   H2 histogram, ns: switched in until switched out
 *   offcpu    H2 histogram, ns: switched out until switched in again (includes runqlat)
 *   switches  per CPU: voluntary, involuntary, idle context switches (struct
 *             runqueue_switches, one cache line per CPU)
 * The idle task (pid 0) is never measured. Timestamps older than attached_ns (set by user
 * space before each attach) are from an earlier attachment and ignored.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "core_fixes.bpf.h"
#include "h2.bpf.h"
#include "maps.bpf.h"
#include "scheduler_runqueue.h"

char LICENSE[] SEC("license") = "GPL";

/* The classic sched_switch tracepoint reports a preempted task's state as TASK_REPORT_MAX. */
#define TASK_REPORT_MAX 0x100

/* Per thread: when it became runnable (0: not waiting) and when it last left a CPU. */
struct task_times {
	__u64 enqueued_ns;
	__u64 offcpu_ns;
};

H2_HISTOGRAM(runqlat);
H2_HISTOGRAM(running);
H2_HISTOGRAM(offcpu);
PER_CPU_LINES(switches, struct runqueue_switches);

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, struct task_times);
	__uint(max_entries, RUNQUEUE_MAX_TASKS);
} tasks SEC(".maps");

/* CLOCK_MONOTONIC time of the current attachment; written by user space through mmap. */
volatile __u64 attached_ns = 0;

static __always_inline void on_wakeup(__u32 pid)
{
	struct task_times *t, fresh = {};
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
	bpf_map_update_elem(&tasks, &pid, &fresh, BPF_NOEXIST);
}

static __always_inline void on_switch(bool involuntary, __u32 prev, __u32 next)
{
	struct runqueue_switches *sw = this_cpu_line(&switches);
	__u64 now = bpf_ktime_get_ns();
	__u64 since = attached_ns;
	struct task_times *t, fresh = {};

	if (!sw)
		return;
	if (prev) {
		if (involuntary)
			sw->involuntary++;
		else
			sw->voluntary++;
		if (sw->running_since_ns >= since && now > sw->running_since_ns)
			h2_record(&running, now - sw->running_since_ns);
		/* A preempted task is runnable again at once: it waits from now. */
		t = bpf_map_lookup_elem(&tasks, &prev);
		if (t) {
			t->enqueued_ns = involuntary ? now : 0;
			t->offcpu_ns = now;
		} else {
			fresh.enqueued_ns = involuntary ? now : 0;
			fresh.offcpu_ns = now;
			bpf_map_update_elem(&tasks, &prev, &fresh, BPF_NOEXIST);
		}
	} else {
		sw->idle++;
	}
	sw->running_since_ns = now;
	if (!next)
		return;
	t = bpf_map_lookup_elem(&tasks, &next);
	if (!t)
		return;
	if (t->enqueued_ns >= since && now > t->enqueued_ns)
		h2_record(&runqlat, now - t->enqueued_ns);
	if (t->offcpu_ns >= since && now > t->offcpu_ns)
		h2_record(&offcpu, now - t->offcpu_ns);
	t->enqueued_ns = 0;
}

/* tp_btf: BTF-typed arguments, direct access to the task structs. */

SEC("tp_btf/sched_wakeup")
int BPF_PROG(rq_btf_wakeup, struct task_struct *p)
{
	on_wakeup(p->pid);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(rq_btf_wakenew, struct task_struct *p)
{
	on_wakeup(p->pid);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(rq_btf_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt || task_state(prev) == TASK_RUNNING, prev->pid, next->pid);
	return 0;
}

/* raw_tp: the same arguments, read with CO-RE probe reads. */

SEC("raw_tp/sched_wakeup")
int BPF_PROG(rq_raw_wakeup, struct task_struct *p)
{
	on_wakeup(BPF_CORE_READ(p, pid));
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(rq_raw_wakenew, struct task_struct *p)
{
	on_wakeup(BPF_CORE_READ(p, pid));
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(rq_raw_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt || task_state(prev) == TASK_RUNNING, BPF_CORE_READ(prev, pid),
		  BPF_CORE_READ(next, pid));
	return 0;
}

/* tracepoint: the classic formatted records (pids only). */

SEC("tp/sched/sched_wakeup")
int rq_tp_wakeup(struct trace_event_raw_sched_wakeup_template *ctx)
{
	on_wakeup(ctx->pid);
	return 0;
}

SEC("tp/sched/sched_wakeup_new")
int rq_tp_wakenew(struct trace_event_raw_sched_wakeup_template *ctx)
{
	on_wakeup(ctx->pid);
	return 0;
}

SEC("tp/sched/sched_switch")
int rq_tp_switch(struct trace_event_raw_sched_switch *ctx)
{
	long state = ctx->prev_state;

	on_switch(state == TASK_RUNNING || (state & TASK_REPORT_MAX), ctx->prev_pid, ctx->next_pid);
	return 0;
}
