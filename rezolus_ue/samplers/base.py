"""What every sampler is: the events it publishes, its options, and a collect step."""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ..config import Option
from ..schema import EventSchema

if TYPE_CHECKING:
    from ..publisher import EventHandle


@dataclass(frozen=True)
class Roots:
    """Filesystem roots, injectable so parsers can run against fixture trees."""

    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")


@dataclass
class SamplerContext:
    """What a sampler gets from the agent."""

    roots: Roots
    options: Mapping[str, object]
    #: Agent self-statistics, for the agent sampler (name -> value).
    agent_stats: Callable[[], Mapping[str, int]] = field(default=lambda: {})


class Sampler(ABC):
    """One source of metrics. Subclasses set ``name`` and ``events`` and implement collect.

    ``start`` acquires resources (kept-open fds) and raises SamplerUnavailable (or OSError,
    translated by the agent) when the sampler cannot run here; ``collect`` is called once per
    interval, only while at least one of the sampler's events has a consumer.
    """

    name: ClassVar[str]
    events: ClassVar[tuple[EventSchema, ...]]
    #: Sampler-specific options, beyond the common ones in config.SAMPLER_OPTIONS.
    options: ClassVar[tuple[Option, ...]] = ()

    def __init__(self, ctx: SamplerContext) -> None:
        self.ctx = ctx
        self.handles: dict[str, EventHandle] = {}
        self._words: list[ctypes.c_uint32] = []

    def start(self) -> None:  # noqa: B027 - optional hook
        """Acquire what collect needs; raise SamplerUnavailable when it cannot run here."""

    def bind(self, handles: Mapping[str, EventHandle]) -> None:
        """Receive the registered handles of this sampler's events (keyed by event name)."""
        self.handles = dict(handles)
        self._words = [h.word for h in self.handles.values()]

    @property
    def wanted(self) -> bool:
        """Return True while any consumer has any of this sampler's events enabled."""
        # Checked for every sampler every interval: read the enable words directly.
        return any(w.value for w in self._words)

    @abstractmethod
    def collect(self) -> None:
        """Read the sources and emit records for the enabled events."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what start acquired."""

    @classmethod
    def summary(cls) -> str:
        """Return the first line of the sampler's docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0]
