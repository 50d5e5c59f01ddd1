"""Time spent in softirq handlers per CPU and kind, and handler durations per kind,
measured by BPF (Rezolus's softirq_time). The procfs ``cpu_softirq`` sampler counts them.

BPF: ``bpf/softirq_time.bpf.c`` (shared struct: ``bpf/softirq_time.h``). Hooks:
``irq:softirq_entry`` and ``irq:softirq_exit``, as tp_btf, raw_tp or classic tracepoint
(the best the kernel supports; option ``attach`` forces one). The time between a CPU's
entry and exit of one vector is added to that CPU's counter for the kind (kinds are the
vectors 0-9, named as ``catalog.SOFTIRQ_KINDS``) and recorded in the kind's H2 histogram.
Softirqs do not nest on a CPU; a hard interrupt taken inside a handler counts as its time.

Layout: one ``struct softirq_time`` per CPU (ten u64 counters and the in-flight start, 96
bytes, padded to 128: two whole cache lines, written only by their CPU) in a
``BPF_F_MMAPABLE`` array; the histograms are one mmapable array of 10 x 496 u64.

Events: ``rezolus_softirq_time`` (per CPU that ran any: ns per kind, totals since the
programs were first loaded), ``rezolus_softirq_duration`` (per kind that ran in the
interval: H2 histogram of handler run times with ``attached_ns``). Demand-driven like every
``BpfSampler``: attached only while a consumer has one of these events enabled.

Measured cost (2-vCPU VM shared with other work, Linux 6.18; kernel.bpf_stats_enabled
run_time_ns / run_cnt over 1.5 s of loopback TCP traffic, two runs): softirq_entry 90-110
ns and softirq_exit 145-165 ns with tp_btf (raw_tp 90-150 / 145-225, tracepoint 105-130 /
180-195), i.e. about 0.25 us per softirq handler run.
"""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ...metrics import h2
from ...metrics.catalog import SOFTIRQ_DURATION, SOFTIRQ_KINDS, SOFTIRQ_TIME
from ...metrics.family import histogram_records
from ..bpf_sampler import BpfSampler

_KINDS = len(SOFTIRQ_KINDS)

#: struct softirq_time (bpf/softirq_time.h): 128 bytes per CPU.
TIMES_DTYPE = np.dtype({
    "names": ["time_ns", "entered_ns", "entered_vec"],
    "formats": [("=u8", (_KINDS,)), "=u8", "=u4"],
    "offsets": [0, 80, 88],
    "itemsize": 128,
})
#: C struct name -> its mirror here (tests check both against the object's BTF).
SHARED_STRUCTS = {"softirq_time": TIMES_DTYPE}


class CpuSoftirqTime(BpfSampler):
    """Softirq handler time per CPU and kind, and run-time histograms per kind (BPF)."""

    name = "cpu_softirq_time"
    families = (SOFTIRQ_TIME, SOFTIRQ_DURATION)
    bpf_object = "softirq_time"
    per_cpu_maps = ("times",)
    keep_maps = ("times", "durations", ".bss")

    def setup(self, bpf: BpfObject) -> None:
        self._times = bpf.array("times", TIMES_DTYPE)
        self._durations = bpf.array("durations").reshape(_KINDS, h2.BUCKETS)
        self._attached_ns = bpf.global_var("attached_ns")
        self._durations_prev: np.ndarray | None = None

    def on_attach(self, now_ns: int) -> None:
        # Handler starts stored before this (an earlier attachment) are ignored, and the
        # first record covers only the attached time.
        self._attached_ns[0] = now_ns
        self._durations_prev = self._durations.copy()

    def publish(self, t_ns: int) -> None:
        window = self.window()
        cur = self._durations.copy()
        prev, self._durations_prev = self._durations_prev, cur
        h = self.handles.get(SOFTIRQ_DURATION.schema.name)
        if h is not None and h.word.value and prev is not None:
            schema = SOFTIRQ_DURATION.schema
            for kind in np.flatnonzero((cur != prev).any(axis=1)).tolist():
                counts, _reset = h2.delta(cur[kind], prev[kind])
                for rec in histogram_records(schema, (SOFTIRQ_KINDS[kind],),
                                             (window,), counts):
                    h.write(schema.pack(*rec))
        h = self.handles.get(SOFTIRQ_TIME.schema.name)
        if h is not None and h.word.value:
            ns = self._times["time_ns"]
            pack = SOFTIRQ_TIME.schema.pack
            for cpu in np.flatnonzero(ns.any(axis=1)).tolist():
                h.write(pack(cpu, *ns[cpu].tolist()))

    def close(self) -> None:
        self._times = self._durations = self._attached_ns = None  # type: ignore[assignment]
        self._durations_prev = None
        super().close()
