"""Per-cgroup CPU time, run-queue latency histogram, run-queue wait and off-CPU time, and
context switches, measured by BPF for a bounded set of cgroups (Rezolus's
cgroup_cpu_usage and cgroup_scheduler_* metrics).

BPF: ``bpf/cgroup_scheduler.bpf.c`` (shared struct: ``bpf/cgroup_scheduler.h``). Hooks:
``sched_wakeup``, ``sched_wakeup_new``, ``sched_switch`` (run-queue latency and off-CPU
time as ``scheduler_runqueue`` measures them, switches) and ``sched_stat_runtime`` (CPU
time, charged as the kernel charges it: every tick and switch; all scheduling classes
since Linux 6.8, CFS only before), each as tp_btf, raw_tp or classic tracepoint. Needs
cgroup v2 (on hybrid hosts the ``cgroup2`` mount, e.g. ``/sys/fs/cgroup/unified``) and
Linux >= 5.5 (64-bit kernfs ids).

Bounded cardinality: the programs count into ``max_cgroups + 1`` slots. A hash map in the
kernel maps a cgroup id to its slot; user space fills it from the cgroup v2 hierarchy, with
the ``cgroup`` sampler's walk and include/exclude globs (``rezolus_ue.samplers.cgroup``):
a cgroup's id is the inode number of its directory (``os.stat(dir).st_ino``), so slots map
back to paths, the events' label. When more groups match than ``max_cgroups``, those that
used the most CPU (``cpu.stat``) since the previous walk keep slots. Slot 0, labelled
``(other)``, counts every other cgroup, including ones created since the last walk (every
10 s at most, at publish). A slot given to a new cgroup starts its totals from zero.

Layout (``BPF_F_MMAPABLE`` arrays, read through mmap): ``counters``, one 64-byte
``struct cgroup_sched_counters`` per slot (added atomically: a slot's tasks run on every
CPU), and ``runqlat``, one 496-bucket H2 histogram per slot (``(max_cgroups + 1) * 3968``
bytes: 258 KB at the default 64).

Events: ``rezolus_cgroup_scheduler`` (per cgroup with a slot, and ``(other)``: cumulative
totals), ``rezolus_cgroup_runqueue_latency`` (per cgroup with waits in the interval: H2
histogram with ``attached_ns``). Demand-driven like every ``BpfSampler``.

Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...config import IntRange, Option
from ...encoding import char_array
from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, Label, counter, histogram
from ...metrics.labels import ATTACHED, CGROUP
from ..cgroup import OPTIONS as CGROUP_OPTIONS

#: A fixed-size cgroup label: a histogram record's bucket room is computed from its fixed
#: fields, so a histogram family cannot carry the dynamic CGROUP label.
CGROUP_PATH = Label("cgroup", char_array(256), "cgroup v2 path below the cgroup root, or"
                    " \"(other)\" for every cgroup without a slot of its own")

CGROUP_SCHEDULER = Family(
    "rezolus_cgroup_scheduler", __name__,
    "Per-cgroup scheduler activity measured by BPF (sched_switch, sched_wakeup,"
    " sched_stat_runtime) while a consumer is attached, for at most max_cgroups cgroups"
    " chosen by include/exclude globs; every other cgroup counts in \"(other)\" (totals"
    " since the cgroup got its slot).",
    (CGROUP,),
    (
        counter("cpu_usage_ns", "ns", "on-CPU time of the cgroup's tasks", dist=False),
        counter("runqueue_wait_ns", "ns", "time its tasks waited, runnable, for a CPU",
                dist=False),
        counter("offcpu_ns", "ns", "time its tasks were off-CPU between two runs",
                dist=False),
        counter("voluntary", "switches", "its tasks left a CPU to sleep or wait",
                dist=False),
        counter("involuntary", "switches", "its tasks were preempted (or yielded) and"
                " stayed runnable", dist=False),
    ),
    cost=COSTLY,
)

CGROUP_RUNQUEUE_LATENCY = Family(
    "rezolus_cgroup_runqueue_latency", __name__,
    "Run-queue latency per cgroup (as rezolus_scheduler_runqueue_latency, charged to the"
    " cgroup the task was last seen in; BPF). Only cgroups with waits in the interval have"
    " a record.",
    (CGROUP_PATH,),
    (ATTACHED, histogram("latency_ns", "ns", "time from runnable to running")),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (CGROUP_SCHEDULER, CGROUP_RUNQUEUE_LATENCY,)

#: This sampler's options (beyond the common ones and BPF_OPTIONS): key, type, default, help.
OPTIONS: tuple[Option, ...] = (
    Option("max_cgroups", "int", 64,
           "Most cgroups with counters and a histogram of their own; every other"
           " cgroup counts in \"(other)\". When more match, those that used the most"
           " CPU since the previous walk of the hierarchy (every 10s at most) are kept."
           " Kernel memory: about 4 KB per cgroup.",
           bounds=IntRange(1, 1024)),
    *(o for o in CGROUP_OPTIONS if o.key in ("include", "exclude")),
)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
