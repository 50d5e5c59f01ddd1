"""The cpu_softirq_time sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ...metrics import h2
from ...metrics.family import histogram_records
from ..bpf_sampler import BpfSampler
from . import FAMILIES, SOFTIRQ_DURATION, SOFTIRQ_KINDS, SOFTIRQ_TIME

_KINDS = len(SOFTIRQ_KINDS)



class CpuSoftirqTime(BpfSampler):
    """Softirq handler time per CPU and kind, and run-time histograms per kind (BPF)."""

    name = "cpu_softirq_time"
    families = FAMILIES
    per_cpu_maps = ("times",)

    def setup(self, bpf: BpfObject) -> None:
        self._times = bpf.array("times")
        self._durations = bpf.array("durations").reshape(_KINDS, h2.BUCKETS)
        self._attached_ns = bpf.global_var("attached_ns")
        self._durations_prev: np.ndarray | None = None

    def on_attach(self, now_ns: int) -> None:
        # Handler starts stored before this (an earlier attachment) are ignored, and the
        # first record covers only the attached time.
        self._attached_ns[0] = now_ns
        self._durations_prev = self._durations.copy()

    def publish(self) -> None:
        window = self.window()
        cur = self._durations.copy()
        prev, self._durations_prev = self._durations_prev, cur
        if prev is not None:
            schema = SOFTIRQ_DURATION.schema
            self.emit(schema, (
                rec for kind in np.flatnonzero((cur != prev).any(axis=1)).tolist()
                for rec in histogram_records(schema, (SOFTIRQ_KINDS[kind],), (window,),
                                             h2.delta(cur[kind], prev[kind])[0])))
        ns = self._times["time_ns"]
        self.emit(SOFTIRQ_TIME.schema, ((cpu, *ns[cpu].tolist())
                                        for cpu in np.flatnonzero(ns.any(axis=1)).tolist()))

    def close(self) -> None:
        self._times = self._durations = self._attached_ns = None  # type: ignore[assignment]
        self._durations_prev = None
        super().close()
