"""Per-CPU time in each state and busy share, and the number of online CPUs.

Sources: ``/proc/stat`` lines ``cpuN user nice system idle iowait irq softirq steal ...``
(USER_HZ ticks; ``steal`` since Linux 2.6.11; older formats with fewer columns read as 0);
``/sys/devices/system/cpu/online``.
Events: ``rezolus_cpu_usage`` (+ ``_dist``: busy_ppm per sample), ``rezolus_cpu_cores``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ...metrics.catalog import CPU_CORES, CPU_USAGE
from ...metrics.family import Family
from ...perf_event import parse_cpu_list
from ...procfs import KeptOpen
from ..base import FamilySampler

#: Columns of a cpuN line we publish, in catalog order.
_COLUMNS = 8
_IDLE, _IOWAIT = 3, 4


def parse_proc_stat_cpus(text: str, tick_ns: int) -> list[tuple[int, ...]]:
    """Return (cpu, user_ns, ..., steal_ns) per ``cpuN`` line of /proc/stat text."""
    rows = []
    # The cpuN lines come first; stop before the long "intr" line rather than split it.
    for line in text.split("\nintr", 1)[0].splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        parts = line.split()
        try:
            cpu = int(parts[0][3:])
            ticks = [int(v) for v in parts[1 : 1 + _COLUMNS]]
        except ValueError:
            continue
        ticks += [0] * (_COLUMNS - len(ticks))
        rows.append((cpu, *(t * tick_ns for t in ticks)))
    return rows


def busy_ppm(now: Sequence[int], before: Sequence[int] | None) -> int:
    """Return the busy share (ppm) between two rows of state times (catalog order)."""
    if before is None:
        d = list(now)
    else:
        d = [a - b for a, b in zip(now, before, strict=True)]
        if min(d) < 0:  # counters went back (CPU hotplug reset): no period to judge
            return 0
    total = sum(d)
    if total <= 0:
        return 0
    return round(1_000_000 * (total - d[_IDLE] - d[_IOWAIT]) / total)


class CpuUsage(FamilySampler):
    """Per-CPU user/nice/system/idle/iowait/irq/softirq/steal time, busy %, online CPUs."""

    name = "cpu_usage"
    families = (CPU_USAGE, CPU_CORES)

    def start(self) -> None:
        self._stat = KeptOpen(self.ctx.roots.procfs / "stat")
        try:
            self._online = KeptOpen(self.ctx.roots.sysfs / "devices/system/cpu/online")
        except BaseException:
            self._stat.close()  # the agent does not close() a sampler that failed to start
            raise
        self._tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        self._prev: dict[int, tuple[int, ...]] = {}

    def read(self) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        out: dict[Family, Mapping[tuple, Sequence[int]]] = {}
        if self.family_wanted(CPU_USAGE):
            rows = {}
            for cpu, *times in parse_proc_stat_cpus(self._stat.read_text(), self._tick_ns):
                rows[(cpu,)] = (*times, busy_ppm(times, self._prev.get(cpu)))
                self._prev[cpu] = tuple(times)
            out[CPU_USAGE] = rows
        if self.family_wanted(CPU_CORES):
            out[CPU_CORES] = {(): (len(parse_cpu_list(self._online.read_text())),)}
        return out

    def close(self) -> None:
        self._stat.close()
        self._online.close()
