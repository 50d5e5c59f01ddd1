// SPDX-License-Identifier: GPL-2.0
/*
 * Test program (tests/test_bpf_loader.py) the verifier must reject: it dereferences a
 * map lookup's result without checking it for NULL.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} counts SEC(".maps");

SEC("raw_tp/sched_switch")
int rzue_broken(void *ctx)
{
	__u32 key = 0;
	__u64 *count = bpf_map_lookup_elem(&counts, &key);

	*count += 1; /* no NULL check: "invalid mem access 'map_value_or_null'" */
	return 0;
}
