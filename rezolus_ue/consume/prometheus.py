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
* ``rezolus_exporter_*``: the exporter's own records, skipped and lost records, and what
  became of applications' data points (``rezolus_exporter_otlp_*``).
* Applications' ``otlp_metrics`` data points (``AppState``) are named by the OpenTelemetry
  specification's Prometheus compatibility rules instead: sanitised OTel names with unit
  and ``_total`` suffixes, attributes as labels beside ``pid``, ``comm``, ``job``,
  ``instance`` and ``otel_scope_name``, resource attributes in ``target_info``
  (docs/applications.md).
* A name that would collide with another family's is renamed in ``RENAMES`` (a test
  checks that no name collides and that every entry is still needed).

Staleness: a label set not seen for ``stale`` publish intervals of its event is dropped;
an event with no record for ``stale`` intervals (the agent stopped, a sampler died) drops
all its label sets. Publish intervals are the agent's ticks (``intervals.Intervals``:
exact from its tick records, inferred without them); an event's publishes are the
intervals it has records in (``intervals.Publishes``). A selection's label set goes with
the first interval of its event that does not name it.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import logging
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import ConfigError
from ..metrics import catalog, h2
from ..metrics.family import DIST, HIST_QUANTILES, Family, Kind, Metric
from ..otel.wire import EVENT as OTLP_EVENT
from ..samplers.processes import PROCESS
from .intervals import Intervals, Publishes
from .records import Record

if TYPE_CHECKING:
    from .otlp import DataPoint, Decoder

log = logging.getLogger("rezolus_ue")

