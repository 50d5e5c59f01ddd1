"""OpenTelemetry metrics from any process: ``otlp_metrics`` records decoded to data points.

Applications publish metrics with an OpenTelemetry user_events exporter (the Rust and
.NET ones, or ``rezolus_ue.otel``): one record of the ``otlp_metrics`` tracepoint
(``rezolus_ue.otel.wire``) per data point, whose ``buffer`` is one serialized OTLP
``ExportMetricsServiceRequest``. A subscription hands such records on as any other,
their raw buffer kept (so ``record`` stores them as written) with the publishing
process's ``pid`` and ``comm`` added; ``decode`` and ``Decoder`` turn a buffer into
``DataPoint``s.

The protobuf is parsed with ``opentelemetry-proto``, the ``otel`` extra: the agent and
every other event need nothing of it, so it stays optional, and naming ``otlp_metrics``
without it is a one-line error (``require``). What a publisher gets wrong (not protobuf,
another protocol or version, a truncated or empty buffer, OTLP's rules broken) is a
``MalformedPayload``: ``Decoder`` counts it and says so once per publisher and kind, and
the consumer reads on.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import math
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import ConfigError, RezolusError
from ..otel import wire
from .records import Record

log = logging.getLogger("rezolus_ue")

#: The tracepoint's name, in either group (``user_events:`` or ``rezolus_ue:``).
EVENT = wire.EVENT
INSTALL = "pip install 'rezolus-ue[otel]'"
#: OTLP's AggregationTemporality values.
_TEMPORALITY = {1: "delta", 2: "cumulative"}
#: The exponent range OTLP allows an exponential histogram's scale.
_SCALES = range(-10, 21)


class MalformedPayload(RezolusError):
    """An ``otlp_metrics`` record that is not one OTLP metrics request; ``kind`` says how:
    empty, protocol, version, truncated, protobuf or invalid (OTLP's rules broken)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"malformed otlp_metrics payload ({kind}): {detail}")
        self.kind = kind


class HistogramValue(NamedTuple):
    """An explicit-bucket histogram point: ``counts[i]`` values fell at or below
    ``bounds[i]`` (and above the bound before); the last count is above every bound."""

    count: int
    sum: float | None
    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    min: float | None
    max: float | None


class ExponentialValue(NamedTuple):
    """An exponential histogram point: bucket ``offset + i`` of either side holds the values
    in (base**(offset+i), base**(offset+i+1)], base = 2**(2**-scale)."""

    scale: int
    zero_count: int
    positive_offset: int
    positive_counts: tuple[int, ...]
    negative_offset: int
    negative_counts: tuple[int, ...]
    count: int
    sum: float | None
    min: float | None
    max: float | None


@dataclass(frozen=True, slots=True)
class DataPoint:
    """One OTLP data point with what it belongs to: its metric, resource and scope.

    ``kind``: sum, gauge, histogram or exponential_histogram; ``value`` holds a sum's or
    gauge's number (None: no value recorded), ``histogram`` or ``exponential`` the others.
    ``temporality``: delta or cumulative (a gauge, a reading, is cumulative: the latest
    one stands). Times are OTLP's, ns since the epoch. ``pid``/``comm``: the publisher.
    """

    metric: str
    description: str
    unit: str
    kind: str
    monotonic: bool
    temporality: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    start_ns: int
    time_ns: int
    value: int | float | None = None
    histogram: HistogramValue | None = None
    exponential: ExponentialValue | None = None
    pid: int = 0
    comm: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the point as JSON-ready values: its times under OTLP's names
        (``start_time_unix_nano``, ``time_unix_nano``), beside a record's own ``time_ns``;
        only the value field its kind has; bytes attributes as hex."""
        out: dict[str, Any] = {
            "pid": self.pid, "comm": self.comm, "metric": self.metric,
            "description": self.description, "unit": self.unit, "kind": self.kind,
            "monotonic": self.monotonic, "temporality": self.temporality,
            "attributes": _jsonable(self.attributes), "resource": _jsonable(self.resource),
            "scope": self.scope, "start_time_unix_nano": self.start_ns,
            "time_unix_nano": self.time_ns}
        if self.histogram is not None:
            out["histogram"] = _jsonable(self.histogram._asdict())
        elif self.exponential is not None:
            out["exponential"] = _jsonable(self.exponential._asdict())
        else:
            out["value"] = _jsonable(self.value)
        return out


def _jsonable(v: Any) -> Any:
    """Return ``v`` with bytes as hex, tuples as lists and non-finite floats as text
    (JSON has neither bytes nor NaN)."""
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


# --- the optional dependency ------------------------------------------------------------


@cache
def available() -> bool:
    """Return whether opentelemetry-proto (and protobuf under it) can be imported."""
    try:
        return importlib.util.find_spec("opentelemetry.proto") is not None
    except (ImportError, ValueError):
        return False


def require() -> None:
    """Raise ConfigError (one line, with the install command) unless the decoder's
    dependency is installed."""
    if not available():
        raise ConfigError(f"reading {EVENT} needs opentelemetry-proto: {INSTALL}")


@cache
def _proto() -> tuple[Any, type[Exception]]:
    """Return (ExportMetricsServiceRequest, protobuf's DecodeError), imported once."""
    require()
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    return ExportMetricsServiceRequest, DecodeError


# --- decoding ---------------------------------------------------------------------------


def check_wire(protocol: int, version: str | bytes) -> None:
    """Raise MalformedPayload unless a record's ``protocol`` and ``version`` are the ones
    this decoder reads (OTLP protobuf, ``wire.VERSION``)."""
    if protocol != wire.PROTOCOL_OTLP:
        raise MalformedPayload("protocol", f"protocol {protocol}, not {wire.PROTOCOL_OTLP}"
                                           " (OTLP protobuf)")
    v = version.encode(errors="surrogateescape") if isinstance(version, str) else version
    if v.rstrip(b"\0") != wire.VERSION:
        raise MalformedPayload("version", f"version {v!r}, not {wire.VERSION.decode()}")


def decode(buffer: bytes, pid: int = 0, comm: str = "") -> list[DataPoint]:
    """Return the data points of one serialized ExportMetricsServiceRequest, in order.

    Summaries (which OTLP keeps for compatibility and no user_events exporter writes) are
    left out. Raise MalformedPayload if ``buffer`` is empty, not that protobuf message,
    or breaks OTLP's rules (an unspecified temporality, bucket counts that do not match
    the bounds, bounds not increasing, a scale out of range); ConfigError if
    opentelemetry-proto is missing.
    """
    return _decode(buffer, pid, comm)[0]


def _decode(buffer: bytes, pid: int, comm: str) -> tuple[list[DataPoint], int]:
    """Return (the data points, how many summary points were left out)."""
    if not buffer:
        raise MalformedPayload("empty", "the buffer is empty")
    request_type, decode_error = _proto()
    try:
        request = request_type.FromString(bytes(buffer))
    except (decode_error, RecursionError, ValueError) as e:
        raise MalformedPayload("protobuf", f"not an ExportMetricsServiceRequest ({e})"
                               ) from None
    out: list[DataPoint] = []
    skipped = 0
    for rm in request.resource_metrics:
        resource = _attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            scope = sm.scope.name
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind == "summary":
                    skipped += len(m.summary.data_points)
                    continue
                if kind is None:
                    continue
                data = getattr(m, kind)
                temporality = "cumulative" if kind == "gauge" else _temporality(m.name, data)
                base = {"metric": m.name, "description": m.description, "unit": m.unit,
                        "kind": kind, "temporality": temporality, "resource": resource,
                        "scope": scope, "pid": pid, "comm": comm,
                        "monotonic": kind == "sum" and data.is_monotonic}
                for p in data.data_points:
                    out.append(DataPoint(attributes=_attributes(p.attributes),
                                         start_ns=p.start_time_unix_nano,
                                         time_ns=p.time_unix_nano, **base,
                                         **_VALUES[kind](m.name, p)))
    return out, skipped


def _temporality(metric: str, data: Any) -> str:
    t = _TEMPORALITY.get(data.aggregation_temporality)
    if t is None:
        raise MalformedPayload("invalid", f"{metric}: aggregation temporality"
                                          f" {data.aggregation_temporality} (unspecified)")
    return t


#: NumberDataPoint.flags: no value was recorded for the point (a gap).
_NO_RECORDED_VALUE = 1


def _number(_metric: str, p: Any) -> dict[str, Any]:
    which = p.WhichOneof("value")
    if which is None or p.flags & _NO_RECORDED_VALUE:
        return {"value": None}
    return {"value": getattr(p, which)}


def _optional(p: Any, name: str) -> float | None:
    return getattr(p, name) if p.HasField(name) else None


def _histogram(metric: str, p: Any) -> dict[str, Any]:
    bounds, counts = tuple(p.explicit_bounds), tuple(p.bucket_counts)
    if counts and len(counts) != len(bounds) + 1:
        raise MalformedPayload("invalid", f"{metric}: {len(counts)} bucket counts for"
                                          f" {len(bounds)} bounds")
    if any(math.isnan(b) for b in bounds) or not all(
            a < b for a, b in itertools.pairwise(bounds)):
        raise MalformedPayload("invalid", f"{metric}: bucket bounds do not increase")
    return {"histogram": HistogramValue(p.count, _optional(p, "sum"), bounds, counts,
                                        _optional(p, "min"), _optional(p, "max"))}


def _exponential(metric: str, p: Any) -> dict[str, Any]:
    if p.scale not in _SCALES:
        raise MalformedPayload("invalid", f"{metric}: scale {p.scale} outside"
                                          f" {_SCALES.start}..{_SCALES.stop - 1}")
    return {"exponential": ExponentialValue(
        p.scale, p.zero_count, p.positive.offset, tuple(p.positive.bucket_counts),
        p.negative.offset, tuple(p.negative.bucket_counts), p.count, _optional(p, "sum"),
        _optional(p, "min"), _optional(p, "max"))}


_VALUES: dict[str, Callable[[str, Any], dict[str, Any]]] = {
    "sum": _number, "gauge": _number, "histogram": _histogram,
    "exponential_histogram": _exponential}


def _attributes(kvs: Any) -> dict[str, Any]:
    """Return OTLP KeyValues as a dict (a repeated key: the last one stands)."""
    return {kv.key: _any_value(kv.value) for kv in kvs}


def _any_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return _attributes(v.kvlist_value.values)
    return None if which is None else getattr(v, which)


# --- records ----------------------------------------------------------------------------


class Publishers:
    """The process behind each writing thread, and its name.

    A record's ``common_pid`` is the thread that wrote it (an SDK exports from a thread
    of its own); ``/proc/<tid>/status`` names its process, ``/proc/<pid>/comm`` that
    process's name. Looked up at a thread's first record, then cached (bounded: an old
    thread's entry goes first); a thread gone before it was seen keeps its own id and
    no name.
    """

    def __init__(self, procfs_root: str | Path = "/proc", size: int = 4096) -> None:
        self.root = Path(procfs_root)
        self.size = size
        self._seen: OrderedDict[int, tuple[int, str]] = OrderedDict()

    def __call__(self, tid: int) -> tuple[int, str]:
        """Return (pid, comm) of the process of thread ``tid``."""
        hit = self._seen.get(tid)
        if hit is not None:
            return hit
        hit = self._seen[tid] = self._look(tid)
        if len(self._seen) > self.size:
            self._seen.popitem(last=False)
        return hit

    def _look(self, tid: int) -> tuple[int, str]:
        pid = tid
        try:
            for line in (self.root / str(tid) / "status").read_text().splitlines():
                if line.startswith("Tgid:"):
                    pid = int(line.split()[1])
                    break
            return pid, (self.root / str(pid) / "comm").read_text().rstrip("\n")
        except (OSError, ValueError, IndexError):
            return pid, ""


def record_fields(fields: dict[str, object], tid: int, publishers: Publishers,
                  uprobe: bool) -> dict[str, object]:
    """Return an ``otlp_metrics`` record's fields as every consumer keeps them: the
    buffer as bytes (base64 on the uprobe transport), then the publisher's pid and comm.
    Raise MalformedPayload if the buffer's text form is cut or not base64."""
    buf = fields.get("buffer")
    if uprobe and isinstance(buf, str):
        try:
            fields["buffer"] = wire.buffer_from_text(buf)
        except ValueError as e:
            raise MalformedPayload("truncated", str(e)) from None
    fields["pid"], fields["comm"] = publishers(tid)
    return fields


class Decoder:
    """Data points from ``otlp_metrics`` records, for a consumer that must not stop.

    ``points`` never raises for what a publisher wrote: a malformed record is counted in
    ``malformed`` (by kind) and yields nothing, and the first of each kind from each
    publisher is logged, once. Summary points, which are left out, count as
    ``unsupported``.
    """

    def __init__(self, on_malformed: Callable[[str], None] | None = None) -> None:
        require()
        self.malformed: Counter[str] = Counter()
        self.unsupported = 0
        self._said: set[tuple[int, str]] = set()
        self._say = on_malformed or (lambda message: log.warning("%s", message))

    def points(self, record: Record) -> list[DataPoint]:
        """Return the data points of one ``otlp_metrics`` record (none if malformed)."""
        f = record.fields
        pid, comm = f.get("pid"), f.get("comm")
        pid = pid if isinstance(pid, int) else record.common_pid
        comm = comm if isinstance(comm, str) else ""
        protocol, version, buf = f.get("protocol"), f.get("version"), f.get("buffer")
        try:
            if not isinstance(protocol, int):
                raise MalformedPayload("protocol", f"protocol {protocol!r}")
            check_wire(protocol, version if isinstance(version, str | bytes) else b"")
            if not isinstance(buf, bytes | bytearray):
                raise MalformedPayload("truncated", "no buffer")
            out, skipped = _decode(bytes(buf), pid, comm)
        except MalformedPayload as e:
            self.reject(pid, comm, e)
            return []
        self.unsupported += skipped
        return out

    def reject(self, pid: int, comm: str, error: MalformedPayload) -> None:
        """Count a malformed record; say it if it is the first of its kind from ``pid``."""
        self.malformed[error.kind] += 1
        if (pid, error.kind) not in self._said:
            self._said.add((pid, error.kind))
            who = f"pid {pid}" + (f" ({comm})" if comm else "")
            self._say(f"{who}: {error}; skipping such records from it")


__all__ = ["EVENT", "DataPoint", "Decoder", "ExponentialValue", "HistogramValue",
           "MalformedPayload", "Publishers", "available", "check_wire", "decode",
           "record_fields", "require"]
