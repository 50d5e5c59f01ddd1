"""The cpu_migrations sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ..bpf_sampler import BpfSampler
from . import CPU_MIGRATIONS, FAMILIES


class CpuMigrations(BpfSampler):
    """Tasks migrated away from and onto each CPU (BPF on sched_migrate_task)."""

    name = "cpu_migrations"
    families = FAMILIES
    per_cpu_maps = ("migrations",)

    def setup(self, bpf: BpfObject) -> None:
        self._migrations = bpf.array("migrations")

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
