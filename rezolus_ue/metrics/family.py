"""Metric families: declarations (name, kind, unit, labels) and how they become events.

A *family* is published as one event: its labels (which CPU, device, interface...) come
first in each record, then one u64 per counter (the running total) or gauge (the last
value). A histogram (at most one per family, declared last) adds ``count``, ``p50``,
``p90``, ``p99``, ``p999``, ``max`` over the interval, the layout's ``grouping_power`` and
``max_value_power``, ``part``/``parts`` (a record whose buckets do not fit 4 KiB is split)
and ``buckets``: the interval's non-zero buckets in the sparse form of
``rezolus_ue.metrics.h2``.

Metrics declared with ``dist`` are oversampled: read every ``sample_interval`` and summarised
once per publish interval in a second, long-form event ``<event>_dist``: one record per
label set and metric, ``metric, value, p50, p90, p99, max``, where for a counter ``value``
is the total and the percentiles are of its per-second rate between samples, and for a
gauge ``value`` is the last level and the percentiles are of its levels. Long form keeps
every registration under the kernel's 512-byte limit however many metrics a family has,
and sampling only speeds up while someone has a ``_dist`` event enabled.

The ``Oversampler`` turns samples into one interval's records; it is pure (no I/O) and
table-tested.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..encoding import (
    MAX_PAYLOAD,
    REL_BYTES,
    U8,
    U64,
    EventSchema,
    Field,
    FieldType,
    char_array,
)
from . import h2

#: Quantiles of a distribution, with their field suffixes.
DIST = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0))
_QS = np.array([q for _s, q in DIST])
#: Longest metric name (the _dist event's ``metric`` field is char[24]).
METRIC_NAME_MAX = 23
#: Quantiles published for histograms.
HIST_QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))


class Kind(enum.Enum):
    """What a metric's value means."""

    COUNTER = "counter"  # cumulative, only grows (resets are detected)
    GAUGE = "gauge"  # a level, may go up and down
    HISTOGRAM = "histogram"  # H2 buckets of a distribution, cumulative


@dataclass(frozen=True)
class Metric:
    """One metric: name, kind, unit and meaning. ``dist``: publish the interval's
    distribution of per-sample values too (oversampling)."""

    name: str
    kind: Kind
    unit: str
    description: str
    dist: bool = True


@dataclass(frozen=True)
class Label:
    """A dimension of a family, written first in every record."""

    name: str
    type: FieldType
    description: str
    max_len: int = 0  # for dynamic (``__rel_loc char[]``) labels


def counter(name: str, unit: str, description: str, dist: bool = True) -> Metric:
    """Return a counter declaration."""
    return Metric(name, Kind.COUNTER, unit, description, dist)


def gauge(name: str, unit: str, description: str, dist: bool = True) -> Metric:
    """Return a gauge declaration."""
    return Metric(name, Kind.GAUGE, unit, description, dist)


def histogram(name: str, unit: str, description: str) -> Metric:
    """Return a histogram declaration."""
    return Metric(name, Kind.HISTOGRAM, unit, description, dist=False)


