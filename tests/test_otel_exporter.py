"""``UserEventsMetricExporter`` in-process: every instrument kind round-trips through
opentelemetry-proto, nothing is serialized with no consumer, the size limit drops and
counts, and the SDK loads only when the exporter is named (pure logic: the tracepoint
is a stand-in with an enable word; tests/uprobe and tests/kernel use the real one)."""

from __future__ import annotations

import ctypes
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from rezolus_ue.errors import RezolusError
from rezolus_ue.otel import exporter as mod
from rezolus_ue.otel import wire
from rezolus_ue.otel.exporter import UserEventsMetricExporter

DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE


class Tracepoint:
    """A stand-in handle: an enable word the test sets, and the payloads written."""

    def __init__(self) -> None:
        self.word = ctypes.c_uint32(1)
        self.payloads: list[bytes] = []
        self.closed = False

    def write(self, payload: bytes) -> bool:
        self.payloads.append(payload)
        return True

    def requests(self) -> list[Any]:
        out = []
        for p in self.payloads:
            w = wire.decode(p)
            assert (w.protocol, w.version) == (0, b"v0.19.00")
            out.append(ExportMetricsServiceRequest.FromString(w.buffer))
        return out


class App:
    """An SDK pipeline around one exporter, collected on demand."""

    def __init__(self, exporter: UserEventsMetricExporter, views: tuple = ()) -> None:
        self.exporter = exporter
        self.reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        self.provider = MeterProvider(
            metric_readers=[self.reader], views=list(views),
            resource=Resource.create({"service.name": "checkout", "host.cores": 8}))
        self.meter = self.provider.get_meter("shop", "1.2", attributes={"team": "payments"})

    def collect(self) -> None:
        self.reader.collect()


@pytest.fixture
def tracepoint(monkeypatch: pytest.MonkeyPatch) -> Tracepoint:
    tp = Tracepoint()

    def fake_open(transport: str, tracefs: object) -> tuple[str, Tracepoint, Any]:
        def close() -> None:
            tp.closed = True
        return ("uprobe" if transport == "uprobe" else "user_events"), tp, close

    monkeypatch.setattr(mod, "_open", fake_open)
    return tp


@pytest.fixture
def app(tracepoint: Tracepoint) -> Iterator[App]:
    a = App(UserEventsMetricExporter(), views=(
        View(instrument_name="*.exp", aggregation=ExponentialBucketHistogramAggregation()),))
    yield a
    a.provider.shutdown()


def _one_point(req: Any) -> tuple[Any, Any, Any]:
    """Return (resource metrics, scope metrics, metric) of a one-point request."""
    assert len(req.resource_metrics) == 1
    rm = req.resource_metrics[0]
    assert len(rm.scope_metrics) == 1
    sm = rm.scope_metrics[0]
    assert len(sm.metrics) == 1
    m = sm.metrics[0]
    kind = m.WhichOneof("data")
    assert len(getattr(m, kind).data_points) == 1, m
    return rm, sm, m


def _attrs(kvs: Any) -> dict[str, Any]:
    out = {}
    for kv in kvs:
        v = kv.value
        which = v.WhichOneof("value")
        out[kv.key] = ([getattr(x, x.WhichOneof("value")) for x in v.array_value.values]
                       if which == "array_value" else getattr(v, which))
    return out


def _by_name(tp: Tracepoint) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for req in tp.requests():
        _rm, _sm, m = _one_point(req)
        out.setdefault(m.name, []).append(m)
    return out


