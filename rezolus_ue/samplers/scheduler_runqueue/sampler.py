"""The scheduler_runqueue sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ..bpf_sampler import BpfSampler
from . import (
    FAMILIES,
    SCHEDULER_OFFCPU,
    SCHEDULER_RUNNING,
    SCHEDULER_RUNQUEUE_LATENCY,
    SCHEDULER_SWITCHES,
)


class SchedulerRunqueue(BpfSampler):
    """Run-queue latency, running and off-CPU time histograms, switches per CPU (BPF)."""

    name = "scheduler_runqueue"
    families = FAMILIES
    per_cpu_maps = ("switches",)
    histograms = (
        (SCHEDULER_RUNQUEUE_LATENCY, "runqlat"),
        (SCHEDULER_RUNNING, "running"),
        (SCHEDULER_OFFCPU, "offcpu"),
    )

    def setup(self, bpf: BpfObject) -> None:
        self._switches = bpf.array("switches")
        self._attached_ns = bpf.global_var("attached_ns")

    def on_attach(self, now_ns: int) -> None:
        # Timestamps the programs stored before this (an earlier attachment) are ignored.
        self._attached_ns[0] = now_ns

    def publish(self) -> None:
        self.publish_histograms(self.window())
        sw = self._switches
        vol, inv, idle = sw["voluntary"], sw["involuntary"], sw["idle"]
        self.emit(SCHEDULER_SWITCHES.schema, (
            (cpu, int(vol[cpu]), int(inv[cpu]), int(idle[cpu]))
            for cpu in np.flatnonzero(vol | inv | idle).tolist()))

    def close(self) -> None:
        self._switches = self._attached_ns = None  # type: ignore[assignment]
        super().close()
