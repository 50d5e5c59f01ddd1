"""Tasks moved between CPUs, per CPU and direction, counted by BPF (Rezolus's
cpu_migrations, direction from/to).

BPF: ``bpf/cpu_migrations.bpf.c`` (shared struct: ``bpf/cpu_migrations.h``). Hook:
``sched:sched_migrate_task`` (``set_task_cpu`` moving a task to another CPU: load
balancing, wakeups placed elsewhere, affinity changes), as tp_btf, raw_tp or classic
tracepoint (the best the kernel supports; option ``attach`` forces one). Each migration
adds one to ``from`` of the CPU the task leaves and one to ``to`` of the CPU it goes to.
The hook runs on whichever CPU does the move, so the per-CPU lines (one 64-byte cache
line per CPU, ``BPF_F_MMAPABLE``) are incremented atomically; migrations are rare next
to context switches, so they seldom contend.

Events: ``rezolus_cpu_migrations`` (per CPU with any migration: totals since the programs
were first loaded). ``perf_software``'s ``cpu_migrations`` counts the same moves with a
perf counter, per destination CPU only.

Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, counter
from ...metrics.labels import CPU

CPU_MIGRATIONS = Family(
    "rezolus_cpu_migrations", __name__,
    "Tasks moved between CPUs, per CPU and direction, counted by BPF on"
    " sched:sched_migrate_task while a consumer is attached (totals since the agent loaded"
    " the programs).",
    (CPU,),
    (
        counter("from", "migrations", "tasks moved away from this CPU", dist=False),
        counter("to", "migrations", "tasks moved onto this CPU", dist=False),
    ),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (CPU_MIGRATIONS,)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