def test_every_instrument_kind_round_trips_one_point_per_record(app: App,
                                                               tracepoint: Tracepoint) -> None:
    m = app.meter
    m.create_counter("reqs", unit="{request}", description="requests").add(
        3, {"route": "/pay", "ok": True, "codes": [200, 201], "ratio": 0.5})
    m.create_counter("bytes").add(1.5)
    m.create_up_down_counter("inflight").add(-2)
    m.create_gauge("temp").set(21.5, {"zone": "a"})
    m.create_observable_gauge("queue", callbacks=[lambda _o: [
        _obs(7, {"q": "x"}), _obs(9, {"q": "y"})]])
    h = m.create_histogram("lat", unit="ms")
    for v in (1, 30, 700):
        h.record(v)
    e = m.create_histogram("lat.exp", unit="ms")
    for v in (0.5, 2, 2, 1000):
        e.record(v)
    app.collect()

    reqs = tracepoint.requests()
    assert len(reqs) == len(tracepoint.payloads) == 8  # queue has two points
    rm, sm, _ = _one_point(reqs[0])
    res = _attrs(rm.resource.attributes)
    assert res["service.name"] == "checkout" and res["host.cores"] == 8
    assert (sm.scope.name, sm.scope.version) == ("shop", "1.2")
    assert _attrs(sm.scope.attributes) == {"team": "payments"}

    got = _by_name(tracepoint)
    (c,) = got["reqs"]
    assert (c.unit, c.description) == ("{request}", "requests")
    assert c.sum.is_monotonic and c.sum.aggregation_temporality == DELTA
    p = c.sum.data_points[0]
    assert p.as_int == 3 and p.time_unix_nano >= p.start_time_unix_nano > 0
    assert _attrs(p.attributes) == {"route": "/pay", "ok": True, "codes": [200, 201],
                                    "ratio": 0.5}
    assert got["bytes"][0].sum.data_points[0].as_double == 1.5
    (u,) = got["inflight"]
    assert not u.sum.is_monotonic and u.sum.aggregation_temporality == CUMULATIVE
    assert u.sum.data_points[0].as_int == -2
    assert got["temp"][0].gauge.data_points[0].as_double == 21.5
    assert sorted(q.gauge.data_points[0].as_int for q in got["queue"]) == [7, 9]
    (hist,) = got["lat"]
    hp = hist.histogram.data_points[0]
    assert hist.histogram.aggregation_temporality == DELTA
    assert (hp.count, hp.sum, hp.min, hp.max) == (3, 731, 1, 700)
    assert len(hp.bucket_counts) == len(hp.explicit_bounds) + 1 and sum(hp.bucket_counts) == 3
    (ex,) = got["lat.exp"]
    ep = ex.exponential_histogram.data_points[0]
    assert ex.exponential_histogram.aggregation_temporality == DELTA
    assert (ep.count, ep.min, ep.max) == (4, 0.5, 1000)
    assert sum(ep.positive.bucket_counts) + ep.zero_count == 4
    assert app.exporter.written == 8 and app.exporter.dropped == app.exporter.not_enabled == 0


def _obs(value: int, attrs: dict[str, str]) -> Any:
    from opentelemetry.metrics import Observation

    return Observation(value, attrs)


def test_counters_are_delta_and_up_down_counters_cumulative_across_exports(
        app: App, tracepoint: Tracepoint) -> None:
    c, u = app.meter.create_counter("c"), app.meter.create_up_down_counter("u")
    for _ in range(2):
        c.add(5)
        u.add(5)
        app.collect()
    got = _by_name(tracepoint)
    assert [m.sum.data_points[0].as_int for m in got["c"]] == [5, 5]
    assert [m.sum.data_points[0].as_int for m in got["u"]] == [5, 10]


