// SPDX-License-Identifier: GPL-2.0
/*
 * syscall: syscalls counted and timed by family (Rezolus's syscall sampler). User space:
 * rezolus_ue/samplers/syscall.
 *
 * Hooks, each in three variants of which user space loads one, chosen by probing the
 * kernel: tp_btf (sc_btf_*) > raw_tp (sc_raw_*) > tracepoint (sc_tp_*):
 *   raw_syscalls/sys_exit   count the call in its family; if the thread's call was timed,
 *                           record its enter-to-exit latency. Attached while active.
 *   raw_syscalls/sys_enter  time the call (all, or a random 1 in latency_sample): remember
 *                           when, in the thread's task storage. User space attaches it only
 *                           during timing windows (option latency_window, default 100 ms
 *                           of each second), so between windows a syscall runs one program.
 *
 * Why count at exit: the floor of any syscall sampler is the cost of a BPF program on a
 * syscall tracepoint (~50 ns a call each, measured: bench/rezolus_compare.py, floor and
 * floor1), so two programs per call can never come within a few points of one. Counting
 * where the latency is recorded leaves one program per call outside the windows. A call
 * that never returns (exit, exit_group) is not counted; the exit tracepoint carries the
 * syscall number in the registers (orig_ax on x86_64, syscallno on arm64) as the enter
 * one does.
 *
 * The family of each syscall number comes from syscall_family, a .rodata table that user
 * space fills before load (rezolus_ue/samplers/syscall/table.py): no table lives here.
 *
 * Maps (BPF_F_MMAPABLE arrays, read by user space through mmap):
 *   counts   per CPU: calls by family (struct syscall_counts, two cache lines per CPU)
 *   latency  SYSCALL_FAMILIES H2 histograms, ns, one after another: family f's bucket i
 *            is entry f * H2_BUCKETS + i
 * inflight (task storage: each thread's enter time) is internal. Task storage (Linux
 * 5.11, in every tracing program type; the agent needs 6.4 for user_events) costs a
 * pointer chase where the LRU hash it replaced cost a hash, a bucket walk and, for a new
 * thread, a locked insert: 10-20 ns less per syscall, and no 65536-entry table
 * preallocated; a lookup on a thread without storage (no call of it timed yet) is cheaper
 * still. Most of a timed call's cost is the two clock reads (~35 ns each on the 2-vCPU
 * VM: bpf_ktime_get_ns is an indirect call to the clocksource). The storage is created
 * afresh on each load, so a syscall entered before the programs attached is not timed;
 * it is freed with its thread, so syscalls that never return leave nothing behind.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "h2.bpf.h"
#include "maps.bpf.h"
#include "syscall.h"

char LICENSE[] SEC("license") = "GPL";

/* Family code of each syscall number; written by user space before load. */
const volatile __u8 syscall_family[SYSCALL_MAX_ID] = {};
/*
 * Time a call only if a random u32 is below this (option latency_sample = n: 2^32 / n);
 * 0 times every call entered while sys_enter is attached.
 */
const volatile __u32 latency_sample_below = 0;

struct inflight {
	__u64 enter_ns;	/* 0: no syscall of this thread being timed */
};

PER_CPU_LINES(counts, struct syscall_counts);

H2_HISTOGRAMS(latency, SYSCALL_FAMILIES);

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);	/* required for local storage */
	__type(key, int);
	__type(value, struct inflight);
} inflight SEC(".maps");

static __always_inline void on_enter(long id)
{
	struct inflight *t;

	if (id < 0)	/* no syscall (e.g. skipped by seccomp or ptrace) */
		return;
	if (latency_sample_below && bpf_get_prandom_u32() >= latency_sample_below)
		return;
	t = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t)
		t->enter_ns = bpf_ktime_get_ns();
}

static __always_inline void on_exit(long id)
{
	struct syscall_counts *c;
	struct inflight *t;
	__u32 family = 0;
	__u64 now;

	if (id < 0)
		return;
	if (id < SYSCALL_MAX_ID)
		family = syscall_family[id] & (SYSCALL_FAMILIES - 1);
	c = this_cpu_line(&counts);
	/* Atomic although per CPU: where syscall tracepoints are faultable their probes may
	 * run preemptible, so two of these programs can interleave on one CPU. (Measured: a
	 * plain increment is no cheaper here, the line being this CPU's.) */
	if (c)
		__sync_fetch_and_add(&c->calls[family], 1);
	t = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (!t || !t->enter_ns)
		return;
	now = bpf_ktime_get_ns();
	if (now > t->enter_ns)
		h2_record_row(&latency, family, now - t->enter_ns);
	t->enter_ns = 0;
}

/* The register holding the syscall number at sys_exit (the enter tracepoint's id). */
#if defined(__TARGET_ARCH_x86)
#define NR_REG orig_ax
#elif defined(__TARGET_ARCH_arm64)
#define NR_REG syscallno
#else
#error "syscall.bpf.c: no syscall number register for this architecture"
#endif

/* tp_btf: BTF-typed arguments (regs, id) and (regs, ret). */

SEC("tp_btf/sys_enter")
int BPF_PROG(sc_btf_enter, struct pt_regs *regs, long id)
{
	on_enter(id);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sc_btf_exit, struct pt_regs *regs, long ret)
{
	on_exit(regs->NR_REG);	/* BTF-typed: a direct load */
	return 0;
}

/* raw_tp: the same arguments, untyped. */

SEC("raw_tp/sys_enter")
int BPF_PROG(sc_raw_enter, struct pt_regs *regs, long id)
{
	on_enter(id);
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(sc_raw_exit, struct pt_regs *regs, long ret)
{
	on_exit(BPF_CORE_READ(regs, NR_REG));	/* untyped: a probe read */
	return 0;
}

/* tracepoint: the classic formatted records. */

SEC("tp/raw_syscalls/sys_enter")
int sc_tp_enter(struct trace_event_raw_sys_enter *ctx)
{
	on_enter(ctx->id);
	return 0;
}

SEC("tp/raw_syscalls/sys_exit")
int sc_tp_exit(struct trace_event_raw_sys_exit *ctx)
{
	on_exit(ctx->id);
	return 0;
}
