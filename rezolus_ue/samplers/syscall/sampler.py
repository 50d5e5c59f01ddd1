"""Syscalls counted, and their latency measured, by family, by BPF (Rezolus's syscall
sampler).

BPF: ``bpf/syscall.bpf.c`` (shared struct: ``bpf/syscall.h``), built by ``python -m
rezolus_ue.bpf.build``. Hooks: ``raw_syscalls:sys_enter`` and ``raw_syscalls:sys_exit``,
each as tp_btf, raw_tp or classic tracepoint: the best one the kernel supports is loaded
(option ``attach`` forces one). Needs kernel BTF and CAP_BPF + CAP_PERFMON (or root).
The syscall-number -> family table (``table.py``, x86_64 and arm64) is written into the
object's ``.rodata`` before each load.

Events: ``rezolus_syscall``: per family (``op``), syscalls entered, totals since the
programs were first loaded; all sixteen families every interval, zeros included, so a
consumer computing rates sees an unbroken series per family. ``rezolus_syscall_latency``:
per family, an H2 histogram of the interval's enter-to-exit times, with ``attached_ns``;
only families with at least one call returning in the interval, since an empty histogram
record carries nothing the counter does not already say (a syscall that blocks across
several intervals is recorded in the one it returns in).

Lifecycle (``BpfSampler``): loaded at start to verify, then unloaded; attached only while
a consumer has one of the two events enabled (``collect = "on-demand"``). The counts (one
``struct syscall_counts``, two cache lines, per CPU) and the histograms (16 x 496 u64 in
one array) are ``BPF_F_MMAPABLE`` maps kept across unloads and read through mmap: a
publish makes no syscall to read them. Each thread's enter time lives in BPF task
storage, created with the programs and gone with them.

Measured cost (2-vCPU VM, Linux 6.18, shared: load average 8-120 from other work, so
medians drift; minima are steadier). Per syscall, ``getppid`` in a loop, minimum over 15
interleaved rounds: 135 ns bare; +30 ns with programs that return at once (the
raw_syscalls slow path and two BPF calls: the floor of any raw_syscalls consumer); +145 ns
with the LRU-hash version of the programs; +130 ns with task storage (this one). The rest
is mostly the two ``bpf_ktime_get_ns`` (70 ns: without them +70 ns); a plain per-CPU
increment instead of the atomic one measured the same. BPF run-time stats
(kernel.bpf_stats_enabled=1, which adds ~45 ns per program run itself): sys_enter
128 -> 109 ns, sys_exit 146 -> 137 ns. ``perf bench sched messaging -g 10 -l 250`` (3M
syscalls, ~1.1 us of CPU each), its CPU time, median of 6 interleaved rounds: +4.8%
before, +4.0% after (wall: +8.3%, +13.2%: noise at this load); bench/overhead.py has the
full comparison. Timing 1 syscall in 8 (at random) would cut the cost to +68 ns, but
histograms would then be estimates: not done. One publish (11 histogram and 16 counter
records, fake handles: no write syscalls) took 0.5-0.9 ms of CPU, mostly H2 percentiles
and record packing. The object loads and counts on the VM tier's Linux 6.12
too (tp_btf, raw_tp and tracepoint).
"""

from __future__ import annotations

import platform

import numpy as np

from ...bpf.build import BUILD_COMMAND
from ...bpf.libbpf import Object
from ...bpf.loader import BpfObject
from ...errors import SamplerUnavailable
from ...metrics import h2
from ...metrics.catalog import SYSCALL, SYSCALL_LATENCY
from ...metrics.family import histogram_records
from ..bpf_sampler import BpfSampler
from . import table

#: struct syscall_counts (bpf/syscall.h): calls by family, one per CPU.
COUNTS_DTYPE = np.dtype({
    "names": ["calls"],
    "formats": [("=u8", (len(table.FAMILIES),))],
    "offsets": [0],
    "itemsize": 8 * len(table.FAMILIES),
})
#: C struct name -> its mirror here (tests check both against the object's BTF).
SHARED_STRUCTS = {"syscall_counts": COUNTS_DTYPE}

_OPS = tuple(f.encode() for f in table.FAMILIES)


class Syscall(BpfSampler):
    """Syscall counts and latency histograms by family (BPF on raw_syscalls)."""

    name = "syscall"
    families = (SYSCALL, SYSCALL_LATENCY)
    bpf_object = "syscall"
    per_cpu_maps = ("counts",)
    keep_maps = ("counts", "latency")

    def start(self) -> None:
        machine = platform.machine()
        arch = table.arch_of(machine)
        if arch is None:
            raise SamplerUnavailable(self.name, f"no syscall table for {machine}"
                                     " (x86_64 and arm64 have one)")
        self._table = table.lookup_table(arch).tobytes()
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
        rodata.set_initial_value(bytes(data))

    def setup(self, bpf: BpfObject) -> None:
        #: (CPUs, families) call totals.
        self._calls = bpf.array("counts", COUNTS_DTYPE)["calls"]
        #: (families, buckets) cumulative latency histograms.
        self._latency = bpf.array("latency").reshape(len(table.FAMILIES), h2.BUCKETS)
        self._latency_prev = self._latency.copy()

    def on_attach(self, now_ns: int) -> None:
        # Counts made after the last publish but before the last detach stay out of the
        # first record after this attach, which covers only the attached time.
        self._latency_prev = self._latency.copy()

    def publish(self, t_ns: int) -> None:
        window = self.window()
        cur = self._latency.copy()
        counts, _reset = h2.delta(cur, self._latency_prev)
        self._latency_prev = cur
        h = self.handles.get(SYSCALL_LATENCY.schema.name)
        if h is not None and h.word.value:
            schema = SYSCALL_LATENCY.schema
            for code in np.flatnonzero(counts.sum(axis=1)).tolist():
                for rec in histogram_records(schema, (_OPS[code],), (window,), counts[code]):
                    h.write(schema.pack(*rec))
        h = self.handles.get(SYSCALL.schema.name)
        if h is not None and h.word.value:
            pack = SYSCALL.schema.pack
            for op, total in zip(_OPS, self._calls.sum(axis=0).tolist(), strict=True):
                h.write(pack(op, total))

    def close(self) -> None:
        self._calls = self._latency = self._latency_prev = None  # type: ignore[assignment]
        super().close()
