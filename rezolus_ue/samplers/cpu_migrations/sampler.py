"""The cpu_migrations sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ..base import Rows
from ..bpf_sampler import BpfCapture, BpfSampler
from . import CPU_MIGRATIONS, FAMILIES


class CpuMigrations(BpfSampler):
    """Tasks migrated away from and onto each CPU (BPF on sched_migrate_task)."""

    name = "cpu_migrations"
    families = FAMILIES
    per_cpu_maps = ("migrations",)
    reads = ((CPU_MIGRATIONS, "migrations"),)

    def setup(self, bpf: BpfObject) -> None:
        self._migrations = bpf.array("migrations")

    def parse(self, raw: BpfCapture) -> Rows:
        m = raw.maps.get("migrations")
        if m is None:
            return {}
        frm, to = m["from"], m["to"]
        return {CPU_MIGRATIONS: {(cpu,): (int(frm[cpu]), int(to[cpu]))
                                 for cpu in np.flatnonzero(frm | to).tolist()}}

    def close(self) -> None:
        self._migrations = None  # type: ignore[assignment]
        super().close()
