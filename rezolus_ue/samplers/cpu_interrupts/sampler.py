"""The cpu_interrupts sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...errors import SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family
from ..base import FamilySampler
from . import CPU_INTERRUPTS, FAMILIES, KINDS

#: Field of each description, as a slot of a CPU_INTERRUPTS row.
_SLOT = {d.encode(): CPU_INTERRUPTS.slot(f) for d, f in KINDS.items()}
_DEVICE, _OTHER = CPU_INTERRUPTS.slot("device"), CPU_INTERRUPTS.slot("other")
_FIELDS = len(CPU_INTERRUPTS.scalars)
#: Machine-wide lines: one count, not one per CPU.
_NOT_PER_CPU = (b"ERR", b"MIS", b"Err")


def parse_interrupts(data: bytes) -> dict[int, tuple[int, ...]]:
    """Return {cpu: (device, local_timer, ..., other)} for each CPU column of
    /proc/interrupts text."""
    lines = data.split(b"\n")
    cpus = [int(w[3:]) for w in lines[0].split() if w[:3] == b"CPU" and w[3:].isdigit()]
    n = len(cpus)
    totals = [[0] * n for _ in range(_FIELDS)]
    for line in lines[1:]:
        name, sep, rest = line.partition(b":")
        name = name.strip()
        if not sep or not name or name in _NOT_PER_CPU:
            continue
        words = rest.split(None, n)
        counts = []
        for w in words[:n]:
            if not w.isdigit():
                break
            counts.append(int(w))
        if name.isdigit():
            slot = _DEVICE
        else:
            description = words[n].strip() if len(words) > n and len(counts) == n else b""
            slot = _SLOT.get(description, _OTHER)
        row = totals[slot]
        for i, c in enumerate(counts):
            row[i] += c
    return {cpu: tuple(t[i] for t in totals) for i, cpu in enumerate(cpus)}


class CpuInterrupts(FamilySampler):
    """Interrupts per CPU: device, local timer, rescheduling, function call, TLB, other."""

    name = "cpu_interrupts"
    families = FAMILIES
    oversample = False

    def start(self) -> None:
        try:
            self._file = KeptOpen(self.ctx.roots.procfs / "interrupts")
        except FileNotFoundError as e:
            raise SamplerUnavailable(self.name, f"{e} (needs procfs)") from None

    def capture(self) -> bytes | None:
        return self._file.read() if self.family_wanted(CPU_INTERRUPTS) else None

    def parse(self, raw: bytes | None) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        return {CPU_INTERRUPTS: {(cpu,): row for cpu, row in parse_interrupts(raw).items()}}

    def close(self) -> None:
        self._file.close()
