// SPDX-License-Identifier: GPL-2.0
/*
 * Test program (tests/test_bpf_h2.py): run with BPF_PROG_TEST_RUN, computes h2_index() of
 * every value of data.values into data.indices, in BPF, so the test compares the
 * kernel-side function with rezolus_ue/metrics/h2.py. User space fills and reads data
 * through the mmapped .bss.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "h2.bpf.h"
#include "h2_test.h"

char LICENSE[] SEC("license") = "GPL";

struct h2_test_data data = {};
/* Runs of the program. */
__u64 runs = 0;

SEC("syscall")
int h2_test_index(void *ctx)
{
	for (int i = 0; i < H2_TEST_VALUES; i++)
		data.indices[i] = h2_index(data.values[i]);
	runs++;
	return 0;
}
