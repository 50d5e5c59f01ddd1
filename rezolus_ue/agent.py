"""The agent loop: start samplers, register their events, collect only while consumed.

Each interval the agent reads every sampler's enable words (a memory read per event) and
calls ``collect`` only for samplers with a consumer, so with nobody listening it reads no
procfs file and writes nothing. A sampler that cannot start, or that raises, is reported
and disabled; it never stops the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from dataclasses import dataclass
from pathlib import Path

from .config import Config
from .errors import RezolusError, SamplerUnavailable
from .publisher import Publisher
from .samplers import REGISTRY, Roots, Sampler, SamplerContext

log = logging.getLogger("rezolus_ue")


@dataclass
class SamplerState:
    """What the agent knows about one configured sampler."""

    name: str
    sampler: Sampler | None
    status: str  # "active" | "idle" | "unavailable" | "disabled"
    reason: str = ""
    errors: int = 0


class Agent:
    """Owns the publisher and the samplers; ``run`` loops until told to stop."""

    def __init__(self, config: Config, tracefs: Path) -> None:
        self.config = config
        self.tracefs = tracefs
        self.publisher: Publisher | None = None
        self.states: dict[str, SamplerState] = {}
        self.sampler_errors = 0
        self._started_ns = time.monotonic_ns()

    def start(self) -> None:
        """Open user_events and start every enabled sampler; raise if nothing can publish."""
        a = self.config.agent
        self.publisher = Publisher(self.tracefs, bool(a["persist"]), bool(a["multi_format"]))
        roots = Roots(Path(str(a["procfs"])), Path(str(a["sysfs"])))
        for name, cls in REGISTRY.items():
            if not self.config.sampler_enabled(name):
                self.states[name] = SamplerState(name, None, "disabled", "disabled in config")
                continue
            ctx = SamplerContext(roots, self.config.samplers[name], self.stats)
            sampler = cls(ctx)
            try:
                sampler.start()
            except (SamplerUnavailable, RezolusError, OSError) as e:
                reason = e.reason if isinstance(e, SamplerUnavailable) else str(e)
                log.warning("sampler %s unavailable: %s", name, reason)
                self.states[name] = SamplerState(name, None, "unavailable", reason)
                continue
            sampler.bind(self.publisher.register(cls.events))
            self.states[name] = SamplerState(name, sampler, "idle")

    @property
    def event_names(self) -> list[str]:
        """Return the names of the registered events."""
        return list(self.publisher.handles) if self.publisher else []

    def stats(self) -> dict[str, int]:
        """Return the self-metrics published in rezolus_agent."""
        s = self.publisher.stats if self.publisher else None
        states = self.states.values()
        return {
            "uptime_ns": time.monotonic_ns() - self._started_ns,
            "events_written": s.written if s else 0,
            "ebadf_races": s.ebadf if s else 0,
            "write_errors": s.errors if s else 0,
            "sampler_errors": self.sampler_errors,
            "samplers_active": sum(st.status == "active" for st in states),
            "samplers_unavailable": sum(st.status == "unavailable" for st in states),
        }

    def tick(self) -> None:
        """Collect once from every sampler that has a consumer."""
        for st in self.states.values():
            sampler = st.sampler
            if sampler is None:
                continue
            if not sampler.wanted:
                st.status = "idle"
                continue
            st.status = "active"
            try:
                sampler.collect()
            except Exception as e:  # a sampler bug must not stop the others
                self.sampler_errors += 1
                st.errors += 1
                if st.errors == 1 or st.errors % 100 == 0:
                    log.error("sampler %s failed (%d times): %s", st.name, st.errors, e)

    def run(self, wake_fd: int, should_stop) -> None:  # type: ignore[no-untyped-def]
        """Tick every interval until ``should_stop()``; ``wake_fd`` interrupts the sleep."""
        interval = self.config.interval_ns / 1e9
        next_at = time.monotonic()
        while not should_stop():
            self.tick()
            next_at += interval
            now = time.monotonic()
            if next_at < now:  # fell behind (suspend, overload): skip, don't burst
                next_at = now + interval - (now - next_at) % interval
            ready, _, _ = select.select([wake_fd], [], [], next_at - now)
            if ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_fd, 512)

    def close(self) -> None:
        """Close every sampler and unregister every event."""
        for st in self.states.values():
            if st.sampler is not None:
                try:
                    st.sampler.close()
                except Exception as e:
                    log.debug("closing sampler %s: %s", st.name, e)
        if self.publisher is not None:
            self.publisher.close()
