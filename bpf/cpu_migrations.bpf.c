// SPDX-License-Identifier: GPL-2.0
/*
 * cpu_migrations: tasks moved between CPUs, per CPU and direction (Rezolus's
 * cpu_migrations). User space: rezolus_ue/samplers/cpu_migrations/.
 *
 * Hook, in three variants of which user space loads one: tp_btf (mig_btf_*) > raw_tp
 * (mig_raw_*) > tracepoint (mig_tp_*):
 *   sched:sched_migrate_task   set_task_cpu() moves a task from its CPU to dest_cpu
 * It fires on whichever CPU does the move (the load balancer, a waker, the stopper
 * thread of sched_setaffinity), so counters are incremented atomically.
 *
 * Maps (BPF_F_MMAPABLE array, read by user space through mmap):
 *   migrations  per CPU: struct cpu_migrations {from, to}, one cache line per CPU
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "maps.bpf.h"
#include "cpu_migrations.h"

char LICENSE[] SEC("license") = "GPL";

PER_CPU_LINES(migrations, struct cpu_migrations);

/* Before Linux 5.16 (and without THREAD_INFO_IN_TASK) a task's CPU was task_struct::cpu. */
struct task_struct___cpu {
	unsigned int cpu;
} __attribute__((preserve_access_index));

/* Return the CPU task p is on (task_cpu()): the CPU it leaves at sched_migrate_task. */
static __always_inline __u32 task_cpu_of(struct task_struct *p)
{
	if (bpf_core_field_exists(((struct task_struct___cpu *)p)->cpu))
		return BPF_CORE_READ((struct task_struct___cpu *)p, cpu);
	return BPF_CORE_READ(p, thread_info.cpu);
}

static __always_inline void on_migrate(__u32 from, __u32 to)
{
	struct cpu_migrations *m;

	if (from == to)
		return;
	m = bpf_map_lookup_elem(&migrations, &from);
	if (m)
		__sync_fetch_and_add(&m->from, 1);
	m = bpf_map_lookup_elem(&migrations, &to);
	if (m)
		__sync_fetch_and_add(&m->to, 1);
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(mig_btf_migrate, struct task_struct *p, int dest_cpu)
{
	on_migrate(task_cpu_of(p), dest_cpu);
	return 0;
}

SEC("raw_tp/sched_migrate_task")
int BPF_PROG(mig_raw_migrate, struct task_struct *p, int dest_cpu)
{
	on_migrate(task_cpu_of(p), dest_cpu);
	return 0;
}

SEC("tp/sched/sched_migrate_task")
int mig_tp_migrate(struct trace_event_raw_sched_migrate_task *ctx)
{
	on_migrate(ctx->orig_cpu, ctx->dest_cpu);
	return 0;
}
