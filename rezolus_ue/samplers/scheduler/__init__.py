"""System-wide scheduler activity, and per-CPU run and run-queue wait time.

Sources:

* ``/proc/stat`` lines ``ctxt`` (context switches since boot), ``processes`` (forks since
  boot), ``procs_running`` and ``procs_blocked`` (Linux >= 2.5.45; older kernels read 0).
  A missing ``/proc/stat`` makes the sampler unavailable. The file is opened shared with
  the cpu_usage sampler: in one agent tick the kernel formats it once for both.
* ``/proc/schedstat`` (``CONFIG_SCHEDSTATS``): ``version N``, ``timestamp``, then per
  online CPU ``cpuN`` with 9 numbers, each followed by its ``domainN`` lines (ignored).
  Per Documentation/scheduler/sched-stats.rst the 7th, 8th and 9th numbers are the time
  tasks spent running on the CPU (ns), the time runnable tasks waited on its run queue
  (ns) and the timeslices run. These positions are the same in versions 15, 16 and 17
  (16 and 17 changed only domain lines); numbers after the 9th (out-of-tree patches add
  some) are ignored. A newer version is read the same way, with a note in ``detail``;
  version 14 and older (12 numbers, the three yld_*_empty counters first) is not read.
  Without the file (``CONFIG_SCHEDSTATS`` off) or with an unsupported version,
  ``rezolus_scheduler_cpu`` is not published and ``detail`` says why.

Events: ``rezolus_scheduler`` (+ ``_dist``), ``rezolus_scheduler_cpu`` (+ ``_dist``).
Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...metrics.family import Family, counter, gauge
from ...metrics.labels import CPU

SCHEDULER = Family(
    "rezolus_scheduler", __name__,
    "System-wide scheduler activity (/proc/stat).",
    (),
    (
        counter("context_switches", "switches", "context switches"),
        counter("forks", "processes", "processes and threads created"),
        gauge("procs_running", "tasks", "runnable tasks"),
        gauge("procs_blocked", "tasks", "tasks blocked on IO"),
    ),
)

SCHEDULER_CPU = Family(
    "rezolus_scheduler_cpu", __name__,
    "Per-CPU run and run-queue wait time (/proc/schedstat; needs CONFIG_SCHEDSTATS).",
    (CPU,),
    (
        counter("running_ns", "ns", "time tasks spent running on this CPU"),
        counter("waiting_ns", "ns", "time runnable tasks spent waiting for this CPU"),
        counter("timeslices", "timeslices", "timeslices run on this CPU"),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (SCHEDULER, SCHEDULER_CPU,)
