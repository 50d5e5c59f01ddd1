"""Time spent in softirq handlers per CPU and kind, and handler durations per kind,
measured by BPF (Rezolus's softirq_time). The procfs ``cpu_softirq`` sampler counts them.

BPF: ``bpf/cpu_softirq_time.bpf.c`` (shared struct: ``bpf/cpu_softirq_time.h``). Hooks:
``irq:softirq_entry`` and ``irq:softirq_exit``, as tp_btf, raw_tp or classic tracepoint
(the best the kernel supports; option ``attach`` forces one). The time between a CPU's
entry and exit of one vector is added to that CPU's counter for the kind (kinds are the
vectors 0-9, named as ``catalog.SOFTIRQ_KINDS``) and recorded in the kind's H2 histogram.
Softirqs do not nest on a CPU; a hard interrupt taken inside a handler counts as its time.

Layout: one ``struct softirq_time`` per CPU (ten u64 counters and the in-flight start, 96
bytes, padded to 128: two whole cache lines, written only by their CPU) in a
``BPF_F_MMAPABLE`` array; the histograms are one mmapable array of 10 x 496 u64.

Events: ``rezolus_softirq_time`` (per CPU that ran any: ns per kind, totals since the
programs were first loaded), ``rezolus_softirq_duration`` (per kind that ran in the
interval: H2 histogram of handler run times with ``attached_ns``). Demand-driven like every
``BpfSampler``: attached only while a consumer has one of these events enabled.

Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...encoding import char_array
from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, Label, counter, histogram
from ...metrics.labels import ATTACHED, CPU
from ..cpu_softirq import SOFTIRQ_KINDS

SOFTIRQ_KIND = Label("kind", char_array(16), "softirq kind: " + ", ".join(SOFTIRQ_KINDS))

SOFTIRQ_TIME = Family(
    "rezolus_softirq_time", __name__,
    "Time spent in softirq handlers per CPU, by kind, measured by BPF on irq:softirq_entry"
    " and irq:softirq_exit while a consumer is attached (totals since the agent loaded the"
    " programs; hard interrupts taken inside a handler count as its time).",
    (CPU,),
    tuple(counter(f"{k}_ns", "ns", f"time in {k.upper()} softirq handlers", dist=False)
          for k in SOFTIRQ_KINDS),
    cost=COSTLY,
)

SOFTIRQ_DURATION = Family(
    "rezolus_softirq_duration", __name__,
    "How long each softirq handler run took, by kind, all CPUs together (BPF on"
    " irq:softirq_entry and irq:softirq_exit). Only kinds that ran in the interval have a"
    " record.",
    (SOFTIRQ_KIND,),
    (ATTACHED, histogram("duration_ns", "ns", "time from softirq_entry to softirq_exit")),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (SOFTIRQ_TIME, SOFTIRQ_DURATION,)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
