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
import math
import struct
from bisect import bisect_left
from collections.abc import Callable, ItemsView, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import accumulate, chain, repeat
from operator import itemgetter, mul, sub, truediv

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
#: Longest metric name (the _dist event's ``metric`` field is char[24]).
METRIC_NAME_MAX = 23
#: Quantiles published for histograms.
HIST_QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))


class Kind(enum.Enum):
    """What a metric's value means."""

    COUNTER = "counter"  # cumulative, only grows (resets are detected)
    GAUGE = "gauge"  # a level, may go up and down
    HISTOGRAM = "histogram"  # H2 buckets of a distribution, cumulative


class Cost(enum.Enum):
    """What a consumer that enables an event makes the host pay, besides the agent's own
    reading: measured per BPF hook in docs/PERFORMANCE.md, section "bpf_hooks" (ns per
    run, share of a CPU), and on workloads in section "overhead"."""

    #: Read on the agent's clock (procfs, sysfs, netlink, perf counters, the agent
    #: itself): nothing is paid per kernel event, whatever the workload does.
    CHEAP = "cheap"
    #: Counted by BPF programs on hot paths (syscall entry and exit, scheduler switch and
    #: wakeup, softirq, block IO, packets, TCP): every such kernel event of the workload
    #: pays while a consumer has the event enabled.
    COSTLY = "costly"


COSTLY = Cost.COSTLY


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
    #: The sampler that publishes it: its name, or (as every sampler package declares
    #: it) the declaring module's ``__name__``, ``rezolus_ue.samplers.<name>``, whose last
    #: part names it: the folder is the one place the name is written.
    sampler: str
    description: str
    labels: tuple[Label, ...]
    metrics: tuple[Metric, ...]
    #: How the _dist event's samples are taken, when not every sample_interval.
    dist_sampling: str = ""
    #: What enabling its events costs the host (its _dist event's too): the one
    #: declaration ``events``, the docs and the consumers' defaults read.
    cost: Cost = Cost.CHEAP

    def __post_init__(self) -> None:
        if "." in self.sampler:
            object.__setattr__(self, "sampler", self.sampler.rpartition(".")[2])
        hist = [m for m in self.metrics if m.kind is Kind.HISTOGRAM]
        if len(hist) > 1 or (hist and self.metrics[-1].kind is not Kind.HISTOGRAM):
            raise ValueError(f"{self.event}: at most one histogram, declared last")
        self.schemas  # noqa: B018 - validate the derived events now, at import

    @property
    def scalars(self) -> tuple[Metric, ...]:
        """Return the counters and gauges, in order."""
        return tuple(m for m in self.metrics if m.kind is not Kind.HISTOGRAM)

    def slot(self, name: str) -> int:
        """Return the position of scalar ``name`` in a row (``scalars`` order)."""
        for i, m in enumerate(self.scalars):
            if m.name == name:
                return i
        raise KeyError(f"{self.event} has no scalar {name!r}")

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
            f"Distribution over each publish interval of {self.event}'s metrics, sampled "
            + (self.dist_sampling or "every sample_interval (oversampling): a burst shorter"
               " than the interval shows in max."),
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
            room = min(MAX_PAYLOAD - fixed, h2.MAX_ENTRIES * h2.SPARSE_ENTRY_SIZE) \
                // h2.SPARSE_ENTRY_SIZE * h2.SPARSE_ENTRY_SIZE
            fields.append(Field("buckets", REL_BYTES, "", f"{h.name}: the interval's non-zero"
                                " buckets, {u16 index; u64 count} each", max_len=room,
                                to_text=h2.sparse_to_text, text_len=h2.MAX_TEXT))
        return EventSchema(self.event, self.description + _describe(self), tuple(fields),
                           self.sampler, _cadence(self))


def _cadence(f: Family) -> str:
    if not f.labels:
        return "one record per interval"
    return "one record per " + " and ".join(lb.name for lb in f.labels) + " per interval"


def _describe(f: Family) -> str:
    h = f.histogram
    return f" Histogram: {h.name} ({h.unit}), H2 layout." if h else ""


