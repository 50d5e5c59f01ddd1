"""Decoded tracepoint records, as every consumer (top, tail, record, exporter) sees them.

A record has two namespaces that never mix: its event's payload fields (``r["cpu"]`` or
``r.fields["cpu"]``: the CPU the values are about) and its own metadata (``r.meta.cpu``:
the CPU the record was written on). The metadata keeps ftrace's names as attributes,
``time_ns``, ``common_cpu`` and ``common_pid``, which no event field may take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..encoding import EventSchema
from ..metrics import h2
from ..otel import wire

#: The keys of the JSON form that are not event fields (``time``: the wall clock, present
#: when ``Record.to_json`` is given the source's wall offset, as tail gives it).
JSON_META = ("event", "time_ns", "common_cpu", "common_pid", "time")
#: Events that applications publish, which every consumer reads beside ours: OpenTelemetry's
#: ``otlp_metrics`` (``rezolus_ue.otel.wire``, decoded by ``consume.otlp``). A
#: subscription adds the publishing process to each of their records: ``pid``, ``comm``.
APP_EVENTS: dict[str, EventSchema] = {wire.EVENT: wire.SCHEMA}


def event_schema(event: str) -> EventSchema | None:
    """Return the schema of an event a consumer reads (ours or an application's), or None."""
    from ..schema import by_name

    return by_name().get(event) or APP_EVENTS.get(event)


class Meta(NamedTuple):
    """Where and when a record was written (not what it is about: see ``Record.fields``)."""

    time_ns: int  #: CLOCK_MONOTONIC of the writing host (the perf sample time)
    cpu: int  #: the CPU the writer ran on
    pid: int  #: the writer (the agent)


class Histogram:
    """One record's H2 bucket counts, with percentile helpers.

    ``counts`` is the dense H2 array (``rezolus_ue.metrics.h2``); values are reported as
    their bucket's upper edge, as the agent's own percentile fields are.
    """

    __slots__ = ("counts",)

    def __init__(self, counts: np.ndarray) -> None:
        self.counts = counts

    def sum(self) -> int:
        """Return how many values the histogram holds."""
        return int(self.counts.sum())

    def percentile(self, p: float) -> int:
        """Return the value at percentile ``p`` (0-100), 0 if the histogram is empty."""
        return self.percentiles([p])[0]

    def percentiles(self, ps: Sequence[float]) -> list[int]:
        """Return the values at each percentile of ``ps`` (0-100)."""
        return h2.percentiles(self.counts, [p / 100 for p in ps])

    def nonzero(self) -> int:
        """Return how many buckets hold a value."""
        return int(np.count_nonzero(self.counts))

    def __add__(self, other: Histogram) -> Histogram:
        """Return the merge of two histograms (parts of one publish, or intervals)."""
        return Histogram(self.counts + other.counts)


@dataclass(frozen=True, slots=True)
class Record:
    """One record of one rezolus-ue event.

    ``fields`` are the event's payload fields by name: integers, ``str`` for char arrays
    and ``__rel_loc char[]``, ``bytes`` for ``__rel_loc u8[]`` (a histogram's ``buckets``:
    see ``histogram()``). ``meta`` is where and when it was written.
    """

    event: str
    time_ns: int
    common_cpu: int
    common_pid: int
    fields: dict[str, object] = field(default_factory=dict)

    @property
    def meta(self) -> Meta:
        """Return the record's time, writing CPU and writing pid."""
        return Meta(self.time_ns, self.common_cpu, self.common_pid)

    def __getitem__(self, name: str) -> object:
        """Return the event field ``name`` (KeyError if the event has none)."""
        return self.fields[name]

    def get(self, name: str, default: object = None) -> object:
        """Return the event field ``name``, or ``default``."""
        return self.fields.get(name, default)

    def histogram(self) -> Histogram | None:
        """Return the record's buckets as a Histogram, or None if it has none."""
        data = self.fields.get("buckets")
        return Histogram(h2.decode_sparse(data)) if isinstance(data, bytes | bytearray) else None

    def to_json(self, wall_offset_ns: int | None = None) -> dict[str, object]:
        """Return the one JSON form of a record (``tail --format json``'s, with the source's
        ``wall_offset_ns``; ``record_from_json``'s input).

        The metadata under ftrace's reserved names (``event``, ``time_ns``, ``common_cpu``,
        ``common_pid``), then the event's fields; ``buckets`` as {index: count}, other
        bytes as hex; last, given ``wall_offset_ns``, ``time``: ``time_ns`` plus it, in ns
        since the epoch (a monotonic time alone cannot say which wall time it was).
        """
        out: dict[str, object] = {"event": self.event, "time_ns": self.time_ns,
                                  "common_cpu": self.common_cpu,
                                  "common_pid": self.common_pid}
        for k, v in self.fields.items():
            if k == "buckets" and isinstance(v, bytes | bytearray):
                counts = h2.decode_sparse(v)
                nz = np.flatnonzero(counts)
                out[k] = {int(i): int(counts[i]) for i in nz}
            elif isinstance(v, bytes | bytearray):
                out[k] = v.hex()
            else:
                out[k] = v
        if wall_offset_ns is not None:
            out["time"] = self.time_ns + wall_offset_ns
        return out


def record_from_json(d: dict[str, object]) -> Record:
    """Return the record of its JSON form (``Record.to_json``, ``tail --format json``);
    ``time``, derived from ``time_ns``, is not read.

    Fields the schema declares as bytes come as hex, or for ``buckets`` as {index: count}.
    """
    fields = {k: v for k, v in d.items() if k not in JSON_META}
    schema = event_schema(str(d["event"]))
    if schema is not None:
        for f in schema.fields:
            v = fields.get(f.name)
            if f.type.dynamic and not f.type.text:
                if isinstance(v, str):
                    fields[f.name] = bytes.fromhex(v)
                elif isinstance(v, dict):
                    counts = h2.new_counts()
                    for i, c in v.items():
                        counts[int(i)] = c
                    fields[f.name] = h2.encode_sparse(counts)
    return Record(str(d["event"]), int(d["time_ns"]),  # type: ignore[call-overload]
                  int(d.get("common_cpu", 0)), int(d.get("common_pid", 0)),  # type: ignore[call-overload]
                  fields)