DEFAULT_STALE = 3
#: Default cap on the applications' series held (Prometheus series: a histogram counts its
#: buckets, ``_sum`` and ``_count``): ``exporter --max-app-series``.
DEFAULT_MAX_APP_SERIES = 10_000

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
    as an interval they are not in closes (``intervals``)."""

    labels: tuple[str, ...]  # fields that label a series: its identity, few values each


#: The selection families, by event. ``rezolus_process`` is labelled by pid, comm and
#: start_ns: pid and start_ns are a process's identity, so a reused pid is a new series
#: and never continues the counters of the process that had it. user and cgroup are left
#: out, and state (which changes from one interval to the next) would split every series.
SELECTIONS: dict[str, Selection] = {
    PROCESS.event: Selection(("pid", "comm", "start_ns")),
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
    PromMetric("rezolus_exporter_otlp_points_total", "counter",
               "data points of applications' otlp_metrics records the exporter decoded", "",
               "otlp_points", 1, ()),
    PromMetric("rezolus_exporter_otlp_dropped_points_total", "counter",
               "applications' data points not exposed, by reason", "", "otlp_dropped", 1,
               ("reason",)),
    PromMetric("rezolus_exporter_otlp_malformed_records_total", "counter",
               "applications' otlp_metrics records that could not be decoded, by kind", "",
               "otlp_malformed", 1, ("kind",)),
    PromMetric("rezolus_exporter_otlp_series", "gauge",
               "Prometheus series of applications held (a histogram's buckets, _sum and"
               " _count each count)", "", "otlp_series", 1, ()),
    PromMetric("rezolus_exporter_otlp_series_limit", "gauge",
               "the cap on the applications' series held (--max-app-series)", "",
               "otlp_series_limit", 1, ()),
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
    """One event's decoding plan, and its publish tracking (``pub``)."""

    family: Family
    dist: bool
    metrics: dict[str, int]  # _dist: metric name -> scalar index
    pub: Publishes = field(default_factory=Publishes)
    #: A selection's (``SELECTIONS``): its label sets go with each interval not naming them.
    selection: bool = False
    #: The interval (``State._ticks``' count) of its latest record (-1: none yet).
    tick: int = -1

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
                 families: Sequence[Family] = catalog.FAMILIES,
                 max_app_series: int = DEFAULT_MAX_APP_SERIES,
                 decoder: Decoder | None = None) -> None:
        if stale < 1:
            raise ValueError("stale must be at least 1 publish interval")
        self.stale = stale
        self.families = tuple(families)
        self.records = 0
        self.event_records: dict[str, int] = {}
        self.skipped = 0
        self.lost = 0
        #: Applications' series, from ``otlp_metrics`` records.
        self.apps = AppState(stale, max_app_series)
        #: Malformed ``otlp_metrics`` records, by kind (``otlp.MalformedPayload.kind``).
        self.otlp_malformed: dict[str, int] = {}
        self._decoder = decoder
        self._no_decoder = False
        self._events: dict[str, _Event] = {}
        for f in self.families:
            self._events[f.event] = _Event(f, False, {})
            if f.dist_schema is not None:
                self._events[f.dist_schema.name] = _Event(
                    f, True, {m.name: j for j, m in enumerate(f.scalars) if m.dist})
        for event in SELECTIONS:
            if event in self._events:
                self._events[event].selection = True
        self._rows: dict[str, dict[tuple, _Row]] = {e: {} for e in self._events}
        self._interval_ns = 0  # the latest interval measured on any event
        self._intervals = Intervals()
        self._ticks = 0  # intervals closed
        #: The events with records in the open interval.
        self._open: list[str] = []

    def ingest(self, records: Iterable[Record], now_ns: int | None = None) -> None:
        """Take records in; ``now_ns`` is when they arrived (default: their own time)."""
        counts = self.event_records
        for r in records:
            self.records += 1
            counts[r.event] = counts.get(r.event, 0) + 1
            ev = self._events.get(r.event)
            if ev is None:
                if r.event == OTLP_EVENT:
                    self._ingest_app(r, r.time_ns if now_ns is None else now_ns)
                else:
                    self.skipped += 1
                continue
            closed = self._intervals.feed((r,))  # the tick record too: it is a family
            if closed:
                self._close(len(closed))
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
            self._publish(ev, r.event, r.time_ns, now_ns)
            rows[key] = _Row(ev.pub.gen, values)
            return
        if not ev.hist:
            self._publish(ev, r.event, r.time_ns, now_ns)
            rows[labels] = _Row(ev.pub.gen, values, t_ns=r.time_ns)
            return
        self._publish(ev, r.event, r.time_ns, now_ns)
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
        rows[labels] = _Row(ev.pub.gen, values, ev.quantiles_of(fields), fields["count"], total,
                            buckets)

    def _ingest_app(self, r: Record, now_ns: int) -> None:
        decoder = self._decoder or self._new_decoder()
        if decoder is None:  # the otel extra is missing
            self.skipped += 1
            return
        unsupported = decoder.unsupported
        points = decoder.points(r)
        if not points:
            self.otlp_malformed = dict(decoder.malformed)
        if decoder.unsupported != unsupported:
            d = self.apps.dropped
            d["summary"] = d.get("summary", 0) + decoder.unsupported - unsupported
        self.apps.add(points, r.time_ns, now_ns)

    def _new_decoder(self) -> Decoder | None:
        """Return the otlp_metrics decoder, made at the first record (None, said once,
        without the ``otel`` extra: such records are then skipped)."""
        if self._no_decoder:
            return None
        from .otlp import Decoder

        try:
            self._decoder = Decoder()
        except ConfigError as e:
            log.warning("%s", e)
            self._no_decoder = True
        return self._decoder

    @property
    def otlp_points(self) -> int:
        """Return the applications' data points decoded."""
        return self.apps.points

    @property
    def otlp_dropped(self) -> dict[str, int]:
        """Return the applications' data points not exposed, by ``DROP_REASONS`` key."""
        return self.apps.dropped

    @property
    def otlp_series(self) -> int:
        """Return the applications' Prometheus series held."""
        return self.apps.series

    @property
    def otlp_series_limit(self) -> int:
        """Return the cap on the applications' series."""
        return self.apps.max_series

    def _publish(self, ev: _Event, event: str, t_ns: int, now_ns: int) -> None:
        """Count publishes: an event's first record in an interval starts its next one,
        and drops the label sets not seen for ``stale`` of them."""
        pub = ev.pub
        pub.seen_at_ns = now_ns
        if ev.tick == self._ticks:
            return
        ev.tick = self._ticks
        self._open.append(event)
        began = pub.start_ns is not None
        pub.publish(t_ns, now_ns)
        if began:
            if pub.period_ns:
                self._interval_ns = pub.period_ns
            gen, stale = pub.gen, self.stale
            _drop(self._rows[event], lambda row: gen - row.gen > stale)

    def _close(self, closed: int) -> None:
        """Count ``closed`` intervals ended: a selection's label sets not named in the
        interval that ended go."""
        if not closed:
            return
        self._ticks += closed
        for event in self._open:
            ev = self._events[event]
            if ev.selection:
                gen = ev.pub.gen
                _drop(self._rows[event], lambda row, gen=gen: row.gen != gen)
        self._open = []

    def prune(self, now_ns: int) -> int:
        """Drop every series of events with no record for ``stale`` publish intervals;
        return how many were dropped."""
        dropped = 0
        for name, ev in self._events.items():
            if ev.pub.silent(now_ns, self.stale,
                             self._intervals.period_ns or self._interval_ns):
                dropped += len(self._rows[name])
                self._rows[name].clear()
                ev.pub.forget()
        return dropped + self.apps.prune(now_ns)

    def rows(self, event: str) -> dict[tuple, _Row]:
        """Return the rows of one event (keys: label tuples; ``_dist``: (labels, metric))."""
        return self._rows[event]

    def series(self) -> int:
        """Return how many label sets are held (an application's metric's too)."""
        return sum(len(r) for r in self._rows.values()) + self.apps.held()

    def series_by_event(self) -> dict[str, int]:
        """Return how many label sets each event has now, for the events with any."""
        out = {e: len(r) for e, r in self._rows.items() if r}
        if self.apps.held():
            out[OTLP_EVENT] = self.apps.held()
        return out

    def copy(self) -> State:
        """Return a snapshot: dicts copied, rows shared (they are never mutated)."""
        new = copy.copy(self)
        new.event_records = dict(self.event_records)
        new._rows = {e: dict(r) for e, r in self._rows.items()}
        new._events = {e: copy.copy(ev) for e, ev in self._events.items()}
        for ev in new._events.values():
            ev.pub = ev.pub.copy()
        new._open = list(self._open)
        new.apps = self.apps.copy()
        new.otlp_malformed = dict(self.otlp_malformed)
        return new


