"""What one frame of ``rezolus-ue top`` holds: the rows the model derives and the renderer
draws (``View``). Plain frozen data: the contract between ``top_model`` and ``top_render``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class CpuRow:
    """One CPU (or all of them) over the frame; shares are 0..1, None when unknown."""

    cpu: int  # -1 for the total
    busy: float | None
    user: float | None = None  # user + nice
    system: float | None = None  # system
    irq: float | None = None  # irq + softirq
    iowait: float | None = None
    steal: float | None = None
    peak: float | None = None  # the interval's max busy share (from the _dist event)


@dataclass(frozen=True, slots=True)
class AgentRow:
    """The agent, from its latest ``rezolus_agent`` record."""

    pid: int
    uptime_s: float
    events_written: int
    rss_bytes: int
    cpu: float | None  # share of one CPU over the frame
    sampler_errors: int
    write_errors: int
    samplers_active: int
    samplers_unavailable: int


@dataclass(frozen=True, slots=True)
class SamplerRow:
    """One sampler as the agent's latest ``rezolus_agent_status`` record says."""

    sampler: str
    state: str  # idle, active, failed, unavailable, disabled
    reason: str
    last_error: str
    errors: int

    @property
    def why(self) -> str:
        """Return why it is in its state: the error while failed, else the reason."""
        return self.last_error if self.state == "failed" else self.reason


@dataclass(frozen=True, slots=True)
class PressureRow:
    """PSI of one resource: shares of time (0..1) some or all tasks stalled."""

    resource: str
    some: float | None
    full: float | None


@dataclass(frozen=True, slots=True)
class SchedRow:
    """System-wide scheduler activity."""

    ctxsw_s: float | None
    forks_s: float | None
    running: int
    blocked: int


@dataclass(frozen=True, slots=True)
class DiskRow:
    """One block device; rates per second, ``util`` 0..1, await in ms."""

    device: str
    reads_s: float | None
    writes_s: float | None
    read_bps: float | None
    write_bps: float | None
    util: float | None
    r_await_ms: float | None
    w_await_ms: float | None
    in_flight: int


@dataclass(frozen=True, slots=True)
class NetRow:
    """One network interface; rates per second."""

    interface: str
    rx_bps: float | None
    tx_bps: float | None
    rx_pps: float | None
    tx_pps: float | None
    errors_s: float | None
    drops_s: float | None


@dataclass(frozen=True, slots=True)
class CgroupRow:
    """One cgroup; ``cpu``/``user``/``system``/``throttled`` in CPUs (1.0 = one CPU)."""

    path: str
    cpu: float | None
    user: float | None
    system: float | None
    throttled: float | None
    memory_bytes: int
    io_read_bps: float | None
    io_write_bps: float | None


@dataclass(frozen=True, slots=True)
class HistRow:
    """One histogram over the frame: its label set's buckets (H2) and percentiles."""

    event: str
    metric: str
    unit: str
    label: str
    counts: np.ndarray = field(repr=False)
    count: int
    p50: int
    p90: int
    p99: int
    max: int


@dataclass(frozen=True, slots=True)
class View:
    """One frame: everything the renderer shows. ``frame`` 0 is the empty start."""

    frame: int = 0
    t_ns: int = 0
    dt_s: float | None = None  # data time since the previous frame (None: first frame)
    events_per_s: float | None = None
    records: int = 0  # records received in total
    resets: int = 0  # counter resets detected in total
    agent: AgentRow | None = None
    cpu_total: CpuRow | None = None
    cpus: tuple[CpuRow, ...] = ()
    memory: dict[str, int] | None = None
    sched: SchedRow | None = None
    disks: tuple[DiskRow, ...] = ()
    nets: tuple[NetRow, ...] = ()
    cgroups: tuple[CgroupRow, ...] = ()
    hists: tuple[HistRow, ...] = ()
    samplers: tuple[SamplerRow, ...] = ()
    pressure: tuple[PressureRow, ...] = ()
