"""The dashboard's data: every chart's series, one point per publish interval.

A ``Dataset`` takes records (a recording's, or the live agent's as they come), groups them
by publish interval (``consume.intervals``) and keeps, per interval, each chart's values
(``pages``): gauges as published, counters as rates per second (``intervals.Rates``),
histograms as the percentiles of the interval's buckets merged over their labels. Pure:
no I/O, so the tests feed it records and compare with the recording.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import numpy as np

from ...metrics import h2
from ...metrics.family import Family, Kind
from ..intervals import Interval, Intervals, Rates
from ..records import Record
from .pages import BANDS, PAGES, SUMMED_LABEL, TOP, Chart, Page

#: Label series kept per chart: a family with more (thousands of short-lived processes)
#: keeps the first seen, so memory stays bounded.
MAX_SERIES = 256
#: Points a chart is sent at most: a longer range is thinned to every n-th interval.
MAX_POINTS = 3000


_SUMMED, _BY_LABEL, _BANDS = range(3)


@dataclass(frozen=True)
class _Plan:
    """What one event's record adds to the charts, worked out once per event."""

    family: Family
    #: (metric, is a counter) of each scalar.
    scalars: tuple[tuple[str, bool], ...]
    #: (chart id, how: _SUMMED/_BY_LABEL/_BANDS, its metrics' names).
    charts: tuple[tuple[str, int, tuple[str, ...]], ...]


@cache
def _plans() -> dict[str, _Plan]:
    charts: dict[str, list[Chart]] = {}
    for p in PAGES:
        for c in p.charts:
            charts.setdefault(c.family.event, []).append(c)
    return {e: _Plan(cs[0].family,
                     tuple((m.name, m.kind is Kind.COUNTER) for m in cs[0].family.scalars),
                     tuple((c.id, _BANDS if c.bands else _BY_LABEL if c.by_label else _SUMMED,
                            tuple(m.name for m in c.metrics)) for c in cs))
            for e, cs in charts.items()}


def series_name(family: Family, fields: dict[str, object]) -> str:
    """Return the name of a record's series in a labelled chart: its first label's value,
    with the next label's when the first is a number (a pid and its command)."""
    labels = family.labels
    first = fields.get(labels[0].name)
    if isinstance(first, int) and len(labels) > 1:
        return f"{first} {fields.get(labels[1].name)}"
    return str(first)


@dataclass
class Span:
    """A range of a dataset: offsets in seconds from its first interval (negative: from
    its last), None for either end."""

    start: float | None = None
    end: float | None = None

    def indices(self, times: list[int]) -> tuple[int, int]:
        """Return the [lo, hi) indices of ``times`` (ns) inside the span."""
        if not times:
            return 0, 0
        first, last = times[0], times[-1]

        def at(off: float | None, default: int) -> int:
            if off is None:
                return default
            return (last if off < 0 else first) + int(off * 1e9)

        lo = bisect.bisect_left(times, at(self.start, first))
        hi = bisect.bisect_right(times, at(self.end, last))
        return lo, hi