@dataclass(frozen=True, eq=False)  # identity hash: families are singletons, used as keys
class Family:
    """One event's worth of metrics, published by one sampler."""

    event: str
    sampler: str
    description: str
    labels: tuple[Label, ...]
    metrics: tuple[Metric, ...]
    cadence: str = ""

    def __post_init__(self) -> None:
        hist = [m for m in self.metrics if m.kind is Kind.HISTOGRAM]
        if len(hist) > 1 or (hist and self.metrics[-1].kind is not Kind.HISTOGRAM):
            raise ValueError(f"{self.event}: at most one histogram, declared last")
        self.schemas  # noqa: B018 - validate the derived events now, at import

    @property
    def scalars(self) -> tuple[Metric, ...]:
        """Return the counters and gauges, in order."""
        return tuple(m for m in self.metrics if m.kind is not Kind.HISTOGRAM)

    @property
    def histogram(self) -> Metric | None:
        """Return the histogram metric, if any."""
        m = self.metrics[-1] if self.metrics else None
        return m if m is not None and m.kind is Kind.HISTOGRAM else None

    @property
    def dist_metrics(self) -> tuple[Metric, ...]:
        """Return the oversampled metrics, in order."""
        return tuple(m for m in self.scalars if m.dist)

    def _label_fields(self) -> list[Field]:
        return [Field(lb.name, lb.type, "label", lb.description, lb.max_len)
                for lb in self.labels]

    @cached_property
    def dist_schema(self) -> EventSchema | None:
        """Return the long-form ``<event>_dist`` event, if any metric is oversampled."""
        dm = self.dist_metrics
        if not dm:
            return None
        names = ", ".join(m.name for m in dm)
        fields = [
            *self._label_fields(),
            Field("metric", char_array(METRIC_NAME_MAX + 1), "name",
                  f"which metric of {self.event}: {names}"),
            Field("value", U64, "as the metric", "counter: total; gauge: last value"),
        ]
        fields += [Field(suffix, U64, "as the metric (counters: per second)",
                         f"{suffix} over the interval's samples: counter rates per second"
                         " between samples, or gauge levels") for suffix, _q in DIST]
        return EventSchema(
            f"{self.event}_dist",
            f"Distribution over each publish interval of {self.event}'s metrics, sampled"
            " every sample_interval (oversampling): a burst shorter than the interval shows"
            " in max.",
            tuple(fields), self.sampler,
            "one record per metric" + (" and " + " and ".join(lb.name for lb in self.labels)
                                       if self.labels else "") + " per interval")

    @property
    def schemas(self) -> tuple[EventSchema, ...]:
        """Return the events of this family: the record event, then the _dist event."""
        return (self.schema,) if self.dist_schema is None else (self.schema, self.dist_schema)

    @cached_property
    def schema(self) -> EventSchema:
        """Return the event this family's records are published as."""
        fields = self._label_fields()
        for m in self.scalars:
            if len(m.name) > METRIC_NAME_MAX:
                raise ValueError(f"{self.event}.{m.name}: name longer than {METRIC_NAME_MAX}")
            fields.append(Field(m.name, U64, m.unit, m.description))
        h = self.histogram
        if h is not None:
            fields.append(Field("count", U64, "values", f"{h.name}: values recorded in"
                                " the interval"))
            for suffix, q in HIST_QUANTILES:
                fields.append(Field(suffix, U64, h.unit, f"{h.name}: {q * 100:g}th percentile"
                                    " (upper edge of its bucket) over the interval"))
            fields += [
                Field("grouping_power", U8, "", "H2 layout grouping power"),
                Field("max_value_power", U8, "", "H2 layout max value power"),
                Field("part", U8, "", "this record's part of the bucket list (0-based)"),
                Field("parts", U8, "", "records the bucket list was split into"),
            ]
            fixed = sum(f.type.size for f in fields) + REL_BYTES.size
            room = (MAX_PAYLOAD - fixed) // h2.SPARSE_ENTRY_SIZE * h2.SPARSE_ENTRY_SIZE
            fields.append(Field("buckets", REL_BYTES, "", f"{h.name}: the interval's non-zero"
                                " buckets, {u16 index; u64 count} each", max_len=room))
        return EventSchema(self.event, self.description + _describe(self), tuple(fields),
                           self.sampler, self.cadence or _cadence(self))


def _cadence(f: Family) -> str:
    if not f.labels:
        return "one record per interval"
    return "one record per " + " and ".join(lb.name for lb in f.labels) + " per interval"


def _describe(f: Family) -> str:
    h = f.histogram
    return f" Histogram: {h.name} ({h.unit}), H2 layout." if h else ""


