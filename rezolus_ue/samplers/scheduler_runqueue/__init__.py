"""The scheduler_runqueue sampler: BPF on the scheduler's tracepoints (see ``sampler``)."""

from .sampler import SWITCHES_DTYPE, SchedulerRunqueue

__all__ = ["SWITCHES_DTYPE", "SchedulerRunqueue"]
