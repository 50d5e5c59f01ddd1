"""Interrupts handled per CPU: device interrupts, and the kernel's own by kind.

Source: ``/proc/interrupts``: a header of CPU columns ``CPU0 CPU1 ...`` (online CPUs only),
then one line per interrupt, ``NAME: n n ... description``. Lines named by a number are
device interrupts (IO-APIC, MSI, the arm64 arch timer...): summed per CPU as ``device``.
Named lines are the architecture's own, classified by their description (the same on x86
and arm64, whose IPIs are ``IPI0:`` ... lines): ``Local timer interrupts``,
``Rescheduling interrupts``, ``Function call interrupts``, ``TLB shootdowns``; every other
per-CPU named line (NMI, thermal, hypervisor callbacks, IRQ work...) counts in ``other``.
``ERR``, ``MIS`` (x86) and ``Err`` (arm64) are machine-wide, not per CPU: left out. A row
shorter than the header reads 0 for the CPUs it lacks.

The file lists every interrupt on every CPU, so the kernel's cost to print it grows with
both: read once per publish interval, not every sample_interval.
Events: ``rezolus_cpu_interrupts``.
Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...metrics.family import Family, counter
from ...metrics.labels import CPU

#: Named /proc/interrupts lines by description -> the field they count in.
KINDS = {
    "Local timer interrupts": "local_timer",
    "Rescheduling interrupts": "rescheduling",
    "Function call interrupts": "function_call",
    "TLB shootdowns": "tlb_shootdowns",
}

CPU_INTERRUPTS = Family(
    "rezolus_cpu_interrupts", __name__,
    "Interrupts handled per CPU, device and the kernel's own by kind (/proc/interrupts).",
    (CPU,),
    (
        counter("device", "interrupts", "device interrupts (the numbered lines)",
                dist=False),
        counter("local_timer", "interrupts", "local timer interrupts (x86 LOC; on arm64"
                " the arch timer is a device interrupt)", dist=False),
        counter("rescheduling", "interrupts", "rescheduling IPIs", dist=False),
        counter("function_call", "interrupts", "function call IPIs", dist=False),
        counter("tlb_shootdowns", "interrupts", "TLB shootdown IPIs (x86)", dist=False),
        counter("other", "interrupts", "every other per-CPU named line (NMI, thermal,"
                " IRQ work, ...)", dist=False),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (CPU_INTERRUPTS,)
