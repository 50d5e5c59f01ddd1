"""``UserEventsMetricExporter``: OpenTelemetry SDK metrics as the ``otlp_metrics`` tracepoint.

What the Rust and .NET user_events exporters write, from Python: each data point one
``ExportMetricsServiceRequest`` (built with opentelemetry-proto) in one record of
``rezolus_ue.otel.wire``. Transports as the agent's: ``user_events:otlp_metrics`` where the
kernel has user_events (registered by this process, no agent needed), else
``rezolus_ue:otlp_metrics`` on the uprobe stub's slot, which a running agent defines.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tracefs_tools import TracefsError, find_tracefs

from ..errors import PermissionDenied, RezolusError
from ..publisher import UserEventsPublisher, attach_uprobe, choose_transport
from . import wire

try:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.metrics.v1 import metrics_pb2
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )
    from opentelemetry.sdk.metrics import _Gauge as SyncGauge
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        ExponentialHistogram,
        Gauge,
        MetricExporter,
        MetricExportResult,
        MetricsData,
        Sum,
    )
    from opentelemetry.sdk.metrics.export import Histogram as HistogramData
except ImportError as e:
    raise RezolusError(f"rezolus_ue.otel needs the OpenTelemetry SDK ({e.name} is missing):"
                       " pip install rezolus-ue[otel]") from None

log = logging.getLogger("rezolus_ue")

_DELTA = AggregationTemporality.DELTA
_CUMULATIVE = AggregationTemporality.CUMULATIVE

#: The Rust exporter's choice (``Temporality::Delta``): delta for counters, histograms and
#: gauges (a gauge reports only when set in the interval), cumulative for up-down
#: counters, whose deltas a reader could not add back up after a lost record.
TEMPORALITY: dict[type, AggregationTemporality] = {
    Counter: _DELTA,
    ObservableCounter: _DELTA,
    Histogram: _DELTA,
    SyncGauge: _DELTA,
    ObservableGauge: _DELTA,
    UpDownCounter: _CUMULATIVE,
    ObservableUpDownCounter: _CUMULATIVE,
}

_PROTO_TEMPORALITY = {
    _DELTA: metrics_pb2.AGGREGATION_TEMPORALITY_DELTA,
    _CUMULATIVE: metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE,
}


class UserEventsMetricExporter(MetricExporter):
    """An SDK ``MetricExporter`` writing each data point as one ``otlp_metrics`` record;
    use it with ``PeriodicExportingMetricReader``.

    ``export`` reads the tracepoint's enable word first: with no consumer it builds and
    serializes nothing (``not_enabled`` counts the points skipped). The SDK still does its
    part every interval: each measurement is aggregated as it is recorded, observable
    callbacks run, and the reader collects the points it hands to ``export``.

    ``transport``: ``"auto"`` (user_events where the kernel has it, else uprobe, as the
    agent chooses), ``"user_events"`` or ``"uprobe"``. ``tracefs``: the mount point (found
    if None). A point whose request exceeds the transport's limit (``max_buffer``: 65,360
    bytes on user_events, less on uprobe) is dropped and counted in ``dropped``. Raises
    RezolusError, saying what to do, when the transport cannot be opened (no tracefs,
    ``user_events_data`` not writable, the uprobe stub not installed).
    """

    def __init__(self, transport: str = "auto", *, tracefs: str | Path | None = None,
                 preferred_temporality: dict[type, AggregationTemporality] | None = None,
                 preferred_aggregation: dict[type, Any] | None = None) -> None:
        super().__init__(preferred_temporality={**TEMPORALITY, **(preferred_temporality or {})},
                         preferred_aggregation=preferred_aggregation)
        self.transport, self._handle, self._close = _open(transport, tracefs)
        self._word = self._handle.word
        #: The largest serialized request the transport carries.
        self.max_buffer = wire.MAX_BUFFER if self.transport == "user_events" \
            else wire.UPROBE_MAX_BUFFER
        #: Records written.
        self.written = 0
        #: Points dropped: over ``max_buffer``, or a write the kernel refused.
        self.dropped = 0
        #: Points skipped, unserialized, because no consumer had the tracepoint enabled.
        self.not_enabled = 0
        self._warned: set[str] = set()
        self._shut = False

    @property
    def enabled(self) -> bool:
        """Return True while a consumer has ``otlp_metrics`` enabled."""
        return self._word.value != 0

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        """Write each data point as one record; FAILURE if any was dropped."""
        if self._shut:
            return MetricExportResult.FAILURE
        if not self._word.value:
            self.not_enabled += _count_points(metrics_data)
            return MetricExportResult.SUCCESS
        dropped = self.dropped
        request = ExportMetricsServiceRequest()
        for rm in metrics_data.resource_metrics:
            del request.resource_metrics[:]
            prm = request.resource_metrics.add()
            _put_attributes(prm.resource.attributes, rm.resource.attributes)
            prm.schema_url = rm.schema_url or ""
            for sm in rm.scope_metrics:
                del prm.scope_metrics[:]
                psm = prm.scope_metrics.add()
                _put_scope(psm.scope, sm.scope)
                psm.schema_url = sm.schema_url or ""
                for metric in sm.metrics:
                    self._export_metric(request, psm, metric)
        return MetricExportResult.SUCCESS if self.dropped == dropped \
            else MetricExportResult.FAILURE

    def _export_metric(self, request: Any, psm: Any, metric: Any) -> None:
        del psm.metrics[:]
        pm = psm.metrics.add()
        pm.name = metric.name
        pm.description = metric.description or ""
        pm.unit = metric.unit or ""
        data = metric.data
        if isinstance(data, Sum):
            points, put = pm.sum.data_points, _put_number
            pm.sum.aggregation_temporality = _PROTO_TEMPORALITY[data.aggregation_temporality]
            pm.sum.is_monotonic = data.is_monotonic
        elif isinstance(data, Gauge):
            points, put = pm.gauge.data_points, _put_number
        elif isinstance(data, HistogramData):
            points, put = pm.histogram.data_points, _put_histogram
            pm.histogram.aggregation_temporality = \
                _PROTO_TEMPORALITY[data.aggregation_temporality]
        elif isinstance(data, ExponentialHistogram):
            points, put = pm.exponential_histogram.data_points, _put_exponential
            pm.exponential_histogram.aggregation_temporality = \
                _PROTO_TEMPORALITY[data.aggregation_temporality]
        else:
            self._warn_once(metric.name, f"{metric.name}: {type(data).__name__} data has no"
                            " OTLP form here; its points are dropped")
            self.dropped += len(getattr(data, "data_points", ()))
            return
        for point in data.data_points:
            if not self._word.value:  # the last consumer left
                self.not_enabled += 1
                continue
            del points[:]
            put(points.add(), point)
            self._write(metric.name, self._serialize(request))

    @staticmethod
    def _serialize(request: Any) -> bytes:
        return request.SerializeToString()

    def _write(self, name: str, buffer: bytes) -> None:
        if len(buffer) > self.max_buffer:
            self.dropped += 1
            self._warn_once(name, f"{name}: a data point of {len(buffer)} bytes exceeds the"
                            f" {self.max_buffer} of {wire.EVENT} on {self.transport};"
                            " dropped (fewer attributes or buckets keep it under)")
            return
        try:
            ok = self._handle.write(wire.payload(buffer))
        except RezolusError as e:
            self.dropped += 1
            self._warn_once(name, f"{name}: {e}")
            return
        if ok:
            self.written += 1
        else:  # the benign race: disabled between our check and the write
            self.not_enabled += 1

    def _warn_once(self, name: str, message: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("%s", message)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Return True: every record is written during ``export``."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Unregister the event (user_events); later exports fail."""
        if not self._shut:
            self._shut = True
            self._close()


