"""The explicit sampler registry: adding a sampler is a module, one line here and a config
section (generated). A test checks every registered sampler is in configs/default.toml."""

from __future__ import annotations

from ..config import Option, sampler_options
from .agent import AgentSelf
from .base import Roots, Sampler, SamplerContext
from .blockio import BlockIO
from .blockio_requests import BlockioRequests
from .cgroup import Cgroups
from .cgroup_scheduler import CgroupScheduler
from .cpu.frequency import CpuFrequency
from .cpu.migrations import CpuMigrations
from .cpu.softirq import CpuSoftirq
from .cpu.softirq_time import CpuSoftirqTime
from .cpu.usage import CpuUsage
from .memory import Memory
from .network.interfaces import NetworkInterfaces
from .network.protocol import NetworkProtocol
from .network_traffic import NetworkTraffic
from .perf import PerfHardware, PerfSoftware
from .scheduler import Scheduler
from .scheduler_runqueue import SchedulerRunqueue
from .syscall import Syscall
from .tcp import Tcp
from .tcp_traffic import TcpTraffic

REGISTRY: dict[str, type[Sampler]] = {
    CpuUsage.name: CpuUsage,
    CpuSoftirq.name: CpuSoftirq,
    CpuSoftirqTime.name: CpuSoftirqTime,
    CpuFrequency.name: CpuFrequency,
    CpuMigrations.name: CpuMigrations,
    Scheduler.name: Scheduler,
    SchedulerRunqueue.name: SchedulerRunqueue,
    Syscall.name: Syscall,
    Memory.name: Memory,
    BlockIO.name: BlockIO,
    BlockioRequests.name: BlockioRequests,
    NetworkInterfaces.name: NetworkInterfaces,
    NetworkProtocol.name: NetworkProtocol,
    NetworkTraffic.name: NetworkTraffic,
    Tcp.name: Tcp,
    TcpTraffic.name: TcpTraffic,
    PerfSoftware.name: PerfSoftware,
    PerfHardware.name: PerfHardware,
    Cgroups.name: Cgroups,
    CgroupScheduler.name: CgroupScheduler,
    AgentSelf.name: AgentSelf,
}


def options() -> dict[str, tuple[Option, ...]]:
    """Return every sampler's option table, keyed by sampler name."""
    return sampler_options({n: cls.options for n, cls in REGISTRY.items()})


__all__ = ["REGISTRY", "Roots", "Sampler", "SamplerContext", "options"]