class Oversampler:
    """Collects one family's samples and summarises them once per publish interval.

    ``add`` takes, per label tuple, the values of one sample (cumulative counter totals and
    gauge levels, in the family's scalar order). ``publish`` returns the interval's records
    for the family's event and for its ``_dist`` event, and starts the next interval.
    Counter rates come from consecutive samples; a counter that went down was reset and
    gives no rate for that step. ``add`` only stores the sample (it runs up to ten times
    per interval); all arithmetic happens in ``publish``, vectorised over samples, label
    sets and metrics at once.
    """

    def __init__(self, family: Family) -> None:
        self.family = family
        scalars = family.scalars
        self._cols = np.array([j for j, m in enumerate(scalars) if m.dist], dtype=np.intp)
        self._counter = np.array([scalars[j].kind is Kind.COUNTER for j in self._cols],
                                 dtype=bool)
        self._names = [scalars[j].name.encode() for j in self._cols]
        #: (t_ns, rows) of each sample since the last publish, after the carried-over one.
        self._samples: list[tuple[int, Mapping[tuple, Sequence[int]]]] = []
        #: The last sample of the previous interval: the base of the first rate.
        self._base: tuple[int, Mapping[tuple, Sequence[int]]] | None = None
        #: The last add() kept values only (nobody consumed the _dist event).
        self._plain = False

    @property
    def last(self) -> Mapping[tuple, Sequence[int]]:
        """Return the rows of the latest sample of this interval ({} if none)."""
        return self._samples[-1][1] if self._samples else {}

    def add(self, t_ns: int, rows: Mapping[tuple, Sequence[int]], dist: bool = True) -> None:
        """Record one sample taken at monotonic time ``t_ns``.

        ``dist=False`` (nobody consumes the _dist event) keeps only the latest values.
        """
        if not dist or not len(self._cols):
            self._samples = [(t_ns, rows)]
            self._base = None
            self._plain = True
            return
        if self._plain:  # the _dist event was just enabled: start its series afresh
            self._samples = []
            self._plain = False
        self._samples.append((t_ns, rows))

    def publish(self) -> tuple[list[tuple], list[tuple]]:
        """Return (records of the family's event, records of its _dist event)."""
        if not self._samples:
            return [], []
        t_last, last = self._samples[-1]
        records = [(*key, *(int(v) for v in values)) for key, values in last.items()]
        dist: list[tuple] = []
        keys = tuple(last)
        if len(self._cols) and keys and not self._plain:
            dist = self._summarise(keys, last)
        self._base = None if self._plain else (t_last, last)
        self._samples = []
        return records, dist

    def _summarise(self, keys: tuple, last: Mapping[tuple, Sequence[int]]) -> list[tuple]:
        series = ([self._base] if self._base is not None else []) + self._samples
        nan_row = [np.nan] * len(self.family.scalars)
        # (samples, keys, metrics) of the oversampled columns; NaN where a key was absent.
        v = np.array([[rows.get(k, nan_row) for k in keys] for _t, rows in series],
                     dtype=np.float64)[:, :, self._cols]
        t = np.array([t for t, _rows in series], dtype=np.float64)
        # Gauges: this interval's levels. Counters: rates between consecutive samples,
        # from the previous interval's last one on. Both padded with NaN to one length.
        levels = v[1:] if self._base is not None else v
        values = np.full(levels.shape, np.nan)
        values[:, :, ~self._counter] = levels[:, :, ~self._counter]
        if len(series) > 1:
            with np.errstate(invalid="ignore"):
                d = np.diff(v, axis=0)[:, :, self._counter]
                rate = d * (1e9 / np.diff(t))[:, None, None]
                rate[d < 0] = np.nan  # a counter went back: reset, no rate for that step
            values[len(values) - len(rate):, :, self._counter] = rate
        arr = np.sort(values, axis=0)  # NaN sorts last
        n = np.sum(~np.isnan(arr), axis=0)  # valid values per (key, metric)
        # Nearest rank for every quantile, key and metric at once: index ceil(q*n) - 1.
        idx = np.maximum(np.ceil(_QS[:, None, None] * n[None]) - 1, 0).astype(np.intp)
        picked = np.take_along_axis(arr, np.minimum(idx, len(arr) - 1), axis=0)
        picked = np.where(n[None] > 0, np.maximum(np.rint(picked), 0), 0)
        qs = picked.astype(np.uint64).transpose(1, 2, 0).tolist()  # [key][metric][quantile]
        out = []
        names, cols = self._names, self._cols.tolist()
        for i, key in enumerate(keys):
            row, kq = last[key], qs[i]
            for c, j in enumerate(cols):
                out.append((*key, names[c], int(row[j]), *kq[c]))
        return out


def _align(keys: tuple, arr: np.ndarray, want: tuple) -> np.ndarray:
    """Return ``arr``'s rows reordered to ``want`` (NaN for keys it lacks)."""
    index = {k: i for i, k in enumerate(keys)}
    out = np.full((len(want), arr.shape[1]), np.nan)
    for i, k in enumerate(want):
        j = index.get(k)
        if j is not None:
            out[i] = arr[j]
    return out


def histogram_records(schema: EventSchema, labels: tuple, scalars: Sequence[int],
                      counts: np.ndarray) -> list[tuple]:
    """Return the record(s) of a histogram family for one interval's bucket ``counts``.

    A bucket list too long for one record is split across ``parts`` records; every part
    repeats the labels, scalars and percentiles so each stands alone in ftrace or perf.
    """
    qs = h2.percentiles(counts, [q for _s, q in HIST_QUANTILES])
    head = (*labels, *scalars, int(counts.sum()), *qs, h2.GROUPING_POWER, h2.MAX_VALUE_POWER)
    parts = h2.split_sparse(h2.encode_sparse(counts), schema.fields[-1].max_len)
    if len(parts) > 255:
        raise ValueError(f"{schema.name}: {len(parts)} parts exceed the u8 part counter")
    return [(*head, i, len(parts), p) for i, p in enumerate(parts)]
