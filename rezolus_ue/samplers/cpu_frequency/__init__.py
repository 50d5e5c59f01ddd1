"""Current frequency of each CPU.

Sources, the first that gives any frequency at start:

1. cpufreq: ``/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq`` (kHz), one kept-open
   file per CPU. On x86 the kernel derives the value from APERF/MPERF (the average over
   the last tick or so), elsewhere it is the driver's last requested frequency. A CPU whose
   file cannot be read (it went offline: sysfs answers ENODEV/EBUSY) is skipped for that
   sample; CPUs without a file (offline at start, or gone offline) are looked for again at
   most once per second, so a CPU brought online later appears. CPUs sharing a policy
   (one clock) read the policy's file; such a CPU taken offline may keep reporting the
   policy's frequency, as its fd still reaches the policy.
2. ``/proc/cpuinfo`` ``cpu MHz`` lines (decimal MHz, x86 and a few others; arm64 has
   none), attributed to the preceding ``processor : N``. Used where no CPU has cpufreq
   (VMs, containers without sysfs cpufreq); ``detail`` says so. On a VM this is usually
   the nominal (TSC) frequency, constant.

If neither gives a frequency the sampler is unavailable, with the reason.
Events: ``rezolus_cpu_frequency`` (+ ``_dist``: frequency levels per sample).
"""

from __future__ import annotations

from ...metrics.family import Family, gauge
from ...metrics.labels import CPU

CPU_FREQUENCY = Family(
    "rezolus_cpu_frequency", __name__,
    "Current frequency per CPU (cpufreq scaling_cur_freq, else /proc/cpuinfo 'cpu MHz').",
    (CPU,),
    # Not oversampled: governors change frequency on their own slower clock, and
    # /proc/cpuinfo (the fallback) is expensive to generate.
    (gauge("frequency_hz", "Hz", "current frequency", dist=False),),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (CPU_FREQUENCY,)
