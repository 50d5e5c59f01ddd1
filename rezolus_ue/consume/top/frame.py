"""The pure model behind ``rezolus-ue top``: records in, one frame of every panel's rows out.

The agent writes every record of a publish tick in one burst and ends it with its tick
record; ``intervals.Intervals`` says where each tick ends (inferring it where a stream has
no tick records, or the caller says the data went quiet: ``flush``). When a tick ends at
least one display interval after the last frame (``intervals.INTERVAL_SLACK``), the model
*commits* a frame at once: rates from consecutive cumulative counters per series (a
counter that went down was reset: that step gives no rate), the interval's maximum from
``_dist`` events, the histograms' buckets summed over the frame and the latest values,
handed to each panel's ``derive`` (``Frame``); ``view`` holds what they derived. No I/O,
no clocks: the records' own timestamps are the only time there is.

The events are the panels' ``Read`` declarations. A series is one label set of an event
(or what ``Read.identity`` names: a process is its pid and start time, whatever its state
or name). A series is gone when its event published twice without it, counted in the
event's own publishes (``intervals.Publishes``: the intervals it had records in), never
in frames: a slow agent (a tick spread over seconds of BPF loading under emulation) may
commit more frames than it publishes, and counting frames dropped every row between two of
its records, so no row ever had a rate. An event that stopped altogether (its sampler
failed) loses its rows after three of its publish periods of data time. An event whose
label sets change every publish (``Read.latest``: the busiest processes) shows only the
latest publish's series.

An application's event (``Feed``: OpenTelemetry's ``otlp_metrics``) is no family: its
records go as they come to the accumulator its panel keeps, outside the batches (they
follow the applications' clocks, not the agent's), and frames carry it to ``derive``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ...metrics.family import Family, Kind
from ..intervals import EVENT as TICK
from ..intervals import INTERVAL_SLACK, Interval, Intervals, Publishes, deltas
from ..records import Record

if TYPE_CHECKING:
    from .layout import Panel


@dataclass(frozen=True)
class Read:
    """An event a panel reads, and how the model keeps its series."""

    family: Family
    #: Its ``_dist`` event too: the interval's maximum of each oversampled metric.
    dist: bool = False
    #: The fields that tell its series apart (default: its labels).
    identity: tuple[str, ...] = ()
    #: Its label sets change every publish: publishes are counted by batch, a frame holds
    #: the latest publish's series only, and the others are kept (for their counters) for
    #: ``LATEST_KEEP`` publishes.
    latest: bool = False

    @property
    def events(self) -> tuple[str, ...]:
        """Return the events it subscribes to."""
        d = self.family.dist_schema
        return (self.family.event, d.name) if self.dist and d is not None else (
            self.family.event,)


class Accumulator(Protocol):
    """What a ``Feed``'s panel keeps of its records."""

    def add(self, record: Record) -> None:
        """Take one record."""
        ...


@dataclass(frozen=True)
class Feed:
    """An application's event a panel reads: each record goes to the panel's own
    ``Accumulator`` (``new()`` makes one per model), which ``Frame.feeds`` hands to its
    ``derive``. ``available()``: whether top can read it here (its decoder installed)."""

    event: str
    new: Callable[[], Accumulator]
    available: Callable[[], bool] = lambda: True


#: Publishes a ``Read.latest`` series is kept without a record: it may come back to the
#: busiest list, and its counters give a rate over the time since it left.
LATEST_KEEP = 60

