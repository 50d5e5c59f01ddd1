"""Per-CPU time in each state and busy share, and the number of online CPUs.

Sources: ``/proc/stat`` lines ``cpuN user nice system idle iowait irq softirq steal ...``
(USER_HZ ticks; ``steal`` since Linux 2.6.11; older formats with fewer columns read as 0);
``/sys/devices/system/cpu/online``. ``/proc/stat`` is opened shared with the scheduler
sampler: in one agent tick the kernel formats it once for both (the agent's ``SharedFiles``).
Events: ``rezolus_cpu_usage`` (+ ``_dist``: busy_ppm per sample), ``rezolus_cpu_cores``.
Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...metrics.family import Family, counter, gauge
from ...metrics.labels import CPU

CPU_USAGE = Family(
    "rezolus_cpu_usage", __name__,
    "Time each CPU has spent in each state since boot (/proc/stat), and how busy it was."
    " busy_ppm is sampled every sample_interval, so its max shows bursts the interval's"
    " average hides.",
    (CPU,),
    (
        counter("user_ns", "ns", "time in user mode (excluding nice)", dist=False),
        counter("nice_ns", "ns", "time in user mode at positive nice", dist=False),
        counter("system_ns", "ns", "time in kernel mode", dist=False),
        counter("idle_ns", "ns", "idle time", dist=False),
        counter("iowait_ns", "ns", "idle time with IO outstanding", dist=False),
        counter("irq_ns", "ns", "time servicing hardware interrupts", dist=False),
        counter("softirq_ns", "ns", "time servicing softirqs", dist=False),
        counter("steal_ns", "ns", "time stolen by the hypervisor", dist=False),
        gauge("busy_ppm", "ppm", "share of the sample period not idle or iowait"
              " (1000000 = 100%)"),
    ),
)

CPU_CORES = Family(
    "rezolus_cpu_cores", __name__,
    "CPUs online (/sys/devices/system/cpu/online).",
    (),
    (gauge("online", "cpus", "online CPUs", dist=False),),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (CPU_USAGE, CPU_CORES,)
