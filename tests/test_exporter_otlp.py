"""Applications' OpenTelemetry metrics (``otlp_metrics``) as Prometheus series, in-process.

Data points are built as ``consume.otlp.DataPoint``s, as protobuf buffers decoded by
``consume.otlp`` (records shaped as the subscription delivers them), and as the
OpenTelemetry SDK exports them through ``rezolus_ue.otel``'s exporter with its tracepoint
replaced by a list. Expected expositions are written out by hand from the OpenTelemetry
specification's "Prometheus and OpenMetrics Compatibility" rules; every one is also
checked by ``test_exporter.parse`` (a strict text-format parser).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_exporter import ScriptedSubscription, parse, parser, scripted  # noqa: F401

from rezolus_ue.consume import exporter as ex
from rezolus_ue.consume import prometheus as prom
from rezolus_ue.consume.otlp import DataPoint, ExponentialValue, HistogramValue
from rezolus_ue.consume.records import Record
from rezolus_ue.otel import wire

S = 1_000_000_000
#: The publisher of most points: a shop service, pid 100.
RESOURCE = {"service.name": "shop", "host.name": "web-1"}
L = 'comm="shop",job="shop",otel_scope_name="shop.web",pid="100",route="/pay"'


def point(**kw: Any) -> DataPoint:
    """Return a data point of the shop service (fields not given: a delta counter)."""
    base: dict[str, Any] = dict(
        metric="shop.requests", description="Requests served", unit="{request}",
        kind="sum", monotonic=True, temporality="delta", attributes={"route": "/pay"},
        resource=RESOURCE, scope="shop.web", start_ns=0, time_ns=10, value=1, pid=100,
        comm="shop")
    return DataPoint(**{**base, **kw})


def hist(count: int, total: float | None, bounds: tuple[float, ...], counts: tuple[int, ...]
         ) -> HistogramValue:
    return HistogramValue(count, total, bounds, counts, None, None)


def app_text(st: prom.State) -> str:
    """Return the applications' part of the exposition (before the exporter's own)."""
    text = prom.exposition(st)
    parse(text)
    return text.split("# HELP rezolus_exporter_records_total", 1)[0]


def dropped(st: prom.State) -> dict[str, int]:
    return dict(st.otlp_dropped)


# --- names and labels -------------------------------------------------------------------


@pytest.mark.parametrize(("name", "unit", "kind", "monotonic", "want"), [
    ("http.server.request.duration", "s", "histogram", False,
     "http_server_request_duration_seconds"),
    ("http.server.requests", "{request}", "sum", True, "http_server_requests_total"),
    ("system.memory.usage", "By", "sum", False, "system_memory_usage_bytes"),
    ("cpu.utilization", "1", "gauge", False, "cpu_utilization_ratio"),
    ("errors", "1", "sum", True, "errors_total"),  # _ratio is for gauges only
    ("queue.depth", "1", "sum", False, "queue_depth"),
    ("requests_total", "", "sum", True, "requests_total"),
    ("cpu.time", "s", "sum", True, "cpu_time_seconds_total"),
    ("cpu.time_total", "s", "sum", True, "cpu_time_seconds_total"),  # unit before _total
    ("request_duration_seconds", "s", "histogram", False, "request_duration_seconds"),
    ("net.io", "By/s", "gauge", False, "net_io_bytes_per_second"),
    ("queue.rate", "{item}/s", "gauge", False, "queue_rate_per_second"),
    ("disk.free", "KiBy", "gauge", False, "disk_free_kibibytes"),
    ("latency", "ms", "histogram", False, "latency_milliseconds"),
    ("board.temp", "Cel", "gauge", False, "board_temp_celsius"),
    ("load", "%", "gauge", False, "load_percent"),
    ("custom", "widgets", "gauge", False, "custom_widgets"),  # an unknown unit, as it is
    ("2xx.responses", "", "sum", True, "_2xx_responses_total"),
    ("weird-name!!x", "", "gauge", False, "weird_name_x"),
    ("ns:metric", "", "gauge", False, "ns:metric"),
])
def test_names_follow_the_specification(name: str, unit: str, kind: str, monotonic: bool,
                                        want: str) -> None:
    assert prom.app_name(name, unit, kind, monotonic) == want


@pytest.mark.parametrize(("attributes", "want"), [
    ({"http.method": "GET"}, {"http_method": "GET"}),
    # Keys that sanitise alike: values joined with ';' in the original keys' order.
    ({"http_method": "POST", "http.method": "GET"}, {"http_method": "GET;POST"}),
    ({"1st": "a", "a--b": "c"}, {"key_1st": "a", "a_b": "c"}),
    # The exporter's own labels are not taken over by an attribute.
    ({"pid": 7, "job": "x", "le": "1"},
     {"exported_pid": "7", "exported_job": "x", "exported_le": "1"}),
    ({"ok": True, "n": 3, "x": 1.5, "list": [1, "a"], "raw": b"\x01\x02"},
     {"ok": "true", "n": "3", "x": "1.5", "list": '[1,"a"]', "raw": "AQI="}),
    ({"": "dropped"}, {}),
])
def test_attributes_become_sanitised_labels(attributes: dict[str, object],
                                            want: dict[str, str]) -> None:
    assert prom.attribute_labels(attributes) == want


def test_label_values_are_escaped_and_job_instance_come_from_the_resource() -> None:
    st = prom.State()
    res = {"service.name": "cart", "service.namespace": "shop", "service.instance.id": "i-7",
           "deployment": 'blue"green'}
    st.apps.add([point(attributes={"path": 'a"b\\c\nd'}, resource=res, scope="")], S)
    text = app_text(st)
    assert ('shop_requests_total{comm="shop",instance="i-7",job="shop/cart",'
            'path="a\\"b\\\\c\\nd",pid="100"} 1\n') in text
    # The resource's other attributes go to target_info, labelled as the series are.
    assert ('target_info{comm="shop",deployment="blue\\"green",instance="i-7",'
            'job="shop/cart",pid="100"} 1\n') in text


# --- every instrument kind --------------------------------------------------------------


def every_kind() -> prom.State:
    """Return a state fed two exports of every instrument kind by the shop service."""
    st = prom.State()
    for i, (delta, gauge, inflight, h, cum) in enumerate([
            (3, 0.25, 5, (hist(3, 17.5, (5.0, 10.0), (1, 2, 0))), 100),
            (4, 0.5, -2, (hist(2, 25.0, (5.0, 10.0), (0, 1, 1))), 250)]):
        start, end = i * 10, (i + 1) * 10
        st.apps.add([
            point(value=delta, start_ns=start, time_ns=end),
            point(metric="shop.cpu.utilization", unit="1", kind="gauge", monotonic=False,
                  temporality="cumulative", value=gauge, description="CPU share"),
            point(metric="shop.inflight", kind="sum", monotonic=False,
                  temporality="cumulative", value=inflight, description="In flight"),
            point(metric="shop.duration", unit="ms", kind="histogram", monotonic=False,
                  value=None, histogram=h, start_ns=start, time_ns=end,
                  description="Time to serve"),
            point(metric="shop.bytes", unit="By", temporality="cumulative", value=cum,
                  description="Bytes sent"),
            point(metric="shop.queue", kind="sum", monotonic=False, value=1),
            point(metric="shop.size", kind="exponential_histogram", monotonic=False,
                  value=None, exponential=ExponentialValue(0, 0, 0, (1,), 0, (), 1, 1.5,
                                                           None, None)),
        ], (i + 1) * S)
    return st


def test_every_instrument_kind_exactly() -> None:
    assert app_text(every_kind()) == f"""\