# --- application metrics: otlp_metrics, as OpenTelemetry's Prometheus exporters map them ---
#
# The rules of the OpenTelemetry specification's "Prometheus and OpenMetrics Compatibility"
# (OTLP metric points to Prometheus), with the unit words of the Collector's translator.

#: OTel (UCUM) units -> the Prometheus word a name ends with (values are not scaled: "ms"
#: stays milliseconds). Unit "1" adds ``_ratio`` to gauges only, as the Collector does
#: (many counters misuse it for counts); an unknown unit is sanitised and added as it is.
UNIT_WORDS: dict[str, str] = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
    "us": "microseconds", "ns": "nanoseconds",
    "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
    "TiBy": "tebibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams",
    "Cel": "celsius", "Hz": "hertz", "%": "percent", "1": "",
}
#: The denominator of ``a/b`` units: "By/s" is ``_bytes_per_second``.
PER_UNIT_WORDS: dict[str, str] = {
    "s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month",
    "y": "year",
}
#: Labels the exporter puts on application series itself; an attribute of one of these
#: names is exposed as ``exported_<name>``, as Prometheus renames a clashing target label.
APP_LABELS = ("comm", "instance", "job", "le", "otel_scope_name", "pid")
#: An application's export interval until two of its exports have been seen: the SDKs'
#: default (``OTEL_METRIC_EXPORT_INTERVAL``, 60 s). Its series go after ``stale`` of them.
APP_INTERVAL_NS = 60 * 10**9
#: Names applications may not take: the exporter's own namespace, and the target info.
RESERVED_PREFIX = "rezolus_"
TARGET_INFO = "target_info"
#: Why an application's data point was not exposed: the ``reason`` label of
#: ``rezolus_exporter_otlp_dropped_points_total`` (docs/applications.md lists them).
DROP_REASONS: dict[str, str] = {
    "exponential_histogram": "exponential histograms need Prometheus native histograms,"
    " which the text format cannot carry (the specification: SHOULD be dropped)",
    "delta_non_monotonic": "a delta up-down sum has no level to add its deltas to"
    " (the specification: MUST be dropped); SDKs publish up-down counters cumulative",
    "summary": "summary points are not decoded: OTLP keeps them for compatibility and no"
    " user_events exporter writes them",
    "no_value": "the point carries no value",
    "invalid_name": "the name has no character Prometheus allows",
    "reserved_name": f"the name starts with {RESERVED_PREFIX} or is {TARGET_INFO}",
    "name_conflict": "another application's metric of another type (or whose samples"
    " would share a name) holds the name; the first one seen keeps it",
    "series_limit": "a new series beyond --max-app-series",
}

