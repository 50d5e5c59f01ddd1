"""Publish intervals: which records belong to which of the agent's publish ticks, the
counters' rates between them, and when a series or publisher has gone quiet.

The one place every consumer (``top``, the exporter, replay, Parquet, ``view``) learns
interval boundaries from. The agent writes every record of a tick in one burst and ends
it with one ``rezolus_interval`` record (``EVENT``: the tick's ``seq``, the configured
``interval_ns`` and the ``records`` it wrote that tick), so a boundary is exact: the
records since the previous tick record are the tick's. A stream without tick records
(a recording made before the agent wrote them, perf reading only some events, a tick
record dropped) is split where a series repeats, the one inference there is: a series
published twice belongs to two ticks. Such intervals are not ``exact``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from .records import APP_EVENTS, Record, event_schema

#: The agent's tick record, written after every other record of a publish tick.
EVENT = "rezolus_interval"

#: A consumer drawing frames every ``d`` seconds takes a tick at least this share of ``d``
#: after its previous frame as the next: the agent's ticks jitter by a few ms around its
#: publish interval, so a frame every exactly ``d`` would skip ticks that came early.
INTERVAL_SLACK = 0.9


@dataclass(slots=True)
class Interval:
    """One publish tick's records, in time order (its tick record excluded).

    ``start_ns`` is its first record's time (``end_ns`` when it has none); ``end_ns`` the
    time of its tick record, or when inferred (``exact`` False) of its last record.
    ``written`` is what the tick record says the agent wrote that tick (None: inferred).
    """

    seq: int
    start_ns: int
    end_ns: int
    records: list[Record]
    exact: bool
    written: int | None
    #: The configured publish interval the tick record carries (0: inferred).
    interval_ns: int = 0

    @property
    def missing(self) -> int:
        """Return how many records the agent wrote in this tick that did not arrive (0 when
        inferred). Meaningful for a reader of every event written: one reading some events
        while another consumer enables more sees the others' records as missing too."""
        if self.written is None:
            return 0
        ours = sum(1 for r in self.records if r.event not in APP_EVENTS)
        return max(0, self.written - ours)


def _key_fields(event: str) -> tuple[str, ...] | None:
    """Return the fields that tell an event's series apart (its labels, a ``_dist``
    record's metric, a histogram's part), or None for an event that is not the agent's."""
    if event in APP_EVENTS:
        return None
    schema = event_schema(event)
    if schema is None:
        return None
    return tuple(f.name for f in schema.fields if f.unit in ("label", "name")
                 or f.name == "part")


class Intervals:
    """Group a time-ordered record stream into publish intervals, as it arrives.

    ``feed`` returns the intervals its records closed: at each tick record (exact), or,
    without one, where a series repeats (inferred). ``flush`` closes the open one.
    ``period_ns``: the expected publish interval until one is measured (0: unknown).
    """

    def __init__(self, period_ns: int = 0) -> None:
        self._period_ns = period_ns
        self._measured = 0
        self._open: list[Record] = []
        self._keys: set[tuple] = set()
        self._key_fields: dict[str, tuple[str, ...] | None] = {}
        self._seq = -1  # the latest closed interval's
        self._last_end: int | None = None
        self._last_exact_end: tuple[int, int] | None = None  # (seq, end_ns)

    @property
    def period_ns(self) -> int:
        """Return the publish interval: measured between consecutive ticks, else the tick
        record's configured one, else the one given (0: not known yet)."""
        return self._measured or self._period_ns

    @property
    def pending(self) -> bool:
        """Return whether records wait in the open interval."""
        return bool(self._open)

    def feed(self, records: Iterable[Record]) -> list[Interval]:
        """Take records (in time order); return the intervals they closed."""
        out: list[Interval] = []
        fields_of = self._key_fields
        keys = self._keys
        for r in records:
            if r.event == EVENT:
                out.append(self._close_tick(r))
                continue
            names = fields_of.get(r.event, ())
            if names == ():
                names = fields_of[r.event] = _key_fields(r.event)
            if names is not None:
                f = r.fields
                key = (r.event, *(f.get(n) for n in names))
                if key in keys:  # a series again: the tick record was not seen
                    out.append(self._close_inferred())
                keys.add(key)
            self._open.append(r)
        return out

    def flush(self) -> list[Interval]:
        """Close the open interval (the data went quiet, or the stream ended)."""
        return [self._close_inferred()] if self._open else []

    def _close_tick(self, tick: Record) -> Interval:
        f = tick.fields
        seq = _int(f.get("seq"), self._seq + 1)
        configured = _int(f.get("interval_ns"), 0)
        if configured:
            self._period_ns = configured
        last = self._last_exact_end
        if last is not None and seq == last[0] + 1 and tick.time_ns > last[1]:
            self._measured = tick.time_ns - last[1]
        self._last_exact_end = (seq, tick.time_ns)
        written = f.get("records")
        iv = self._take(seq, tick.time_ns, True, written if isinstance(written, int) else None)
        iv.interval_ns = configured
        return iv

    def _close_inferred(self) -> Interval:
        end = self._open[-1].time_ns if self._open else (self._last_end or 0)
        return self._take(self._seq + 1, end, False, None)

    def _take(self, seq: int, end_ns: int, exact: bool, written: int | None) -> Interval:
        records, self._open = self._open, []
        self._keys.clear()
        self._seq, self._last_end = seq, end_ns
        start = records[0].time_ns if records else end_ns
        return Interval(seq, start, end_ns, records, exact, written)


