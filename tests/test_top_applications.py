"""``rezolus-ue top``'s applications panel, in-process: data points built as
``consume.otlp.DataPoint``s (and ``otlp_metrics`` records with real protobuf buffers)
beside the agent ticks of ``top_host``; the expected figures are worked out by hand."""

from __future__ import annotations

import re
from typing import Any

import pytest
from test_exporter_otlp import hist, otlp_record, point, proto_points
from top_host import Host, S, text_of

from rezolus_ue.consume import otlp
from rezolus_ue.consume.top import applications as apps
from rezolus_ue.consume.top.frame import Model
from rezolus_ue.consume.top.keys import UiState, handle_key
from rezolus_ue.consume.top.registry import TOP_EVENTS, feed_events, new_model
from rezolus_ue.otel import wire

#: The shop service's exports, one per agent tick: (requests delta, queue depth, bytes
#: sent so far). Its SDK exports every 10 s of its own clock: the delta points say so.
EXPORTS = [(30, 7, 1000), (50, 9, 3000)]


def shop_points(i: int) -> list[Any]:
    """Return the shop service's export ``i``: a delta counter, a gauge, a cumulative
    counter and a delta histogram."""
    start, end = (100 + i * 10) * S, (110 + i * 10) * S
    delta, depth, sent = EXPORTS[i]
    return [
        point(value=delta, start_ns=start, time_ns=end),
        point(metric="shop.queue.depth", unit="{item}", kind="gauge", monotonic=False,
              temporality="cumulative", value=depth),
        point(metric="shop.bytes", unit="By", temporality="cumulative", value=sent,
              start_ns=1, time_ns=end),
        point(metric="shop.duration", unit="ms", kind="histogram", monotonic=False,
              value=None, histogram=hist(4, 100.0, (10.0,), (1, 3)), start_ns=start,
              time_ns=end),
    ]


def accumulator(m: Model) -> apps.Applications:
    acc = m._feeds[wire.EVENT]
    assert isinstance(acc, apps.Applications)
    return acc


def shop(exports: int = 2) -> tuple[Model, Host]:
    """Return a model fed agent ticks a second apart, the shop exporting at each."""
    host = Host()
    m = new_model(1.0)
    for i in range(exports):
        m.ingest(host.records())
        for p in shop_points(i):
            accumulator(m).add_point(p, host.t + 90)
        m.flush()
        host.advance()
    return m, host


def by_metric(m: Model) -> dict[str, apps.AppRow]:
    return {r.metric: r for r in apps.rows(m.view)}


def test_values_and_rates_by_kind() -> None:
    rows = by_metric(shop()[0])
    req, depth, sent, dur = (rows[k] for k in ("shop.requests", "shop.queue.depth",
                                               "shop.bytes", "shop.duration"))
    # Delta counter: the deltas' total; its rate over the point's own 10 s.
    assert (req.kind, req.value, req.rate) == ("counter", 80, pytest.approx(5.0))
    # Gauge: the latest level, no rate.
    assert (depth.kind, depth.value, depth.rate) == ("gauge", 9, None)
    # Cumulative counter: the latest total; its rate between its last two points (10 s).
    assert (sent.value, sent.rate) == (3000, pytest.approx(200.0))
    # Histogram: the latest point's mean; its count per second.
    assert (dur.kind, dur.value, dur.rate) == ("histogram", 25.0, pytest.approx(0.4))
    assert {(r.pid, r.comm, r.attributes) for r in rows.values()} == {
        (100, "shop", "route=/pay")}


def test_the_first_cumulative_point_has_no_rate_yet() -> None:
    rows = by_metric(shop(1)[0])
    assert rows["shop.bytes"].rate is None and rows["shop.requests"].rate == 3.0


def test_the_panel_shows_once_an_application_publishes() -> None:
    m, host = shop(0)
    m.ingest(host.records())
    m.flush()
    assert "APP METRIC" not in text_of(m, 160, 60)
    m, _host = shop()
    out = text_of(m, 160, 60)
    assert "APP METRIC" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("shop.bytes"))
    assert re.search(r"route=/pay\s+2\.9K\s+200\s+By\s+100 shop", line), line
    line = next(ln for ln in out.splitlines() if ln.startswith("shop.duration"))
    assert re.search(r"25ms\s+0\.4\s+ms\s+100 shop", line), line


