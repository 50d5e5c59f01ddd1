"""The syscall sampler: BPF on raw_syscalls, counts and latency by family (see ``sampler``)."""

from .sampler import COUNTS_DTYPE, Syscall

__all__ = ["COUNTS_DTYPE", "Syscall"]
