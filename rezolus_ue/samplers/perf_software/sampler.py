"""The perf_software sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...errors import RezolusError
from ...linux.perf_event import PERF_FORMAT_GROUP, PERF_TYPE_SOFTWARE
from ...metrics.family import Family
from ..perf_counters import (
    SOFTWARE_COUNTERS,
    PerCpuCounters,
    _unavailable,
    open_group,
)
from . import FAMILIES, OPTIONS, PERF_SOFTWARE


class PerfSoftware(PerCpuCounters):
    """Per-CPU context switches, CPU migrations and page faults (perf software counters)."""

    name = "perf_software"
    families = FAMILIES
    options = OPTIONS

    def start(self) -> None:
        cpus = self.cpus_to_open()
        try:
            for cpu in cpus:
                self._events.append((cpu, open_group(PERF_TYPE_SOFTWARE, SOFTWARE_COUNTERS,
                                                     cpu, PERF_FORMAT_GROUP)))
        except RezolusError as e:
            self.close()
            raise _unavailable(self.name, e, "cannot open software perf counters") from None

    def capture(self) -> list[bytes] | None:
        if not self.family_wanted(PERF_SOFTWARE):
            return None
        n = len(SOFTWARE_COUNTERS)
        return [evs[0].read_group_raw(n) for _cpu, evs in self._events]

    def parse(self, raw: list[bytes] | None) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        n = len(SOFTWARE_COUNTERS)
        return {PERF_SOFTWARE: {(cpu,): evs[0].decode_group(data, n) for (cpu, evs), data
                                in zip(self._events, raw, strict=True)}}
