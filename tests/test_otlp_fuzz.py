"""Whatever a process writes to ``otlp_metrics``, a consumer reads on: random bytes,
mutated and truncated real buffers, random records on either transport. Decoding raises
``MalformedPayload`` or nothing; the record path a subscription runs never raises at
all; every point decoded prints as text and strict JSON.
"""

from __future__ import annotations

import io
import json
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
from test_otlp_decode import (
    DELTA,
    UPROBE_FORMAT,
    USER_EVENTS_FORMAT,
    counter,
    exponential,
    gauge,
    header,
    histogram,
    kv,
    otlp_record,
    request,
    rust_record,
    uprobe_raw,
)

from rezolus_ue.consume import otlp, tail
from rezolus_ue.consume.otlp import DataPoint, Decoder, MalformedPayload, Publishers
from rezolus_ue.consume.records import Record
from rezolus_ue.consume.subscription import Subscription
from rezolus_ue.otel import wire
from tracefs_tools import parse_format

FUZZ = settings(max_examples=2000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
VALID = [counter(), counter(value=2.5, route="/a", tags=["x", 1], nested={"k": b"\0"}),
         gauge(), histogram(code=200), exponential()]


def decode_or_malformed(buf: bytes) -> list[DataPoint]:
    """Return the points, or [] for what decode rejects as malformed (and only that)."""
    try:
        return otlp.decode(buf, 7, "fuzz")
    except MalformedPayload as e:
        assert e.kind in {"empty", "protobuf", "invalid"}, e
        return []


def shown(points: list[DataPoint]) -> None:
    """Print each point as tail would, as text and as strict JSON."""
    rec = otlp_record(b"")
    for p in points:
        tail.format_point_text(rec, p, 0)
        json.dumps(p.to_json(), allow_nan=False)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(buf: bytes) -> None:
    shown(decode_or_malformed(buf))
    said: list[str] = []
    d = Decoder(on_malformed=said.append)
    d.points(otlp_record(buf))
    d.points(otlp_record(buf))
    assert len(said) <= 1 and sum(d.malformed.values()) in (0, 2)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A real buffer with a few bytes flipped, inserted, deleted or cut off."""
    buf = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(buf) - 1)))
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "cut"]))
        if op == "flip" and buf:
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and buf:
            buf[at] = draw(st.integers(0, 255))
        elif op == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[at:at + draw(st.integers(1, 8))]
        else:
            del buf[at:]
    return bytes(buf)


@FUZZ
@given(mutated())
def test_mutated_real_buffers(buf: bytes) -> None:
    shown(decode_or_malformed(buf))
    Decoder(on_malformed=lambda _m: None).points(otlp_record(buf))


@pytest.mark.parametrize("buf", VALID)
def test_every_truncation_of_real_buffers(buf: bytes) -> None:
    for n in range(len(buf)):
        shown(decode_or_malformed(buf[:n]))


finite = st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text()
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=8)


@FUZZ
@given(attrs=st.dictionaries(st.text(max_size=8), values, max_size=4),
       value=st.integers(-(2**63), 2**63 - 1) | st.floats(),
       bounds=st.lists(finite, max_size=5, unique=True), name=st.text(max_size=16))
def test_what_an_sdk_may_write_decodes_to_what_it_wrote(attrs: dict, value: int | float,
                                                        bounds: list[float], name: str) -> None:
    pattrs = [kv(k, v) for k, v in attrs.items() if v is not None]
    number = m.NumberDataPoint(attributes=pattrs, time_unix_nano=5)
    if isinstance(value, float):
        number.as_double = value
    else:
        number.as_int = value
    bounds.sort()
    hist = m.HistogramDataPoint(attributes=pattrs, count=3, explicit_bounds=bounds,
                                bucket_counts=[1] * (len(bounds) + 1))
    buf = request(m.Metric(name=name, gauge=m.Gauge(data_points=[number])),
                  m.Metric(name=name, histogram=m.Histogram(data_points=[hist],
                                                            aggregation_temporality=DELTA)))
    g, h = otlp.decode(buf)
    assert g.metric == h.metric == name
    assert g.value == value or (math.isnan(value) and math.isnan(g.value))  # type: ignore[arg-type]
    assert h.histogram is not None and h.histogram.bounds == tuple(bounds)
    assert set(g.attributes) == {k for k, v in attrs.items() if v is not None}
    shown([g, h])


# --- the record path a subscription runs ------------------------------------------------------


@pytest.fixture(scope="module")
def subscription(tmp_path_factory: pytest.TempPathFactory) -> Subscription:
    """A Subscription's decoding state without perf events: its formats for both groups."""
    sub = Subscription.__new__(Subscription)
    sub._formats = {2341: (wire.EVENT, parse_format(USER_EVENTS_FORMAT), False),
                    2342: (wire.EVENT, parse_format(UPROBE_FORMAT), True)}
    sub._publishers = Publishers(tmp_path_factory.mktemp("proc"))
    sub._rejects = Decoder(on_malformed=lambda _m: None)
    return sub


@FUZZ
@given(uprobe=st.booleans(), body=st.binary(max_size=200))
def test_random_records_never_raise(subscription: Subscription, uprobe: bool,
                                    body: bytes) -> None:
    raw = header(4330, 2342 if uprobe else 2341) + body
    rec = subscription._decode(raw, 1, 0)
    if rec is not None:
        assert set(rec.fields) >= {"protocol", "version", "buffer", "pid", "comm"}
        assert isinstance(rec.fields["buffer"], bytes)
        out = io.StringIO()
        tail.write_records([rec], "json", out, 0, points=subscription._rejects)


@FUZZ
@given(uprobe=st.booleans(), buf=mutated(), at=st.integers(0, 4096),
       junk=st.binary(min_size=1, max_size=4), protocol=st.integers(0, 2**32 - 1),
       version=st.binary(min_size=8, max_size=8))
def test_damaged_real_records_never_raise(subscription: Subscription, uprobe: bool,
                                          buf: bytes, at: int, junk: bytes, protocol: int,
                                          version: bytes) -> None:
    payload = struct.pack("<I", protocol) + version + rust_record(buf)[12:]
    raw = uprobe_raw(payload, 4330) if uprobe else header(4330) + payload
    at %= len(raw)
    raw = raw[:at] + junk + raw[at + len(junk):] if at >= 8 else raw[:len(raw) - at]
    rec = subscription._decode(raw, 1, 0)
    if rec is not None:
        tail.write_records([rec], "text", io.StringIO(), 0, points=subscription._rejects)


anything = st.none() | st.integers() | st.text(max_size=12) | st.binary(max_size=64) \
    | st.sampled_from(VALID) | st.just("v0.19.00") | st.just(0)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["protocol", "version", "buffer", "pid",
                                               "comm"]), anything))
def test_records_of_any_shape_never_raise(fields: dict) -> None:
    """What a foreign recording or JSON lines may hold for the event's fields."""
    rec = Record(wire.EVENT, 1, 0, 42, fields)
    tail.write_records([rec], "json", io.StringIO(), 0,
                       points=Decoder(on_malformed=lambda _m: None))
