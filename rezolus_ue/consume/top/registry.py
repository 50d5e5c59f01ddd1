"""The panels of ``rezolus-ue top`` in their order on the screen, and what they make top
subscribe to. Adding a panel is a module with its ``PANEL`` and one line here."""

from __future__ import annotations

from ...metrics.family import Cost
from . import (
    applications,
    cgroups,
    cpu,
    disks,
    header,
    memory,
    network,
    processes,
    samplers,
    scheduler,
)
from .frame import Model, View
from .layout import Panel

#: Every panel: the header's, then the body's in one column's order (from ``layout.WIDE``
#: cells the left ones beside the right ones, the wide ones below).
PANELS: tuple[Panel, ...] = (
    header.PANEL,
    cpu.PANEL,
    memory.PANEL,
    samplers.PANEL,
    scheduler.PANEL,
    disks.PANEL,
    network.PANEL,
    cgroups.PANEL,
    processes.PANEL,
    applications.PANEL,
)

#: Every event top can show: only what its panels read, so the agent samples nothing
#: else on top's behalf.
TOP_EVENTS: tuple[str, ...] = tuple(dict.fromkeys(
    e for p in PANELS for r in p.reads for e in r.events))

_COST = {e: r.family.cost for p in PANELS for r in p.reads for e in r.events}

#: The events of ``TOP_EVENTS`` that cost the host while enabled (``Family.cost``): the
#: BPF-counted histograms, which top subscribes to only when asked (``--costly``, key c).
COSTLY_EVENTS: tuple[str, ...] = tuple(e for e in TOP_EVENTS if _COST[e] is Cost.COSTLY)


def top_events(costly: bool) -> tuple[str, ...]:
    """Return the events top subscribes to: the cheap ones, and the costly ones too."""
    return TOP_EVENTS if costly else tuple(e for e in TOP_EVENTS if e not in COSTLY_EVENTS)


def feed_events() -> tuple[str, ...]:
    """Return the applications' events top reads too (``frame.Feed``) where it can: never
    waited for, shown when an application publishes them."""
    return tuple(dict.fromkeys(fd.event for p in PANELS for fd in p.feeds if fd.available()))


def new_model(interval_s: float = 1.0, host: str = "", kernel: str = "") -> Model:
    """Return a model of every panel's rows."""
    return Model(PANELS, interval_s, host, kernel)


def complete(v: View) -> bool:
    """Return whether every row of the frame has rates (none first seen in it)."""
    return v.dt_s is not None and all(p.complete(v) for p in PANELS if p.complete)
