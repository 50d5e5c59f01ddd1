"""The cpu_softirq_time sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ...metrics import h2
from ..base import Rows
from ..bpf_sampler import BpfCapture, BpfSampler
from . import FAMILIES, SOFTIRQ_DURATION, SOFTIRQ_KINDS, SOFTIRQ_TIME


class CpuSoftirqTime(BpfSampler):
    """Softirq handler time per CPU and kind, and run-time histograms per kind (BPF)."""

    name = "cpu_softirq_time"
    families = FAMILIES
    per_cpu_maps = ("times",)
    #: One row per kind (SOFTIRQ_KINDS x H2 buckets).
    histograms = ((SOFTIRQ_DURATION, "durations"),)
    reads = ((SOFTIRQ_TIME, "times"),)

    def setup(self, bpf: BpfObject) -> None:
        self._times = bpf.array("times")
        self._attached_ns = bpf.global_var("attached_ns")

    def on_attach(self, now_ns: int) -> None:
        # Handler starts stored before this (an earlier attachment) are ignored.
        self._attached_ns[0] = now_ns

    def parse(self, raw: BpfCapture) -> Rows:
        rows: dict = {}
        if SOFTIRQ_DURATION in raw.hists:
            cur, prev = raw.hists[SOFTIRQ_DURATION]
            # Kinds whose handlers ran in the interval.
            rows[SOFTIRQ_DURATION] = {
                (SOFTIRQ_KINDS[kind],): (raw.window,
                                         h2.nonzero(h2.delta(cur[kind], prev[kind])[0]))
                for kind in np.flatnonzero((cur != prev).any(axis=1)).tolist()}
        times = raw.maps.get("times")
        if times is not None:
            ns = times["time_ns"]
            rows[SOFTIRQ_TIME] = {(cpu,): ns[cpu].tolist()
                                  for cpu in np.flatnonzero(ns.any(axis=1)).tolist()}
        return rows

    def close(self) -> None:
        self._times = self._attached_ns = None  # type: ignore[assignment]
        super().close()
