"""Prometheus exposition of rezolus-ue records: names, the latest-value state, the text.

Pure (no clock, no I/O): ``State`` takes records in, ``exposition(state)`` returns text
exposition format 0.0.4; ``exporter`` serves it over HTTP.

Naming, derived from ``rezolus_ue.metrics.catalog`` (``mapping_table()`` lists every name;
docs/prometheus.md embeds it):

* A metric ``m`` of the family published as event ``rezolus_<f>`` is named
  ``rezolus_<f>_<m>``: the event name already carries the ``rezolus_`` namespace once.
  Where ``<f>`` already ends with ``<m>`` (unit aside), ``<m>`` is not repeated:
  ``rezolus_cpu_frequency.frequency_hz`` is ``rezolus_cpu_frequency_hertz``.
* Units become Prometheus base units, as floats, by the metric's declared unit:
  ``_ns`` -> ``_seconds`` (/1e9), ``_us`` -> ``_seconds`` (/1e6), ``_ppm`` -> ``_ratio``
  (/1e6), ``_milli`` -> no suffix (/1e3, e.g. ``ipc``), ``_hz`` -> ``_hertz``. Other units
  (bytes, packets, ...) stay as published, integers.
* counter -> ``<name>_total``, TYPE counter (e.g.
  ``rezolus_cpu_usage_user_seconds_total{cpu="0"}``); gauge -> ``<name>``, TYPE gauge.
* Labels are the family's labels under their own names (cpu, device, interface, resource,
  sampler, cgroup); a selection's (``SELECTIONS``: the busiest processes) are fewer.
* ``<event>_dist`` records (oversampled metrics) -> TYPE gauge with a ``quantile`` label
  (0.5, 0.9, 0.99, 1 = max over the publish interval's samples): for a gauge
  ``<name>_dist`` (levels, e.g. ``rezolus_cpu_usage_busy_ratio_dist{cpu="0",quantile="0.99"}``),
  for a counter ``<name>_per_second`` (per-second rates between samples). They get names of
  their own so that ``sum(rezolus_memory_free_bytes)`` never adds quantiles to levels.
* A histogram -> TYPE summary ``<name>{quantile="0.5"|"0.9"|"0.99"|"0.999"|"1"}`` (the
  latest interval's percentiles, NaN when it recorded nothing) and ``<name>_count`` (values
  recorded since the exporter started). No ``_sum``: H2 buckets do not keep one. With
  ``native_buckets``, also a classic TYPE histogram ``<name>_histogram_bucket{le=...}``
  and ``_count``: the interval deltas that records carry, accumulated since the exporter
  started, cumulated over the H2 bucket upper edges from just below the lowest non-empty
  bucket to the highest, then ``+Inf``.
* ``rezolus_exporter_*``: the exporter's own records, skipped and lost records.
* A name that would collide with another family's is renamed in ``RENAMES`` (a test
  checks that no name collides and that every entry is still needed).

Staleness: a label set not seen for ``stale`` publish intervals of its event is dropped;
an event with no record for ``stale`` intervals (the agent stopped, a sampler died) drops
all its label sets. Publish intervals are counted from the records: a key seen again
starts the event's next publish. A selection's label set goes with the first interval
that does not name it (its ``closed_by`` event ends each interval).
"""

from __future__ import annotations

import copy
import functools
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..metrics import catalog, h2
from ..metrics.family import DIST, HIST_QUANTILES, Family, Kind, Metric
from ..samplers.processes import PROCESS, PROCESSES
from .records import Record

DEFAULT_STALE = 3

# --- naming: derived from the catalog ------------------------------------------------------

#: Declared unit -> (name suffix it replaces, new suffix, divisor to the base unit).
UNIT_RULES: dict[str, tuple[str, str, int]] = {
    "ns": ("_ns", "_seconds", 10**9),
    "us": ("_us", "_seconds", 10**6),
    "ppm": ("_ppm", "_ratio", 10**6),
    "1/1000": ("_milli", "", 10**3),
    "Hz": ("_hz", "_hertz", 1),
}
#: (event, metric) -> the metric name to use instead, where ``<event>_<metric>`` would
#: collide with another family's name. ``rezolus_agent.sampler_errors`` meets
#: ``rezolus_agent_sampler.errors``; renaming it in the catalog would make this empty (a
#: test checks every entry is still needed and that no name collides).
RENAMES: dict[tuple[str, str], str] = {("rezolus_agent", "sampler_errors"): "refresh_errors"}
_BASE_UNIT = {"_seconds": "seconds", "_ratio": "ratio (1 = 100%)", "": "a plain number",
              "_hertz": "hertz"}


