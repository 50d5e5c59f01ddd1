"""The publishers: define event schemas as tracepoints and hand out their handles.

Two transports stand behind one interface. ``user_events`` (Linux 6.4+ with
CONFIG_USER_EVENTS) registers each event as ``user_events:<name>``. ``uprobe`` (any kernel
with CONFIG_UPROBE_EVENTS, which the distribution kernels without user_events have)
defines each as the uprobe event ``rezolus_ue:<name>`` on a slot of the stub shared object
(``linux/uprobe_stub``), its fields fetched from the record the stub receives.

Either way a handle has ``word`` (non-zero while a consumer has the tracepoint enabled: the
kernel keeps it current in our memory), ``enabled`` and ``write(payload)``, which takes the
payload as ``schema.pack`` builds it, so samplers do not know which transport they feed.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from tracefs_tools import (
    EventNotFound,
    ProbeBusy,
    ProbeExists,
    Tracefs,
    TracefsError,
    TracefsPermissionError,
    UprobeDefinition,
    UprobeEvents,
)

from .errors import KernelFeatureMissing, PermissionDenied, RezolusError
from .linux.uprobe_stub import SLOTS, Stub, first_arg_register, hashed_slot
from .linux.user_events import (
    REG_MULTI_FORMAT,
    REG_PERSIST,
    Stats,
    UserEventsData,
    missing_user_events_hint,
)
from .schema import EVENTS, GROUPS, EventSchema

log = logging.getLogger("rezolus_ue")

UPROBE_GROUP = GROUPS["uprobe"]


class EventHandle(Protocol):
    """One published event, whichever the transport."""

    name: str
    word: ctypes.c_uint32 | ctypes.c_uint16

    @property
    def enabled(self) -> bool: ...

    def write(self, payload: bytes) -> bool: ...


class Publisher(Protocol):
    """What the agent and the samplers need of a transport."""

    transport: str
    group: str
    handles: dict[str, EventHandle]

    @property
    def stats(self) -> Stats: ...

    def register(self, schemas: Iterable[EventSchema]) -> dict[str, EventHandle]: ...

    def unregister(self, names: Iterable[str]) -> None: ...

    def close(self) -> None: ...


def choose_transport(tracefs: str | Path, setting: str = "auto") -> tuple[str, str]:
    """Return (transport, why) for ``setting`` on this kernel; raise KernelFeatureMissing
    when the one asked for (or, for auto, either) is missing."""
    root = Path(tracefs)
    try:
        tfs = Tracefs(root)
        has_ue, has_up = tfs.has_user_events, tfs.has_uprobe_events
    except TracefsPermissionError as e:
        raise PermissionDenied(str(e)) from None
    except TracefsError as e:
        raise RezolusError(str(e)) from None
    if setting == "user_events" or (setting == "auto" and has_ue):
        if not has_ue:
            raise KernelFeatureMissing("user_events", missing_user_events_hint(root))
        return "user_events", ("configured" if setting == "user_events" else
                               "this kernel has user_events")
    if not has_up:
        raise KernelFeatureMissing(
            "uprobe events" if setting == "uprobe" else "user_events and uprobe events",
            f"{root}/uprobe_events is missing: the kernel needs CONFIG_UPROBE_EVENTS=y"
            + ("" if setting == "uprobe" else " (or CONFIG_USER_EVENTS=y, Linux 6.4+)"))
    return "uprobe", ("configured" if setting == "uprobe" else
                      "this kernel has no user_events (CONFIG_USER_EVENTS)")


def open_publisher(tracefs: str | Path, transport: str = "auto", *, persist: bool = False,
                   multi_format: bool = False) -> Publisher:
    """Return the publisher of ``transport`` (auto: user_events where the kernel has it)."""
    chosen, why = choose_transport(tracefs, transport)
    log.info("transport: %s (%s)", chosen, why)
    if chosen == "user_events":
        return UserEventsPublisher(tracefs, persist, multi_format)
    if persist or multi_format:
        log.warning("persist and multi_format are user_events options; the uprobe transport"
                    " ignores them")
    return UprobePublisher(tracefs)


class UserEventsPublisher:
    """All of the agent's registrations, on one ``user_events_data`` fd."""

    transport = "user_events"
    group = GROUPS["user_events"]

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
                reg = self._data.register(s.name_args, self.flags)
                if reg.flags != self.flags:
                    log.warning("%s: this kernel does not support registration flags %#x;"
                                " registered with %#x", s.name, self.flags, reg.flags)
                self.handles[s.name] = h = reg
            out[s.name] = h
        return out

    def unregister(self, names: Iterable[str]) -> None:
        """Unregister the named events (a sampler removed by a config reload)."""
        for name in names:
            h = self.handles.pop(name, None)
            if h is not None:
                h.unregister()  # type: ignore[attr-defined]

    def close(self) -> None:
        """Unregister everything and close the data file."""
        self._data.close()
        self.handles.clear()


