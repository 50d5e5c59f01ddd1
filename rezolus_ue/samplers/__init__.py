"""The explicit sampler registry: adding a sampler is a module, one line here and a config
section (generated). A test checks every registered sampler is in configs/default.toml."""

from __future__ import annotations

from ..config import Option, sampler_options
from .agent import AgentSelf
from .base import Roots, Sampler, SamplerContext
from .cpu.usage import CpuUsage

REGISTRY: dict[str, type[Sampler]] = {
    CpuUsage.name: CpuUsage,
    AgentSelf.name: AgentSelf,
}


def options() -> dict[str, tuple[Option, ...]]:
    """Return every sampler's option table, keyed by sampler name."""
    return sampler_options({n: cls.options for n, cls in REGISTRY.items()})


__all__ = ["REGISTRY", "Roots", "Sampler", "SamplerContext", "options"]
