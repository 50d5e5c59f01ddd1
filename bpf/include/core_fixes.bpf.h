/* SPDX-License-Identifier: GPL-2.0 */
/* CO-RE shims for kernel struct changes (as libbpf-tools' core_fixes.bpf.h). */
#ifndef REZOLUS_UE_CORE_FIXES_BPF_H
#define REZOLUS_UE_CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

#define TASK_RUNNING 0

/* task_struct::state became __state in Linux 5.14. */
struct task_struct___o {
	volatile long int state;
} __attribute__((preserve_access_index));

/* Return the scheduler state of task t (TASK_RUNNING == 0 while runnable). */
static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___o *)t, state);
}

#endif /* REZOLUS_UE_CORE_FIXES_BPF_H */
