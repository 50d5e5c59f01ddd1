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

Measured cost (2-vCPU VM shared with other work, Linux 6.18; kernel.bpf_stats_enabled
run_time_ns / run_cnt over 1.5 s of a process flipping its affinity between CPU 0 and 1,
two runs): 240-270 ns per migration with tp_btf, 180-200 ns raw_tp, ~150 ns tracepoint
(the two atomic adds on lines other CPUs also write dominate).
"""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ...metrics.catalog import CPU_MIGRATIONS
from ..bpf_sampler import BpfSampler

#: struct cpu_migrations (bpf/cpu_migrations.h): one cache line per CPU.
MIGRATIONS_DTYPE = np.dtype({
    "names": ["from", "to"],
    "formats": ["=u8", "=u8"],
    "offsets": [0, 8],
    "itemsize": 64,
})
#: C struct name -> its mirror here (tests check both against the object's BTF).
SHARED_STRUCTS = {"cpu_migrations": MIGRATIONS_DTYPE}


class CpuMigrations(BpfSampler):
    """Tasks migrated away from and onto each CPU (BPF on sched_migrate_task)."""

    name = "cpu_migrations"
    families = (CPU_MIGRATIONS,)
    bpf_object = "cpu_migrations"
    per_cpu_maps = ("migrations",)
    keep_maps = ("migrations",)

    def setup(self, bpf: BpfObject) -> None:
        self._migrations = bpf.array("migrations", MIGRATIONS_DTYPE)

    def publish(self, t_ns: int) -> None:
        self.window()
        h = self.handles.get(CPU_MIGRATIONS.schema.name)
        if h is None or not h.word.value:
            return
        m = self._migrations
        frm, to = m["from"], m["to"]
        pack = CPU_MIGRATIONS.schema.pack
        for cpu in np.flatnonzero(frm | to).tolist():
            h.write(pack(cpu, int(frm[cpu]), int(to[cpu])))

    def close(self) -> None:
        self._migrations = None  # type: ignore[assignment]
        super().close()