class UprobeHandle:
    """One event on the uprobe transport: its slot's counter and function."""

    __slots__ = ("_emit", "_record", "_stats", "name", "word")

    def __init__(self, name: str, word: ctypes.c_uint16, emit: ctypes._CFuncPtr,
                 record, stats: Stats) -> None:  # type: ignore[no-untyped-def]
        self.name = name
        #: The slot's reference counter; hot loops test ``word.value``.
        self.word = word
        self._emit = emit
        self._record = record
        self._stats = stats

    @property
    def enabled(self) -> bool:
        """Return True while at least one consumer has the tracepoint enabled."""
        return self.word.value != 0

    def write(self, payload: bytes) -> bool:
        """Hand one record to the probed function (the kernel fetches its fields)."""
        rec = self._record(payload)
        self._emit(rec, len(rec))
        self._stats.written += 1
        return True


def owned_uprobes(events: UprobeEvents, stub_path: Path) -> list[UprobeDefinition]:
    """Return the uprobe events of our group defined on ``stub_path``: ours, from this or
    an earlier agent; another tool's events, in our group or not, are not."""
    return [d for d in events.list()
            if d.group == UPROBE_GROUP and Path(d.path) == stub_path]


def slot_of(d: UprobeDefinition, stub: Stub) -> int:
    """Return the stub slot whose reference counter ``d`` names: the kernel knows the
    slot only by that file offset, so readers of the counter find it from there."""
    slot, rest = divmod((d.ref_ctr_offset or 0) - stub.counter_offset(0),
                        ctypes.sizeof(ctypes.c_uint16))
    if Path(d.path) != stub.path or d.ref_ctr_offset is None or rest \
            or not 0 <= slot < stub.slots:
        raise RezolusError(f"{d.group}:{d.event} is not on a slot of {stub.path} ({d.line}):"
                           " an agent of another installation (REZOLUS_UE_UPROBE_STUB)"
                           " defined it")
    return slot


def remove_owned(events: UprobeEvents,
                 stub_path: Path) -> tuple[list[str], list[UprobeDefinition]]:
    """Delete our group's events on ``stub_path``; return (the names deleted, the
    definitions a consumer still holds, which the kernel keeps)."""
    deleted, busy = [], []
    for d in owned_uprobes(events, stub_path):
        try:
            events.delete(d.group, d.event)
            deleted.append(d.event)
        except ProbeBusy:
            busy.append(d)
        except EventNotFound:
            pass
    return deleted, busy


#: Catalog events whose hashed slot another catalog event has: each gets a free slot here
#: instead. Only ever appended to (an entry removed moves its event to another slot).
#: When a new event collides, catalog_slots (tests/test_uprobe_layout.py) names a free one.
SLOT_OVERRIDES: dict[str, int] = {}


def event_slot(name: str) -> int:
    """Return the stub slot of catalog event ``name``: the one its name hashes to, unless
    SLOT_OVERRIDES gives it another. Nothing else counts, so adding or removing a sampler
    moves no other event (a position in the catalog would)."""
    return SLOT_OVERRIDES.get(name, hashed_slot(name))


def catalog_slots() -> dict[str, int]:
    """Return each catalog event's stub slot (``event_slot``); raise RezolusError if two
    share one, which the catalog's test prevents."""
    out: dict[str, int] = {}
    owner: dict[int, str] = {}
    for e in EVENTS:
        slot = out[e.name] = event_slot(e.name)
        if owner.setdefault(slot, e.name) != e.name:
            raise RezolusError(f"events {owner[slot]} and {e.name} share stub slot {slot}:"
                               " give the one added last a free slot in SLOT_OVERRIDES"
                               f" (e.g. {free_slot(e.name, owner)})")
    return out


def free_slot(name: str, taken: Iterable[int]) -> int:
    """Return the slot for ``name``, not a catalog event's: its hashed slot, else the next
    one (round the stub) not in ``taken``."""
    used, start = set(taken), hashed_slot(name)
    return next(s % SLOTS for s in range(start, start + SLOTS) if s % SLOTS not in used)


def attach_uprobe(schema: EventSchema, stub: Stub | None = None,
                  stats: Stats | None = None) -> UprobeHandle:
    """Return a handle writing ``schema``'s records to its slot from a process that does not
    define the event (an application, without root): the agent defines it, and the slot's
    counter says whether a consumer listens. The slot is ``event_slot``'s, which is the
    agent's for a name no catalog event's slot takes (tests/test_otel_wire.py checks)."""
    stub = stub or Stub()
    slot = event_slot(schema.name)
    return UprobeHandle(schema.name, stub.counter(slot), stub.function(slot),
                        schema.uprobe.record, stats if stats is not None else Stats())