# HELP shop_bytes_total Bytes sent
# TYPE shop_bytes_total counter
shop_bytes_total{{{L}}} 250
# HELP shop_cpu_utilization_ratio CPU share
# TYPE shop_cpu_utilization_ratio gauge
shop_cpu_utilization_ratio{{{L}}} 0.5
# HELP shop_duration_milliseconds Time to serve
# TYPE shop_duration_milliseconds histogram
shop_duration_milliseconds_bucket{{{L},le="5.0"}} 1
shop_duration_milliseconds_bucket{{{L},le="10.0"}} 4
shop_duration_milliseconds_bucket{{{L},le="+Inf"}} 5
shop_duration_milliseconds_sum{{{L}}} 42.5
shop_duration_milliseconds_count{{{L}}} 5
# HELP shop_inflight In flight
# TYPE shop_inflight gauge
shop_inflight{{{L}}} -2
# HELP shop_requests_total Requests served
# TYPE shop_requests_total counter
shop_requests_total{{{L}}} 7
# HELP target_info Target metadata: each application's resource attributes
# TYPE target_info gauge
target_info{{comm="shop",host_name="web-1",job="shop",pid="100"}} 1
"""


def test_dropped_kinds_are_counted_by_reason(caplog: pytest.LogCaptureFixture) -> None:
    st = every_kind()
    # Said once per reason, naming the first point's metric and process.
    said = [r.getMessage() for r in caplog.records if "dropped:" in r.getMessage()]
    assert len(said) == 2 and "pid 100 (shop): shop.queue dropped: a delta up-down" in said[0]
    assert dropped(st) == {"delta_non_monotonic": 2, "exponential_histogram": 2}
    assert st.otlp_points == 14
    text = prom.exposition(st)
    for reason, n in dropped(st).items():
        assert (f'rezolus_exporter_otlp_dropped_points_total{{reason="{reason}"}} {n}\n'
                in text)
    assert set(dropped(st)) <= set(prom.DROP_REASONS)
    # Series held: 2 buckets + +Inf, _sum and _count, and 4 single series.
    assert "rezolus_exporter_otlp_series 9\n" in text and st.otlp_series == 9


@pytest.mark.parametrize("deltas", [[3, 4, 5, 0, 11], [0.1, 0.2, 0.3], [2**53, 1, 1]])
def test_a_counter_total_is_the_sum_of_its_deltas(deltas: list[float]) -> None:
    st = prom.State()
    for i, d in enumerate(deltas):
        st.apps.add([point(value=d, start_ns=i * 10, time_ns=(i + 1) * 10)], (i + 1) * S)
    total = 0
    for d in deltas:
        total += d
    assert f"shop_requests_total{{{L}}} {prom._value(total)}\n" in app_text(st)
    (row,) = st.apps.rows()
    assert row.value == total and type(row.value) is type(total)


def test_a_delta_that_starts_before_the_last_one_ended_starts_again() -> None:
    # The SDK restarted (same pid and comm, as after an exec): its stream begins anew,
    # which Prometheus reads as a counter reset. A gap (points lost) continues the total.
    st = prom.State()
    st.apps.add([point(value=5, start_ns=100, time_ns=200)], S)
    st.apps.add([point(value=2, start_ns=300, time_ns=400)], 2 * S)  # a gap: 7
    assert st.apps.rows()[0].value == 7
    st.apps.add([point(value=1, start_ns=50, time_ns=450)], 3 * S)
    assert st.apps.rows()[0].value == 1


def test_histogram_bounds_changed_start_again_and_no_sum_no_sum_line() -> None:
    st = prom.State()
    kw = dict(metric="lat", unit="s", kind="histogram", monotonic=False, value=None)
    st.apps.add([point(**kw, histogram=hist(2, None, (1.0,), (1, 1)), start_ns=0,
                       time_ns=10)], S)
    st.apps.add([point(**kw, histogram=hist(1, None, (0.5, 1.0), (1, 0, 0)), start_ns=10,
                       time_ns=20)], 2 * S)
    text = app_text(st)
    assert f'lat_seconds_bucket{{{L},le="0.5"}} 1\n' in text
    assert f'lat_seconds_bucket{{{L},le="+Inf"}} 1\n' in text
    assert "lat_seconds_sum" not in text  # an SDK leaves sum out for negative values


def test_a_histogram_without_buckets_has_its_inf_bucket() -> None:
    st = prom.State()
    st.apps.add([point(metric="lat", unit="s", kind="histogram", monotonic=False,
                       value=None, histogram=hist(4, 2.0, (), ()))], S)
    text = app_text(st)
    assert f'lat_seconds_bucket{{{L},le="+Inf"}} 4\n' in text
    assert f"lat_seconds_sum{{{L}}} 2.0\n" in text


def test_non_finite_values() -> None:
    st = prom.State()
    for name, v in (("a", float("inf")), ("b", float("-inf")), ("c", float("nan"))):
        st.apps.add([point(metric=name, kind="gauge", monotonic=False,
                           temporality="cumulative", value=v)], S)
    text = app_text(st)
    assert f"a{{{L}}} +Inf\n" in text and f"b{{{L}}} -Inf\n" in text
    assert f"c{{{L}}} NaN\n" in text


def test_points_without_a_value_and_bad_names_are_dropped() -> None:
    st = prom.State()
    st.apps.add([point(value=None), point(metric="!!!"),
                 point(metric="rezolus.cpu.usage"), point(metric="target_info", kind="gauge",
                                                          monotonic=False)], S)
    assert dropped(st) == {"no_value": 1, "invalid_name": 1, "reserved_name": 2}
    assert st.apps.rows() == []


def test_a_name_holds_one_type_the_first_seen() -> None:
    st = prom.State()
    gauge = dict(kind="gauge", monotonic=False, temporality="cumulative", value=1)
    st.apps.add([point(metric="jobs", **gauge)], S)
    # Another process's gauge of the same name joins it; a histogram of that name, or a
    # gauge named as a histogram's sample, would clash in the exposition.
    st.apps.add([point(metric="jobs", pid=200, **gauge)], S)
    st.apps.add([point(metric="jobs", pid=300, kind="histogram", monotonic=False,
                       value=None, histogram=hist(1, 1.0, (), ()))], S)
    st.apps.add([point(metric="lat", pid=300, kind="histogram", monotonic=False,
                       value=None, histogram=hist(1, 1.0, (), ()))], S)
    st.apps.add([point(metric="lat_count", pid=400, **gauge)], S)
    assert dropped(st) == {"name_conflict": 2}
    fams = parse(prom.exposition(st))
    assert len(fams["jobs"].samples) == 2 and fams["jobs"].type == "gauge"
    assert fams["lat"].type == "histogram" and "lat_count" not in fams


# --- staleness --------------------------------------------------------------------------


def export(st: prom.State, t_s: int, *metrics: str, pid: int = 100, **kw: Any) -> None:
    """Feed one export of ``metrics`` (cumulative counters unless ``kw`` says) at t_s."""
    opts = {"temporality": "cumulative", **kw}
    st.apps.add([point(metric=m, pid=pid, value=t_s, **opts) for m in metrics], t_s * S)


def names(st: prom.State) -> set[str]:
    return {r.family for r in st.apps.rows()}


def test_a_silent_publisher_goes_after_stale_export_intervals() -> None:
    st = prom.State(stale=3)
    export(st, 10, "a")
    export(st, 12, "a")  # an export interval of 2 s, measured
    export(st, 12, "b", pid=200)  # one export: the SDKs' default interval, 60 s
    st.prune(12 * S + 3 * 2 * S)
    assert names(st) == {"a_total", "b_total"}
    assert st.prune(12 * S + 3 * 2 * S + 1) == 1
    assert names(st) == {"b_total"}
    st.prune(12 * S + 3 * prom.APP_INTERVAL_NS)
    assert names(st) == {"b_total"}
    st.prune(12 * S + 3 * prom.APP_INTERVAL_NS + 1)
    assert names(st) == set() and st.otlp_series == 0
    assert "target_info" not in prom.exposition(st)


def test_a_cumulative_stream_left_out_goes_and_delta_and_gauges_stay() -> None:
    st = prom.State(stale=3)
    export(st, 1, "a", "b")
    export(st, 1, "d", temporality="delta")
    export(st, 1, "g", kind="gauge", monotonic=False)
    for t in range(2, 5):  # three exports without b, d or g
        export(st, t, "a")
    assert names(st) == {"a_total", "b_total", "d_total", "g"}
    export(st, 5, "a")  # the fourth: b is gone, as the agent's label sets go
    assert names(st) == {"a_total", "d_total", "g"}


def test_a_freed_name_may_take_another_type() -> None:
    st = prom.State(stale=1)
    export(st, 1, "jobs", kind="gauge", monotonic=False)
    export(st, 2, "jobs", kind="gauge", monotonic=False)
    st.prune(100 * S)
    st.apps.add([point(metric="jobs", kind="histogram", monotonic=False, value=None,
                       histogram=hist(1, 1.0, (), ()))], 101 * S)
    assert parse(prom.exposition(st))["jobs"].type == "histogram"
    assert not dropped(st)


# --- the cap ----------------------------------------------------------------------------


def test_the_series_cap_refuses_new_series_only() -> None:
    st = prom.State(max_app_series=6)
    h = dict(metric="lat", unit="s", kind="histogram", monotonic=False, value=None,
             histogram=hist(2, 3.0, (1.0, 2.0), (1, 1, 0)))
    st.apps.add([point(**h)], S)  # 2 buckets, +Inf, _sum, _count: 5 series
    st.apps.add([point(value=1)], S)  # 6
    st.apps.add([point(value=1, attributes={"route": "/cart"})], S)  # a 7th: refused
    st.apps.add([point(metric="other", value=1, pid=200)], S)  # refused
    st.apps.add([point(value=2, start_ns=10, time_ns=20)], 2 * S)  # held ones go on
    assert dropped(st) == {"series_limit": 2}
    assert st.otlp_series == 6 and len(st.apps.rows()) == 2
    text = prom.exposition(st)
    assert f"shop_requests_total{{{L}}} 3\n" in text
    assert "rezolus_exporter_otlp_series_limit 6\n" in text
    st.prune(10**6 * S)  # every publisher silent: room again
    st.apps.add([point(metric="other", value=1, pid=200)], 10**6 * S + 1)
    assert st.otlp_series == 1


def test_max_app_series_option() -> None:
    args = parser().parse_args(["exporter", "--max-app-series", "50"])
    assert args.max_app_series == 50 and not args.no_apps
    assert parser().parse_args(["exporter"]).max_app_series == prom.DEFAULT_MAX_APP_SERIES
    assert ex.Exporter(max_app_series=50).state.otlp_series_limit == 50
    with pytest.raises(SystemExit):
        parser().parse_args(["exporter", "--max-app-series", "-1"])


# --- records: real buffers through the decoder ------------------------------------------


def request(metric: Any) -> bytes:
    """Return an ExportMetricsServiceRequest of the shop service holding ``metric``."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    for k, v in RESOURCE.items():
        kv = rm.resource.attributes.add()
        kv.key, kv.value.string_value = k, v
    sm = rm.scope_metrics.add()
    sm.scope.name = "shop.web"
    sm.metrics.append(metric)
    return req.SerializeToString()