_BAD_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_BAD_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_UNDERSCORES = re.compile(r"__+")
_BRACES = re.compile(r"\{[^}]*\}")


def sanitize_name(name: str) -> str:
    """Return ``name`` as a Prometheus metric name: characters outside ``[a-zA-Z0-9_:]``
    become ``_``, runs of ``_`` one, and a leading digit gets a ``_`` before it."""
    out = _UNDERSCORES.sub("_", _BAD_NAME.sub("_", name))
    return "_" + out if out[:1].isdigit() else out


def sanitize_label(key: str) -> str:
    """Return attribute ``key`` as a Prometheus label name (``[a-zA-Z_][a-zA-Z0-9_]*``);
    a leading digit gets ``key_`` before it, as the Collector does."""
    out = _UNDERSCORES.sub("_", _BAD_LABEL.sub("_", key))
    return "key_" + out if out[:1].isdigit() else out


def _unit_words(unit: str) -> tuple[list[str], str]:
    """Return the name tokens of ``unit``'s main part, and its ``per`` word ("By/s":
    (["bytes"], "second")); parts in braces (``{request}``, a count) are dropped."""
    main, _sep, per = _BRACES.sub("", unit).partition("/")
    main, per = main.strip(), per.strip()
    words = [t for t in sanitize_name(UNIT_WORDS.get(main, main)).split("_") if t] \
        if main else []
    per_word = sanitize_name(PER_UNIT_WORDS.get(per, per)).strip("_") if per else ""
    return words, per_word


def app_name(name: str, unit: str, kind: str, monotonic: bool) -> str:
    """Return the Prometheus name of an OTel metric: sanitised, then the unit's words
    unless the name has them already, ``_ratio`` for a gauge of unit "1", and ``_total``
    for a monotonic sum (after the unit, as the specification orders them)."""
    counter = kind == "sum" and monotonic
    base = sanitize_name(name)
    if counter and base.endswith("_total"):
        base = base[: -len("_total")]
    tokens = base.split("_")
    words, per = _unit_words(unit)
    suffix = [w for w in words if w not in tokens]
    if per and per not in tokens:
        suffix += ["per", per]
    if unit == "1" and kind == "gauge" and "ratio" not in tokens:
        suffix.append("ratio")
    out = "_".join(t for t in (base, *suffix) if t)
    return f"{out}_total" if counter else out


def app_type(kind: str, monotonic: bool, temporality: str) -> tuple[str, str]:
    """Return (Prometheus type, ``DROP_REASONS`` key or ""): what a point of this kind
    becomes, or why it is dropped."""
    if kind == "gauge":
        return "gauge", ""
    if kind == "sum":
        if monotonic:
            return "counter", ""
        return ("gauge", "") if temporality == "cumulative" else ("", "delta_non_monotonic")
    if kind == "histogram":
        return "histogram", ""
    return "", "exponential_histogram"


def attribute_text(value: object) -> str:
    """Return an attribute value as label text, per the attribute specification: strings
    as they are, booleans ``true``/``false``, arrays as JSON, bytes as base64."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def attribute_labels(attributes: Mapping[str, object], ours: Iterable[str] = APP_LABELS
                     ) -> dict[str, str]:
    """Return attributes as labels: names sanitised, one of ``ours`` as ``exported_<it>``;
    keys that sanitise alike join their values with ``;`` in their keys' order."""
    taken = set(ours)
    out: dict[str, str] = {}
    for key in sorted(attributes):
        name = sanitize_label(key)
        if not name:
            continue
        if name in taken:
            name = f"exported_{name}"
        text = attribute_text(attributes[key])
        out[name] = f"{out[name]};{text}" if name in out else text
    return out