@dataclass(slots=True)
class Series:
    """One series of a counter/gauge event: its latest record and its counters' rates."""

    t_ns: int
    values: dict[str, object]  # the latest record's fields
    counts: tuple  # its counters' values, in ``names`` order
    names: tuple[str, ...]  # its event's counters
    gen: int  # its event's publish it was last seen in
    acc_dt: int = 0
    acc: tuple = ()  # the counters' steps summed since the last frame
    #: A ``Read.latest`` event's counters' steps over the last frame with steps, and
    #: the time they took: its ``rates`` until read.
    steps: tuple | None = None
    steps_dt: int = 0
    _rates: dict[str, float] | None = None

    @property
    def rates(self) -> dict[str, float] | None:
        """Return the counters' rates per second over the last frame with steps (None
        before two records); a ``Read.latest`` event's are made when first read."""
        if self._rates is None and self.steps is not None:
            k = 1e9 / self.steps_dt
            self._rates = dict(zip(self.names, map(k.__mul__, self.steps), strict=True))
        return self._rates

    def int(self, name: str) -> int:
        """Return field ``name`` of the latest record as an int (0 if it is not one)."""
        v = self.values.get(name, 0)
        return v if isinstance(v, int) else 0

    def text(self, name: str) -> str:
        """Return field ``name`` of the latest record as text."""
        return str(self.values.get(name, ""))

    def rate(self, *names: str) -> float | None:
        """Return the sum of the counters' rates per second, None before two records."""
        rates = self.rates
        if rates is None:
            return None
        if len(names) == 1:
            return rates.get(names[0], 0.0)
        return sum(rates.get(n, 0.0) for n in names)


def _getter(names: tuple[str, ...], default: object) -> Callable[[dict], tuple]:
    """Return a function of a record's fields returning the ``names`` fields as a tuple,
    ``default`` for a field it lacks (a decoded record has all; a hand-made one may not).

    Top ingests every record of a 500-cgroup host each second: ``itemgetter`` takes the
    fields in one C call where a generator of ``dict.get`` took a Python frame per field.
    """
    if not names:
        return lambda f: ()
    get = operator.itemgetter(*names)
    one = len(names) == 1

    def values(f: dict) -> tuple:
        try:
            v = get(f)
        except KeyError:
            return tuple(f.get(n, default) for n in names)
        return (v,) if one else v

    return values


@dataclass(frozen=True, slots=True)
class _Meta:
    counters: tuple[str, ...]
    histogram: bool
    base: str | None  # for a _dist event: its family's event
    latest: bool
    labels: Callable[[dict], tuple]  # the label values (histograms, _dist)
    identity: Callable[[dict], tuple]  # what tells its series apart
    counter_values: Callable[[dict], tuple]


def _meta(reads: Iterable[Read]) -> dict[str, _Meta]:
    out: dict[str, _Meta] = {}
    ways: dict[str, tuple] = {}
    for r in reads:
        f = r.family
        if ways.setdefault(f.event, (r.latest, r.identity)) != (r.latest, r.identity):
            raise ValueError(f"{f.event} is read two ways by top's panels")
        labels = tuple(lb.name for lb in f.labels)
        counters = tuple(m.name for m in f.scalars if m.kind is Kind.COUNTER)
        label_values = _getter(labels, None)
        identity = _getter(r.identity, None) if r.identity else label_values
        out[f.event] = _Meta(counters, f.histogram is not None, None, r.latest,
                             label_values, identity, _getter(counters, 0))
        if r.dist and f.dist_schema is not None:
            out[f.dist_schema.name] = _Meta((), False, f.event, False, label_values,
                                            label_values, _getter((), 0))
    return out


@dataclass(slots=True)
class Frame:
    """What a frame's panels derive their rows from (``Panel.derive``)."""

    t_ns: int
    dt_s: float | None  # data time since the previous frame (None: the first)
    #: Each event's current series: (identity, series), in first-seen order.
    series: dict[str, list[tuple[tuple, Series]]]
    #: The interval's maximum of each (event, labels, metric) of a ``_dist`` event.
    dist_max: dict[tuple, int]
    #: Each (event, labels) histogram's buckets summed over the frame.
    hists: dict[tuple, np.ndarray]
    #: Each event's publish period as measured from its records (0: not yet).
    periods: dict[str, int]
    #: Each ``Feed`` event's accumulator (the model's own: read it, never keep it).
    feeds: Mapping[str, Accumulator] = field(default_factory=dict)

    def of(self, event: str) -> list[tuple[tuple, Series]]:
        """Return the current series of ``event``."""
        return self.series.get(event, [])