def otlp_record(buffer: bytes, t_ns: int, pid: int = 100, comm: str = "shop") -> Record:
    """Return an otlp_metrics record as the subscription delivers it."""
    return Record(wire.EVENT, t_ns, 0, pid + 1, {
        "protocol": wire.PROTOCOL_OTLP, "version": wire.VERSION.decode(), "buffer": buffer,
        "pid": pid, "comm": comm})


def proto_points(i: int) -> list[bytes]:
    """Return the buffers of export ``i`` (0 or 1) of ``every_kind``'s points."""
    pb = pytest.importorskip("opentelemetry.proto.metrics.v1.metrics_pb2")
    delta, cum = pb.AGGREGATION_TEMPORALITY_DELTA, pb.AGGREGATION_TEMPORALITY_CUMULATIVE
    start, end = i * 10, (i + 1) * 10

    def metric(name: str, description: str, unit: str = "") -> Any:
        return pb.Metric(name=name, description=description, unit=unit)

    def attrs(p: Any) -> Any:
        kv = p.attributes.add()
        kv.key, kv.value.string_value = "route", "/pay"
        return p

    out = []
    m = metric("shop.requests", "Requests served", "{request}")
    m.sum.aggregation_temporality, m.sum.is_monotonic = delta, True
    attrs(m.sum.data_points.add(start_time_unix_nano=start, time_unix_nano=end,
                                as_int=(3, 4)[i]))
    out.append(m)
    m = metric("shop.cpu.utilization", "CPU share", "1")
    attrs(m.gauge.data_points.add(time_unix_nano=end, as_double=(0.25, 0.5)[i]))
    out.append(m)
    m = metric("shop.inflight", "In flight", "{request}")
    m.sum.aggregation_temporality, m.sum.is_monotonic = cum, False
    attrs(m.sum.data_points.add(start_time_unix_nano=1, time_unix_nano=end,
                                as_int=(5, -2)[i]))
    out.append(m)
    m = metric("shop.duration", "Time to serve", "ms")
    m.histogram.aggregation_temporality = delta
    attrs(m.histogram.data_points.add(
        start_time_unix_nano=start, time_unix_nano=end, count=(3, 2)[i], sum=(17.5, 25.0)[i],
        explicit_bounds=[5.0, 10.0], bucket_counts=((1, 2, 0), (0, 1, 1))[i]))
    out.append(m)
    m = metric("shop.bytes", "Bytes sent", "By")
    m.sum.aggregation_temporality, m.sum.is_monotonic = cum, True
    attrs(m.sum.data_points.add(start_time_unix_nano=1, time_unix_nano=end,
                                as_int=(100, 250)[i]))
    out.append(m)
    m = metric("shop.queue", "", "{request}")
    m.sum.aggregation_temporality = delta
    attrs(m.sum.data_points.add(start_time_unix_nano=start, time_unix_nano=end, as_int=1))
    out.append(m)
    m = metric("shop.size", "", "{request}")
    m.exponential_histogram.aggregation_temporality = delta
    p = attrs(m.exponential_histogram.data_points.add(
        start_time_unix_nano=start, time_unix_nano=end, count=1, sum=1.5, scale=0))
    p.positive.bucket_counts.append(1)
    out.append(m)
    return [request(m) for m in out]


