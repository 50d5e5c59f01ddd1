/* SPDX-License-Identifier: GPL-2.0 */
/* h2_test.bpf.c's global (.bss): values in, their H2 bucket indices out. */
#ifndef REZOLUS_UE_H2_TEST_H
#define REZOLUS_UE_H2_TEST_H

#define H2_TEST_VALUES 256

struct h2_test_data {
	__u64 values[H2_TEST_VALUES];
	__u32 indices[H2_TEST_VALUES];
};

#endif
