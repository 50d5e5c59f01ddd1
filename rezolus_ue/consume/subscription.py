"""Subscribe to rezolus-ue tracepoints exactly as any tool would: perf_event_open.

One ``PERF_TYPE_TRACEPOINT`` event per tracepoint per CPU (``PERF_SAMPLE_RAW | TIME |
CPU``), all of a CPU's writing into one mmap'd ring as with ``perf record -a``, decoded
with the event's tracefs ``format`` file. Two subscriptions (two `rezolus-ue top`, or top
beside `perf record`) each get every record; none touches the global ftrace buffer or
``tracing_on``; closing one leaves the others running. Records the kernel had to drop (a
ring full) are counted in ``lost``, never hidden.

Either transport is read without an option: the events are looked for under both groups,
``user_events`` and the uprobe transport's ``rezolus_ue``, and records of both decode to the
same fields (a uprobe record's probe address is dropped, its text buckets become the sparse
form; see ``encoding.UprobeLayout``).

Holding a perf event keeps a user_event (or a uprobe event) alive, so an agent restart
that registers the same events again reuses them: the subscription carries on. Events
that appear later (the agent started after us, or a sampler began publishing) are picked
up by a periodic rescan.

Applications' events (``records.APP_EVENTS``: OpenTelemetry's ``otlp_metrics``) are read
from every process that publishes them, in either group: on user_events whether the agent
runs or not (each application registers the event), on the uprobe transport while it
runs (it defines the event for them). Each of their records gets its publisher's ``pid``
and ``comm`` (``otlp.record_fields``).
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tracefs_tools import EventFormat, Tracefs, TracefsError, find_tracefs

from ..errors import (
    ConfigError,
    KernelFeatureMissing,
    PermissionDenied,
    RezolusError,
    TracepointBusy,
)
from ..linux.perf_ring import TracepointRings
from ..metrics.h2 import sparse_from_text
from ..schema import EVENTS, cheap
from ..schema import GROUPS as TRANSPORT_GROUPS
from . import otlp
from .intervals import EVENT as TICK
from .readiness import START, Verdict, Watch
from .records import APP_EVENTS, Record

log = logging.getLogger("rezolus_ue")
#: Where our events may be: both transports' groups, user_events first.
GROUPS = tuple(TRANSPORT_GROUPS.values())
UPROBE_GROUP = TRANSPORT_GROUPS["uprobe"]
#: How often to look at the agent and for newly registered events: a consumer says within
#: this long what it waits for, and subscribes within it to what appears.
LOOK_S = 1.0
#: Data pages of each CPU's ring (4 KiB each): perf record's default, 512 KiB, which
#: kernel.perf_event_mlock_kb allows per CPU without CAP_IPC_LOCK. It holds many publish
#: intervals of every event, so a consumer starved of CPU for a while catches up instead
#: of losing records.
RING_PAGES = 128


def resolve_events(patterns: Iterable[str] | None, costly: bool = False) -> list[str]:
    """Return the event names matching ``patterns`` (names or shell globs). None: every
    cheap event, and the costly ones too with ``costly`` (``schema.COST``: enabling those
    attaches BPF programs that every syscall, switch or packet pays for), then the
    applications' events (``otlp_metrics``) if their decoder is installed; patterns name
    what the user asked for, costly or not (a glob passes over ``otlp_metrics`` without
    its decoder).

    Raise ConfigError naming a pattern that matches no event, or ``otlp_metrics`` named
    without its decoder (opentelemetry-proto: the ``otel`` extra).
    """
    ours = [e.name for e in EVENTS]
    apps = list(APP_EVENTS) if otlp.available() else []
    if not patterns:
        return (ours if costly else cheap(ours)) + apps
    known = ours + apps
    out: list[str] = []
    for p in patterns:
        for g in GROUPS:
            p = p.removeprefix(f"{g}:")
        if p in APP_EVENTS:
            otlp.require()
        hits = [n for n in known if fnmatch.fnmatchcase(n, p)]
        if not hits:
            close = [n for n in known if p.strip("*") and p.strip("*") in n][:5]
            hint = f"; did you mean {', '.join(close)}?" if close else \
                "; `rezolus-ue events` lists them"
            raise ConfigError(f"no rezolus-ue event matches {p!r}{hint}")
        out += [n for n in hits if n not in out]
    return out


class Subscription:
    """Records of the selected rezolus-ue events, from every CPU, in time order: the
    live ``source.Source``."""

    live = True
    exhausted = False  # a live source never ends

    def __init__(self, events: Sequence[str] | None = None, *, wait: bool = True,
                 tracefs: Tracefs | None = None, ring_pages: int = RING_PAGES,
                 on_state: Callable[[str], None] | None = None, lazy: bool = False,
                 runtime_dir: Path | None = None, asked: bool = True) -> None:
        """``wait``: block until records can come (saying why they cannot yet), else raise
        a RezolusError saying why. ``lazy``: neither block nor raise; ``state`` says why
        nothing comes (a full-screen consumer shows it). ``on_state(message)`` hears each
        change of that answer, and when the agent stops and comes back (default: logged
        as a warning). ``asked``: the user named ``events``: say which of them will not
        come even while others do (a default set says so only when none can come)."""
        # None is every event: the consumers (top, tail, record, exporter, subscribe())
        # choose their cheap defaults before they get here (``resolve_events``). The tick
        # record comes with any of ours (``intervals``): it says where each tick ends.
        self.wanted = resolve_events(events, costly=True)
        ours = [n for n in self.wanted if n not in APP_EVENTS]
        implicit = bool(ours) and TICK not in self.wanted
        if implicit:
            self.wanted.append(TICK)
        #: Our events that no one asked for: judged neither ready nor quiet by their own
        #: records (ticks come while an asked-for event cannot).
        self._unjudged = set(APP_EVENTS) | ({TICK} if implicit else set())
        self._tfs = tracefs or _open_tracefs()
        if not self._tfs.has_user_events and not self._tfs.has_uprobe_events:
            raise KernelFeatureMissing(
                "user_events and uprobe events", f"{self._tfs.root} has neither"
                " user_events_data nor uprobe_events: the kernel needs CONFIG_USER_EVENTS"
                " (Linux 6.4+) or CONFIG_UPROBE_EVENTS")
        self._rings = TracepointRings(ring_pages=ring_pages)
        self._subs: dict[tuple[str, str], int] = {}  # (group, event) -> tracepoint id
        self._formats: dict[int, tuple[str, EventFormat, bool]] = {}  # id -> (name, fmt, uprobe)
        self._defined: dict[str, set[str]] = {g: set() for g in GROUPS}
        self._blocked: dict[str, str] = {}  # event -> where ftrace holds it
        #: Applications' events wanted: on user_events subscribed with or without the
        #: agent (the watch judges our own events only), and judged by ``_judge_apps``.
        self._apps = [n for n in self.wanted if n in APP_EVENTS]
        # Judged as asked: an agent that writes no tick record (an older one) is no fault.
        self._watch = Watch(ours, on_state or _log_state, runtime_dir, asked)
        self._verdict = Verdict(False, None)
        self._app_said: str | None = None
        self._publishers = otlp.Publishers()
        self._rejects = otlp.Decoder() if self._apps else None
        self._next_look = 0.0
        self._last_record = time.monotonic()
        try:
            if not (wait or lazy):  # the error says it, once
                self._watch.on_state = lambda _message: None
            verdict = self._refresh()
            self._watch.on_state = on_state or _log_state
            if lazy:
                return
            if not verdict.ready and not wait:
                raise RezolusError(verdict.message or "no rezolus-ue event is registered")
            while not verdict.ready:
                time.sleep(LOOK_S)
                verdict = self._refresh()
        except BaseException:
            self.close()  # an interrupted wait must not leave perf events to the finalizer
            raise

    @property
    def state(self) -> str | None:
        """Return why records do not come (or some do not), or None when all is well."""
        return self._verdict.message

    @property
    def ready(self) -> bool:
        """Return whether a subscribed event can bring records (the agent publishes it, or
        an application has registered it)."""
        return self._verdict.ready

    def _refresh(self) -> Verdict:
        """Look at the agent, subscribe to what it publishes, and judge what comes."""
        agent = self._watch.see_agent()
        # Everything subscribed while the agent runs: nothing to list, nothing to judge by.
        if agent is None or len(self.events) < len(self.wanted):
            self._scan(subscribe=agent is not None)
        ours = {n for n in self.events if n not in self._unjudged}
        quiet = time.monotonic() - self._last_record if ours else 0.0
        # From the end of the look: one slower than LOOK_S (a loaded machine) must not
        # make every poll look again.
        self._next_look = time.monotonic() + LOOK_S
        v = self._watch.judge(self._defined, ours, self._blocked, quiet) \
            if self._watch.wanted else Verdict(False, None)
        if self._apps:
            v = self._judge_apps(v)
        self._verdict = v
        return v

    def _judge_apps(self, ours: Verdict) -> Verdict:
        """Return ``ours`` with the applications' events: records can come once one has
        registered them; while none has, say so if they are what the user asked for."""
        live = any(n in APP_EVENTS for _g, n in self._subs)
        note = None
        if not live and (self._watch.asked or not self._watch.wanted):
            held = [f"{n} is enabled in ftrace ({self._blocked[n]}), which shuts perf readers"
                    " such as this one out on the uprobe transport: disable it there"
                    for n in self._apps if n in self._blocked]
            names = ", ".join(self._apps)
            agent = self._watch.agent
            if held:
                note = "; ".join(held)
            elif self._tfs.has_user_events:
                note = (f"no application has registered {names} yet (an OpenTelemetry"
                        " user_events metrics exporter registers it as it starts): waiting"
                        " for one")
            elif agent is None:
                note = (f"{names} needs the agent on this kernel, which has no user_events"
                        f" (the agent defines {UPROBE_GROUP}:{names} for applications):"
                        f" start it with `{START}`")
            elif agent.status is None:
                note = f"the agent (pid {agent.pid}) is starting: {names} is not defined yet"
            else:
                note = (f"the agent (pid {agent.pid}) has not defined {UPROBE_GROUP}:{names}"
                        " for applications (its log says why)")
        if note != self._app_said:
            self._app_said = note
            if note:
                self._watch.on_state(note)
        return Verdict(ours.ready or live,
                       "; ".join(m for m in (ours.message, note) if m) or None)

    @property
    def events(self) -> list[str]:
        """Return the events currently subscribed."""
        return list(dict.fromkeys(name for _g, name in self._subs))

    @property
    def groups(self) -> list[str]:
        """Return the tracepoint groups of the events subscribed: the transports in use
        (the exporter names them on its page; read from its HTTP threads, hence the copy)."""
        return list(dict.fromkeys(g for g, _name in tuple(self._subs)))

    @property
    def wall_offset_ns(self) -> int:
        """Return wall-clock minus CLOCK_MONOTONIC now."""
        return monotonic_to_wall_offset_ns()

    @property
    def lost(self) -> int:
        """Return how many records the kernel dropped because a ring was full."""
        return self._rings.lost

    def _scan(self, subscribe: bool = True) -> None:
        """List our registered events and (``subscribe``) subscribe to the wanted ones
        not yet subscribed.

        One directory read per group finds what is registered: the wanted list names
        every event of every sampler, and those the agent does not publish (disabled, or
        unavailable here) are looked for again at every rescan.
        """
        for group in GROUPS:
            try:
                present = set(self._tfs.events(group))
            except TracefsError as e:
                log.debug("cannot list %s events: %s", group, e)
                present = set()
            self._defined[group] = {n for n in present if n.startswith("rezolus_")}
            # Without the agent, only what applications registered themselves: on the
            # uprobe transport theirs too is the agent's definition (a killed agent's).
            for name in self.wanted if subscribe else \
                    (self._apps if group != UPROBE_GROUP else ()):
                if (group, name) not in self._subs and name in present:
                    self._subscribe(group, name)

    def _subscribe(self, group: str, name: str) -> None:
        try:
            fmt = self._tfs.event_format(group, name)
            self._rings.add(fmt.id)
            # Deleted and registered again (a new id) between the two: the records
            # would carry an id we cannot name. Let the next scan take the new one.
            if self._tfs.event_id(group, name) != fmt.id:
                self._rings.remove(fmt.id)
                return
        except PermissionDenied:
            raise
        except TracepointBusy:
            self._blocked[name] = self._held_by(group, name)
            return
        except (TracefsError, RezolusError) as e:
            log.debug("cannot subscribe to %s:%s: %s", group, name, e)
            return  # deleted between the listing and the open: next scan
        self._blocked.pop(name, None)
        if name not in APP_EVENTS and not any(n not in APP_EVENTS for _g, n in self._subs):
            self._last_record = time.monotonic()  # quiet from our first subscription on
        self._subs[group, name] = fmt.id
        self._formats[fmt.id] = (name, fmt, group == UPROBE_GROUP)

    def _held_by(self, group: str, name: str) -> str:
        """Return where ftrace has ``name`` enabled, as a path the user can write 0 to."""
        try:
            places = self._tfs.enabled_in(group, name)
        except TracefsError:
            places = []
        paths = [str(self._tfs.path("events", group, name, "enable", instance=i))
                 for i in places]
        return ", ".join(paths) or f"{group}:{name}"

    def poll(self, timeout_ms: int, settle_ms: int = 0) -> list[Record]:
        """Return the records that arrived, waiting up to ``timeout_ms`` for the first.

        ``settle_ms``: once the first arrived, wait this long more before reading, so a
        publish's burst comes back in one batch instead of a wakeup per record.
        """
        if time.monotonic() >= self._next_look:
            self._refresh()
        if not self._subs:
            time.sleep(min(timeout_ms / 1000, LOOK_S))
            return []
        if self._rings.wait(min(timeout_ms, int(LOOK_S * 1000))) and settle_ms > 0:
            time.sleep(settle_ms / 1000)
        return self.drain()

    def drain(self) -> list[Record]:
        """Return every record already in the rings, without waiting."""
        out: list[Record] = []
        ours = False
        for s in self._rings.drain():
            rec = self._decode(s.raw, s.time or 0, s.cpu or 0)
            if rec is not None:
                out.append(rec)
                ours = ours or rec.event not in self._unjudged
        if ours:
            self._last_record = time.monotonic()
        return out

    def _decode(self, raw: bytes | None, t: int, cpu: int) -> Record | None:
        if not raw or len(raw) < 8:
            return None
        entry = self._formats.get(int.from_bytes(raw[:2], "little"))
        if entry is None:
            return None
        name, fmt, uprobe = entry
        tid = int.from_bytes(raw[4:8], "little", signed=True)
        try:
            fields = decode_fields(fmt, raw, uprobe)
            if name in APP_EVENTS:
                fields = otlp.record_fields(fields, tid, self._publishers, uprobe)
        except (ValueError, otlp.MalformedPayload) as e:
            if self._rejects is None or name not in APP_EVENTS:
                log.debug("undecodable %s record: %s", name, e)
                return None
            bad = e if isinstance(e, otlp.MalformedPayload) else \
                otlp.MalformedPayload("truncated", str(e))
            self._rejects.reject(*self._publishers(tid), bad)
            return None
        return Record(name, t, cpu, tid, fields)

    def close(self) -> None:
        """Stop every perf event (idempotent)."""
        self._rings.close()
        self._subs.clear()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def decode_fields(fmt: EventFormat, raw: bytes, uprobe: bool) -> dict[str, object]:
    """Return a raw record's fields as on user_events, whichever transport wrote it: a
    uprobe record's probe address dropped, its text buckets in the sparse form. Raise
    ValueError if the record is cut short."""
    fields = fmt.decode(raw)
    if uprobe:
        fields.pop("__probe_ip", None)
        b = fields.get("buckets")
        if isinstance(b, str):
            fields["buckets"] = sparse_from_text(b)
    return fields


def _log_state(message: str) -> None:
    log.warning("%s", message)


def _open_tracefs() -> Tracefs:
    try:
        return Tracefs(find_tracefs(mount=os.geteuid() == 0))
    except TracefsError as e:
        raise KernelFeatureMissing("tracefs", str(e)) from None


def monotonic_to_wall_offset_ns() -> int:
    """Return wall-clock minus CLOCK_MONOTONIC, to print record times as local time."""
    return time.time_ns() - time.monotonic_ns()


__all__ = ["Record", "Subscription", "decode_fields", "monotonic_to_wall_offset_ns",
           "resolve_events"]
