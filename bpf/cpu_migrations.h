/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by cpu_migrations.bpf.c and rezolus_ue/samplers/cpu_migrations/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_CPU_MIGRATIONS_H
#define REZOLUS_UE_CPU_MIGRATIONS_H

/*
 * One CPU's migration counters (cumulative), padded to a cache line. Unlike most per-CPU
 * lines these are written from any CPU (the one doing the migration), so atomically.
 */
struct cpu_migrations {
	__u64 from;	/* tasks moved away from this CPU */
	__u64 to;	/* tasks moved onto this CPU */
	__u64 __pad[6];
};

#endif /* REZOLUS_UE_CPU_MIGRATIONS_H */