@dataclass(frozen=True)
class Selection:
    """A family whose records each interval name a selection (the busiest processes), not
    every label set there is: its series are labelled by ``labels`` only, and go as soon
    as a record of ``closed_by`` (published once per interval beside it) ends an interval
    they are not in."""

    labels: tuple[str, ...]  # fields that label a series: its identity, few values each
    closed_by: str  # the event whose records end each interval


#: The selection families, by event. ``rezolus_process`` is labelled by pid, comm and
#: start_ns: pid and start_ns are a process's identity, so a reused pid is a new series
#: and never continues the counters of the process that had it. user and cgroup are left
#: out, and state (which changes from one interval to the next) would split every series.
SELECTIONS: dict[str, Selection] = {
    PROCESS.event: Selection(("pid", "comm", "start_ns"), PROCESSES.event),
}


def series_labels(family: Family) -> tuple[str, ...]:
    """Return the fields that label the family's series: its labels, or a selection's."""
    sel = SELECTIONS.get(family.event)
    return sel.labels if sel is not None else tuple(lb.name for lb in family.labels)


@dataclass(frozen=True)
class PromMetric:
    """One Prometheus metric family and where its values come from."""

    name: str
    type: str  # counter | gauge | summary | histogram
    help: str
    event: str  # source event
    source: str  # source field (or the _dist ``metric``)
    divisor: int  # exposed value = raw / divisor
    labels: tuple[str, ...]  # label names, without quantile/le


def base_name(family: Family, metric: Metric) -> tuple[str, int, str]:
    """Return (Prometheus name stem, divisor, unit as exposed) of a catalog metric."""
    name = RENAMES.get((family.event, metric.name), metric.name)
    divisor, unit, suffix = 1, metric.unit, ""
    rule = UNIT_RULES.get(metric.unit)
    if rule and name.endswith(rule[0]):
        name, suffix, divisor = name[: -len(rule[0])], rule[1], rule[2]
        unit = _BASE_UNIT[suffix]
    if family.event.endswith(f"_{name}"):
        # No stutter: rezolus_scheduler_running.running_ns is rezolus_scheduler_running_seconds.
        return f"{family.event}{suffix}", divisor, unit
    return f"{family.event}_{name}{suffix}", divisor, unit


def _conv(unit: str, divisor: int) -> str:
    if divisor == 1:
        return ""
    power = round(math.log10(divisor))
    return f" ({unit} / 1e{power})" if 10**power == divisor else f" ({unit} / {divisor})"


def _help(description: str, divisor: int) -> str:
    # A catalog description may spell out the raw unit's scale, wrong once converted.
    return description.replace(" (1000000 = 100%)", "") if divisor != 1 else description


def family_metrics(family: Family) -> list[PromMetric]:
    """Return the Prometheus metrics of one family, in exposition order."""
    labels = series_labels(family)
    out = []
    for m in family.scalars:
        stem, div, unit = base_name(family, m)
        src = f"{family.event}.{m.name}"
        conv, desc = _conv(m.unit, div), _help(m.description, div)
        if m.kind is Kind.COUNTER:
            out.append(PromMetric(f"{stem}_total", "counter",
                                  f"{desc}; {unit}, from {src}{conv}",
                                  family.event, m.name, div, labels))
            if m.dist:
                out.append(PromMetric(
                    f"{stem}_per_second", "gauge",
                    f"{desc}: per-second rate, quantiles over the publish interval"
                    f" of rates between samples; {unit}/s, from {family.event}_dist"
                    f" metric={m.name}{conv}", f"{family.event}_dist", m.name, div, labels))
        else:
            out.append(PromMetric(stem, "gauge", f"{desc}; {unit}, from {src}{conv}",
                                  family.event, m.name, div, labels))
            if m.dist:
                out.append(PromMetric(
                    f"{stem}_dist", "gauge",
                    f"{desc}: quantiles over the publish interval of the levels"
                    f" sampled every sample_interval; {unit}, from {family.event}_dist"
                    f" metric={m.name}{conv}", f"{family.event}_dist", m.name, div, labels))
    h = family.histogram
    if h is not None:
        stem, div, unit = base_name(family, h)
        conv = _conv(h.unit, div)
        out.append(PromMetric(
            stem, "summary", f"{h.description}: quantiles over the latest publish interval,"
            f" count since the exporter started; {unit}, from {family.event}{conv}",
            family.event, h.name, div, labels))
        out.append(PromMetric(
            f"{stem}_histogram", "histogram", f"{h.description}: H2 buckets accumulated since"
            f" the exporter started; {unit}, from {family.event}{conv}",
            family.event, h.name, div, labels))
    return out


