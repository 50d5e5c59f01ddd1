"""Run-queue latency, running time and off-CPU time histograms, and context switches per
CPU by kind, measured by BPF (Rezolus's scheduler runqueue sampler).

BPF: ``bpf/scheduler_runqueue.bpf.c`` (shared struct: ``bpf/scheduler_runqueue.h``), built
by ``python -m rezolus_ue.bpf.build``. Hooks: ``sched_wakeup``, ``sched_wakeup_new``,
``sched_switch``, each as tp_btf, raw_tp or classic tracepoint: the best one the kernel
supports is loaded (option ``attach`` forces one). Needs kernel BTF
(``CONFIG_DEBUG_INFO_BTF``) and CAP_BPF + CAP_PERFMON (or root).

Events: ``rezolus_scheduler_runqueue_latency`` (``latency_ns``),
``rezolus_scheduler_running`` (``running_ns``), ``rezolus_scheduler_offcpu``
(``offcpu_ns``): H2 histograms of the interval, each with ``attached_ns``, the time the
programs were attached during the interval (shorter than the publish interval on the first
record after a consumer arrives); ``rezolus_scheduler_switches``: per CPU voluntary,
involuntary and idle switch totals.

Lifecycle (``BpfSampler``): the object is loaded at start to verify it, then unloaded;
programs are loaded and attached only while a consumer has one of these events enabled
(``collect = "on-demand"``), and detached and unloaded within one publish interval after
the last leaves. The histograms are cumulative ``BPF_F_MMAPABLE`` arrays kept across
unloads and read through mmap; ``publish`` takes the interval's delta (``h2.delta``).

Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, counter, histogram
from ...metrics.labels import ATTACHED, CPU

SCHEDULER_RUNQUEUE_LATENCY = Family(
    "rezolus_scheduler_runqueue_latency", __name__,
    "Run-queue latency: how long tasks waited, runnable, for a CPU (from wakeup or"
    " preemption to running; BPF on sched_wakeup, sched_wakeup_new, sched_switch).",
    (),
    (ATTACHED, histogram("latency_ns", "ns", "time from runnable to running")),
    cost=COSTLY,
)

SCHEDULER_RUNNING = Family(
    "rezolus_scheduler_running", __name__,
    "How long tasks ran each time they got a CPU (switch-in to switch-out; BPF on"
    " sched_switch).",
    (),
    (ATTACHED, histogram("running_ns", "ns", "time from switch-in to switch-out")),
    cost=COSTLY,
)

SCHEDULER_OFFCPU = Family(
    "rezolus_scheduler_offcpu", __name__,
    "How long tasks were off-CPU between two runs (switch-out to the next switch-in,"
    " run-queue wait included; BPF on sched_switch).",
    (),
    (ATTACHED, histogram("offcpu_ns", "ns", "time from switch-out to the next switch-in")),
    cost=COSTLY,
)

SCHEDULER_SWITCHES = Family(
    "rezolus_scheduler_switches", __name__,
    "Context switches per CPU by kind, counted by BPF on sched_switch while a consumer is"
    " attached (totals since the agent loaded the programs).",
    (CPU,),
    (
        counter("voluntary", "switches", "the task left the CPU to sleep or wait",
                dist=False),
        counter("involuntary", "switches", "the task was preempted (or yielded) and stayed"
                " runnable", dist=False),
        counter("idle", "switches", "switches away from the idle task", dist=False),
    ),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (
    SCHEDULER_RUNQUEUE_LATENCY, SCHEDULER_RUNNING, SCHEDULER_OFFCPU, SCHEDULER_SWITCHES,
)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