class Table(Mapping):
    """One sample of a family's series as one array: ``labels`` (the label tuples, in row
    order) and ``array`` (int64, one row per label tuple, the family's scalar order).

    What a reader of fixed-layout text (a column per CPU) gives instead of a dict: it is
    the ``{labels: values}`` mapping it stands for (built on first use, values as tuples
    of ints), so every user of rows takes it, while the Oversampler summarises samples of
    the same labels with NumPy straight from their arrays. At 128 CPUs a tuple per series
    at each sample, then an array built from them again at publish, made cpu_softirq's
    parse and summary cost 1,870 us a second; from its Tables 970 (bench/scale.py's
    paced agent, 2-vCPU reference VM). Readers hand the same ``labels`` list while the
    layout holds.
    """

    __slots__ = ("_rows", "array", "labels")

    def __init__(self, labels: list[tuple], array: np.ndarray) -> None:
        self.labels, self.array = labels, array
        self._rows: dict[tuple, tuple[int, ...]] | None = None

    @property
    def rows(self) -> dict[tuple, tuple[int, ...]]:
        """Return the ``{labels: values}`` dict this table stands for."""
        if self._rows is None:
            self._rows = dict(zip(self.labels, map(tuple, self.array.tolist()), strict=True))
        return self._rows

    def __getitem__(self, key: tuple) -> tuple[int, ...]:
        return self.rows[key]

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def items(self) -> ItemsView[tuple, tuple[int, ...]]:
        return self.rows.items()

    def records(self) -> Iterator[tuple]:
        """Return the ``(*labels, *values)`` records of the rows, in order (made in C:
        one tuple each)."""
        return zip(*zip(*self.labels, strict=True), *self.array.T.tolist(), strict=True)

    def __repr__(self) -> str:
        return f"Table({self.rows!r})"