def _open(transport: str, tracefs: str | Path | None) -> tuple[str, Any, Any]:
    """Return (transport, handle, close) for ``otlp_metrics`` through the publishers."""
    if transport not in ("auto", "user_events", "uprobe"):
        raise RezolusError(f"transport {transport!r}: use auto, user_events or uprobe")
    chosen, why = transport, "configured"
    if transport != "uprobe":
        try:
            root = Path(tracefs) if tracefs is not None else find_tracefs(mount=False)
            chosen, why = choose_transport(root, transport)
        except TracefsError as e:
            raise RezolusError(str(e)) from None
        except PermissionDenied:
            # tracefs is closed to us: user_events needs it, the uprobe transport does not.
            if transport == "user_events":
                raise
            chosen, why = "uprobe", "tracefs is closed to this user"
    log.info("%s: transport %s (%s)", wire.EVENT, chosen, why)
    if chosen == "user_events":
        pub = UserEventsPublisher(root)
        try:
            handle = pub.register([wire.SCHEMA])[wire.EVENT]
        except BaseException:
            pub.close()
            raise
        return chosen, handle, pub.close
    return chosen, attach_uprobe(wire.SCHEMA), lambda: None


def _count_points(metrics_data: MetricsData) -> int:
    return sum(len(m.data.data_points) for rm in metrics_data.resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics)


