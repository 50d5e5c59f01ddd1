"""The perf_hardware sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...errors import KernelFeatureMissing, PermissionDenied, RezolusError, SamplerUnavailable
from ...linux.perf_event import PERF_TYPE_HARDWARE, PerfEvent
from ...metrics.family import Family
from ..perf_counters import (
    _HW_READ_FORMAT,
    HARDWARE_COUNTERS,
    PerCpuCounters,
    _unavailable,
    ipc_milli,
    open_group,
    open_hardware,
    scaled_delta,
)
from . import FAMILIES, OPTIONS, PERF_HARDWARE


class PerfHardware(PerCpuCounters):
    """Per-CPU cycles, instructions, branch misses and IPC (hardware counters; needs a PMU)."""

    name = "perf_hardware"
    families = FAMILIES
    options = OPTIONS

    def start(self) -> None:
        cpus = self.cpus_to_open()
        group = self.bool_option("group")
        try:
            for cpu in cpus:
                try:
                    evs = self._open_cpu(cpu, group)
                except (PermissionDenied, KernelFeatureMissing):
                    raise
                except RezolusError as e:
                    if not group:
                        raise
                    # The PMU cannot hold the group (EINVAL): count ungrouped instead.
                    group = False
                    self.detail = f"counters not grouped (ipc_milli less exact): {e}"
                    evs = self._open_cpu(cpu, group)
                self._events.append((cpu, evs))
        except KernelFeatureMissing:
            self.close()
            raise SamplerUnavailable(self.name, self._no_pmu_reason()) from None
        except RezolusError as e:
            self.close()
            raise _unavailable(self.name, e, "cannot open hardware perf counters") from None
        # Per counter: (value, time_enabled, time_running) at the last read; the scaled
        # running totals; per CPU.
        self._prev = {cpu: [(0, 0, 0)] * len(HARDWARE_COUNTERS) for cpu, _ in self._events}
        self._totals = {cpu: [0] * len(HARDWARE_COUNTERS) for cpu, _ in self._events}

    @staticmethod
    def _open_cpu(cpu: int, group: bool) -> tuple[PerfEvent, ...]:
        """Return the counters of ``cpu``, counting (as one group when ``group``)."""
        if group:
            return open_group(PERF_TYPE_HARDWARE, HARDWARE_COUNTERS, cpu, _HW_READ_FORMAT)
        return open_hardware(cpu, _HW_READ_FORMAT)

    def _no_pmu_reason(self) -> str:
        """Return why hardware counters cannot be opened here, naming the PMUs present."""
        devices = self.ctx.roots.sysfs / "bus/event_source/devices"
        try:
            pmus = ", ".join(sorted(p.name for p in devices.iterdir())) or "none"
        except OSError:
            pmus = "unknown"
        return ("no PMU exposed by this CPU/VM: perf_event_open of PERF_TYPE_HARDWARE cycles"
                f" fails (perf PMUs present: {pmus}); enable the virtual PMU in the hypervisor"
                " (e.g. QEMU -cpu host, VMware vPMC) or run on bare metal")

    def capture(self) -> list[tuple[int, list[tuple[int, int, int]]]] | None:
        if not self.family_wanted(PERF_HARDWARE):
            return None
        out = []
        for cpu, evs in self._events:
            counts = []
            for ev in evs:
                c = ev.read_counter()
                counts.append((c.value, c.time_enabled or 0, c.time_running or 0))
            out.append((cpu, counts))
        return out

    def parse(self, raw: list[tuple[int, list[tuple[int, int, int]]]] | None,
              ) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        rows = {}
        for cpu, counts in raw:
            prev, totals = self._prev[cpu], self._totals[cpu]
            deltas = []
            for i, now in enumerate(counts):
                d = scaled_delta(*now, prev[i])
                prev[i] = now
                totals[i] += d
                deltas.append(d)
            rows[(cpu,)] = (*totals, ipc_milli(deltas[1], deltas[0]))
        return {PERF_HARDWARE: rows}