#: The exporter's own metrics.
SELF_METRICS = (
    PromMetric("rezolus_exporter_records_total", "counter",
               "records the exporter ingested", "", "records", 1, ()),
    PromMetric("rezolus_exporter_event_records_total", "counter",
               "records the exporter ingested, by event", "", "event_records", 1, ("event",)),
    PromMetric("rezolus_exporter_skipped_records_total", "counter",
               "records the exporter could not map (unknown event or metric)", "", "skipped",
               1, ()),
    PromMetric("rezolus_exporter_lost_records_total", "counter",
               "records the kernel dropped before the exporter read them", "", "lost", 1, ()),
)


def all_metrics(families: Sequence[Family] = catalog.FAMILIES) -> list[PromMetric]:
    """Return every Prometheus metric the exporter can expose, in exposition order."""
    return [pm for f in families for pm in family_metrics(f)] + list(SELF_METRICS)


def mapping_table(families: Sequence[Family] = catalog.FAMILIES) -> str:
    """Return the markdown table of every exposed metric (embedded in docs/prometheus.md)."""
    lines = ["| metric | type | labels | source | help |", "|---|---|---|---|---|"]
    for pm in all_metrics(families):
        labels = list(pm.labels) + {"summary": ["quantile"], "histogram": ["le"]}.get(
            pm.type, ["quantile"] if pm.event.endswith("_dist") else [])
        src = (f"`{pm.event}` metric=`{pm.source}`" if pm.event.endswith("_dist")
               else f"`{pm.event}.{pm.source}`" if pm.event else "exporter")
        note = " (with `--native-buckets`)" if pm.type == "histogram" else ""
        lines.append(f"| `{pm.name}` | {pm.type}{note} | {', '.join(labels) or '-'} | {src} |"
                     f" {pm.help.rsplit('; ', 1)[0].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


# --- state: pure --------------------------------------------------------------------------


class _Row(NamedTuple):
    """The latest values of one label set of one event; never mutated (snapshots share it)."""

    gen: int  # the event's publish generation it was last seen in
    values: tuple[int, ...]  # scalars in family order; for _dist: p50, p90, p99, max
    quantiles: tuple[int, ...] = ()  # histogram: the latest interval's p50..max
    interval_count: int = 0  # histogram: values recorded in the latest interval
    total: int = 0  # histogram: values recorded since the exporter started
    buckets: np.ndarray | None = None  # histogram: cumulative bucket counts
    t_ns: int = 0  # selection: when its record was written


def _getter(names: Sequence[str]) -> Callable[[dict], tuple]:
    """Return a function giving ``names``' values of a fields dict, always as a tuple."""
    if not names:
        return lambda _d: ()
    if len(names) == 1:
        (name,) = names
        return lambda d: (d[name],)
    return operator.itemgetter(*names)


def _drop(rows: dict[tuple, _Row], gone: Callable[[_Row], bool]) -> None:
    """Drop the series of ``rows`` whose row is ``gone``."""
    for k in [k for k, row in rows.items() if gone(row)]:
        del rows[k]


@dataclass
class _Event:
    """One event's decoding plan, and its publish tracking: keys seen in the current
    publish, and when."""

    family: Family
    dist: bool
    metrics: dict[str, int]  # _dist: metric name -> scalar index
    gen: int = 0
    seen: set = field(default_factory=set)
    gen_start_ns: int | None = None
    interval_ns: int = 0
    seen_at_ns: int | None = None
    #: The selection event whose intervals this event's records end (``SELECTIONS``).
    closes: str | None = None
    #: A selection's: when the latest record of its ``closed_by`` event was written.
    closed_ns: int | None = None

    def __post_init__(self) -> None:
        f = self.family
        self.labels_of = _getter(series_labels(f))
        self.values_of = _getter([s for s, _q in DIST] if self.dist
                                 else [m.name for m in f.scalars])
        self.quantiles_of = _getter([s for s, _q in HIST_QUANTILES])
        self.hist = f.histogram is not None and not self.dist


class State:
    """The latest value of every series, from ingested records; pure (no clock, no I/O).

    ``ingest`` takes records (sorted by time, as ``Subscription.poll`` returns them);
    ``prune(now_ns)`` drops events silent for ``stale`` publish intervals; ``copy`` returns
    a snapshot to render while ingest goes on.
    """

    def __init__(self, stale: int = DEFAULT_STALE,
                 families: Sequence[Family] = catalog.FAMILIES) -> None:
        if stale < 1:
            raise ValueError("stale must be at least 1 publish interval")
        self.stale = stale
        self.families = tuple(families)
        self.records = 0
        self.event_records: dict[str, int] = {}
        self.skipped = 0
        self.lost = 0
        self._events: dict[str, _Event] = {}
        for f in self.families:
            self._events[f.event] = _Event(f, False, {})
            if f.dist_schema is not None:
                self._events[f.dist_schema.name] = _Event(
                    f, True, {m.name: j for j, m in enumerate(f.scalars) if m.dist})
        for event, sel in SELECTIONS.items():
            if event in self._events and sel.closed_by in self._events:
                self._events[sel.closed_by].closes = event
        self._rows: dict[str, dict[tuple, _Row]] = {e: {} for e in self._events}
        self._interval_ns = 0  # the latest interval measured on any event

    def ingest(self, records: Iterable[Record], now_ns: int | None = None) -> None:
        """Take records in; ``now_ns`` is when they arrived (default: their own time)."""
        counts = self.event_records
        for r in records:
            self.records += 1
            counts[r.event] = counts.get(r.event, 0) + 1
            ev = self._events.get(r.event)
            if ev is None:
                self.skipped += 1
                continue
            try:
                self._ingest(ev, r, r.time_ns if now_ns is None else now_ns)
            except (KeyError, TypeError, ValueError):
                self.skipped += 1  # a record of another layout (agent of another version)

    def _ingest(self, ev: _Event, r: Record, now_ns: int) -> None:
        fields = r.fields
        labels = ev.labels_of(fields)
        rows = self._rows[r.event]
        values = ev.values_of(fields)
        sum(values)  # raises TypeError on a non-number: render must never meet one
        if ev.dist:
            metric = fields["metric"]
            if metric not in ev.metrics:
                raise KeyError(metric)
            key: tuple = (labels, metric)
            self._publish(ev, r.event, key, r.time_ns, now_ns)
            rows[key] = _Row(ev.gen, values)
            return
        if not ev.hist:
            self._publish(ev, r.event, labels, r.time_ns, now_ns)
            rows[labels] = _Row(ev.gen, values, t_ns=r.time_ns)
            if ev.closes is not None:
                self._close(ev.closes, r.time_ns)
            return
        self._publish(ev, r.event, (labels, fields.get("part", 0)), r.time_ns, now_ns)
        data = fields["buckets"]
        if not isinstance(data, bytes | bytearray) or len(data) % h2.SPARSE_ENTRY_SIZE:
            raise ValueError(f"{r.event}: malformed buckets")
        entries = np.frombuffer(data, dtype=h2.SPARSE_DTYPE)
        index = entries["index"].astype(np.intp)
        if len(index) and int(index.max()) >= h2.BUCKETS:
            raise ValueError(f"{r.event}: bucket index out of range")
        prev = rows.get(labels)
        # A new array, never added in place: a snapshot being rendered may hold the old one.
        # Indices are unique within a record, so a plain fancy-index add is exact.
        buckets = h2.new_counts() if prev is None or prev.buckets is None else prev.buckets.copy()
        buckets[index] += entries["count"]
        total = (prev.total if prev else 0) + int(entries["count"].sum())
        rows[labels] = _Row(ev.gen, values, ev.quantiles_of(fields), fields["count"], total,
                            buckets)

    def _publish(self, ev: _Event, event: str, key: tuple, t_ns: int, now_ns: int) -> None:
        """Count publishes: a key seen again starts the event's next one."""
        ev.seen_at_ns = now_ns
        if ev.gen_start_ns is None:
            ev.gen_start_ns = t_ns
        if key in ev.seen:
            ev.gen += 1
            if t_ns > ev.gen_start_ns:
                ev.interval_ns = self._interval_ns = t_ns - ev.gen_start_ns
            ev.gen_start_ns = t_ns
            ev.seen = set()
            gen, stale = ev.gen, self.stale
            _drop(self._rows[event], lambda row: gen - row.gen > stale)
        ev.seen.add(key)

    def _close(self, event: str, t_ns: int) -> None:
        """End an interval of selection ``event`` at ``t_ns``: drop its series not seen
        since halfway from the previous end. Its records come in the same burst as the
        closing record (before or after it, as the sampler writes them) and bursts an
        interval apart, so halfway tells the burst just ended from the one before."""
        ev = self._events[event]
        before, ev.closed_ns = ev.closed_ns, t_ns
        if before is None or t_ns <= before:
            return
        cut = (before + t_ns) // 2
        _drop(self._rows[event], lambda row: row.t_ns < cut)

    def prune(self, now_ns: int) -> int:
        """Drop every series of events with no record for ``stale`` publish intervals;
        return how many were dropped."""
        dropped = 0
        for name, ev in self._events.items():
            interval = ev.interval_ns or self._interval_ns
            if (interval and ev.seen_at_ns is not None
                    and now_ns - ev.seen_at_ns > self.stale * interval):
                dropped += len(self._rows[name])
                self._rows[name].clear()
                ev.seen = set()
                ev.gen_start_ns = ev.seen_at_ns = None
        return dropped

    def rows(self, event: str) -> dict[tuple, _Row]:
        """Return the rows of one event (keys: label tuples; ``_dist``: (labels, metric))."""
        return self._rows[event]

    def series(self) -> int:
        """Return how many label sets are held."""
        return sum(len(r) for r in self._rows.values())

    def series_by_event(self) -> dict[str, int]:
        """Return how many label sets each event has now, for the events with any."""
        return {e: len(r) for e, r in self._rows.items() if r}

    def copy(self) -> State:
        """Return a snapshot: dicts copied, rows shared (they are never mutated)."""
        new = copy.copy(self)
        new.event_records = dict(self.event_records)
        new._rows = {e: dict(r) for e, r in self._rows.items()}
        new._events = {e: copy.copy(ev) for e, ev in self._events.items()}
        for ev in new._events.values():
            ev.seen = set(ev.seen)
        return new


# --- exposition: pure ---------------------------------------------------------------------


def escape_label(value: str) -> str:
    """Return a label value escaped per the text format (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """Return HELP text escaped per the text format (backslash, newline)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _num(raw: int, divisor: int) -> str:
    return str(raw) if divisor == 1 else repr(raw / divisor)


class _Labels:
    """Label strings of one family's label sets, each escaped and joined once per render."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names
        self._inner: dict[tuple, str] = {}

    def _get(self, key: tuple) -> str:
        inner = self._inner.get(key)
        if inner is None:
            inner = self._inner[key] = ",".join(
                f'{n}="{escape_label(str(v))}"' for n, v in zip(self.names, key, strict=True))
        return inner

    def plain(self, key: tuple) -> str:
        """Return ``{a="x",...}`` (empty without labels)."""
        inner = self._get(key)
        return "{" + inner + "}" if inner else ""

    def extra(self, key: tuple, pair: str) -> str:
        """Return ``{a="x",...,<pair>}``."""
        inner = self._get(key)
        return "{" + inner + "," + pair + "}" if inner else "{" + pair + "}"


_DIST_PAIRS = tuple(f'quantile="{q:g}"' for _s, q in DIST)
_HIST_PAIRS = tuple(f'quantile="{q:g}"' for _s, q in HIST_QUANTILES)
_LE_INF = 'le="+Inf"'


@functools.cache
def _le_pairs(divisor: int) -> tuple[str, ...]:
    """Return the ``le`` label of every H2 bucket's upper edge, in the base unit."""
    return tuple(f'le="{_num(int(u), divisor)}"' for u in h2.UPPER)


def _head(out: list[str], pm: PromMetric) -> None:
    out.append(f"# HELP {pm.name} {escape_help(pm.help)}\n# TYPE {pm.name} {pm.type}\n")


def exposition(state: State, *, native_buckets: bool = False) -> str:
    """Return the text exposition (format 0.0.4) of every series ``state`` holds."""
    out: list[str] = []
    for f in state.families:
        _family(out, state, f, native_buckets)
    for pm in SELF_METRICS:
        _head(out, pm)
        value = getattr(state, pm.source)
        if isinstance(value, dict):  # by the one label
            out.extend(f'{pm.name}{{{pm.labels[0]}="{escape_label(k)}"}} {v}\n'
                       for k, v in sorted(value.items()))
        else:
            out.append(f"{pm.name} {value}\n")
    return "".join(out)


def _family(out: list[str], state: State, f: Family, native_buckets: bool) -> None:
    main = sorted(state.rows(f.event).items())
    lab = _Labels(series_labels(f))
    dist: dict[str, list[tuple[tuple, _Row]]] = {}
    if f.dist_schema is not None:
        for (labels, metric), row in sorted(state.rows(f.dist_schema.name).items()):
            dist.setdefault(metric, []).append((labels, row))
    scalar_index = {m.name: j for j, m in enumerate(f.scalars)}
    for pm in family_metrics(f):
        name, div = pm.name, pm.divisor
        if pm.type in ("counter", "gauge") and pm.event == f.event:
            if main:
                j = scalar_index[pm.source]
                _head(out, pm)
                out.extend(f"{name}{lab.plain(k)} {_num(row.values[j], div)}\n"
                           for k, row in main)
        elif pm.type == "gauge":  # a _dist metric
            rows = dist.get(pm.source)
            if rows:
                _head(out, pm)
                for k, row in rows:
                    out.extend(f"{name}{lab.extra(k, pair)} {_num(v, div)}\n"
                               for pair, v in zip(_DIST_PAIRS, row.values, strict=True))
        elif pm.type == "summary" and main:
            _head(out, pm)
            for k, row in main:
                for pair, v in zip(_HIST_PAIRS, row.quantiles, strict=True):
                    # Like a client library's summary with no observation in its window.
                    value = _num(v, div) if row.interval_count else "NaN"
                    out.append(f"{name}{lab.extra(k, pair)} {value}\n")
                out.append(f"{name}_count{lab.plain(k)} {row.total}\n")
        elif pm.type == "histogram" and native_buckets and main:
            _head(out, pm)
            for k, row in main:
                _buckets(out, pm, lab, k, row)


def _buckets(out: list[str], pm: PromMetric, lab: _Labels, key: tuple, row: _Row) -> None:
    counts = row.buckets if row.buckets is not None else h2.new_counts()
    nz = np.flatnonzero(counts)
    if len(nz):
        # From the empty bucket just below the lowest non-empty one, so that
        # histogram_quantile interpolates from the right lower bound.
        lo, hi = max(int(nz[0]) - 1, 0), int(nz[-1])
        cum = np.cumsum(counts[lo : hi + 1], dtype=np.uint64).tolist()
        les = _le_pairs(pm.divisor)
        out.extend(f"{pm.name}_bucket{lab.extra(key, les[i])} {c}\n"
                   for i, c in zip(range(lo, hi + 1), cum, strict=True))
    out.append(f"{pm.name}_bucket{lab.extra(key, _LE_INF)} {row.total}\n")
    out.append(f"{pm.name}_count{lab.plain(key)} {row.total}\n")
