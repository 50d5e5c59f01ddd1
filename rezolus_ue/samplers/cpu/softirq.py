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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...errors import SamplerUnavailable
from ...metrics.catalog import CPU_SOFTIRQ, SOFTIRQ_KINDS
from ...metrics.family import Family
from ...procfs import KeptOpen
from ..base import FamilySampler

#: /proc/softirqs row name -> column of SOFTIRQ_KINDS.
_KIND_INDEX = {k.upper(): i for i, k in enumerate(SOFTIRQ_KINDS)}
_KIND_INDEX["BLOCK_IOPOLL"] = _KIND_INDEX["IRQ_POLL"]  # renamed in Linux 4.5
_KINDS = len(SOFTIRQ_KINDS)


def parse_softirqs(text: str) -> dict[int, tuple[int, ...]]:
    """Return {cpu: (hi, timer, ..., rcu)} for each CPU column of /proc/softirqs text."""
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = [int(w[3:]) for w in lines[0].split() if w[:3] == "CPU" and w[3:].isdigit()]
    n = len(cpus)
    if not n:
        return {}
    zero = (0,) * n
    # One tuple per kind, in catalog order; kinds the kernel does not list stay 0.
    kinds = [zero] * _KINDS
    get = _KIND_INDEX.get
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        j = get(name.strip())
        if j is None:
            continue
        try:
            counts = tuple(map(int, rest.split()))
        except ValueError:
            continue  # a garbled line is skipped, not fatal
        if len(counts) != n:
            counts = (counts + zero)[:n]
        kinds[j] = counts
    return dict(zip(cpus, zip(*kinds, strict=True), strict=True))


class CpuSoftirq(FamilySampler):
    """Softirqs handled per CPU by kind (timer, net_rx, sched, rcu, ...)."""

    name = "cpu_softirq"
    families = (CPU_SOFTIRQ,)

    def start(self) -> None:
        try:
            self._file = KeptOpen(self.ctx.roots.procfs / "softirqs")
        except FileNotFoundError as e:
            raise SamplerUnavailable(self.name, f"{e} (needs Linux >= 2.6.31)") from None

    def read(self) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if not self.family_wanted(CPU_SOFTIRQ):
            return {}
        return {CPU_SOFTIRQ: {(cpu,): counts
                              for cpu, counts in parse_softirqs(self._file.read_text()).items()}}

    def close(self) -> None:
        self._file.close()
