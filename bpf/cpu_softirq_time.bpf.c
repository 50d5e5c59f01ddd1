// SPDX-License-Identifier: GPL-2.0
/*
 * cpu_softirq_time: time spent in softirq handlers per CPU and kind, and a histogram of
 * handler durations per kind (Rezolus's softirq_time). User space:
 * rezolus_ue/samplers/cpu_softirq_time/.
 *
 * Hooks, each in three variants of which user space loads one: tp_btf (sirq_btf_*) >
 * raw_tp (sirq_raw_*) > tracepoint (sirq_tp_*):
 *   irq:softirq_entry   a vector's handler starts on this CPU: remember when
 *   irq:softirq_exit    it returns: add the elapsed time to the CPU's line and histogram
 * Softirqs do not nest on a CPU (handlers run with softirqs disabled), so one in-flight
 * start per CPU suffices; hard interrupts taken during a handler count as its time.
 *
 * Maps (BPF_F_MMAPABLE arrays, read by user space through mmap):
 *   times      per CPU: struct softirq_time (ns per kind), 128 bytes per CPU
 *   durations  SOFTIRQ_KINDS H2 histograms (row = vector), ns per handler run
 * A start older than attached_ns (set by user space before each attach) is from an
 * earlier attachment and ignored.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "h2.bpf.h"
#include "maps.bpf.h"
#include "cpu_softirq_time.h"

char LICENSE[] SEC("license") = "GPL";

/* One struct softirq_time per CPU (two cache lines; user space sizes it to the CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct softirq_time);
	__uint(max_entries, MAX_CPUS);
} times SEC(".maps");

H2_HISTOGRAMS(durations, SOFTIRQ_KINDS);

/* CLOCK_MONOTONIC time of the current attachment; written by user space through mmap. */
volatile __u64 attached_ns = 0;

static __always_inline void on_entry(__u32 vec)
{
	struct softirq_time *t = this_cpu_line(&times);

	if (!t)
		return;
	t->entered_ns = bpf_ktime_get_ns();
	t->entered_vec = vec;
}

static __always_inline void on_exit(__u32 vec)
{
	struct softirq_time *t = this_cpu_line(&times);
	__u64 now = bpf_ktime_get_ns(), start;

	if (!t)
		return;
	start = t->entered_ns;
	t->entered_ns = 0;
	if (!start || start < attached_ns || now < start || vec != t->entered_vec ||
	    vec >= SOFTIRQ_KINDS)
		return;
	t->time_ns[vec] += now - start;
	h2_record_row(&durations, vec, now - start);
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(sirq_btf_entry, unsigned int vec)
{
	on_entry(vec);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(sirq_btf_exit, unsigned int vec)
{
	on_exit(vec);
	return 0;
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(sirq_raw_entry, unsigned int vec)
{
	on_entry(vec);
	return 0;
}

SEC("raw_tp/softirq_exit")
int BPF_PROG(sirq_raw_exit, unsigned int vec)
{
	on_exit(vec);
	return 0;
}

SEC("tp/irq/softirq_entry")
int sirq_tp_entry(struct trace_event_raw_softirq *ctx)
{
	on_entry(ctx->vec);
	return 0;
}

SEC("tp/irq/softirq_exit")
int sirq_tp_exit(struct trace_event_raw_softirq *ctx)
{
	on_exit(ctx->vec);
	return 0;
}