class Dataset:
    """Each chart's series over the intervals seen, for one source.

    ``keep_ns``: drop intervals older than this behind the newest (live following);
    0 keeps everything (a recording)."""

    def __init__(self, name: str, wall_offset_ns: int = 0, keep_ns: int = 0) -> None:
        self.name = name
        self.wall_offset_ns = wall_offset_ns
        self.keep_ns = keep_ns
        self.times: list[int] = []  # each interval's end, CLOCK_MONOTONIC ns
        self.series: dict[str, dict[str, list[float | None]]] = {}
        self.records = 0
        self.events: set[str] = set()
        #: Guards the lists: a live dataset grows in one thread while pages read it.
        self.lock = threading.Lock()
        self._intervals = Intervals()
        self._rates = Rates()

    def feed(self, records: Iterable[Record]) -> int:
        """Take records in time order; return how many intervals they closed."""
        return self._add_all(self._intervals.feed(records))

    def flush(self) -> int:
        """Close the open interval (the recording ended); return how many closed."""
        return self._add_all(self._intervals.flush())

    def _add_all(self, closed: list[Interval]) -> int:
        for iv in closed:
            self._add(iv.end_ns, iv.records)
        return len(closed)

    def drop_open(self) -> None:
        """Forget the open interval's records (following stopped part-way through it)."""
        self._intervals = Intervals()

    def _row(self, records: list[Record]) -> dict[str, dict[str, float | None]]:
        """Return each chart's values over one interval's records."""
        plans = _plans()
        rate = self._rates.rate
        row: dict[str, dict[str, float | None]] = {}
        hists: dict[str, np.ndarray] = {}
        for r in records:
            plan = plans.get(r.event)
            if plan is None:
                continue
            self.events.add(r.event)
            family = plan.family
            f = r.fields
            ident = f.get(family.labels[0].name) if family.labels else None
            values: dict[str, float | None] = {}
            for name, counter in plan.scalars:
                v = f.get(name)
                if isinstance(v, int):
                    values[name] = rate((r.event, ident, name), v, r.time_ns) if counter \
                        else float(v)
            label = None
            for cid, how, metrics in plan.charts:
                cells = row.get(cid)
                if cells is None:
                    cells = row[cid] = {}
                if how == _SUMMED:
                    for m in metrics:
                        _add(cells, m, values.get(m))
                elif how == _BY_LABEL:
                    if label is None:
                        label = series_name(family, f)
                    _add(cells, label, values.get(metrics[0]))
                elif (h := r.histogram()) is not None:
                    acc = hists.get(cid)
                    hists[cid] = h.counts if acc is None else acc + h.counts
        for cid, counts in hists.items():
            if counts.sum():
                ps = h2.percentiles(counts, [q for _n, q in BANDS])
                row[cid] = {n: float(p) for (n, _q), p in zip(BANDS, ps, strict=True)}
        return row

    def _add(self, end_ns: int, records: list[Record]) -> None:
        row = self._row(records)
        self.records += len(records)
        with self.lock:
            n = len(self.times)
            self.times.append(end_ns)
            for cid, cells in row.items():
                cols = self.series.setdefault(cid, {})
                for name, v in cells.items():
                    col = cols.get(name)
                    if col is None:
                        if len(cols) >= MAX_SERIES:
                            continue
                        col = cols[name] = [None] * n
                    col.append(v)
            for cols in self.series.values():
                for col in cols.values():
                    if len(col) == n:
                        col.append(None)
            self._trim()

    def _trim(self) -> None:
        """Drop what is older than ``keep_ns``, in steps of a tenth (not every interval)."""
        if not self.keep_ns or not self.times:
            return
        cut = self.times[-1] - self.keep_ns
        if self.times[0] >= cut - self.keep_ns // 10:
            return
        k = bisect.bisect_left(self.times, cut)
        del self.times[:k]
        for cols in self.series.values():
            for name in list(cols):
                del cols[name][:k]
                if all(v is None for v in cols[name]):
                    del cols[name]

    def span(self) -> tuple[float, float] | None:
        """Return the first and last interval's wall-clock times (s), or None if empty."""
        with self.lock:
            if not self.times:
                return None
            return self._wall(self.times[0]), self._wall(self.times[-1])

    def _wall(self, t_ns: int) -> float:
        return (t_ns + self.wall_offset_ns) / 1e9

    def present(self, page: Page) -> bool:
        """Return whether the dataset holds any of ``page``'s events."""
        return any(e in self.events for e in page.events)

    def page_data(self, page: Page, span: Span | None = None,
                  since_ns: int | None = None) -> dict[str, object]:
        """Return ``page``'s charts over ``span`` (or after ``since_ns``, a time the page
        already has): x as wall-clock seconds, each chart's series names and values."""
        with self.lock:
            times = self.times
            if since_ns is not None:
                lo, hi = bisect.bisect_right(times, since_ns), len(times)
            else:
                lo, hi = (span or Span()).indices(times)
            step = max(1, math.ceil((hi - lo) / MAX_POINTS))
            idx = range(lo, hi, step)
            charts = [self._chart(c, idx) for c in page.charts]
            return {
                "dataset": self.name,
                "t_ns": [times[i] for i in idx],
                "x": [self._wall(times[i]) for i in idx],
                "charts": [c for c in charts if c is not None],
            }

    def _chart(self, c: Chart, idx: range) -> dict[str, object] | None:
        cols = self.series.get(c.id)
        if not cols:
            return None
        if c.bands:
            names = [n for n, _q in BANDS]
        elif c.by_label:
            names = sorted(cols, key=lambda n: -_mean(cols[n], idx))[:TOP]
        else:
            names = [m.name for m in c.metrics if m.name in cols]
        data = [[cols[n][i] for i in idx] if n in cols else [None] * len(idx) for n in names]
        summed = bool(c.family.labels) and not c.by_label and not c.bands
        return {"id": c.id, "title": c.title, "unit": c.unit, "bands": c.bands,
                "by_label": c.by_label, "summed": summed and c.family.labels[0].name
                == SUMMED_LABEL, "series": names, "data": data}


def _add(cells: dict[str, float | None], name: str, v: float | None) -> None:
    """Sum ``v`` into a cell (over CPUs, or label values that share a name)."""
    if v is None:
        cells.setdefault(name, None)
        return
    prev = cells.get(name)
    cells[name] = v if prev is None else prev + v


def _mean(col: list[float | None], idx: range) -> float:
    vals = [v for i in idx if (v := col[i]) is not None]
    return sum(vals) / len(vals) if vals else -math.inf