@dataclass(frozen=True, slots=True)
class View:
    """One frame: every panel's rows, by panel name. ``frame`` 0 is the empty start."""

    frame: int = 0
    t_ns: int = 0
    dt_s: float | None = None  # data time since the previous frame (None: first frame)
    events_per_s: float | None = None
    records: int = 0  # records received in total
    resets: int = 0  # counter resets detected in total
    rows: Mapping[str, object] = field(default_factory=dict)


class Model:
    """Ingests records; commits a ``View`` of ``panels``' rows per display interval of data
    time."""

    def __init__(self, panels: Sequence[Panel], interval_s: float = 1.0, host: str = "",
                 kernel: str = "") -> None:
        self.panels = tuple(panels)
        self.interval_ns = int(interval_s * 1e9)
        self.host = host
        self.kernel = kernel
        #: Records the kernel dropped (the subscription's count, set by the caller).
        self.lost = 0
        #: While True (display paused) frames are not committed; data keeps accumulating.
        self.hold = False
        self.view = View()
        #: Set by the caller: the events subscribed so far (shown while waiting); () while
        #: no agent has registered them, None before the first try.
        self.subscribed: tuple[str, ...] | None = None
        #: Set by the subscription: why nothing (or not everything) comes, or None.
        self.waiting: str | None = None
        #: Set by the caller: the 1, 5 and 15 minute load averages (/proc/loadavg).
        self.loadavg: tuple[float, float, float] | None = None
        self._meta = _meta(r for p in self.panels for r in p.reads)
        self._feeds = {fd.event: fd.new() for p in self.panels for fd in p.feeds}
        self._latest = {e for e, m in self._meta.items() if m.latest}
        self._series: dict[tuple, Series] = {}
        self._pubs: dict[str, Publishes] = {}
        self._dist_max: dict[tuple, int] = {}
        self._hists: dict[tuple, np.ndarray] = {}
        self._intervals = Intervals()
        self._frame_t: int | None = None
        self._frame_records = 0
        self._records = 0
        self._resets = 0

    @property
    def frames(self) -> int:
        """Return how many frames have been committed."""
        return self.view.frame

    @property
    def batch_open(self) -> bool:
        """Return whether records arrived since the last publish tick ended."""
        return self._intervals.pending

    def ingest(self, records: Iterable[Record]) -> None:
        """Add records (in time order), committing frames as publish ticks end."""
        feeds = self._feeds
        ticked = []
        for r in records:
            feed = feeds.get(r.event)
            if feed is not None:  # the applications' clocks, not the agent's ticks
                feed.add(r)
                self._records += 1
                self._frame_records += 1
            elif r.event in self._meta or r.event == TICK:
                ticked.append(r)
        for iv in self._intervals.feed(ticked):
            self._interval(iv)

    def flush(self) -> None:
        """End the open tick: the data went quiet, the agent's tick is complete."""
        for iv in self._intervals.flush():
            self._interval(iv)

    # --- ingest -------------------------------------------------------------------------

    def _interval(self, iv: Interval) -> None:
        """Take one publish tick's records, then commit a frame if one is due."""
        meta_of = self._meta.__getitem__
        pubs = self._pubs
        gens: dict[str, int] = {}  # each event's publish number in this tick
        self._records += len(iv.records)
        self._frame_records += len(iv.records)
        for r in iv.records:
            meta = meta_of(r.event)
            f = r.fields
            if meta.base is not None:
                self._add_dist(meta.base, meta.labels(f), f)
                continue
            if meta.histogram:
                self._add_hist(r, meta.labels(f))
                continue
            event = r.event
            gen = gens.get(event)
            if gen is None:
                pub = pubs.get(event)
                if pub is None:
                    pub = pubs[event] = Publishes()
                gen = gens[event] = pub.publish(r.time_ns)
            self._add_series(r, (event, meta.identity(f)), meta, gen)
        t = iv.start_ns
        if iv.records:
            first = self._frame_t is None
            if first or (not self.hold
                         and t - self._frame_t >= self.interval_ns * INTERVAL_SLACK):
                self._commit(t)

    def _add_series(self, r: Record, key: tuple, meta: _Meta, gen: int) -> None:
        s = self._series.get(key)
        counts = meta.counter_values(r.fields)
        if s is None:
            self._series[key] = Series(r.time_ns, r.fields, counts, meta.counters, gen)
            return
        dt = r.time_ns - s.t_ns
        if dt > 0:
            steps = deltas(counts, s.counts)
            if steps is None:  # the source restarted: no rate from this step
                self._resets += 1
            else:
                s.acc_dt += dt
                s.acc = tuple(map(operator.add, s.acc, steps)) if s.acc else steps
        s.t_ns, s.values, s.counts, s.gen = r.time_ns, r.fields, counts, gen

    def _add_dist(self, base: str, labels: tuple, f: dict[str, object]) -> None:
        key = (base, labels, f.get("metric"))
        v = int(f.get("max", 0))  # type: ignore[call-overload]
        if v > self._dist_max.get(key, -1):
            self._dist_max[key] = v

    def _add_hist(self, r: Record, labels: tuple) -> None:
        h = r.histogram()
        if h is None:
            return
        counts = h.counts
        key = (r.event, labels)
        acc = self._hists.get(key)
        # Histogram events carry the interval's buckets (not cumulative): sum them.
        self._hists[key] = counts if acc is None else acc + counts

    # --- frames -------------------------------------------------------------------------

    def _commit(self, t: int) -> None:
        frame = self.view.frame + 1
        dt_s = (t - self._frame_t) / 1e9 if self._frame_t is not None else None
        by_event: dict[str, list[tuple[tuple, Series]]] = {}
        gone = []
        pubs = self._pubs
        interval = self.interval_ns
        latest_events = self._latest
        for key, s in self._series.items():
            event, ident = key
            pub = pubs[event]
            latest = event in latest_events
            # This loop visits every CPU, cgroup and process of the host: inlined.
            if latest:
                if pub.gen - s.gen > LATEST_KEEP:
                    gone.append(key)
                    continue
            elif pub.gen - s.gen >= 2:
                gone.append(key)  # the device/cgroup went away
                continue
            if pub.period_ns and t - s.t_ns > 3 * max(pub.period_ns, interval):
                gone.append(key)  # its sampler stopped
                continue
            if s.acc_dt > 0:
                if latest:  # made when read: a screen shows a few of its series
                    s.steps, s.steps_dt, s._rates = s.acc, s.acc_dt, None
                else:
                    s._rates = dict(zip(s.names, map((1e9 / s.acc_dt).__mul__, s.acc),
                                        strict=True))
                s.acc_dt = 0
                s.acc = ()
            if latest and s.gen != pub.gen:
                continue  # not in the latest publish: kept for its counters, not shown
            rows = by_event.get(event)
            if rows is None:
                rows = by_event[event] = []
            rows.append((ident, s))
        for key in gone:
            del self._series[key]
        data = Frame(t, dt_s, by_event, self._dist_max, self._hists,
                     {e: p.period_ns for e, p in pubs.items()}, self._feeds)
        self.view = View(
            frame=frame, t_ns=t, dt_s=dt_s,
            events_per_s=self._frame_records / dt_s if dt_s else None,
            records=self._records, resets=self._resets,
            rows={p.name: p.derive(data) for p in self.panels})
        self._frame_t = t
        self._frame_records = 0
        self._dist_max = {}
        self._hists = {}
