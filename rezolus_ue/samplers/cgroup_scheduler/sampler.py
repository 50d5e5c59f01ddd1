"""The cgroup_scheduler sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...bpf import libbpf
from ...bpf.libbpf import Object
from ...bpf.loader import BpfObject
from ...errors import SamplerUnavailable
from ...metrics import h2
from ..base import Rows
from ..bpf_sampler import BPF_OPTIONS, BpfCapture, BpfSampler
from ..cgroup.sampler import (
    RESCAN_NS,
    cgroup2_mounts,
    matches,
    parse_cpu_stat,
    select_top,
    truncate_label,
    walk,
)
from . import CGROUP_RUNQUEUE_LATENCY, CGROUP_SCHEDULER, FAMILIES, OPTIONS

#: The counters in CGROUP_SCHEDULER's field order.
_FIELDS = ("cpu_ns", "runqueue_wait_ns", "offcpu_ns", "voluntary", "involuntary")
#: The label of slot 0 (CGROUP_SCHED_OTHER): every cgroup without a slot of its own.
OTHER_LABEL = "(other)"

def _map_calls() -> tuple[Callable[..., int], Callable[..., int]]:
    """Return libbpf's bpf_map_update_elem and bpf_map_delete_elem, typed."""
    lib = libbpf.lib()
    update, delete = lib.bpf_map_update_elem, lib.bpf_map_delete_elem
    update.restype = delete.restype = ctypes.c_int
    update.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    delete.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return update, delete


class SlotMap:
    """The kernel's cgroup id -> slot hash map, written through our own dup of its fd."""

    def __init__(self, fd: int) -> None:
        self.fd = os.dup(fd)
        self._update, self._delete = _map_calls()

    def set(self, cgroup_id: int, slot: int) -> None:
        key, value = ctypes.c_uint64(cgroup_id), ctypes.c_uint32(slot)
        ret = self._update(self.fd, ctypes.byref(key), ctypes.byref(value), 0)
        if ret < 0:
            raise libbpf.translate("updating BPF map cgroup_slots", -ret)

    def delete(self, cgroup_id: int) -> None:
        key = ctypes.c_uint64(cgroup_id)
        self._delete(self.fd, ctypes.byref(key))  # ENOENT: already gone, fine

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def cgroup2_root(procfs: Path) -> Path:
    """Return the cgroup v2 mount point (best first, as the cgroup sampler prefers);
    raise SamplerUnavailable when there is none."""
    mounts = procfs / "mounts"
    try:
        points = cgroup2_mounts(mounts.read_text())
    except OSError as e:
        raise SamplerUnavailable("cgroup_scheduler",
                                 f"cannot read {mounts}: {e.strerror}") from None
    if not points:
        raise SamplerUnavailable("cgroup_scheduler", f"no cgroup2 mount in {mounts}: the"
                                 " BPF programs key on cgroup v2 ids (mount one, e.g. mount"
                                 " -t cgroup2 none /sys/fs/cgroup/unified)")
    return Path(points[0])


