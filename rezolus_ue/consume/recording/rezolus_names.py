"""Our metrics under Rezolus's names: the one declaration of which of our metrics is which
Rezolus metric, so that Rezolus's viewer fills its built-in dashboards from our Parquet.

A metric of ours that Rezolus also has is written under Rezolus's ``metric`` name with its
labels (``state``, ``op``, ``direction``, ``kind``...) and label names (a CPU is ``id``, a
cgroup ``name``); every other one keeps a name of ours, ``rezolus_ue_<family>__<metric>`` (two
underscores: ``agent`` + ``sampler_errors`` is not ``agent_sampler`` + ``errors``),
and shows in the viewer's query explorer. Where two of our events count the same thing
(``rezolus_blockio_device`` from procfs and ``rezolus_blockio_requests`` from BPF), only
the cheap one, which a default recording holds, takes Rezolus's name: a dashboard's
``sum()`` would count the other twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ...metrics import catalog
from ...metrics.family import Family, Kind, Metric
from ...samplers.blockio_requests import BLOCKIO_ERROR_KINDS

#: Our label names that Rezolus spells otherwise.
LABELS = {"cpu": "id", "cgroup": "name"}
#: Events kept out of the wide (viewer) columns: a series per process would be a column
#: per process; the records stay in the file (see ``parquet``).
NOT_IN_VIEW = frozenset({"rezolus_process", "rezolus_agent_status"})
#: Prefix of the names of our metrics that Rezolus does not have.
OURS = "rezolus_ue_"


@dataclass(frozen=True)
class Name:
    """A Rezolus metric and the constant labels that tell ours apart within it."""

    metric: str
    labels: tuple[tuple[str, str], ...] = ()


def _n(metric: str, **labels: str) -> Name:
    return Name(metric, tuple(labels.items()))


def _each(metric: str, label: str, values: Sequence[str], suffix: str = "",
          **extra: str) -> dict[str, Name]:
    """Return ``{value + suffix: metric{label=value}}`` for a family of one metric per value."""
    return {v + suffix: _n(metric, **{label: v}, **extra) for v in values}


_SOFTIRQS = ("hi", "timer", "net_tx", "net_rx", "block", "irq_poll", "tasklet", "sched",
             "hrtimer", "rcu")
_DIRECTIONS = {"rx": "receive", "tx": "transmit"}

#: ``{event: {our metric: Rezolus name}}``: the mapping (``mapping_table`` documents it).
MAPPING: dict[str, dict[str, Name]] = {
    "rezolus_cpu_usage": _each("cpu_usage", "state",
                               ("user", "nice", "system", "irq", "softirq", "steal"), "_ns"),
    "rezolus_cpu_cores": {"online": _n("cpu_cores")},
    "rezolus_cpu_softirq": _each("softirq", "kind", _SOFTIRQS),
    "rezolus_softirq_time": _each("softirq_time", "kind", _SOFTIRQS, "_ns"),
    "rezolus_cpu_migrations": _each("cpu_migrations", "direction", ("from", "to")),
    "rezolus_scheduler_cpu": {"waiting_ns": _n("scheduler_runqueue_wait")},
    "rezolus_scheduler_switches": _each("scheduler_context_switch", "kind",
                                        ("voluntary", "involuntary")),
    "rezolus_scheduler_runqueue_latency": {"latency_ns": _n("scheduler_runqueue_latency")},
    "rezolus_scheduler_running": {"running_ns": _n("scheduler_running")},
    "rezolus_scheduler_offcpu": {"offcpu_ns": _n("scheduler_offcpu")},
    "rezolus_syscall": {"calls": _n("syscall")},
    "rezolus_syscall_latency": {"latency_ns": _n("syscall_latency")},
    "rezolus_memory": {f"{m}_bytes": _n(f"memory_{m}")
                       for m in ("total", "free", "available", "buffers", "cached")},
    "rezolus_memory_vmstat": {f"numa_{m}": _n(f"memory_numa_{m}")
                              for m in ("hit", "miss", "foreign", "local", "other",
                                        "interleave")},
    "rezolus_blockio_device": {
        **{ours: _n("blockio_operations", op=op) for ours, op in (
            ("reads", "read"), ("writes", "write"), ("discards", "discard"),
            ("flushes", "flush"))},
        **{f"{op}_bytes": _n("blockio_bytes", op=op) for op in ("read", "write", "discard")},
    },
    "rezolus_blockio_requests": {f"errors_{k}": _n("blockio_errors", error=k)
                                 for k in BLOCKIO_ERROR_KINDS},
    "rezolus_blockio_latency": {"latency_ns": _n("blockio_latency")},
    "rezolus_blockio_size": {"size_bytes": _n("blockio_size")},
    "rezolus_network_interface": {
        **{f"{d}_bytes": _n("network_bytes", direction=v) for d, v in _DIRECTIONS.items()},
        **{f"{d}_packets": _n("network_packets", direction=v) for d, v in _DIRECTIONS.items()},
        **{f"{d}_dropped": _n("network_drop", direction=v) for d, v in _DIRECTIONS.items()},
    },
    "rezolus_tcp_packet_latency": {"latency_ns": _n("tcp_packet_latency")},
    "rezolus_tcp_srtt": {"srtt_ns": _n("tcp_srtt")},
    "rezolus_tcp_jitter": {"jitter_ns": _n("tcp_jitter")},
    "rezolus_tcp_connect_latency": {"latency_ns": _n("tcp_connect_latency")},
    "rezolus_tcp_retransmit": {"retransmits": _n("tcp_retransmit")},
    "rezolus_tcp_traffic": {
        **{f"{d}_bytes": _n("tcp_bytes", direction=v) for d, v in _DIRECTIONS.items()},
        **{f"{d}_packets": _n("tcp_packets", direction=v) for d, v in _DIRECTIONS.items()},
    },
    "rezolus_perf_hardware": {"cycles": _n("cpu_cycles"), "instructions": _n("cpu_instructions"),
                              "branch_misses": _n("cpu_branch_misses")},
    "rezolus_cgroup": {"cpu_user_ns": _n("cgroup_cpu_usage", state="user"),
                       "cpu_system_ns": _n("cgroup_cpu_usage", state="system"),
                       "throttled_periods": _n("cgroup_cpu_throttled"),
                       "throttled_ns": _n("cgroup_cpu_throttled_time")},
    "rezolus_cgroup_scheduler": {
        "runqueue_wait_ns": _n("cgroup_scheduler_runqueue_wait", state="wait"),
        "offcpu_ns": _n("cgroup_scheduler_offcpu", state="offcpu"),
        **_each("cgroup_scheduler_context_switch", "kind", ("voluntary", "involuntary")),
    },
    "rezolus_agent": {"cpu_user_ns": _n("rezolus_cpu_usage", state="user"),
                      "cpu_system_ns": _n("rezolus_cpu_usage", state="system"),
                      "rss_bytes": _n("rezolus_memory_usage_resident_set_size")},
}

_GPU = ("gpu_clock", "gpu_dram_bandwidth_utilization", "gpu_energy_consumption", "gpu_memory",
        "gpu_memory_utilization", "gpu_pcie_bandwidth", "gpu_pcie_throughput",
        "gpu_power_usage", "gpu_sm_occupancy", "gpu_sm_utilization", "gpu_temperature",
        "gpu_tensor_utilization", "gpu_utilization", "gpmu_busy_cycles", "gpmu_clock",
        "gpmu_lds_instructions", "gpmu_salu_instructions", "gpmu_valu_instructions")
_HW_EVENTS = "hardware events perf_hardware does not open (it counts cycles, instructions" \
    " and branch misses)"
_MSRS = "per-CPU frequency counters (APERF, MPERF, TSC): cpu_frequency reads cpufreq"
_TLB = "TLB flushes by reason (tlb:tlb_flush): not collected; cpu_interrupts counts TLB" \
    " shootdown interrupts"

#: ``{Rezolus metric: why}``: what Rezolus's built-in dashboards chart that no sampler of
#: ours collects. Everything else their queries name is in MAPPING: tests/test_parquet.py
#: checks both against the names (tests/fixtures/rezolus/dashboard-metrics.txt).
NOT_COLLECTED: dict[str, str] = {
    "cpu_aperf": _MSRS, "cpu_mperf": _MSRS, "cpu_tsc": _MSRS,
    **dict.fromkeys(("cpu_branch_instructions", "cpu_dtlb_miss", "cpu_l3_access",
                     "cpu_l3_miss"), _HW_EVENTS),
    "cpu_tlb_flush": _TLB, "cgroup_cpu_tlb_flush": _TLB,
    **dict.fromkeys(("cgroup_cpu_cycles", "cgroup_cpu_instructions"),
                    "per-cgroup hardware counters (perf in cgroup mode): not collected"),
    "cgroup_cpu_migrations": "per-cgroup migrations: cgroup_scheduler does not count them",
    "cgroup_syscall": "per-cgroup system calls: syscall counts by operation only",
    **dict.fromkeys(("rezolus_bpf_run_count", "rezolus_bpf_run_time"),
                    "per-program BPF run statistics (kernel.bpf_stats_enabled, which times"
                    " every BPF program on the host): not collected"),
    "blockio_requeues": "requests the block layer requeued (block:block_rq_requeue): not"
                        " counted",
    "network_ena_bandwidth_allowance_exceeded": "AWS ENA driver statistics: no sampler",
    **dict.fromkeys(_GPU, "GPU telemetry (NVML and the like): no GPU sampler"),
}


def families() -> dict[str, Family]:
    """Return the catalog's families by event name."""
    return {f.event: f for f in catalog.FAMILIES}