class Oversampler:
    """Collects one family's samples and summarises them once per publish interval.

    ``add`` takes, per label tuple, the values of one sample (cumulative counter totals and
    gauge levels, in the family's scalar order). ``publish`` returns the interval's records
    for the family's event and for its ``_dist`` event, and starts the next interval.
    Counter rates come from consecutive samples; a counter that went down was reset and
    gives no rate for that step. ``add`` only stores the sample (it runs up to ten times
    per interval); the arithmetic happens in ``publish``.

    The summary is plain Python, not NumPy: an interval holds about ten samples of a few
    label sets, and right after the agent's sleep (cold caches) the thirty-odd calls of a
    vectorised NumPy summary cost more than this loop. Measured on the 2-vCPU reference VM,
    one family's publish, cold: 520-640 us with NumPy, 120-380 us in plain Python (2 to 4
    label sets of 1 to 10 oversampled metrics); counters that did not move and gauges that
    held one level, common in a second, take a shortcut. A family of many series (a
    hundred CPUs or interfaces) is the exception: its summary is computed with NumPy
    (``_summarise_arrays``, from VECTOR_SERIES series), to the same records; from the
    samples' own arrays when its reader gives ``Table`` s.
    """

    def __init__(self, family: Family) -> None:
        self.family = family
        scalars = family.scalars
        #: (scalar position, is a counter, metric name) of each oversampled metric.
        self._dist = tuple((j, m.kind is Kind.COUNTER, m.name.encode())
                           for j, m in enumerate(scalars) if m.dist)
        #: (t_ns, rows) of each sample since the last publish, after the carried-over one.
        self._samples: list[tuple[int, Mapping[tuple, Sequence[int]]]] = []
        #: The last sample of the previous interval: the base of the first rate.
        self._base: tuple[int, Mapping[tuple, Sequence[int]]] | None = None
        #: The last add() kept values only (nobody consumed the _dist event).
        self._plain = False
        #: (label sets, the columns of the (*labels, name) heads of the records) of the
        #: last NumPy summary: the label sets rarely change, so the heads are made once.
        self._heads: tuple[list[tuple], list[tuple]] = ([], [])

    @property
    def last(self) -> Mapping[tuple, Sequence[int]]:
        """Return the rows of the latest sample of this interval ({} if none)."""
        return self._samples[-1][1] if self._samples else {}

    def add(self, t_ns: int, rows: Mapping[tuple, Sequence[int]], dist: bool = True) -> None:
        """Record one sample taken at monotonic time ``t_ns``.

        ``dist=False`` (nobody consumes the _dist event) keeps only the latest values.
        """
        if not dist or not self._dist:
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
        rows, dist = self.interval()
        return [(*key, *values) for key, values in rows.items()], dist

    def interval(self) -> tuple[Mapping[tuple, Sequence[int]], list[tuple]]:
        """Return (the interval's rows: its last sample's, records of the _dist event),
        and start the next interval."""
        if not self._samples:
            return {}, []
        last = self._samples[-1][1]
        dist: list[tuple] = []
        if self._dist and last and not self._plain:
            dist = self._summarise(last)
        self._base = None if self._plain else self._samples[-1]
        self._samples = []
        return last, dist

    def _summarise(self, last: Mapping[tuple, Sequence[int]]) -> list[tuple]:
        """Return the _dist records: per label set of the last sample and oversampled
        metric, (labels, name, last value, p50, p90, p99, max).

        Written for the cold caches the agent runs in (it sleeps between ticks): the loops
        over samples are ``map`` over C functions (no Python frame per element), and only
        the unusual cases (a label set that came or went, a counter reset, two samples at
        one time) take the slower general path.
        """
        base = self._base
        series = self._samples if base is None else [base, *self._samples]
        times = [t for t, _rows in series]
        steps = list(map(sub, times[1:], times))
        if min(steps, default=1) > 0:
            # Per step: the factor turning a counter's increase into a rate per second.
            per_s: list[float | None] = list(map(truediv, repeat(1e9), steps))
        else:
            per_s = [1e9 / d if d > 0 else None for d in steps]
        steady = None not in per_s
        skip = 0 if base is None else 1  # gauges: this interval's levels, not the base's
        dicts = [rows for _t, rows in series]
        if steady and len(last) * len(self._dist) >= VECTOR_SERIES:
            out = self._summarise_arrays(last, dicts, per_s, skip)
            if out is not None:
                return out
        out = []
        append = out.append
        for key, row in last.items():
            try:
                rows = list(map(itemgetter(key), dicts))
            except KeyError:  # absent from some samples: a label set came or went
                cols = []
            else:
                if rows.count(row) == len(rows):  # nothing moved (an idle device...)
                    for j, counter, name in self._dist:
                        x = row[j]
                        append((*key, name, x, *(_ZEROS if counter or x < 0 else
                                                 (round(x),) * len(DIST))))
                    continue
                cols = list(zip(*rows, strict=True))
            for j, counter, name in self._dist:
                if not (cols and steady):
                    q = _quantiles(_general(dicts, key, j, counter, per_s, skip))
                elif counter:
                    v = cols[j]
                    d = list(map(sub, v[1:], v))
                    if not any(d):  # did not move (many counters, most of the time)
                        q = _ZEROS
                    elif min(d) < 0:  # a counter went back: reset, no rate for that step
                        q = _quantiles([x * f for x, f in zip(d, per_s, strict=True)
                                        if x >= 0])
                    else:
                        q = _quantiles(list(map(mul, d, per_s)))
                else:
                    v = cols[j][skip:]
                    x = v[0]
                    if v.count(x) == len(v):  # one level all interval long
                        q = (round(x),) * len(DIST) if x >= 0 else _ZEROS
                    else:
                        q = _quantiles(list(v))
                append((*key, name, row[j], *q))
        return out


    def _summarise_arrays(self, last: Mapping[tuple, Sequence[int]],
                          dicts: list[Mapping[tuple, Sequence[int]]], per_s: list,
                          skip: int) -> list[tuple] | None:
        """Return what ``_summarise`` returns, computed with NumPy over every label set
        at once: at 128 CPUs a family holds over a thousand series, whose loop cost 2 us
        each (bench/scale.py). The same arithmetic: integer differences, each times its
        step's float factor, nearest ranks of the sorted values, rounded half to even.
        None (the loop decides) when a sample lacks a label set of the last or a value
        is not an integer of less than 2**62, or when the samples are dicts of a family
        with fewer oversampled metrics than others (the array of every value built from
        them costs more than the loop then)."""
        table = _stacked(last, dicts)
        if table is not None:
            keys = last.labels  # type: ignore[attr-defined]  # Tables of the same labels
        elif 2 * len(self._dist) >= len(self.family.scalars):
            keys = list(last)
            pick = itemgetter(*keys) if len(keys) > 1 else (lambda d: (d[keys[0]],))
            try:
                table = np.array([pick(d) for d in dicts])
            except (KeyError, ValueError):
                return None
        else:
            return None
        if table.dtype != np.int64 or table.ndim != 3 or table.size == 0 or \
                int(np.abs(table).max()) >= 1 << 62:
            return None
        cols = [j for j, _c, _n in self._dist]
        counters = np.array([c for _j, c, _n in self._dist])
        q = np.zeros((len(keys), len(cols), len(DIST)), dtype=np.int64)
        if counters.any():
            v = table[:, :, [j for j, c, _n in self._dist if c]]
            d = v[1:] - v[:-1]  # (steps, keys, metrics)
            rates = d * np.array(per_s, dtype=np.float64)[:, None, None]
            if np.abs(rates).max(initial=0) >= 1 << 62:  # beyond exact int64 results
                return None
            back = d < 0  # a counter went back: reset, no rate for that step
            n: np.ndarray | int = len(d)
            if back.any():
                rates[back] = np.nan
                n = np.count_nonzero(~back, axis=0)
            q[:, counters] = _nearest_ranks(np.sort(rates, axis=0), n)
        if not counters.all():
            v = table[skip:, :, [j for j, c, _n in self._dist if not c]]
            q[:, ~counters] = _nearest_ranks(np.sort(v, axis=0), len(v))
        np.maximum(q, 0, out=q)
        # Each record: its head's columns, then the last value's and the quantiles',
        # zipped in C: a tuple per record and nothing else (1,280 series: the loop cost
        # 262 us, a tuple of the values added to each head 197, this 90; 2-vCPU VM).
        if self._heads[0] is not keys and self._heads[0] != keys:
            names = [n for _j, _c, n in self._dist]
            self._heads = keys, list(zip(*[(*key, name) for key in keys for name in names],
                                         strict=True))
        tails = np.concatenate((table[-1][:, cols, None], q), axis=2)  # dicts[-1] is last
        return list(zip(*self._heads[1], *tails.reshape(-1, tails.shape[2]).T.tolist(),
                        strict=True))


