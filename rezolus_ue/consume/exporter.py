"""``rezolus-ue exporter``: a Prometheus text-exposition endpoint fed by the tracepoints.

The exporter subscribes to the ``user_events:rezolus_*`` tracepoints like any consumer,
keeps the latest values in a pure ``State`` and serves them as text exposition format 0.0.4
on ``GET /metrics`` (default ``http://127.0.0.1:9745/metrics``).

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
  sampler, cgroup).
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
starts the event's next publish.

I/O lives at the edges: ``serve_http`` (a ``ThreadingHTTPServer`` in a daemon thread; a
scrape renders a snapshot copied under the lock, one render at a time, reused until the
state changes) and ``run`` (the subscription polled in the main thread).
"""

from __future__ import annotations

import argparse
import copy
import errno
import functools
import gzip
import logging
import math
import operator
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..config import path_arg
from ..errors import ConfigError, RezolusError
from ..metrics import catalog, h2
from ..metrics.family import DIST, HIST_QUANTILES, Family, Kind, Metric
from .records import Record
from .source import Source

log = logging.getLogger("rezolus_ue")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9745
DEFAULT_STALE = 3
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POLL_MS = 250

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
    labels = tuple(lb.name for lb in family.labels)
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


def _getter(names: Sequence[str]) -> Callable[[dict], tuple]:
    """Return a function giving ``names``' values of a fields dict, always as a tuple."""
    if not names:
        return lambda _d: ()
    if len(names) == 1:
        (name,) = names
        return lambda d: (d[name],)
    return operator.itemgetter(*names)


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

    def __post_init__(self) -> None:
        f = self.family
        self.labels_of = _getter([lb.name for lb in f.labels])
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
            rows[labels] = _Row(ev.gen, values)
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
            rows = self._rows[event]
            for k in [k for k, row in rows.items() if ev.gen - row.gen > self.stale]:
                del rows[k]
        ev.seen.add(key)

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
    lab = _Labels(tuple(lb.name for lb in f.labels))
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


# --- I/O: the HTTP endpoint and the subscription loop ---------------------------------------

_INDEX = b"""<!doctype html>
<html><head><title>rezolus-ue exporter</title></head>
<body><h1>rezolus-ue exporter</h1>
<p>Linux telemetry from the <code>user_events:rezolus_*</code> tracepoints, in Prometheus
text format: <a href="/metrics">/metrics</a>.</p></body></html>
"""


