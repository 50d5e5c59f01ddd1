"""Per-CPU time in each state, from ``/proc/stat``.

Sources: ``/proc/stat`` lines ``cpuN user nice system idle iowait irq softirq steal ...``
(USER_HZ ticks; ``steal`` since Linux 2.6.11; older formats with fewer columns read as 0).
Events: ``rezolus_cpu_usage`` (one record per online CPU per interval, cumulative ns).
"""

from __future__ import annotations

import os

from ...procfs import KeptOpen
from ...schema import CPU_USAGE
from ..base import Sampler

#: Columns of a cpuN line we publish, in schema order after `cpu`.
_COLUMNS = 8


def parse_proc_stat_cpus(text: str, tick_ns: int) -> list[tuple[int, ...]]:
    """Return (cpu, user_ns, ..., steal_ns) per ``cpuN`` line of /proc/stat text."""
    rows = []
    for line in text.splitlines():
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


class CpuUsage(Sampler):
    """Per-CPU user/nice/system/idle/iowait/irq/softirq/steal time from /proc/stat."""

    name = "cpu_usage"
    events = (CPU_USAGE,)

    def start(self) -> None:
        self._stat = KeptOpen(self.ctx.roots.procfs / "stat")
        self._tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")

    def collect(self) -> None:
        h = self.handles[CPU_USAGE.name]
        pack, write = CPU_USAGE.pack, h.write
        for row in parse_proc_stat_cpus(self._stat.read_text(), self._tick_ns):
            write(pack(*row))

    def close(self) -> None:
        self._stat.close()
