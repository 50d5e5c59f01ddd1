"""Per-CPU software perf counters: context switches, CPU migrations, page faults.

Sources: ``perf_event_open(2)`` in counting mode (no sampling, no ring buffer),
``PERF_COUNT_SW_CONTEXT_SWITCHES``, ``_CPU_MIGRATIONS``, ``_PAGE_FAULTS`` (all since Linux
2.6.31; never multiplexed), one event per counter per online CPU with pid=-1 (everything
that runs on that CPU), opened in ``start()`` and kept open. A CPU's three counters are one
perf group read with ``PERF_FORMAT_GROUP``, one ``read(2)`` per CPU. Online CPUs come from
``<sysfs>/devices/system/cpu/online`` at start; CPUs brought online later are not counted
until the agent restarts. Needs root, CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8) or
``kernel.perf_event_paranoid`` <= 0 (per-CPU events).

Reading another CPU's active counter is an IPI to it (smp_call_function_single),
expensive in a VM (a VM exit each way); a group read makes it one IPI per CPU instead of
one per counter, and the reader waits for the IPI to be answered. So the counters are read
once per publish interval unless the ``oversample`` option asks for every sample_interval
(cost figures: docs/PERFORMANCE.md).

Events: ``rezolus_perf_software`` (+ ``_dist``).
"""


from __future__ import annotations

from ...config import Option
from ...linux.capabilities import PERF_COUNTERS, Need
from ...metrics.family import Family, counter
from ...metrics.labels import CPU

#: The perf samplers read another CPU's counters with an IPI to it: not every sample_interval
#: unless asked (their ``oversample`` option).
PERF_DIST = ("every sample_interval only with the sampler's oversample = true; by default"
              " once per publish interval, so value, percentiles and max are the interval's"
              " one rate (each read of another CPU's counters interrupts that CPU).")

PERF_SOFTWARE = Family(
    "rezolus_perf_software", __name__,
    "Per-CPU software perf counters (perf_event_open PERF_TYPE_SOFTWARE).",
    (CPU,),
    (
        counter("context_switches", "switches", "context switches"),
        counter("cpu_migrations", "migrations", "tasks migrated to this CPU"),
        counter("page_faults", "faults", "page faults"),
    ),
    dist_sampling=PERF_DIST,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (PERF_SOFTWARE,)

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

#: This sampler's options (beyond the common ones): key, type, default, help.
OPTIONS: tuple[Option, ...] = (OVERSAMPLE,)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = PERF_COUNTERS