def test_records_decode_to_the_same_exposition() -> None:
    st = prom.State()
    for i in range(2):
        st.ingest([otlp_record(b, (i + 1) * S) for b in proto_points(i)])
    # The decoder's points are every_kind's: the same exposition, the same drops.
    assert app_text(st) == app_text(every_kind())
    assert dropped(st) == dropped(every_kind())
    assert st.records == 14 and st.skipped == 0
    assert st.series_by_event() == {wire.EVENT: 5}


def test_a_malformed_record_is_counted_and_reading_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    st = prom.State()
    good = proto_points(0)[0]
    st.ingest([otlp_record(b"\xff\xff not protobuf", S), otlp_record(b"\x00", S),
               otlp_record(good, 2 * S)])
    assert st.otlp_malformed == {"protobuf": 2}
    assert f"shop_requests_total{{{L}}} 3\n" in app_text(st)
    text = prom.exposition(st)
    assert 'rezolus_exporter_otlp_malformed_records_total{kind="protobuf"} 2\n' in text
    # Said once per publisher and kind.
    assert len([r for r in caplog.records if "malformed otlp_metrics" in r.getMessage()]) == 1


# --- the SDK end to end, in-process -----------------------------------------------------


class Tracepoint:
    """Stands in for the exporter's tracepoint: enabled, its payloads kept."""

    class Word:
        value = 1

    def __init__(self) -> None:
        self.word = self.Word()
        self.payloads: list[bytes] = []

    def write(self, payload: bytes) -> bool:
        self.payloads.append(bytes(payload))
        return True