def rezolus_name(family: Family, metric: Metric) -> Name:
    """Return the name ``metric`` of ``family`` is written under: Rezolus's, or ours."""
    name = MAPPING.get(family.event, {}).get(metric.name)
    if name is not None:
        return name
    return Name(f"{OURS}{family.event.removeprefix('rezolus_')}__{metric.name}")


def label_name(label: str) -> str:
    """Return the name a label of ours is written under."""
    return LABELS.get(label, label)


def reverse() -> dict[tuple[str, frozenset[tuple[str, str]]], tuple[str, str]]:
    """Return ``{(Rezolus metric, its constant labels): (our event, our metric)}``, to read
    a file Rezolus wrote as our events."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], tuple[str, str]] = {}
    for f in catalog.FAMILIES:
        for m in f.metrics:
            n = rezolus_name(f, m)
            out.setdefault((n.metric, frozenset(n.labels)), (f.event, m.name))
    return out


def _rows() -> Iterator[tuple[str, str, str, str]]:
    for f in catalog.FAMILIES:
        for m in f.metrics:
            n = MAPPING.get(f.event, {}).get(m.name)
            if n is None:
                continue
            labels = [f"{k}={v}" for k, v in n.labels]
            labels += [label_name(lb.name) for lb in f.labels]
            yield (f"{f.event}.{m.name}", n.metric, ", ".join(labels),
                   "histogram" if m.kind is Kind.HISTOGRAM else m.kind.value)


def mapping_table() -> str:
    """Return the Markdown table of our metrics that carry Rezolus's names, then the one of
    what Rezolus's dashboards chart that we do not collect."""
    lines = ["| ours (event.field) | Rezolus metric | labels | type |", "|---|---|---|---|"]
    lines += [f"| `{a}` | `{b}` | {c or '-'} | {d} |" for a, b, c, d in _rows()]
    lines += ["", "What Rezolus's built-in dashboards chart that no sampler of ours collects"
              " (their charts of it stay empty):", "",
              "| Rezolus metric | why |", "|---|---|"]
    why: dict[str, list[str]] = {}
    for metric, reason in NOT_COLLECTED.items():
        why.setdefault(reason, []).append(metric)
    lines += [f"| {', '.join(f'`{m}`' for m in ms)} | {r} |" for r, ms in why.items()]
    return "\n".join(lines) + "\n"