#: Series (label sets x oversampled metrics) from which a family's summary is computed
#: with NumPy (``_summarise_arrays``): from its samples' arrays if they are Tables of the
#: same labels, else if at least half its metrics are oversampled (the array built from
#: the dicts holds them all); otherwise the plain loop is cheaper (2-vCPU reference VM:
#: even at 48 series of 3 metrics; from 64 series of 8 or 10 metrics, 1.4x to 3.4x
#: faster at 1,280 series; 1 metric of 9 from dicts: slower at 128).
VECTOR_SERIES = 64


def _stacked(last: Mapping[tuple, Sequence[int]],
             samples: list[Mapping[tuple, Sequence[int]]]) -> np.ndarray | None:
    """Return the (samples, labels, scalars) array of samples that are all Tables of the
    labels of ``last`` (in its order), else None."""
    if not isinstance(last, Table):
        return None
    labels = last.labels
    for t in samples:
        if not isinstance(t, Table) or (t.labels is not labels and t.labels != labels):
            return None
    return np.stack([t.array for t in samples])


def _nearest_ranks(ordered: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """Return the DIST quantiles (``_quantiles``) along axis 0 of values sorted along it
    (NaNs, values left out, last), ``n`` values each: (keys, metrics, quantiles), 0 where
    there are no values."""
    out = np.zeros((*ordered.shape[1:], len(DIST)), dtype=np.int64)
    if ordered.shape[0] == 0:
        return out
    if isinstance(n, int) or n.min() == n.max():  # as many values everywhere (usual)
        return _nearest_ranks_of(ordered, int(n if isinstance(n, int) else n.flat[0]), out)
    n = np.broadcast_to(np.asarray(n), ordered.shape[1:])
    for i, (_s, quantile) in enumerate(DIST):
        rank = np.maximum(np.ceil(quantile * n).astype(np.int64) - 1, 0)
        got = np.take_along_axis(ordered, np.minimum(rank, ordered.shape[0] - 1)[None],
                                 axis=0)[0]
        if got.dtype.kind == "f":
            got = np.rint(np.where(n > 0, got, 0)).astype(np.int64)
        out[..., i] = np.where(n > 0, got, 0)
    return out


def _nearest_ranks_of(ordered: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """Return ``_nearest_ranks`` into ``out`` where every series has ``n`` values."""
    if n <= 0:
        return out
    for i, (_s, quantile) in enumerate(DIST):
        got = ordered[max(math.ceil(quantile * n) - 1, 0)]
        out[..., i] = np.rint(got) if got.dtype.kind == "f" else got
    return out


def _general(dicts: list[Mapping[tuple, Sequence[int]]], key: tuple, j: int, counter: bool,
             per_s: list[float | None], skip: int) -> list:
    """Return the values of metric ``j`` of ``key`` to summarise, where some sample lacks the
    key or two samples share a time: counter rates between consecutive samples that both
    have it, gauge levels of the samples that have it."""
    v = [r[j] if (r := rows.get(key)) is not None else None for rows in dicts]
    if not counter:
        return [x for x in v[skip:] if x is not None]
    return [(b - a) * f for a, b, f in zip(v, v[1:], per_s, strict=False)
            if f is not None and a is not None and b is not None and b >= a]


#: Nearest-rank positions of the DIST quantiles among n sorted values, by n.
_RANKS: dict[int, Callable[[list], tuple]] = {}
_ZEROS = (0,) * len(DIST)


def _quantiles(values: list) -> tuple[int, ...]:
    """Return the DIST quantiles (nearest rank: the ceil(q * n)-th smallest, at least the
    first) of ``values``, rounded half to even and at least 0; all 0 without values."""
    n = len(values)
    if not n:
        return _ZEROS
    pick = _RANKS.get(n)
    if pick is None:
        pick = _RANKS[n] = itemgetter(*(max(math.ceil(q * n) - 1, 0) for _s, q in DIST))
    values.sort()
    qs = tuple(map(round, pick(values)))
    if qs[0] < 0:  # ascending: only the smallest can be below 0
        return tuple(max(q, 0) for q in qs)
    return qs


def histogram_records(schema: EventSchema, labels: tuple, scalars: Sequence[int],
                      counts: np.ndarray) -> list[tuple]:
    """Return the record(s) of a histogram family for one interval's bucket ``counts``.

    A bucket list too long for one record is split across ``parts`` records; every part
    repeats the labels, scalars and percentiles so each stands alone in ftrace or perf.
    """
    return sparse_histogram_records(schema, labels, scalars, *h2.nonzero(counts))


#: Upper edge of every bucket, as Python ints.
_UPPER: list[int] = h2.UPPER.tolist()


@lru_cache(maxsize=64)
def _sparse_struct(n: int) -> struct.Struct:
    """Return the struct of ``n`` entries of the sparse form (h2.SPARSE_DTYPE, packed)."""
    return struct.Struct("=" + "HQ" * n)


def sparse_histogram_records(schema: EventSchema, labels: tuple, scalars: Sequence[int],
                             index: Sequence[int], count: Sequence[int]) -> list[tuple]:
    """Return ``histogram_records`` of the interval whose non-zero buckets are ``index``
    (ascending) with ``count`` values each.

    Plain Python over the non-zero buckets (usually a handful): cheaper than NumPy on a
    full bucket array, and exactly ``h2.percentiles`` and ``h2.encode_sparse``.
    """
    cum = list(accumulate(count))
    total = cum[-1] if cum else 0
    if total:
        # The bucket holding the nearest rank (at least the first, at most the last:
        # q * total is a float) is the first whose running count reaches it.
        qs = [_UPPER[index[bisect_left(cum, max(1, min(total, math.ceil(q * total))))]]
              for _s, q in HIST_QUANTILES]
    else:
        qs = [0] * len(HIST_QUANTILES)
    sparse = _sparse_struct(len(index)).pack(*chain.from_iterable(zip(index, count,
                                                                        strict=True)))
    head = (*labels, *scalars, total, *qs, h2.GROUPING_POWER, h2.MAX_VALUE_POWER)
    parts = h2.split_sparse(sparse, schema.fields[-1].max_len)
    if len(parts) > 255:
        raise ValueError(f"{schema.name}: {len(parts)} parts exceed the u8 part counter")
    return [(*head, i, len(parts), p) for i, p in enumerate(parts)]