@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, Tracepoint]]:
    """Yield (meter, reader, tracepoint): the SDK exporting through ``rezolus_ue.otel``."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from rezolus_ue.otel import exporter as otel_exporter

    tp = Tracepoint()
    monkeypatch.setattr(otel_exporter, "_open",
                        lambda transport, tracefs: ("user_events", tp, lambda: None))
    reader = PeriodicExportingMetricReader(otel_exporter.UserEventsMetricExporter(),
                                           export_interval_millis=10**9)
    provider = MeterProvider(metric_readers=[reader],
                             resource=Resource.create({"service.name": "shop"}))
    try:
        yield provider.get_meter("shop.web"), reader, tp
    finally:
        provider.shutdown()


def test_the_sdk_through_the_exporter(sdk: tuple[Any, Any, Tracepoint]) -> None:
    meter, reader, tp = sdk
    requests = meter.create_counter("shop.requests", unit="{request}")
    inflight = meter.create_up_down_counter("shop.inflight", unit="{request}")
    duration = meter.create_histogram("shop.duration", unit="ms")
    st = prom.State()
    adds = [[3, 4], [5], [], [1, 1, 1]]  # an export with nothing to say in between
    for k, batch in enumerate(adds):
        for n in batch:
            requests.add(n, {"route": "/pay"})
            inflight.add(n, {"route": "/pay"})
            duration.record(n * 4.0, {"route": "/pay"})
        reader.force_flush()
        st.ingest([otlp_record(wire.decode(p).buffer, (k + 1) * S) for p in tp.payloads])
        tp.payloads.clear()
    fams = parse(prom.exposition(st))
    labels = {"route": "/pay", "pid": "100", "comm": "shop", "job": "shop",
              "otel_scope_name": "shop.web"}
    every = [n for batch in adds for n in batch]

    def one(name: str, **extra: str) -> float:
        # The SDK's resource has a service.instance.id of its own making: the instance.
        fam = next(f for f in fams.values() if any(s[0] == name for s in f.samples))
        return next(v for n, lb, v in fam.samples if n == name and lb.get("instance")
                    and {k: x for k, x in lb.items() if k != "instance"} == {**labels, **extra})

    assert one("shop_requests_total") == sum(every)
    assert one("shop_inflight") == sum(every)  # cumulative: the latest level
    assert one("shop_duration_milliseconds_count") == len(every)
    assert one("shop_duration_milliseconds_sum") == sum(every) * 4.0
    assert one("shop_duration_milliseconds_bucket", le="5.0") == every.count(1)
    assert not dropped(st) and not st.otlp_malformed


# --- the exporter command ---------------------------------------------------------------


def test_the_exporter_serves_applications_beside_the_agent() -> None:
    exp = ex.Exporter(clock=None)
    exp.ingest([otlp_record(b, S) for b in proto_points(0)])
    body = exp.body().decode()
    assert f"shop_requests_total{{{L}}} 3\n" in body
    assert re.search(rf"<code>{wire.EVENT}</code>: 5 label sets", exp.index().decode())


def test_run_follows_otlp_metrics_unless_told_not_to(
        scripted: type[ScriptedSubscription]) -> None:  # noqa: F811
    pytest.importorskip("opentelemetry.proto")
    args = parser().parse_args(["exporter", "--listen", f"127.0.0.1:{scripted.port}",
                                "--no-wait"])
    assert ex.run(args) == 0
    assert scripted.made[0].wanted[-1] == wire.EVENT
    ScriptedSubscription.made = []
    args = parser().parse_args(["exporter", "--listen", f"127.0.0.1:{scripted.port}",
                                "--no-wait", "--no-apps"])
    assert ex.run(args) == 0
    assert wire.EVENT not in scripted.made[0].wanted


def test_docs_list_every_drop_reason() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "applications.md").read_text()
    section = text.split("\n## Prometheus\n", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `(\w+)` \|", section, re.M)) == set(prom.DROP_REASONS)
    assert f"--max-app-series N` ({prom.DEFAULT_MAX_APP_SERIES:,}" in section
