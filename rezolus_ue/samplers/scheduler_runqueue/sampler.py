"""The scheduler_runqueue sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ..base import Rows
from ..bpf_sampler import BpfCapture, BpfSampler, whole_histograms
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
    reads = ((SCHEDULER_SWITCHES, "switches"),)

    def setup(self, bpf: BpfObject) -> None:
        self._switches = bpf.array("switches")
        self._attached_ns = bpf.global_var("attached_ns")

    def on_attach(self, now_ns: int) -> None:
        # Timestamps the programs stored before this (an earlier attachment) are ignored.
        self._attached_ns[0] = now_ns

    def parse(self, raw: BpfCapture) -> Rows:
        rows: dict = whole_histograms(raw)
        sw = raw.maps.get("switches")
        if sw is not None:
            vol, inv, idle = sw["voluntary"], sw["involuntary"], sw["idle"]
            rows[SCHEDULER_SWITCHES] = {
                (cpu,): (int(vol[cpu]), int(inv[cpu]), int(idle[cpu]))
                for cpu in np.flatnonzero(vol | inv | idle).tolist()}
        return rows

    def close(self) -> None:
        self._switches = self._attached_ns = None  # type: ignore[assignment]
        super().close()
