/* SPDX-License-Identifier: GPL-2.0 */
/*
 * H2 histogram bucketing: the C twin of rezolus_ue/metrics/h2.py (the one declaration of
 * the layout). Grouping power 3, max value power 64: 496 buckets cover every u64.
 *
 *   index(v) = v                                      if v < 16
 *            = (k - 3) * 8 + (v >> (k - 3))           with k = floor(log2 v) = 63 - clz(v)
 *
 * floor(log2 v) is 63 - __builtin_clzll(v) on the host. For BPF it is a six-step binary
 * search instead: the BPF ISA has no count-leading-zeros instruction (LLVM would expand
 * the builtin into a longer sequence anyway), and clang 14, Debian 12's default, crashes
 * on __builtin_clzll for -target bpf. Define H2_SOFT_LOG2 to use the search on the host.
 *
 * tests/test_bpf_h2.py checks this function against the Python one, compiled both for
 * the host (this header is host-compilable: BPF-only parts are under __bpf__) and as a
 * BPF program run with BPF_PROG_TEST_RUN.
 */
#ifndef REZOLUS_UE_H2_BPF_H
#define REZOLUS_UE_H2_BPF_H

#ifndef __bpf__
#include <linux/types.h>
#endif

#define H2_GROUPING_POWER 3
#define H2_MAX_VALUE_POWER 64
#define H2_BUCKETS ((H2_MAX_VALUE_POWER - H2_GROUPING_POWER + 1) << H2_GROUPING_POWER)
/* Values below this have a bucket of their own. */
#define H2_CUTOFF (1ULL << (H2_GROUPING_POWER + 1))

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#if defined(__bpf__) && !defined(H2_SOFT_LOG2)
#define H2_SOFT_LOG2
#endif

/* Return floor(log2 value) for value > 0. */
static __always_inline __u32 h2_log2(__u64 value)
{
#ifdef H2_SOFT_LOG2
	__u32 power = 0;

	if (value >> 32) {
		value >>= 32;
		power += 32;
	}
	if (value >> 16) {
		value >>= 16;
		power += 16;
	}
	if (value >> 8) {
		value >>= 8;
		power += 8;
	}
	if (value >> 4) {
		value >>= 4;
		power += 4;
	}
	if (value >> 2) {
		value >>= 2;
		power += 2;
	}
	if (value >> 1)
		power += 1;
	return power;
#else
	return 63 - __builtin_clzll(value);
#endif
}

/* Return the H2 bucket index of value (0 .. H2_BUCKETS - 1). */
static __always_inline __u32 h2_index(__u64 value)
{
	__u32 power;

	if (value < H2_CUTOFF)
		return (__u32)value;
	/* value >= 16: power is 4..63 */
	power = h2_log2(value);
	return ((power - H2_GROUPING_POWER) << H2_GROUPING_POWER) +
	       (__u32)(value >> (power - H2_GROUPING_POWER));
}

#ifdef __bpf__
/*
 * Count value in histogram, a BPF_MAP_TYPE_ARRAY of H2_BUCKETS u64 (see H2_HISTOGRAM in
 * maps.bpf.h). Atomic: every CPU adds to the same buckets.
 */
static __always_inline void h2_record(void *histogram, __u64 value)
{
	__u32 idx = h2_index(value);
	__u64 *count = bpf_map_lookup_elem(histogram, &idx);

	if (count)
		__sync_fetch_and_add(count, 1);
}
#endif /* __bpf__ */

#endif /* REZOLUS_UE_H2_BPF_H */
