"""What the perf_software and perf_hardware samplers share: per-CPU perf counters opened
in ``start()`` and kept open, the ``oversample`` option, multiplexing scaling."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import KernelFeatureMissing, PermissionDenied, RezolusError, SamplerUnavailable
from ..linux.perf_event import (
    PERF_COUNT_HW_BRANCH_MISSES,
    PERF_COUNT_HW_CPU_CYCLES,
    PERF_COUNT_HW_INSTRUCTIONS,
    PERF_COUNT_SW_CONTEXT_SWITCHES,
    PERF_COUNT_SW_CPU_MIGRATIONS,
    PERF_COUNT_SW_PAGE_FAULTS,
    PERF_FORMAT_GROUP,
    PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING,
    PerfEvent,
    PerfEventAttr,
)
from ..linux.perf_ring import online_cpus
from .base import FamilySampler, SamplerContext

#: Counters of each family, in catalog order.
SOFTWARE_COUNTERS = (PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_COUNT_SW_CPU_MIGRATIONS,
                     PERF_COUNT_SW_PAGE_FAULTS)
HARDWARE_COUNTERS = (PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS,
                     PERF_COUNT_HW_BRANCH_MISSES)
_HW_READ_FORMAT = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING


def scaled_delta(value: int, enabled: int, running: int,
                 prev: tuple[int, int, int]) -> int:
    """Return a counter's increment since ``prev`` (value, enabled, running), scaled up
    for the share of the enabled time it was not on the PMU (multiplexing).

    A counter that never ran in the period gives 0: nothing is known about it.
    """
    dv, de, dr = value - prev[0], enabled - prev[1], running - prev[2]
    if dv <= 0 or dr <= 0:
        return 0
    if de <= dr:
        return dv
    return dv * de // dr


def ipc_milli(d_instructions: int, d_cycles: int) -> int:
    """Return 1000 x instructions per cycle over a period, 0 when no cycles elapsed."""
    if d_cycles <= 0:
        return 0
    return 1000 * d_instructions // d_cycles


def open_group(type_: int, configs: Sequence[int], cpu: int,
               read_format: int) -> tuple[PerfEvent, ...]:
    """Return ``cpu``'s counters ``configs`` as one perf group, counting from zero.

    The leader (first) opens disabled and the members follow its state, so all start
    together; with PERF_FORMAT_GROUP in ``read_format`` one read of the leader returns
    them all (``PerfEvent.read_group``).
    """
    evs: list[PerfEvent] = []
    try:
        for i, config in enumerate(configs):
            attr = PerfEventAttr(type=type_, config=config,
                                 read_format=read_format if i == 0 else
                                 read_format & ~PERF_FORMAT_GROUP)
            attr.set_flags(disabled=i == 0, exclude_hv=True)
            evs.append(PerfEvent.open(attr, -1, cpu, evs[0].fd if evs else -1))
        for ev in evs:
            ev.reset()
        evs[0].enable()
    except BaseException:
        for ev in evs:
            ev.close()
        raise
    return tuple(evs)


def open_hardware(cpu: int, read_format: int) -> tuple[PerfEvent, ...]:
    """Return ``cpu``'s hardware counters opened one by one (not grouped)."""
    evs: list[PerfEvent] = []
    try:
        for config in HARDWARE_COUNTERS:
            evs.append(PerfEvent.hardware(config, cpu, read_format=read_format))
    except BaseException:
        for ev in evs:
            ev.close()
        raise
    return tuple(evs)


def _unavailable(name: str, e: RezolusError, what: str) -> SamplerUnavailable:
    """Return the SamplerUnavailable for a perf_event_open failure ``e``."""
    if isinstance(e, PermissionDenied):
        return SamplerUnavailable(name, f"{what}: {e}")
    if isinstance(e, KernelFeatureMissing):
        return SamplerUnavailable(name, f"{what}: {e.hint}")
    return SamplerUnavailable(name, f"{what}: {e}")


class PerCpuCounters(FamilySampler):
    """What both perf samplers share: counters opened per CPU in ``start``, kept in
    ``_events`` as (cpu, that CPU's counters), closed together; the ``oversample``
    option."""

    origin = "perf_event_open"

    def __init__(self, ctx: SamplerContext) -> None:
        super().__init__(ctx)
        self._events: list[tuple[int, tuple[PerfEvent, ...]]] = []
        self.oversample = self.bool_option("oversample")

    def cpus_to_open(self) -> list[int]:
        """Forget the counters, and return the online CPUs to open them on (raise
        SamplerUnavailable if they cannot be read)."""
        self._events = []
        try:
            return online_cpus(str(self.ctx.roots.sysfs))
        except RezolusError as e:
            raise SamplerUnavailable(self.name, str(e)) from None

    def close(self) -> None:
        for _cpu, evs in self._events:
            for ev in evs:
                ev.close()
        self._events = []
