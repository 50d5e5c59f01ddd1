/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by syscall.bpf.c and rezolus_ue/samplers/syscall/, which reads struct
 * syscall_counts' layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_SYSCALL_H
#define REZOLUS_UE_SYSCALL_H

/* Syscall families (rezolus_ue/samplers/syscall/table.py FAMILIES); 0 is "other". */
#define SYSCALL_FAMILIES 16
/* Syscall numbers the family table covers; larger numbers are "other". */
#define SYSCALL_MAX_ID 1024

/* One CPU's syscall counts by family (cumulative): two cache lines per CPU. */
struct syscall_counts {
	__u64 calls[SYSCALL_FAMILIES];
};

#endif /* REZOLUS_UE_SYSCALL_H */
