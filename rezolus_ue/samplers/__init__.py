"""The explicit sampler registry: adding a sampler is a module, one line here and a config
section (generated). A test checks every registered sampler is in configs/default.toml."""

from __future__ import annotations

from ..config import Option, sampler_options
from .agent import AgentSelf
from .base import Roots, Sampler, SamplerContext
from .blockio import BlockIO
from .cgroup import Cgroups
from .cpu.frequency import CpuFrequency
from .cpu.softirq import CpuSoftirq
from .cpu.usage import CpuUsage
from .memory import Memory
from .network.interfaces import NetworkInterfaces
from .network.protocol import NetworkProtocol
from .perf import PerfHardware, PerfSoftware
from .scheduler import Scheduler
from .scheduler_runqueue import SchedulerRunqueue

REGISTRY: dict[str, type[Sampler]] = {
    CpuUsage.name: CpuUsage,
    CpuSoftirq.name: CpuSoftirq,
    CpuFrequency.name: CpuFrequency,
    Scheduler.name: Scheduler,
    SchedulerRunqueue.name: SchedulerRunqueue,
    Memory.name: Memory,
    BlockIO.name: BlockIO,
    NetworkInterfaces.name: NetworkInterfaces,
    NetworkProtocol.name: NetworkProtocol,
    PerfSoftware.name: PerfSoftware,
    PerfHardware.name: PerfHardware,
    Cgroups.name: Cgroups,
    AgentSelf.name: AgentSelf,
}


def options() -> dict[str, tuple[Option, ...]]:
    """Return every sampler's option table, keyed by sampler name."""
    return sampler_options({n: cls.options for n, cls in REGISTRY.items()})


__all__ = ["REGISTRY", "Roots", "Sampler", "SamplerContext", "options"]