def _job_instance(resource: Mapping[str, object]) -> dict[str, str]:
    """Return the ``job`` and ``instance`` labels of a resource: ``service.namespace/
    service.name`` (or the name alone) and ``service.instance.id``, where present."""
    out = {}
    name = resource.get("service.name")
    if name:
        ns = resource.get("service.namespace")
        out["job"] = f"{attribute_text(ns)}/{attribute_text(name)}" if ns \
            else attribute_text(name)
    inst = resource.get("service.instance.id")
    if inst:
        out["instance"] = attribute_text(inst)
    return out


_JOB_KEYS = ("service.name", "service.namespace", "service.instance.id")

Labels = tuple[tuple[str, str], ...]


class _AppRow(NamedTuple):
    """One application series' value; never mutated (snapshots share it)."""

    family: str
    labels: Labels
    value: int | float = 0  # counter, gauge
    delta: bool = False  # accumulated from delta points
    #: Kept while its publisher lives, when absent from its exports: delta streams and
    #: gauges, which SDKs send only when they changed (a cumulative stream is sent every
    #: export: absent, it is gone).
    kept: bool = False
    end_ns: int = 0  # the latest point's time (unix ns): a delta's next start
    gen: int = 0  # its publisher's publish it was last seen in
    count: int = 0  # histogram
    sum: float | None = None  # histogram (None: a point came without one)
    bounds: tuple[float, ...] = ()  # histogram: explicit bounds
    counts: tuple[int, ...] = ()  # histogram: per bucket, len(bounds) + 1 (or none)
    histogram: bool = False

    @property
    def cost(self) -> int:
        """Return how many Prometheus series it makes: a histogram's buckets (``+Inf``
        too), ``_sum`` and ``_count``."""
        return len(self.bounds) + 3 if self.histogram else 1


@dataclass
class _AppFamily:
    type: str
    help: str
    rows: int = 0  # series held, across publishers


@dataclass
class _Publisher:
    """One application process: its publishes, series and target info."""

    pub: Publishes
    target: Labels  # target_info's labels
    rows: dict[tuple[str, Labels], _AppRow] = field(default_factory=dict)


def _sample_names(name: str, ptype: str) -> tuple[str, ...]:
    return (name, f"{name}_bucket", f"{name}_sum", f"{name}_count") \
        if ptype == "histogram" else (name,)