def test_sort_modes_and_filter() -> None:
    m, _host = shop()

    def order(ui: UiState) -> list[str]:
        out = text_of(m, 160, 60, ui)
        return re.findall(r"^(shop\.\S+)", out, re.M)

    ui = UiState()
    assert order(ui) == ["shop.bytes", "shop.requests", "shop.duration",
                         "shop.queue.depth"]  # by rate, the unknown last
    ui = handle_key(ui, "M")  # by value
    assert order(ui) == ["shop.bytes", "shop.requests", "shop.duration", "shop.queue.depth"]
    ui = handle_key(ui, "s")  # io: by pid, then metric
    assert order(ui) == ["shop.bytes", "shop.duration", "shop.queue.depth", "shop.requests"]
    ui = handle_key(ui, "s")  # name
    assert order(ui) == ["shop.bytes", "shop.duration", "shop.queue.depth", "shop.requests"]
    assert order(UiState(filter="queue")) == ["shop.queue.depth"]
    assert order(UiState(filter="route=/cart")) == []


def test_many_publishers_one_row_each() -> None:
    acc = apps.Applications()
    for pid, comm in ((100, "shop"), (200, "cart")):
        for attrs in ({"route": "/pay"}, {"route": "/cart"}):
            acc.add_point(point(pid=pid, comm=comm, attributes=attrs), 5 * S)
    rows = acc.rows(5 * S)
    assert sorted((r.pid, r.attributes) for r in rows) == [
        (100, "route=/cart"), (100, "route=/pay"), (200, "route=/cart"), (200, "route=/pay")]


def test_a_silent_publisher_goes_after_three_export_intervals() -> None:
    acc = apps.Applications()
    acc.add_point(point(start_ns=S, time_ns=3 * S), 10 * S)  # exports every 2 s
    acc.add_point(point(metric="once", kind="gauge", monotonic=False,
                        temporality="cumulative", pid=200), 10 * S)  # interval unknown
    assert len(acc.rows(10 * S + 6 * S)) == 2
    assert [r.metric for r in acc.rows(10 * S + 6 * S + 1)] == ["once"]
    assert [r.metric for r in acc.rows(10 * S + 3 * 60 * S)] == ["once"]  # the SDK default
    assert acc.rows(10 * S + 3 * 60 * S + 1) == ()
    # A display interval longer than the export interval keeps it for three frames.
    acc.add_point(point(start_ns=S, time_ns=3 * S), 1000 * S)
    assert len(acc.rows(1000 * S + 20 * S, frame_ns=10 * S)) == 1


def test_series_are_capped() -> None:
    acc = apps.Applications(max_series=2)
    for n in range(4):
        acc.add_point(point(attributes={"n": n}), S)
    acc.add_point(point(attributes={"n": 0}, value=5, start_ns=10, time_ns=20), 2 * S)
    assert len(acc.rows(2 * S)) == 2 and acc.dropped == 2


@pytest.mark.parametrize(("x", "unit", "want"), [
    (None, "", "-"), (0, "", "0"), (0.25, "1", "0.25"), (3.14159, "", "3.14"),
    (0.0001, "", "1e-04"), (12_345, "{request}", "12k"), (-2, "", "-2"),
    (1500, "By", "1.5K"), (0.0015, "s", "1.5ms"), (25.0, "ms", "25ms"), (-0.5, "s", "-500ms"),
])
def test_values_in_their_units(x: float | None, unit: str, want: str) -> None:
    assert apps.fmt(x, unit) == want


def test_records_through_the_model_and_malformed_ones_counted() -> None:
    pytest.importorskip("opentelemetry.proto")
    host = Host()
    m = new_model(1.0)
    for i in range(2):
        m.ingest(host.records() + [otlp_record(b, host.t + 90) for b in proto_points(i)]
                 + [otlp_record(b"\xff not protobuf", host.t + 95)])
        m.flush()
        host.advance()
    rows = by_metric(m)
    assert rows["shop.requests"].value == 7 and rows["shop.cpu.utilization"].value == 0.5
    assert "shop.size" in rows  # exponential histograms too: their mean and count rate
    assert accumulator(m).malformed == 2
    assert m.view.records == 2 * (len(Host().records()) + 8)


def test_top_reads_applications_beside_the_agent_never_waiting_for_them() -> None:
    assert wire.EVENT not in TOP_EVENTS
    assert feed_events() == ((wire.EVENT,) if otlp.available() else ())
    m = new_model(1.0)
    m.subscribed = (wire.EVENT,)  # an application, but no agent yet
    out = text_of(m, 100, 30)
    assert "waiting for the agent" in out and wire.EVENT not in out
