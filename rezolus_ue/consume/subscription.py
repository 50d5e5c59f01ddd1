"""Subscribe to rezolus-ue tracepoints exactly as any tool would: perf_event_open.

One ``PERF_TYPE_TRACEPOINT`` event per tracepoint per CPU, each with its own mmap'd ring
(``PERF_SAMPLE_RAW | TIME | CPU``), decoded with the event's tracefs ``format`` file. Two
subscriptions (two `rezolus-ue top`, or top beside `perf record`) each get every record;
none touches the global ftrace buffer or ``tracing_on``; closing one leaves the others
running. Records the kernel had to drop (a ring full) are counted in ``lost``, never hidden.

Holding a perf event keeps a user_event alive, so an agent restart that registers the same
events again reuses them: the subscription carries on. Events that appear later (the agent
started after us, or a sampler began publishing) are picked up by a periodic rescan.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import select
import time
from collections.abc import Iterable, Sequence

from tracefs_tools import EventFormat, Tracefs, TracefsError, find_tracefs

from ..errors import ConfigError, KernelFeatureMissing, PermissionDenied, RezolusError
from ..perf_event import TracepointSubscription
from ..schema import EVENTS
from ..user_events import missing_user_events_hint
from .records import Record

log = logging.getLogger("rezolus_ue")
GROUP = "user_events"
#: How often to look for newly registered events.
RESCAN_S = 2.0


def resolve_events(patterns: Iterable[str] | None) -> list[str]:
    """Return the event names matching ``patterns`` (names or shell globs; None: all).

    Raise ConfigError naming a pattern that matches no rezolus-ue event.
    """
    known = [e.name for e in EVENTS]
    if not patterns:
        return known
    out: list[str] = []
    for p in patterns:
        p = p.removeprefix(f"{GROUP}:")
        hits = [n for n in known if fnmatch.fnmatchcase(n, p)]
        if not hits:
            close = [n for n in known if p.strip("*") and p.strip("*") in n][:5]
            hint = f"; did you mean {', '.join(close)}?" if close else \
                "; `rezolus-ue events` lists them"
            raise ConfigError(f"no rezolus-ue event matches {p!r}{hint}")
        out += [n for n in hits if n not in out]
    return out


class Subscription:
    """Records of the selected rezolus-ue events, from every CPU, in time order."""

    def __init__(self, events: Sequence[str] | None = None, *, wait: bool = True,
                 tracefs: Tracefs | None = None, ring_pages: int = 16,
                 on_wait=None) -> None:  # type: ignore[no-untyped-def]
        self.wanted = resolve_events(events)
        self._tfs = tracefs or _open_tracefs()
        if not self._tfs.has_user_events:
            raise KernelFeatureMissing("user_events", missing_user_events_hint(self._tfs.root))
        self._ring_pages = ring_pages
        self._subs: dict[str, tuple[int, TracepointSubscription]] = {}
        self._formats: dict[int, tuple[str, EventFormat]] = {}
        self._poller = select.poll()
        self._fd_owner: dict[int, str] = {}
        self._lost_closed = 0
        self._next_scan = 0.0
        self._scan()
        if not self._subs:
            if not wait:
                raise RezolusError("no rezolus-ue event is registered: is the agent running?"
                                   " Start it with `sudo rezolus-ue run`")
            if on_wait is not None:
                on_wait()
            else:
                log.warning("waiting for the agent to register events (start it with"
                            " `sudo rezolus-ue run`; Ctrl-C to give up)")
            while not self._subs:
                time.sleep(1.0)
                self._scan()

    @property
    def events(self) -> list[str]:
        """Return the events currently subscribed."""
        return list(self._subs)

    @property
    def lost(self) -> int:
        """Return how many records the kernel dropped because a ring was full."""
        return self._lost_closed + sum(s.lost for _id, s in self._subs.values())

    def _scan(self) -> None:
        """Subscribe to wanted events that are registered and not yet subscribed."""
        self._next_scan = time.monotonic() + RESCAN_S
        for name in self.wanted:
            if name in self._subs:
                continue
            try:
                if not self._tfs.event_exists(GROUP, name):
                    continue
                fmt = self._tfs.event_format(GROUP, name)
            except TracefsError:
                continue  # deleted between the check and the read: next scan
            try:
                sub = TracepointSubscription(fmt.id, ring_pages=self._ring_pages)
            except PermissionDenied:
                raise
            except RezolusError as e:
                log.debug("cannot subscribe to %s: %s", name, e)
                continue
            self._subs[name] = (fmt.id, sub)
            self._formats[fmt.id] = (name, fmt)
            for ev in sub.events:
                self._poller.register(ev.fd, select.POLLIN)
                self._fd_owner[ev.fd] = name

    def poll(self, timeout_ms: int) -> list[Record]:
        """Return the records that arrived, waiting up to ``timeout_ms`` for the first."""
        if time.monotonic() >= self._next_scan and len(self._subs) < len(self.wanted):
            self._scan()
        if not self._subs:
            time.sleep(timeout_ms / 1000)
            return []
        try:
            ready = self._poller.poll(timeout_ms)
        except InterruptedError:
            ready = []
        names = {self._fd_owner[fd] for fd, _ev in ready if fd in self._fd_owner}
        out: list[Record] = []
        for name in names:
            _id, sub = self._subs[name]
            for s in sub.drain():
                rec = self._decode(s.raw, s.time or 0, s.cpu or 0)
                if rec is not None:
                    out.append(rec)
        out.sort(key=lambda r: r.time_ns)
        return out

    def _decode(self, raw: bytes | None, t: int, cpu: int) -> Record | None:
        if not raw or len(raw) < 8:
            return None
        entry = self._formats.get(int.from_bytes(raw[:2], "little"))
        if entry is None:
            return None
        name, fmt = entry
        try:
            fields = fmt.decode(raw)
        except ValueError as e:
            log.debug("undecodable %s record: %s", name, e)
            return None
        return Record(name, t, cpu, int.from_bytes(raw[4:8], "little", signed=True), fields)

    def close(self) -> None:
        """Stop every perf event (idempotent)."""
        for _id, sub in self._subs.values():
            self._lost_closed += sub.lost
            sub.close()
        self._subs.clear()
        self._fd_owner.clear()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_tracefs() -> Tracefs:
    try:
        return Tracefs(find_tracefs(mount=os.geteuid() == 0))
    except TracefsError as e:
        raise KernelFeatureMissing("tracefs", str(e)) from None


def monotonic_to_wall_offset_ns() -> int:
    """Return wall-clock minus CLOCK_MONOTONIC, to print record times as local time."""
    return time.time_ns() - time.monotonic_ns()


__all__ = ["Record", "Subscription", "monotonic_to_wall_offset_ns", "resolve_events"]