class UprobePublisher:
    """The agent's events as uprobe events on the stub's slots, defined through one kept
    ``uprobe_events`` fd (so a reload after the privilege drop can still define).

    Each event takes the slot of its name (``event_slot``), so a restart, even of another
    version with other samplers, defines the same event on the same slot: a definition
    left by a killed agent that a consumer (perf) still holds is identical and is used
    again, and that consumer carries on. A name not in the catalog (a test's schema) takes
    its hashed slot, or the next one no catalog event and no other such name has.
    """

    transport = "uprobe"
    group = UPROBE_GROUP

    def __init__(self, tracefs: str | Path, stub: Stub | None = None) -> None:
        self._register = first_arg_register()
        self.stub = stub or Stub()
        try:
            self._events = UprobeEvents(tracefs)
        except TracefsPermissionError as e:
            raise PermissionDenied(str(e)) from None
        except TracefsError as e:
            raise KernelFeatureMissing("uprobe events", str(e)) from None
        self.handles: dict[str, EventHandle] = {}
        self._stats = Stats()
        self._slots = catalog_slots()
        # Stale definitions a killed agent left: delete them, keep the held ones for reuse.
        try:
            deleted, busy = remove_owned(self._events, self.stub.path)
        except TracefsError as e:
            raise RezolusError(str(e)) from None
        if deleted:
            log.info("removed %d stale uprobe events of an earlier agent", len(deleted))
        self._held = {d.event: d for d in busy}

    @property
    def stats(self) -> Stats:
        """Return the write counters."""
        return self._stats

    def _slot(self, name: str) -> int:
        slot = self._slots.get(name)
        if slot is None:  # not in the catalog (a test's schema)
            slot = self._slots[name] = free_slot(name, self._slots.values())
        return slot

    def register(self, schemas: Iterable[EventSchema]) -> dict[str, EventHandle]:
        """Define each schema's uprobe event (idempotent) and return the handles."""
        out = {}
        for s in schemas:
            h = self.handles.get(s.name)
            if h is None:
                h = self.handles[s.name] = self._define(s)
            out[s.name] = h
        return out

    def _define(self, s: EventSchema) -> UprobeHandle:
        slot, layout = self._slot(s.name), s.uprobe
        d = UprobeDefinition(self.group, s.name, str(self.stub.path),
                             self.stub.function_offset(slot), self.stub.counter_offset(slot),
                             layout.fetch_args(self._register))
        held = self._held.pop(s.name, None)
        if held is not None and held != d:
            raise RezolusError(f"{self.group}:{s.name} is defined differently by an earlier"
                               " agent and a consumer still has it enabled: stop that"
                               " consumer (perf, ftrace), then restart the agent")
        if held is None:
            try:
                self._events.define(d)
            except ProbeExists:  # another agent's, or a race with a consumer's scan
                raise RezolusError(f"{self.group}:{s.name} is already defined on another"
                                   f" file: `rezolus-ue cleanup` removes ours;"
                                   f" check {self._events.path} for the rest") from None
            except TracefsError as e:
                raise RezolusError(f"{e}{self._clash(d)}") from None
        else:
            log.info("%s:%s: a consumer kept it enabled; using it again", self.group, s.name)
        return UprobeHandle(s.name, self.stub.counter(slot), self.stub.function(slot),
                            layout.record, self._stats)

    def _clash(self, d: UprobeDefinition) -> str:
        """Return why the kernel may have refused ``d``: another event probing the same
        address with another reference counter (the kernel allows one per address)."""
        try:
            others = [o for o in self._events.list() if o.path == d.path
                      and o.offset == d.offset and o.ref_ctr_offset != d.ref_ctr_offset]
        except TracefsError:
            return ""
        return "".join(f"; {o.group}:{o.event} probes the same address of {d.path} with"
                       " another reference counter (delete it, or let it be)"
                       for o in others[:1])

    def unregister(self, names: Iterable[str]) -> None:
        """Delete the named events' definitions (kept while a consumer holds one)."""
        for name in names:
            if self.handles.pop(name, None) is not None:
                self._delete(name)

    def _delete(self, name: str) -> None:
        try:
            self._events.delete(self.group, name)
        except ProbeBusy:
            log.info("%s:%s stays defined while a consumer has it enabled; the next start"
                     " uses it again or removes it", self.group, name)
        except TracefsError as e:
            log.warning("cannot delete %s:%s: %s", self.group, name, e)

    def close(self) -> None:
        """Delete every definition of ours and close ``uprobe_events``."""
        for name in list(self.handles):
            self._delete(name)
        self.handles.clear()
        self._events.close()