def test_nothing_is_serialized_while_no_consumer_listens(app: App, tracepoint: Tracepoint,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    serialized = []
    real = UserEventsMetricExporter._serialize

    def counting(request: Any) -> bytes:
        serialized.append(1)
        return real(request)

    monkeypatch.setattr(UserEventsMetricExporter, "_serialize", staticmethod(counting))
    c = app.meter.create_counter("c")
    h = app.meter.create_histogram("h")
    tracepoint.word.value = 0
    assert not app.exporter.enabled
    c.add(1, {"k": "a"})
    c.add(1, {"k": "b"})
    h.record(3)
    app.collect()
    assert serialized == [] and tracepoint.payloads == []
    assert (app.exporter.not_enabled, app.exporter.written) == (3, 0)
    tracepoint.word.value = 1
    c.add(1)
    app.collect()
    assert len(serialized) == len(tracepoint.payloads) == app.exporter.written == 1


def test_a_point_over_the_limit_is_dropped_counted_and_warned_once(
        app: App, tracepoint: Tracepoint, caplog: pytest.LogCaptureFixture) -> None:
    c = app.meter.create_counter("big")
    c.add(1, {"blob": "x" * wire.MAX_BUFFER})
    c.add(1, {"blob": "y" * wire.MAX_BUFFER})
    c.add(1, {"small": "z"})
    with caplog.at_level(logging.WARNING, logger="rezolus_ue"):
        app.collect()
    assert (app.exporter.dropped, app.exporter.written) == (2, 1)
    assert len(tracepoint.payloads) == 1
    assert [r.message.count("exceeds") for r in caplog.records] == [1]


def test_export_reports_failure_when_a_point_was_dropped(tracepoint: Tracepoint) -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader(preferred_temporality=mod.TEMPORALITY)
    provider = MeterProvider(metric_readers=[reader])
    c = provider.get_meter("m").create_counter("c")
    c.add(1, {"blob": "x" * wire.MAX_BUFFER})
    data = reader.get_metrics_data()
    exporter = UserEventsMetricExporter()
    assert exporter.export(data) is MetricExportResult.FAILURE
    c.add(1)
    assert exporter.export(reader.get_metrics_data()) is MetricExportResult.SUCCESS
    exporter.shutdown()
    assert tracepoint.closed
    assert exporter.export(reader.get_metrics_data()) is MetricExportResult.FAILURE
    provider.shutdown()


def test_the_uprobe_transport_has_the_smaller_limit(tracepoint: Tracepoint) -> None:
    up = UserEventsMetricExporter(transport="uprobe")
    assert (up.transport, up.max_buffer) == ("uprobe", wire.UPROBE_MAX_BUFFER)
    a = App(up)
    a.meter.create_counter("c").add(1, {"blob": "x" * wire.UPROBE_MAX_BUFFER})
    a.collect()
    assert (up.dropped, up.written) == (1, 0)
    a.provider.shutdown()


def test_preferred_temporality_is_the_rust_exporters() -> None:
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )
    from opentelemetry.sdk.metrics.export import AggregationTemporality as T

    assert {k: mod.TEMPORALITY[k] for k in (Counter, ObservableCounter, Histogram,
                                            ObservableGauge)} == dict.fromkeys(
        (Counter, ObservableCounter, Histogram, ObservableGauge), T.DELTA)
    assert mod.TEMPORALITY[UpDownCounter] is mod.TEMPORALITY[ObservableUpDownCounter] \
        is T.CUMULATIVE


def test_an_unknown_transport_is_refused() -> None:
    with pytest.raises(RezolusError, match="use auto, user_events or uprobe"):
        UserEventsMetricExporter(transport="kafka")


_BLOCK_OTEL = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
"""


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_importing_the_package_and_the_wire_loads_no_sdk() -> None:
    p = _python("import sys, rezolus_ue.otel, rezolus_ue.otel.wire, rezolus_ue.agent\n"
                "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_without_the_sdk_naming_the_exporter_says_how_to_install_it() -> None:
    p = _python(_BLOCK_OTEL + "from rezolus_ue.errors import RezolusError\n"
                "import rezolus_ue.otel.wire\n"
                "try:\n"
                "    from rezolus_ue.otel import UserEventsMetricExporter\n"
                "except RezolusError as e:\n"
                "    print(e)\n")
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.splitlines()
    assert "pip install rezolus-ue[otel]" in line