class CgroupScheduler(BpfSampler):
    """Per-cgroup CPU time, run-queue latency and switches, for at most max_cgroups (BPF)."""

    name = "cgroup_scheduler"
    families = FAMILIES
    keep_maps = ("cgroup_slots",)
    #: One row per slot (slot 0: every cgroup without one of its own).
    histograms = ((CGROUP_RUNQUEUE_LATENCY, "runqlat"),)
    reads = ((CGROUP_SCHEDULER, "counters"),)
    options = (*BPF_OPTIONS, *OPTIONS)

    def start(self) -> None:
        self._max = self.int_option("max_cgroups")
        self._include = self.strings_option("include")
        self._exclude = self.strings_option("exclude")
        self.root = cgroup2_root(self.ctx.roots.procfs)
        self._clock = time.monotonic_ns
        super().start()

    def configure(self, obj: Object) -> None:
        slots = self._max + 1
        obj.map("counters").max_entries = slots
        obj.map("runqlat").max_entries = slots * h2.BUCKETS
        obj.map("cgroup_slots").max_entries = self._max

    def setup(self, bpf: BpfObject) -> None:
        slots = self._max + 1
        self._counters = bpf.array("counters")
        self._runqlat = bpf.array("runqlat").reshape(slots, h2.BUCKETS)
        self._attached_ns = bpf.global_var("attached_ns")
        assert bpf.obj is not None
        self._slots = SlotMap(bpf.obj.map("cgroup_slots").fd)
        #: Per slot: the counters when it was given to its cgroup (subtracted).
        self._base = np.zeros((slots, len(_FIELDS)), dtype=np.uint64)
        #: Per slot: its cgroup's path (None: free), and cgroup id -> slot.
        self._labels: list[str | None] = [OTHER_LABEL] + [None] * self._max
        self._slot_of: dict[int, int] = {}
        self._baseline: dict[str, int] = {}
        self.matched = self.over_limit = 0
        self.rescan()

    def _values(self, counters: np.ndarray | None = None) -> np.ndarray:
        """Return the counters (the map's, or a copy of it) as a (slots, fields) array,
        in _FIELDS order."""
        c = self._counters if counters is None else counters
        return np.stack([c[f] for f in _FIELDS], axis=1)

    def rescan(self) -> None:
        """Walk the hierarchy and give slots to the chosen cgroups (module docstring)."""
        self._next_scan = self._clock() + RESCAN_NS
        ids: dict[str, int] = {}
        for path in walk(self.root):
            if not matches(path, self._include, self._exclude):
                continue
            with contextlib.suppress(OSError):  # removed meanwhile
                ids[path] = os.stat(self._dir(path)).st_ino
        keep = list(ids)
        self.matched, self.over_limit = len(ids), 0
        if len(ids) > self._max:
            usage = {}
            for path in ids:
                with contextlib.suppress(OSError, ValueError):
                    usage[path] = parse_cpu_stat((self._dir(path) / "cpu.stat").read_bytes())[0]
            keep = select_top(usage, self._baseline, self._max)
            self._baseline = usage
            self.over_limit = len(ids) - len(keep)
        wanted = {ids[p]: p for p in keep}
        # Free the slots of cgroups no longer chosen (gone, or outranked) first.
        for cid in [c for c in self._slot_of if c not in wanted]:
            slot = self._slot_of.pop(cid)
            self._slots.delete(cid)
            self._labels[slot] = None
        free = [s for s in range(1, self._max + 1) if self._labels[s] is None]
        values = None
        for cid, path in wanted.items():
            slot = self._slot_of.get(cid)
            if slot is None:
                slot = free.pop(0)
                # Totals of the slot's previous cgroup are not this one's.
                values = self._values() if values is None else values
                self._base[slot] = values[slot]
                self._prev[CGROUP_RUNQUEUE_LATENCY].reshape(-1, h2.BUCKETS)[slot] = \
                    self._runqlat[slot]
                self._slots.set(cid, slot)
                self._slot_of[cid] = slot
            self._labels[slot] = truncate_label(path)  # renamed groups keep their slot

    def _dir(self, path: str) -> Path:
        return self.root if path == "/" else self.root / path[1:]

    @property
    def detail(self) -> str:  # type: ignore[override]
        base = BpfSampler.detail.fget(self)  # type: ignore[attr-defined]
        if getattr(self, "over_limit", 0):
            base += (f"; {self.matched - self.over_limit} of {self.matched} matching"
                     f" cgroups have slots (max_cgroups={self._max}), the rest count in"
                     f" {OTHER_LABEL}")
        return base

    @detail.setter
    def detail(self, value: str) -> None:
        pass  # derived from the BPF object's state and the last walk

    def on_attach(self, now_ns: int) -> None:
        # Timestamps stored before this (an earlier attachment) are ignored.
        self._attached_ns[0] = now_ns

    def slot_labels(self) -> dict[int, str]:
        """Return the slots in use (``(other)`` included) and their labels."""
        return {s: lb for s, lb in enumerate(self._labels) if lb is not None}

    def capture(self) -> BpfCapture:
        """Give slots anew when a rescan is due (module docstring), then copy the maps."""
        if self._clock() >= self._next_scan:
            self.rescan()
        return super().capture()

    def parse(self, raw: BpfCapture) -> Rows:
        labels = self.slot_labels()
        rows: dict = {}
        if CGROUP_RUNQUEUE_LATENCY in raw.hists:
            cur, prev = raw.hists[CGROUP_RUNQUEUE_LATENCY]
            rows[CGROUP_RUNQUEUE_LATENCY] = {
                (label,): (raw.window, h2.nonzero(h2.delta(cur[slot], prev[slot])[0]))
                for slot in np.flatnonzero((cur != prev).any(axis=1)).tolist()
                # A slot freed since: its waits belonged to a cgroup now gone.
                if (label := labels.get(slot)) is not None}
        counters = raw.maps.get("counters")
        if counters is not None:
            totals = (self._values(counters) - self._base).tolist()
            rows[CGROUP_SCHEDULER] = {(label,): totals[slot] for slot, label in labels.items()}
        return rows

    def close(self) -> None:
        slots = getattr(self, "_slots", None)
        if slots is not None:
            slots.close()
        self._counters = self._runqlat = self._attached_ns = None  # type: ignore[assignment]
        super().close()
