"""Per-CPU perf counters: software (context switches, migrations, page faults) and hardware
(cycles, instructions, branch misses, IPC).

Sources: ``perf_event_open(2)`` in counting mode (no sampling, no ring buffer), one event
per counter per online CPU with pid=-1 (everything that runs on that CPU), opened in
``start()`` and kept open. Software: a CPU's three counters are one perf group read with
``PERF_FORMAT_GROUP``, one ``read(2)`` per CPU; hardware: one ``read(2)`` of 24 bytes
(value, time_enabled, time_running) per counter. Online CPUs come from
``<sysfs>/devices/system/cpu/online`` at start; CPUs brought online later are not counted
until the agent restarts.

- software: ``PERF_COUNT_SW_CONTEXT_SWITCHES``, ``_CPU_MIGRATIONS``, ``_PAGE_FAULTS``
  (all since Linux 2.6.31). Software counters are never multiplexed.
- hardware: ``PERF_COUNT_HW_CPU_CYCLES``, ``_INSTRUCTIONS``, ``_BRANCH_MISSES``. They
  need a PMU, which many VMs do not expose (then the sampler is unavailable, saying so).
  By default a CPU's three counters form one perf group, scheduled onto the PMU together,
  so ``ipc_milli`` divides counts taken over the same time. When the kernel multiplexes
  (more events than PMU counters), each read's increment is scaled by
  d(time_enabled)/d(time_running) and added to a running total, so totals never go back.

Both need root, CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8) or
``kernel.perf_event_paranoid`` <= 0 (per-CPU events).

Events: ``rezolus_perf_software`` (+ ``_dist``), ``rezolus_perf_hardware`` (+ ``_dist``).
Cost of the software reads: reading another CPU's active counter is an IPI to it
(smp_call_function_single), expensive in a VM (a VM exit each way); a group read makes it
one IPI per CPU instead of one per counter. Measured in the agent's 100 ms loop (2-vCPU
Linux 6.18 VM, shared): 265 us per sample with 6 single reads, 70-90 us with 2 group
reads (``bench/collect.py``'s per-sampler table). The reader waits for the IPI to be
answered: when the hypervisor has descheduled the other vCPU, it spins until that vCPU
runs again (25-33 ms of CPU a second at 100 ms sampling, with 21% steal). So the counters
are read once per publish interval unless the ``oversample`` option asks for every
sample_interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..config import Option
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
    PERF_TYPE_HARDWARE,
    PERF_TYPE_SOFTWARE,
    PerfEvent,
    PerfEventAttr,
)
from ..linux.procfs import online_cpus
from ..metrics.catalog import PERF_HARDWARE, PERF_SOFTWARE
from ..metrics.family import Family
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


def _unavailable(name: str, e: RezolusError, what: str) -> SamplerUnavailable:
    """Return the SamplerUnavailable for a perf_event_open failure ``e``."""
    if isinstance(e, PermissionDenied):
        return SamplerUnavailable(name, f"{what}: {e}")
    if isinstance(e, KernelFeatureMissing):
        return SamplerUnavailable(name, f"{what}: {e.hint}")
    return SamplerUnavailable(name, f"{what}: {e}")


#: The option both perf samplers have.
OVERSAMPLE = Option(
    "oversample", "bool", False,
    "Read the counters every sample_interval while the _dist event is enabled, so its"
    " percentiles are of per-sample rates. Off by default: reading another CPU's counters"
    " interrupts it (an IPI, in a VM an exit on both vCPUs), so at 100 ms every CPU is"
    " woken ten times a second, and on a VM whose other vCPU the hypervisor has descheduled"
    " the read spins until it runs again (measured: 25-33 ms of CPU a second on a 2-vCPU VM"
    " with 21% steal). Off, the _dist event summarises the one rate of each publish"
    " interval.")


class PerCpuCounters(FamilySampler):
    """What both perf samplers share: counters opened per CPU in ``start``, kept in
    ``_events`` as (cpu, that CPU's counters), closed together; the ``oversample``
    option."""

    def __init__(self, ctx: SamplerContext) -> None:
        super().__init__(ctx)
        self._events: list[tuple[int, tuple[PerfEvent, ...]]] = []
        self.oversample = bool(ctx.options.get("oversample", False))  # type: ignore[misc]

    def close(self) -> None:
        for _cpu, evs in self._events:
            for ev in evs:
                ev.close()
        self._events = []


class PerfSoftware(PerCpuCounters):
    """Per-CPU context switches, CPU migrations and page faults (perf software counters)."""

    name = "perf_software"
    families = (PERF_SOFTWARE,)
    options = (OVERSAMPLE,)

    def start(self) -> None:
        self._events = []
        try:
            cpus = online_cpus(str(self.ctx.roots.sysfs))
        except RezolusError as e:
            raise SamplerUnavailable(self.name, str(e)) from None
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


class PerfHardware(PerCpuCounters):
    """Per-CPU cycles, instructions, branch misses and IPC (hardware counters; needs a PMU)."""

    name = "perf_hardware"
    families = (PERF_HARDWARE,)
    options = (
        OVERSAMPLE,
        Option("group", "bool", True,
               "Schedule each CPU's three counters onto the PMU as one perf group, so"
               " ipc_milli divides cycles and instructions counted over the same time. Turn"
               " off on a PMU with too few counters to hold all three at once."),
    )

    def start(self) -> None:
        self._events = []
        try:
            cpus = online_cpus(str(self.ctx.roots.sysfs))
        except RezolusError as e:
            raise SamplerUnavailable(self.name, str(e)) from None
        group = bool(self.ctx.options.get("group", True))
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
        evs: list[PerfEvent] = []
        try:
            for config in HARDWARE_COUNTERS:
                evs.append(PerfEvent.hardware(config, cpu, read_format=_HW_READ_FORMAT))
        except BaseException:
            for ev in evs:
                ev.close()
            raise
        return tuple(evs)

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

    def read(self) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if not self.family_wanted(PERF_HARDWARE):
            return {}
        rows = {}
        for cpu, evs in self._events:
            prev, totals = self._prev[cpu], self._totals[cpu]
            deltas = []
            for i, ev in enumerate(evs):
                c = ev.read_counter()
                now = (c.value, c.time_enabled or 0, c.time_running or 0)
                d = scaled_delta(*now, prev[i])
                prev[i] = now
                totals[i] += d
                deltas.append(d)
            rows[(cpu,)] = (*totals, ipc_milli(deltas[1], deltas[0]))
        return {PERF_HARDWARE: rows}