class AppState:
    """Application series from decoded ``otlp_metrics`` data points; pure.

    Delta points accumulate into cumulative series (a counter's total is the sum of its
    deltas; a histogram's buckets, count and sum too); cumulative points and gauges
    replace. A series is labelled by the point's attributes, the publisher's ``pid`` and
    ``comm``, ``job``/``instance`` from its resource and ``otel_scope_name``. Publishes
    are counted per publisher as for the agent's events: a publisher silent for ``stale``
    of its export intervals loses every series, and a cumulative stream it left out of
    ``stale`` exports goes (``_AppRow.kept``: delta streams and gauges stay).
    """

    def __init__(self, stale: int = DEFAULT_STALE,
                 max_series: int = DEFAULT_MAX_APP_SERIES) -> None:
        self.stale = stale
        self.max_series = max_series
        self.points = 0
        self.dropped: dict[str, int] = {}
        self._said: set[str] = set()  # the drop reasons logged
        self.series = 0  # Prometheus series held (``_AppRow.cost`` summed)
        self._families: dict[str, _AppFamily] = {}
        self._owners: dict[str, str] = {}  # sample name -> its family
        self._publishers: dict[tuple[int, str], _Publisher] = {}

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def add(self, points: Iterable[DataPoint], t_ns: int, now_ns: int | None = None) -> None:
        """Take the data points of one record written at ``t_ns`` (CLOCK_MONOTONIC),
        arrived at ``now_ns`` (default: ``t_ns``)."""
        now = t_ns if now_ns is None else now_ns
        for p in points:
            self.points += 1
            reason = self._add(p, t_ns, now)
            if reason:
                self._drop(reason)
                if reason not in self._said:  # as the specification asks: once each
                    self._said.add(reason)
                    log.warning("pid %d (%s): %s dropped: %s; such points are counted in"
                                " rezolus_exporter_otlp_dropped_points_total{reason=%r}",
                                p.pid, p.comm, p.metric, DROP_REASONS[reason], reason)

    def _add(self, p: DataPoint, t_ns: int, now_ns: int) -> str:
        """Take one point; return why it was dropped ("" if it was not)."""
        ptype, reason = app_type(p.kind, p.monotonic, p.temporality)
        if reason:
            return reason
        hist = p.histogram
        if (hist is None) if ptype == "histogram" else (p.value is None):
            return "no_value"
        if not sanitize_name(p.metric).strip("_"):
            return "invalid_name"
        name = app_name(p.metric, p.unit, p.kind, p.monotonic)
        if name.startswith(RESERVED_PREFIX) or name == TARGET_INFO:
            return "reserved_name"
        job = _job_instance(p.resource)
        labels = attribute_labels(p.attributes)
        labels.update(job, pid=str(p.pid), comm=p.comm)
        if p.scope:
            labels["otel_scope_name"] = p.scope
        key = (name, tuple(sorted(labels.items())))
        publisher = self._publisher(p, job)
        pub = publisher.pub
        if pub.see(key, t_ns, now_ns):  # its next export: drop what it no longer sends
            gen, stale = pub.gen, self.stale
            for k in [k for k, r in publisher.rows.items()
                      if not r.kept and gen - r.gen > stale]:
                self._remove(publisher, k)
        fam = self._families.get(name)
        if fam is None:
            if any(s in self._owners for s in _sample_names(name, ptype)):
                return "name_conflict"
        elif fam.type != ptype:
            return "name_conflict"
        prev = publisher.rows.get(key)
        row = self._row(p, ptype, key, prev)
        grow = row.cost - (prev.cost if prev is not None else 0)
        if grow > 0 and self.series + grow > self.max_series:
            return "series_limit"
        if fam is None:
            fam = self._families[name] = _AppFamily(ptype, p.description)
            for s in _sample_names(name, ptype):
                self._owners[s] = name
        if prev is None:
            fam.rows += 1
        publisher.rows[key] = row._replace(gen=pub.gen)
        self.series += grow
        return ""

    def _publisher(self, p: DataPoint, job: dict[str, str]) -> _Publisher:
        """Return the publisher of ``p``, known from now on."""
        pkey = (p.pid, p.comm)
        publisher = self._publishers.get(pkey)
        if publisher is None:
            target = {**job, "pid": str(p.pid), "comm": p.comm, **attribute_labels(
                {k: v for k, v in p.resource.items() if k not in _JOB_KEYS},
                ("comm", "instance", "job", "pid"))}
            publisher = self._publishers[pkey] = _Publisher(
                Publishes(), tuple(sorted(target.items())))
        return publisher

    @staticmethod
    def _row(p: DataPoint, ptype: str, key: tuple[str, Labels], prev: _AppRow | None
             ) -> _AppRow:
        """Return the series after ``p``: a delta added to ``prev``, else ``p`` itself."""
        delta = p.temporality == "delta"
        kept = delta or p.kind == "gauge"
        adds = delta and prev is not None and _continues(prev, p)
        hist = p.histogram
        if ptype != "histogram" or hist is None:
            value = p.value if p.value is not None else 0
            return _AppRow(key[0], key[1], prev.value + value if adds and prev else value,
                           delta, kept, p.time_ns)
        bounds = tuple(float(b) for b in hist.bounds)
        counts = tuple(int(c) for c in hist.counts)
        row = _AppRow(key[0], key[1], 0, delta, kept, p.time_ns, 0, int(hist.count),
                      hist.sum, bounds, counts, True)
        if not adds or prev is None or (prev.bounds, len(prev.counts)) != (bounds, len(counts)):
            return row  # bounds changed: a new series, which Prometheus reads as a reset
        return row._replace(
            count=prev.count + row.count,
            sum=None if prev.sum is None or hist.sum is None else prev.sum + hist.sum,
            counts=tuple(map(operator.add, prev.counts, counts)))

    def _remove(self, publisher: _Publisher, key: tuple[str, Labels]) -> None:
        row = publisher.rows.pop(key)
        self.series -= row.cost
        fam = self._families[row.family]
        fam.rows -= 1
        if not fam.rows:  # the name is free again, for any type
            del self._families[row.family]
            for s in _sample_names(row.family, fam.type):
                self._owners.pop(s, None)

    def prune(self, now_ns: int) -> int:
        """Drop every series of the publishers silent for ``stale`` export intervals;
        return how many were dropped."""
        dropped = 0
        for pkey, publisher in list(self._publishers.items()):
            pub = publisher.pub
            if pub.silent(now_ns, self.stale, APP_INTERVAL_NS):
                dropped += len(publisher.rows)
                for k in list(publisher.rows):
                    self._remove(publisher, k)
                del self._publishers[pkey]
        return dropped

    def rows(self) -> list[_AppRow]:
        """Return every series, by family name and labels."""
        return sorted((r for p in self._publishers.values() for r in p.rows.values()),
                      key=lambda r: (r.family, r.labels))

    def targets(self) -> list[Labels]:
        """Return the target info labels of each publisher with series."""
        return sorted(p.target for p in self._publishers.values() if p.rows)

    def family(self, name: str) -> tuple[str, str]:
        """Return (type, help) of an exposed family."""
        fam = self._families[name]
        return fam.type, fam.help

    def held(self) -> int:
        """Return how many label sets are held (a histogram's is one)."""
        return sum(len(p.rows) for p in self._publishers.values())

    def copy(self) -> AppState:
        """Return a snapshot: dicts copied, rows shared (they are never mutated)."""
        new = copy.copy(self)
        new.dropped = dict(self.dropped)
        new._said = set(self._said)
        new._families = {k: copy.copy(f) for k, f in self._families.items()}
        new._owners = dict(self._owners)
        new._publishers = {k: _Publisher(p.pub.copy(), p.target, dict(p.rows))
                           for k, p in self._publishers.items()}
        return new


