// SPDX-License-Identifier: GPL-2.0
/*
 * The floor of any raw_syscalls consumer, for bench/overhead.py's configuration "floor":
 * programs on sys_enter and sys_exit (tp_btf, as the syscall sampler attaches) that
 * return at once. What they cost is the kernel's syscall tracing slow path and two BPF
 * program calls per syscall, which no syscall sampler can avoid.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sys_enter")
int BPF_PROG(null_enter, struct pt_regs *regs, long id)
{
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(null_exit, struct pt_regs *regs, long ret)
{
	return 0;
}
