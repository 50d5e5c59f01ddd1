"""The publisher: registers event schemas as user_events and hands out their handles.

A handle is a ``user_events.Registration``: ``handle.enabled`` is one read of the enable
word the kernel keeps current, ``handle.write(schema.pack(...))`` writes one record.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from .linux.user_events import REG_MULTI_FORMAT, REG_PERSIST, Registration, Stats, UserEventsData
from .schema import EventSchema

EventHandle = Registration

log = logging.getLogger("rezolus_ue")


class Publisher:
    """All of the agent's registrations, on one ``user_events_data`` fd."""

    def __init__(self, tracefs: str | Path, persist: bool = False,
                 multi_format: bool = False) -> None:
        self.flags = (REG_PERSIST if persist else 0) | (REG_MULTI_FORMAT if multi_format else 0)
        self._data = UserEventsData(tracefs)
        self.handles: dict[str, EventHandle] = {}

    @property
    def stats(self) -> Stats:
        """Return the write counters."""
        return self._data.stats

    def register(self, schemas: Iterable[EventSchema]) -> dict[str, EventHandle]:
        """Register each schema (idempotent) and return their handles by event name."""
        out = {}
        for s in schemas:
            h = self.handles.get(s.name)
            if h is None:
                h = self._data.register(s.name_args, self.flags)
                if h.flags != self.flags:
                    log.warning("%s: this kernel does not support registration flags %#x;"
                                " registered with %#x", s.name, self.flags, h.flags)
                self.handles[s.name] = h
            out[s.name] = h
        return out

    def unregister(self, names: Iterable[str]) -> None:
        """Unregister the named events (a sampler removed by a config reload)."""
        for name in names:
            h = self.handles.pop(name, None)
            if h is not None:
                h.unregister()

    def close(self) -> None:
        """Unregister everything and close the data file."""
        self._data.close()
        self.handles.clear()
