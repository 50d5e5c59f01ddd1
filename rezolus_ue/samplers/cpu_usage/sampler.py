"""The cpu_usage sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from operator import sub

from ...linux.procfs import KeptOpen, parse_cpu_list
from ...metrics.family import Family
from ..base import FamilySampler
from . import CPU_CORES, CPU_USAGE, FAMILIES

#: Columns of a cpuN line we publish, in catalog order.
_COLUMNS = 8
_IDLE, _IOWAIT = CPU_USAGE.slot("idle_ns"), CPU_USAGE.slot("iowait_ns")


def parse_proc_stat_cpus(text: bytes | str, tick_ns: int) -> list[tuple[int, ...]]:
    """Return (cpu, user_ns, ..., steal_ns) per ``cpuN`` line of /proc/stat."""
    data = text.encode() if isinstance(text, str) else text
    # The cpuN lines come first; stop before the long "intr" line rather than split it.
    end = data.find(b"\nintr")
    scale = tick_ns.__mul__
    rows = []
    for line in (data if end < 0 else data[:end]).split(b"\n"):
        if line[:3] != b"cpu" or line[3:4] == b" ":  # not a cpu line, or the aggregate
            continue
        parts = line.split(None, _COLUMNS + 1)[: _COLUMNS + 1]
        try:
            cpu = int(parts[0][3:])
            ticks = tuple(map(scale, map(int, parts[1:])))  # C-level loops, no frames
        except ValueError:
            continue
        if len(ticks) < _COLUMNS:
            ticks += (0,) * (_COLUMNS - len(ticks))
        rows.append((cpu, *ticks))
    return rows


def busy_ppm(now: Sequence[int], before: Sequence[int] | None) -> int:
    """Return the busy share (ppm) between two rows of state times (catalog order)."""
    if before is None:
        d = list(now)
    else:
        if len(now) != len(before):
            raise ValueError("rows of different lengths")
        d = list(map(sub, now, before))
        if min(d) < 0:  # counters went back (CPU hotplug reset): no period to judge
            return 0
    total = sum(d)
    if total <= 0:
        return 0
    return round(1_000_000 * (total - d[_IDLE] - d[_IOWAIT]) / total)


class CpuUsage(FamilySampler):
    """Per-CPU user/nice/system/idle/iowait/irq/softirq/steal time, busy %, online CPUs."""

    name = "cpu_usage"
    families = FAMILIES

    def start(self) -> None:
        # Shared with the scheduler sampler: one read of /proc/stat per agent tick.
        self._stat = self.ctx.shared.open(self.ctx.roots.procfs / "stat")
        try:
            self._online = KeptOpen(self.ctx.roots.sysfs / "devices/system/cpu/online")
        except BaseException:
            # The agent does not close() a sampler that failed to start.
            self._stat.close()
            raise
        self._tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        self._prev: dict[int, tuple[int, ...]] = {}

    def capture(self) -> dict[Family, bytes]:
        raw = {}
        if self.family_wanted(CPU_USAGE):
            raw[CPU_USAGE] = self._stat.read_at(self._sample_ns)
        if self.family_wanted(CPU_CORES):
            raw[CPU_CORES] = self._online.read()
        return raw

    def parse(self, raw: dict[Family, bytes]) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        out: dict[Family, Mapping[tuple, Sequence[int]]] = {}
        if (data := raw.get(CPU_USAGE)) is not None:
            rows = {}
            prev = self._prev
            for row in parse_proc_stat_cpus(data, self._tick_ns):
                cpu, times = row[0], row[1:]
                rows[(cpu,)] = (*times, busy_ppm(times, prev.get(cpu)))
                prev[cpu] = times
            out[CPU_USAGE] = rows
        if (data := raw.get(CPU_CORES)) is not None:
            out[CPU_CORES] = {(): (len(parse_cpu_list(data.decode("ascii", "replace"))),)}
        return out

    def close(self) -> None:
        self._stat.close()
        self._online.close()
