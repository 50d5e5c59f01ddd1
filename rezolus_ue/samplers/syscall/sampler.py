"""The syscall sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import platform
import sys

import numpy as np

from ...bpf.build import BUILD_COMMAND
from ...bpf.libbpf import Object
from ...bpf.loader import BpfObject
from ...errors import SamplerUnavailable
from ...metrics import h2
from ..base import Rows
from ..bpf_sampler import BPF_OPTIONS, BpfCapture, BpfSampler, PartTime
from . import FAMILIES, OPTIONS, SYSCALL, SYSCALL_LATENCY, WINDOW_PERIOD_NS, table

_OPS = tuple(f.encode() for f in table.FAMILIES)


class Syscall(BpfSampler):
    """Syscall counts and latency histograms by family (BPF on raw_syscalls)."""

    name = "syscall"
    families = FAMILIES
    per_cpu_maps = ("counts",)
    #: One row per family (table.FAMILIES x H2 buckets).
    histograms = ((SYSCALL_LATENCY, "latency"),)
    reads = ((SYSCALL, "counts"),)
    options = (*BPF_OPTIONS, *OPTIONS)

    def start(self) -> None:
        machine = platform.machine()
        arch = table.arch_of(machine)
        if arch is None:
            raise SamplerUnavailable(self.name, f"no syscall table for {machine}"
                                     " (x86_64 and arm64 have one)")
        self._table = table.lookup_table(arch).tobytes()
        self.latency_sample = self.int_option("latency_sample")
        self._window_ns = self.int_option("latency_window")
        #: Timing windows of sys_enter (made at the first activation); None: none yet, or
        #: sys_enter attached with sys_exit, timing every call.
        self._windows: PartTime | None = None
        super().start()

    def configure(self, obj: Object) -> None:
        rodata = obj.map(".rodata")
        off, size = obj.btf().datasec(".rodata")["syscall_family"]
        if size != len(self._table):
            raise SamplerUnavailable(self.name, f"the object's family table has {size}"
                                     f" entries, not {len(self._table)}: rebuild it"
                                     f" ({BUILD_COMMAND} --force)")
        data = bytearray(rodata.value_size)
        data[off:off + size] = self._table
        try:
            off, size = obj.btf().datasec(".rodata")["latency_sample_below"]
        except KeyError:
            raise SamplerUnavailable(self.name, "the object predates option latency_sample:"
                                     f" rebuild it ({BUILD_COMMAND} --force)") from None
        below = 0 if self.latency_sample <= 1 else (1 << 32) // self.latency_sample
        data[off:off + size] = below.to_bytes(size, sys.byteorder)
        rodata.set_initial_value(bytes(data))

    def setup(self, bpf: BpfObject) -> None:
        #: (CPUs, families) call totals.
        self._calls = bpf.array("counts")["calls"]
        #: (families, buckets) cumulative latency histograms.
        self._latency = bpf.array("latency").reshape(len(table.FAMILIES), h2.BUCKETS)

    def activate(self) -> None:
        if self._bpf.attached:
            return
        super().activate()  # sys_enter too: a refused attach shows now, not in a window
        if self._window_ns < WINDOW_PERIOD_NS:
            if self._windows is None:
                self._windows = PartTime(self._bpf, "sys_enter", self._window_ns,
                                         WINDOW_PERIOD_NS)
            self._bpf.detach_hook("sys_enter")
            self._windows.start()

    def deactivate(self) -> None:
        self._join()  # an activation in progress ends first: it starts the windows
        if self._windows is not None and self.collect != "always":
            self._windows.stop()
        super().deactivate()

    def capture(self) -> BpfCapture:
        raw = super().capture()
        if self._windows is None or not self._bpf.attached:
            return raw
        # The latency histograms' attached_ns: the time sys_enter was attached (windows).
        return raw._replace(window=self._windows.take())

    def parse(self, raw: BpfCapture) -> Rows:
        rows: dict = {}
        if SYSCALL_LATENCY in raw.hists:
            counts, _reset = h2.delta(*raw.hists[SYSCALL_LATENCY])
            # Families called in the interval.
            rows[SYSCALL_LATENCY] = {
                (_OPS[code],): (raw.window, h2.nonzero(counts[code]))
                for code in np.flatnonzero(counts.sum(axis=1)).tolist()}
        counts_map = raw.maps.get("counts")
        if counts_map is not None:
            rows[SYSCALL] = {(op,): (total,) for op, total in zip(
                _OPS, counts_map["calls"].sum(axis=0).tolist(), strict=True)}
        return rows

    def close(self) -> None:
        self._join()
        if getattr(self, "_windows", None) is not None:
            self._windows.stop()  # type: ignore[union-attr]
        self._calls = self._latency = None  # type: ignore[assignment]
        super().close()