def _continues(prev: _AppRow, p: DataPoint) -> bool:
    """Return whether delta point ``p`` follows ``prev``: a start before the previous end
    is another stream (the SDK restarted): its total starts again, which Prometheus reads
    as a counter reset. A gap (points lost, or written while no one listened) continues."""
    return prev.delta and not (p.start_ns and p.start_ns < prev.end_ns)


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
    _applications(out, state.apps)
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


def _value(v: float) -> str:
    """Return a sample value: integers exactly, floats in full (``repr``), non-finite
    ones as the text format spells them."""
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _applications(out: list[str], apps: AppState) -> None:
    """Add the applications' families (by name), then ``target_info``."""
    name = None
    for row in apps.rows():
        if row.family != name:
            name = row.family
            ptype, text = apps.family(name)
            if text:
                out.append(f"# HELP {name} {escape_help(text)}\n")
            out.append(f"# TYPE {name} {ptype}\n")
        inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in row.labels)
        if ptype != "histogram":
            out.append(f"{name}{{{inner}}} {_value(row.value)}\n")
            continue
        cum = 0
        for bound, n in zip(row.bounds, row.counts, strict=False):
            cum += n
            out.append(f'{name}_bucket{{{inner},le="{_value(bound)}"}} {cum}\n')
        out.append(f'{name}_bucket{{{inner},le="+Inf"}} {row.count}\n')
        if row.sum is not None:
            out.append(f"{name}_sum{{{inner}}} {_value(row.sum)}\n")
        out.append(f"{name}_count{{{inner}}} {row.count}\n")
    targets = apps.targets()
    if targets:
        out.append(f"# HELP {TARGET_INFO} Target metadata: each application's resource"
                   f" attributes\n# TYPE {TARGET_INFO} gauge\n")
        out.extend(TARGET_INFO + "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in t)
                   + "} 1\n" for t in targets)
