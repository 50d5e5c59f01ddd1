"""Softirqs handled per CPU, by kind.

Source: ``/proc/softirqs`` (Linux >= 2.6.31): a header of CPU columns ``CPU0 CPU1 ...``
(every possible CPU, offline ones included, their counts frozen), then one line per kind,
``NAME: n n ...``. Kinds map to ``catalog.SOFTIRQ_KINDS`` by name:

* ``IRQ_POLL`` was called ``BLOCK_IOPOLL`` before Linux 4.5 (same slot, renamed): read as
  ``irq_poll``;
* a kind the kernel does not list (``BLOCK_IOPOLL`` arrived in 2.6.32) reads as 0;
* a kind we do not know (a future kernel's) is ignored.

A row shorter than the header (never seen, but cheap to survive) reads 0 for the missing
CPUs. The counts are softirq handler runs, not raises.
Events: ``rezolus_cpu_softirq`` (+ ``_dist``: per-second rate of each kind).
Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...metrics.family import Family, counter
from ...metrics.labels import CPU

SOFTIRQ_KINDS = ("hi", "timer", "net_tx", "net_rx", "block", "irq_poll", "tasklet", "sched",
                 "hrtimer", "rcu")

CPU_SOFTIRQ = Family(
    "rezolus_cpu_softirq", __name__,
    "Softirqs handled per CPU, by kind (/proc/softirqs).",
    (CPU,),
    tuple(counter(k, "softirqs", f"{k.upper()} softirqs") for k in SOFTIRQ_KINDS),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (CPU_SOFTIRQ,)