class Exporter:
    """The shared state between the subscription (ingest) and the HTTP threads (render).

    Scrapes render from a snapshot copied under the lock, one render at a time: scrapes
    that arrive meanwhile wait for it and share its text, and a scrape with nothing new
    since the last render reuses it. A slow machine therefore never piles up renders
    (each scrape timing out and retrying would otherwise start one more).
    """

    def __init__(self, stale: int = DEFAULT_STALE, native_buckets: bool = False,
                 clock: Callable[[], int] | None = time.monotonic_ns) -> None:
        self.state = State(stale)
        self.native_buckets = native_buckets
        self.renders = 0
        # None: data time (a replayed recording), the newest record's time, so that the
        # series of a recording's end stay however long it is served.
        self._data_ns = 0
        self._clock = clock or (lambda: self._data_ns)
        self._lock = threading.Lock()  # guards state and _version
        self._render_lock = threading.Lock()  # one render at a time; guards _cache
        self._version = 0  # bumped by every change of state
        self._cache: tuple[int, str, dict[bool, bytes]] | None = None

    def ingest(self, records: Sequence[Record], lost: int | None = None) -> None:
        """Take one poll's records in (and the subscription's lost-record count)."""
        if not records and (lost is None or lost == self.state.lost):
            return
        if records:
            self._data_ns = max(self._data_ns, records[-1].time_ns)
        now = self._clock()
        with self._lock:
            self.state.ingest(records, now)
            if lost is not None:
                self.state.lost = lost
            self._version += 1

    def render(self) -> str:
        """Return the exposition of the current state."""
        with self._render_lock:
            return self._render_locked()[1]

    def body(self, gzipped: bool = False) -> bytes:
        """Return the exposition as the HTTP body, gzip-compressed or not (cached)."""
        with self._render_lock:
            _version, text, bodies = self._render_locked()
            if gzipped not in bodies:
                raw = bodies.get(False) or text.encode()
                bodies[False] = raw
                if gzipped:  # level 1: the scrape's CPU matters more than its bytes
                    bodies[True] = gzip.compress(raw, compresslevel=1)
            return bodies[gzipped]

    def _render_locked(self) -> tuple[int, str, dict[bool, bytes]]:
        with self._lock:
            if self.state.prune(self._clock()):
                self._version += 1
            if self._cache is not None and self._cache[0] == self._version:
                return self._cache
            version, snap = self._version, self.state.copy()
        # Rendering runs outside the state lock: ingest goes on meanwhile.
        self._cache = (version, exposition(snap, native_buckets=self.native_buckets), {})
        self.renders += 1
        return self._cache

    def follow(self, src: Source, stop: Callable[[], bool], poll_ms: int = POLL_MS) -> None:
        """Poll ``src`` and ingest until ``stop()`` is true (a recording's end keeps its
        last values served)."""
        while not stop():
            self.ingest(src.poll(poll_ms), src.lost)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection
    timeout = 300  # s: reap connections left idle (a scraper gone without closing)

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def _respond(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        status, gzipped = 200, False
        if path == "/metrics":
            gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
            body, ctype = self.server.body(gzipped), CONTENT_TYPE
        elif path == "/":
            body, ctype = _INDEX, "text/html; charset=utf-8"
        else:
            status, body, ctype = 404, b"not found: try /metrics\n", "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    body: Callable[[bool], bytes]

    def handle_error(self, request: object, client_address: object) -> None:
        # A scraper that timed out and hung up is not worth a traceback on stderr.
        log.debug("http: request from %s failed", client_address, exc_info=True)


def parse_listen(text: str) -> tuple[str, int]:
    """Return (host, port) of ``HOST:PORT``, ``[V6ADDR]:PORT`` or ``:PORT`` (all addresses)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT, e.g."
                          f" {DEFAULT_HOST}:{DEFAULT_PORT}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def serve_http(host: str, port: int, body: Callable[[bool], bytes]) -> _Server:
    """Return a bound HTTP server (not yet serving) whose /metrics returns ``body(gzip)``
    (``Exporter.body``)."""
    cls = _Server
    if ":" in host:
        cls = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        server = cls((host, port), _Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            why = "address already in use"
        elif e.errno in (errno.EACCES, errno.EPERM):
            why = "permission denied (ports below 1024 need root)"
        elif e.errno == errno.EADDRNOTAVAIL or isinstance(e, socket.gaierror):
            why = "no such local address"
        else:
            why = e.strerror or str(e)
        raise RezolusError(f"cannot listen on {where}: {why}; choose another address with"
                           " --listen HOST:PORT") from None
    server.body = body
    return server


def run(args: argparse.Namespace) -> int:
    """Serve /metrics and follow the tracepoints until SIGINT/SIGTERM; return 0."""
    from ..api import open_source
    from ..schema import EVENTS

    host, port = args.listen
    exporter = Exporter(args.stale, args.native_buckets,
                        clock=time.monotonic_ns if args.source is None else None)
    server = serve_http(host, port, exporter.body)  # bind first: a taken port fails at once
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="rezolus-ue-exporter-http", daemon=True)
    thread.start()
    h, p = server.server_address[:2]
    log.info("serving Prometheus metrics on http://%s/metrics",
             f"[{h}]:{p}" if ":" in str(h) else f"{h}:{p}")
    events = [e.name for e in EVENTS if not (args.no_dist and e.name.endswith("_dist"))]
    stop: list[int] = []
    following = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.append(signum)
        if not following.is_set():
            raise KeyboardInterrupt  # still waiting for the agent: break out of the wait

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with open_source(args.source, events, wait=not args.no_wait) as src:
            if args.source is None:
                log.info("following %d events", len(src.events))
            else:
                log.info("serving the records of %s", args.source)
            following.set()
            exporter.follow(src, lambda: bool(stop))
    except KeyboardInterrupt:
        pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.shutdown()
        server.server_close()
    st = exporter.state
    log.info("stopped: %d records, %d skipped, %d lost", st.records, st.skipped, st.lost)
    return 0


def _listen(text: str) -> tuple[str, int]:
    try:
        return parse_listen(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--listen ")) from None


def _stale(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of publish intervals"
                                         " from 1 to 1000")
    return int(text)


_DESCRIPTION = """\
Follow every user_events:rezolus_* tracepoint and serve the latest values in Prometheus
text format on GET /metrics. Names are rezolus_<event>_<metric>: counters end in _total,
ns and us become seconds, ppm a ratio; *_dist quantiles become <gauge>_dist and
<counter>_per_second gauges with a quantile label; histograms become summaries. A label
set not seen for --stale publish intervals is dropped. docs/prometheus.md lists every
name, with scrape configs and PromQL examples."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``exporter`` subcommand to the CLI's subparsers."""
    p = sub.add_parser(
        "exporter", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="serve the tracepoints as Prometheus metrics on HTTP",
        description=_DESCRIPTION,
        epilog="examples:\n"
        "  sudo rezolus-ue exporter\n"
        "  sudo rezolus-ue exporter --listen 0.0.0.0:9745 --native-buckets\n"
        "  curl -s http://127.0.0.1:9745/metrics | grep '^rezolus_cpu_usage'\n"
        "  rezolus-ue exporter --from incident.rzr    the values at the recording's end\n"
        "  scrape config: static_configs: [{targets: ['HOST:9745']}]",
    )
    p.add_argument("--listen", metavar="HOST:PORT", type=_listen,
                   default=(DEFAULT_HOST, DEFAULT_PORT),
                   help=f"address to serve on (default: {DEFAULT_HOST}:{DEFAULT_PORT}; use"
                   f" 0.0.0.0:{DEFAULT_PORT} or [::]:{DEFAULT_PORT} for a remote Prometheus)")
    p.add_argument("--stale", metavar="N", type=_stale, default=DEFAULT_STALE,
                   help="drop a label set (a CPU, device, cgroup...) not seen for N publish"
                   f" intervals (default: {DEFAULT_STALE})")
    p.add_argument("--native-buckets", action="store_true",
                   help="also expose each histogram as a classic Prometheus histogram"
                   " (*_histogram_bucket{le=...}) from its H2 buckets: 8 series per doubling of"
                   " the values' range, per label set")
    p.add_argument("--no-dist", action="store_true",
                   help="do not follow the *_dist events: the agent then does not oversample"
                   " (cheaper), and no quantile gauges are exported")
    p.add_argument("--no-wait", action="store_true",
                   help="fail at once if the agent is not publishing, instead of waiting")
    p.add_argument("--from", dest="source", type=path_arg, metavar="FILE",
                   help="serve a recording (rezolus-ue record / dump output, a ring directory"
                   " or Parquet) instead of the live tracepoints: every record is ingested,"
                   " then /metrics shows the values at its end, judged stale by its clock")
    p.set_defaults(func=run)


# --- docs/prometheus.md: its generated table ------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "prometheus.md"
BEGIN = "<!-- BEGIN generated by `python -m rezolus_ue.consume.exporter` -->"
END = "<!-- END generated -->"


def docs_text(current: str) -> str:
    """Return docs/prometheus.md's text with its generated table brought up to date."""
    head, sep, rest = current.partition(BEGIN)
    _old, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"{DOCS}: markers {BEGIN!r} ... {END!r} not found")
    return f"{head}{BEGIN}\n{mapping_table()}{END}{tail}"


def _main() -> int:
    ap = argparse.ArgumentParser(description="Rewrite the metric table of docs/prometheus.md.")
    ap.add_argument("--check", action="store_true", help="exit 1 if it is stale")
    ns = ap.parse_args()
    current = DOCS.read_text()
    fresh = docs_text(current)
    if ns.check:
        return int(fresh != current)
    if fresh != current:
        DOCS.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
