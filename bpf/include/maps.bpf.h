/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Map shapes shared by every rezolus-ue BPF program. All of them are BPF_F_MMAPABLE
 * arrays: user space maps them once (rezolus_ue/bpf/loader.py) and reads them with plain
 * memory loads, no syscall per refresh.
 */
#ifndef REZOLUS_UE_MAPS_BPF_H
#define REZOLUS_UE_MAPS_BPF_H

#include "h2.bpf.h"

/* The cache line per-CPU counter groups are padded to (no false sharing between CPUs). */
#define CACHE_LINE_SIZE 64
/* Upper bound of the per-CPU maps; user space shrinks them to the possible CPUs. */
#define MAX_CPUS 4096

/* A cumulative H2 histogram: H2_BUCKETS u64 counts, index = h2_index(value). */
#define H2_HISTOGRAM(name)                                                                  \
	struct {                                                                            \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                           \
		__uint(map_flags, BPF_F_MMAPABLE);                                          \
		__type(key, __u32);                                                         \
		__type(value, __u64);                                                       \
		__uint(max_entries, H2_BUCKETS);                                            \
	} name SEC(".maps")

/*
 * One cache line of counters per CPU: value_type must be CACHE_LINE_SIZE bytes; CPU n
 * writes only entry n (from a context that cannot migrate), so plain increments suffice.
 */
#define PER_CPU_LINES(name, value_type)                                                     \
	struct {                                                                            \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                           \
		__uint(map_flags, BPF_F_MMAPABLE);                                          \
		__type(key, __u32);                                                         \
		__type(value, value_type);                                                  \
		__uint(max_entries, MAX_CPUS);                                              \
	} name SEC(".maps")

/* Return this CPU's line of a PER_CPU_LINES map (NULL if the CPU is out of range). */
static __always_inline void *this_cpu_line(void *map)
{
	__u32 cpu = bpf_get_smp_processor_id();

	return bpf_map_lookup_elem(map, &cpu);
}

/*
 * rows cumulative H2 histograms in one mmapable array (row r: entries r * H2_BUCKETS to
 * (r + 1) * H2_BUCKETS - 1), for a histogram per kind or per slot; user space may resize
 * it before load (max_entries = rows * H2_BUCKETS).
 */
#define H2_HISTOGRAMS(name, rows)                                                           \
	struct {                                                                            \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                           \
		__uint(map_flags, BPF_F_MMAPABLE);                                          \
		__type(key, __u32);                                                         \
		__type(value, __u64);                                                       \
		__uint(max_entries, (rows) * H2_BUCKETS);                                   \
	} name SEC(".maps")

/* Count value in row row of an H2_HISTOGRAMS map (a row out of range is dropped). */
static __always_inline void h2_record_row(void *histograms, __u32 row, __u64 value)
{
	__u32 idx = row * H2_BUCKETS + h2_index(value);
	__u64 *count = bpf_map_lookup_elem(histograms, &idx);

	if (count)
		__sync_fetch_and_add(count, 1);
}

#endif /* REZOLUS_UE_MAPS_BPF_H */
