"""Per-CPU hardware perf counters: cycles, instructions, branch misses and IPC.

Sources: ``perf_event_open(2)`` in counting mode, ``PERF_COUNT_HW_CPU_CYCLES``,
``_INSTRUCTIONS``, ``_BRANCH_MISSES``, one event per counter per online CPU (pid=-1), one
``read(2)`` of 24 bytes (value, time_enabled, time_running) per counter. They need a PMU,
which many VMs do not expose (then the sampler is unavailable, saying so). By default a
CPU's three counters form one perf group, scheduled onto the PMU together, so
``ipc_milli`` divides counts taken over the same time. When the kernel multiplexes (more
events than PMU counters), each read's increment is scaled by
d(time_enabled)/d(time_running) and added to a running total, so totals never go back.
Needs root, CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8) or ``kernel.perf_event_paranoid``
<= 0. Read once per publish interval unless ``oversample`` (see ``perf_software``).

Events: ``rezolus_perf_hardware`` (+ ``_dist``).
"""


from __future__ import annotations

from ...config import Option
from ...linux.capabilities import PERF_COUNTERS, Need
from ...metrics.family import Family, counter, gauge
from ...metrics.labels import CPU
from ..perf_software import OVERSAMPLE, PERF_DIST

PERF_HARDWARE = Family(
    "rezolus_perf_hardware", __name__,
    "Per-CPU hardware perf counters (cycles, instructions, branch misses), scaled for"
    " multiplexing; unavailable where the CPU or VM exposes no PMU.",
    (CPU,),
    (
        counter("cycles", "cycles", "CPU cycles"),
        counter("instructions", "instructions", "instructions retired"),
        counter("branch_misses", "branches", "mispredicted branches"),
        gauge("ipc_milli", "1/1000", "instructions per cycle x 1000 over the sample period"),
    ),
    dist_sampling=PERF_DIST,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (PERF_HARDWARE,)

#: This sampler's options (beyond the common ones): key, type, default, help.
OPTIONS: tuple[Option, ...] = (
    OVERSAMPLE,
    Option("group", "bool", True,
           "Schedule each CPU's three counters onto the PMU as one perf group, so"
           " ipc_milli divides cycles and instructions counted over the same time. Turn"
           " off on a PMU with too few counters to hold all three at once."),
)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = PERF_COUNTERS
