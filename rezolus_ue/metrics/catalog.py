"""The metric catalog: every family rezolus-ue publishes, collected from the samplers'
own declarations (``rezolus_ue/samplers/<name>/__init__.py``, each with its ``FAMILIES``).

Each family becomes one event (``rezolus_ue.schema.EVENTS``); its fields, the event
reference (docs/events.md) and the consumers' decoders all derive from it.
Names follow Rezolus where it has one; units are in every name or field description.
"""

from __future__ import annotations

from importlib import import_module

from ..samplers import NAMES
from ..samplers.agent import AGENT, AGENT_SAMPLER, STATUS_CODES
from ..samplers.cgroup import CGROUP_FAMILY
from ..samplers.cpu_softirq import SOFTIRQ_KINDS
from ..samplers.cpu_usage import CPU_CORES, CPU_USAGE
from ..samplers.network import NETWORK
from .family import Family

#: Every family, in documentation order: the samplers' (``NAMES``), each in its own order.
FAMILIES: tuple[Family, ...] = tuple(
    f for name in NAMES for f in import_module(f"rezolus_ue.samplers.{name}").FAMILIES)

#: The families consumers name (top, exporter), re-exported from their samplers.
__all__ = ["AGENT", "AGENT_SAMPLER", "CGROUP_FAMILY", "CPU_CORES", "CPU_USAGE", "FAMILIES",
           "NETWORK", "SOFTIRQ_KINDS", "STATUS_CODES"]