def _put_scope(out: Any, scope: Any) -> None:
    out.name = scope.name or ""
    out.version = scope.version or ""
    _put_attributes(out.attributes, getattr(scope, "attributes", None))


def _put_attributes(out: Any, attributes: Mapping[str, Any] | None) -> None:
    for key, value in (attributes or {}).items():
        kv = out.add()
        kv.key = key
        _put_value(kv.value, value)


def _put_value(out: Any, value: Any) -> None:
    if isinstance(value, str):
        out.string_value = value
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    elif isinstance(value, Mapping):
        _put_attributes(out.kvlist_value.values, value)
    elif isinstance(value, Sequence):
        out.array_value.SetInParent()
        for v in value:
            _put_value(out.array_value.values.add(), v)
    else:
        out.string_value = str(value)


def _put_common(out: Any, point: Any) -> None:
    _put_attributes(out.attributes, point.attributes)
    out.start_time_unix_nano = point.start_time_unix_nano or 0
    out.time_unix_nano = point.time_unix_nano
    _put_exemplars(out.exemplars, point.exemplars)


def _put_number(out: Any, point: Any) -> None:
    _put_common(out, point)
    if isinstance(point.value, int):
        out.as_int = point.value
    else:
        out.as_double = point.value


def _put_histogram(out: Any, point: Any) -> None:
    _put_common(out, point)
    out.count = point.count
    out.sum = point.sum
    out.bucket_counts.extend(point.bucket_counts)
    out.explicit_bounds.extend(point.explicit_bounds)
    if point.count:
        out.min = point.min
        out.max = point.max


def _put_exponential(out: Any, point: Any) -> None:
    _put_common(out, point)
    out.count = point.count
    out.sum = point.sum
    out.scale = point.scale
    out.zero_count = point.zero_count
    out.positive.offset = point.positive.offset
    out.positive.bucket_counts.extend(point.positive.bucket_counts)
    out.negative.offset = point.negative.offset
    out.negative.bucket_counts.extend(point.negative.bucket_counts)
    out.flags = point.flags
    if point.count:
        out.min = point.min
        out.max = point.max


def _put_exemplars(out: Any, exemplars: Iterable[Any]) -> None:
    for ex in exemplars:
        pe = out.add()
        _put_attributes(pe.filtered_attributes, ex.filtered_attributes)
        pe.time_unix_nano = ex.time_unix_nano
        if isinstance(ex.value, int):
            pe.as_int = ex.value
        else:
            pe.as_double = ex.value
        if ex.span_id is not None and ex.trace_id is not None:
            pe.span_id = ex.span_id.to_bytes(8, "big")
            pe.trace_id = ex.trace_id.to_bytes(16, "big")
