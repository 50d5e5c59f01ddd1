"""The events rezolus-ue publishes: one per metric family of the catalog.

This module is the one list of event schemas; each is derived from its family in
``rezolus_ue.metrics.catalog`` (see ``rezolus_ue.metrics.family`` for the field layout)
and encoded by ``rezolus_ue.encoding``. ``docs/events.md`` is generated from it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .encoding import (  # noqa: F401 - re-exported: the encoding vocabulary
    MAX_PAYLOAD,
    NAME_RE,
    REL_BYTES,
    REL_STR,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    EventSchema,
    Field,
    FieldType,
    char_array,
)
from .metrics import catalog
from .metrics.family import Cost

#: The tracepoint group of each transport (``[agent] transport``): the same events,
#: ``user_events:<name>`` or ``rezolus_ue:<name>``.
GROUPS: dict[str, str] = {"user_events": "user_events", "uprobe": "rezolus_ue"}

#: Every event, in documentation order.
EVENTS: tuple[EventSchema, ...] = tuple(s for f in catalog.FAMILIES for s in f.schemas)

#: Each event's cost class, by name: its family's ``cost`` (``metrics.family.Cost``).
COST: dict[str, Cost] = {s.name: f.cost for f in catalog.FAMILIES for s in f.schemas}

CPU_USAGE = catalog.CPU_USAGE.schema
AGENT = catalog.AGENT.schema


def cheap(names: Iterable[str]) -> list[str]:
    """Return the cheap events of ``names``, in order: what a consumer subscribes to
    unless the user asks for costly ones."""
    return [n for n in names if COST.get(n) is not Cost.COSTLY]


def by_name(events: Iterable[EventSchema] = EVENTS) -> dict[str, EventSchema]:
    """Return the events keyed by name."""
    return {e.name: e for e in events}
