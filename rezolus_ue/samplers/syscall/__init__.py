"""Syscalls counted, and their latency measured, by family, by BPF (Rezolus's syscall
sampler).

BPF: ``bpf/syscall.bpf.c`` (shared struct: ``bpf/syscall.h``), built by ``python -m
rezolus_ue.bpf.build``. Hooks: ``raw_syscalls:sys_exit`` (counts every call that returns,
and ends a timed one) and ``raw_syscalls:sys_enter`` (starts the timing; attached only
during timing windows, option ``latency_window``: one program runs per syscall between
them, at about the cost of the do-nothing floor's one program), each as tp_btf, raw_tp or
classic tracepoint: the best one the kernel supports is loaded (option ``attach`` forces
one). Needs kernel BTF and CAP_BPF + CAP_PERFMON (or root).
The syscall-number -> family table (``table.py``, x86_64 and arm64) is written into the
object's ``.rodata`` before each load.

Events: ``rezolus_syscall``: per family (``op``), syscalls returned (exit and exit_group,
which never return, are not counted), totals since the programs were first loaded; all
sixteen families every interval, zeros included, so a consumer computing rates sees an
unbroken series per family. ``rezolus_syscall_latency``: per family, an H2 histogram of
the interval's enter-to-exit times of the calls entered during timing windows (all of
them, or a random 1 in ``latency_sample``), with ``attached_ns`` the windows' time in the
interval; only families with a timed call returning in the interval, since an empty
histogram record carries nothing the counter does not already say (a syscall that blocks
across several intervals is recorded in the one it returns in).

Lifecycle (``BpfSampler``): loaded at start to verify, then unloaded; attached only while
a consumer has one of the two events enabled (``collect = "on-demand"``). The counts (one
``struct syscall_counts``, two cache lines, per CPU) and the histograms (16 x 496 u64 in
one array) are ``BPF_F_MMAPABLE`` maps kept across unloads and read through mmap: a
publish makes no syscall to read them. Each thread's enter time lives in BPF task
storage, created with the programs and gone with them. The windows (``PartTime``) run in
a thread of their own that attaches and detaches sys_enter twice a second; activation
attaches it once first, so a refused attach shows then, not in a window.

The object loads and counts on the VM tier's Linux 6.12 too (tp_btf, raw_tp and
tracepoint). Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...config import DurationRange, IntRange, Option, format_duration
from ...encoding import char_array
from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, Label, counter, histogram
from ...metrics.labels import ATTACHED

SYSCALL_OP = Label("op", char_array(16), "syscall family: read, write, poll, lock, time,"
                   " sleep, socket, yield, filesystem, memory, process, query, ipc, timer,"
                   " event or other")

SYSCALL = Family(
    "rezolus_syscall", __name__,
    "Syscalls by family, counted by BPF on raw_syscalls:sys_exit while a consumer is"
    " attached (totals since the agent loaded the programs; every family, every interval;"
    " exit and exit_group, which never return, are not counted).",
    (SYSCALL_OP,),
    (counter("calls", "syscalls", "syscalls returned", dist=False),),
    cost=COSTLY,
)

SYSCALL_LATENCY = Family(
    "rezolus_syscall_latency", __name__,
    "Syscall latency by family: from a thread's raw_syscalls:sys_enter to its sys_exit"
    " (BPF), of the calls entered in timing windows (option latency_window: 100 ms of"
    " each second by default; attached_ns is their time in the interval), all of them or,"
    " with option latency_sample = N, a random 1 in N. Only families with timed calls"
    " returning in the interval have a record.",
    (SYSCALL_OP,),
    (ATTACHED, histogram("latency_ns", "ns", "time from syscall entry to return")),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (SYSCALL, SYSCALL_LATENCY,)

#: Timing windows recur once in this period (option latency_window).
WINDOW_PERIOD_NS = 1_000_000_000

#: This sampler's options (beyond the common ones and BPF_OPTIONS): key, type, default, help.
OPTIONS: tuple[Option, ...] = (
    Option("latency_window", "duration", "100ms",
           "Time syscalls only during a window this long in each second, at a random"
           " moment in it (the sys_enter program is attached for the window alone);"
           " every syscall is counted whatever this is. Between windows each syscall"
           " runs one BPF program, not two: on a syscall-bound workload that halves the"
           " sampler's cost (docs/PERFORMANCE.md, rezolus_compare). \"1s\" times"
           " continuously. The histograms hold the calls entered in the windows, a sample"
           " in time: percentiles are those of all calls to within the error bound under"
           " latency_sample as long as the workload does not change within the second;"
           " a burst outside every window is not timed, and a family with few calls gets"
           " few samples (10 fsyncs a second: about one timed), so where rare slow calls"
           " matter, time continuously. attached_ns says how much of the interval was"
           " timed.",
           bounds=DurationRange("1ms", format_duration(WINDOW_PERIOD_NS))),
    Option("latency_sample", "int", 1,
           "Of the syscalls entered during the timing windows (latency_window), time 1 in"
           " this many, chosen at random; every syscall is counted whatever this is. 1"
           " times every call in the windows (two clock reads and a task-storage write per"
           " call). N > 1 saves the timing of the calls left out, but both programs still"
           " run for every call in the windows, so that cost falls by less than N-fold"
           " (docs/PERFORMANCE.md, rezolus_compare: ours_s16). The histograms then hold a"
           " random sample of the calls, their count the sample's: a percentile p of n"
           " sampled calls is that of all calls to within a rank error of"
           " 2*sqrt(p(1-p)/n) 19 times in 20 (p99 of 1,000 sampled calls: between p98.4"
           " and p99.6), on top of H2's 12.5% bucket width; a family with few calls per"
           " interval gets few samples.",
           bounds=IntRange(1, 65536)),
)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