def _int(v: object, default: int) -> int:
    return v if isinstance(v, int) else default


def split(records: Iterable[Record]) -> Iterator[Interval]:
    """Return the intervals of a whole recording, in order (the last closed at its end)."""
    iv = Intervals()
    for r in records:
        yield from iv.feed((r,))
    yield from iv.flush()


def deltas(values: tuple[int, ...], prev: tuple[int, ...]) -> tuple[int, ...] | None:
    """Return a series' counters' increases since ``prev``, or None when one went down:
    its source restarted (the agent, a re-created cgroup), so this step gives no rate and
    ``values`` are the base of the next. Every consumer's rates follow this rule."""
    d = tuple(map(operator.sub, values, prev))
    return None if d and min(d) < 0 else d


class Rates:
    """Counters' rates per second between consecutive values of each series, reset-aware
    (``deltas``)."""

    __slots__ = ("_last", "resets")

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[int, int]] = {}
        #: Counter resets seen.
        self.resets = 0

    def rate(self, key: Hashable, value: int, time_ns: int) -> float | None:
        """Take ``key``'s ``value`` at ``time_ns``; return its rate per second since the
        previous one, None for the first, a reset or no time between them."""
        prev = self._last.get(key)
        self._last[key] = (value, time_ns)
        if prev is None:
            return None
        v0, t0 = prev
        step = deltas((value,), (v0,))
        if step is None:
            self.resets += 1
            return None
        if time_ns <= t0:
            return None
        return step[0] * 1e9 / (time_ns - t0)

    def forget(self, key: Hashable) -> None:
        """Drop ``key`` (its series went away): its next value starts afresh."""
        self._last.pop(key, None)

    def keep(self, alive: Callable[[Hashable], bool]) -> None:
        """Drop the series for which ``alive`` is False."""
        for k in [k for k in self._last if not alive(k)]:
            del self._last[k]

    def __len__(self) -> int:
        return len(self._last)


@dataclass(slots=True)
class Publishes:
    """One publisher's publishes (an agent event's intervals, or an application's
    exports), for staleness: a series not in its publisher's last ``n`` publishes went
    away, and a publisher silent for ``n`` of its periods stopped.

    Count a publish with ``publish`` (an interval the event had records in), or, for a
    publisher without tick records (an application's ``otlp_metrics``), let ``see`` count
    one each time a series repeats.
    """

    gen: int = 0  # publishes counted (the current one's number)
    start_ns: int | None = None  # when the current publish began
    period_ns: int = 0  # between the last two publishes' starts (0: not measured yet)
    seen_at_ns: int | None = None  # when its latest record arrived (the caller's clock)
    seen: set = field(default_factory=set)  # ``see``: the current publish's series

    def publish(self, t_ns: int, now_ns: int | None = None) -> int:
        """Count a publish beginning at ``t_ns``; return its number."""
        if self.start_ns is not None:
            self.gen += 1
            if t_ns > self.start_ns:
                self.period_ns = t_ns - self.start_ns
        self.start_ns = t_ns
        self.seen_at_ns = t_ns if now_ns is None else now_ns
        return self.gen

    def see(self, key: Hashable, t_ns: int, now_ns: int | None = None) -> bool:
        """Count a record of series ``key``; return whether it began the next publish
        (``key`` was already in the current one)."""
        began = key in self.seen
        if began or self.start_ns is None:
            self.publish(t_ns, now_ns)
            self.seen = set()
        self.seen_at_ns = t_ns if now_ns is None else now_ns
        self.seen.add(key)
        return began

    def gone(self, gen: int, n: int) -> bool:
        """Return whether a series last seen in publish ``gen`` missed the last ``n``."""
        return self.gen - gen >= n

    def silent(self, now_ns: int, n: int, period_ns: int = 0) -> bool:
        """Return whether nothing came for ``n`` periods (its own measured one, else
        ``period_ns``; never while neither is known)."""
        period = self.period_ns or period_ns
        return bool(period and self.seen_at_ns is not None
                    and now_ns - self.seen_at_ns > n * period)

    def forget(self) -> None:
        """Start counting afresh (its series were dropped)."""
        self.seen = set()
        self.start_ns = self.seen_at_ns = None

    def copy(self) -> Publishes:
        """Return an independent copy."""
        return Publishes(self.gen, self.start_ns, self.period_ns, self.seen_at_ns,
                         set(self.seen))
