"""``otlp_metrics`` from any process: OTLP buffers decoded to data points, the records as
the kernel hands them over on either transport, and every consumer's path (tail's lines,
recordings native and Parquet, JSON lines) for them.

Payloads are real: OTLP requests built with opentelemetry-proto, serialized, and framed
as the Rust exporter frames them (``opentelemetry-user-events-metrics``,
``src/tracepoint/mod.rs``: protocol u32 0, the eight bytes ``v0.19.00``, a ``__rel_loc``
word of ``len << 16`` with offset 0, the buffer).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1 import common_pb2 as common
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

from rezolus_ue.consume import otlp, tail
from rezolus_ue.consume.otlp import (
    DataPoint,
    Decoder,
    ExponentialValue,
    HistogramValue,
    MalformedPayload,
    Publishers,
)
from rezolus_ue.consume.readiness import AgentSeen, Situation, Verdict, Watch, explain
from rezolus_ue.consume.recording import files as recfile
from rezolus_ue.consume.recording import native as recnative
from rezolus_ue.consume.recording import parquet as recparquet
from rezolus_ue.consume.records import Record, record_from_json
from rezolus_ue.consume.subscription import Subscription, decode_fields, resolve_events
from rezolus_ue.errors import ConfigError
from rezolus_ue.otel import wire
from tracefs_tools import parse_format

ROOT = Path(__file__).resolve().parent.parent
DELTA, CUMULATIVE = m.AGGREGATION_TEMPORALITY_DELTA, m.AGGREGATION_TEMPORALITY_CUMULATIVE
T0, T1 = 1_700_000_000_000_000_000, 1_700_000_010_000_000_000

#: ``user_events:otlp_metrics``'s format file, in the layout the 6.12 VM printed for
#: ``tests/fixtures/tracefs/user_events_tt_probe.format`` (a fixed array without its
#: length, ``__rel_loc u8 name[]``), for the registration the exporters write.
USER_EVENTS_FORMAT = """\
name: otlp_metrics
ID: 2341
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:u32 protocol;\toffset:8;\tsize:4;\tsigned:0;
\tfield:char version[];\toffset:12;\tsize:8;\tsigned:1;
\tfield:__rel_loc u8 buffer[];\toffset:20;\tsize:4;\tsigned:1;

print fmt: "protocol=%u version=%s buffer=%llu", REC->protocol, REC->version, REC->buffer
"""

#: ``rezolus_ue:otlp_metrics``'s, as a uprobe event with ``wire.SCHEMA``'s fetch
#: arguments prints it: the probe address, then ``:string`` fields as ``__data_loc``.
UPROBE_FORMAT = """\
name: otlp_metrics
ID: 2342
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;
\tfield:u32 protocol;\toffset:16;\tsize:4;\tsigned:0;
\tfield:__data_loc char[] version;\toffset:20;\tsize:4;\tsigned:1;
\tfield:__data_loc char[] buffer;\toffset:24;\tsize:4;\tsigned:1;

print fmt: "(%lx) protocol=%u version=\\"%s\\" buffer=\\"%s\\"", REC->__probe_ip, ...
"""


# --- OTLP requests, as an SDK builds them ---------------------------------------------------


def kv(key: str, value: Any) -> common.KeyValue:
    return common.KeyValue(key=key, value=any_value(value))


def any_value(v: Any) -> common.AnyValue:
    if isinstance(v, bool):
        return common.AnyValue(bool_value=v)
    if isinstance(v, int):
        return common.AnyValue(int_value=v)
    if isinstance(v, float):
        return common.AnyValue(double_value=v)
    if isinstance(v, bytes):
        return common.AnyValue(bytes_value=v)
    if isinstance(v, list):
        return common.AnyValue(array_value=common.ArrayValue(values=[any_value(x) for x in v]))
    if isinstance(v, dict):
        return common.AnyValue(kvlist_value=common.KeyValueList(
            values=[kv(k, x) for k, x in v.items()]))
    return common.AnyValue(string_value=v)


RESOURCE = {"service.name": "checkout", "host.name": "web-1"}


def request(*metrics: m.Metric, resource: dict[str, Any] | None = None,
            scope: str = "shop") -> bytes:
    """Return one serialized ExportMetricsServiceRequest holding ``metrics``."""
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    res = Resource(attributes=[kv(k, v) for k, v in (resource or RESOURCE).items()])
    req = ExportMetricsServiceRequest(resource_metrics=[m.ResourceMetrics(
        resource=res, scope_metrics=[m.ScopeMetrics(
            scope=common.InstrumentationScope(name=scope, version="1.0"),
            metrics=list(metrics))])])
    return req.SerializeToString()


def number(value: int | float | None, **attrs: Any) -> m.NumberDataPoint:
    p = m.NumberDataPoint(attributes=[kv(k, v) for k, v in attrs.items()],
                          start_time_unix_nano=T0, time_unix_nano=T1)
    if isinstance(value, float):
        p.as_double = value
    elif value is not None:
        p.as_int = value
    return p


def counter(name: str = "requests", value: int | float = 5, **attrs: Any) -> bytes:
    return request(m.Metric(name=name, description="requests served", unit="{request}",
                            sum=m.Sum(data_points=[number(value, **attrs)],
                                      aggregation_temporality=DELTA, is_monotonic=True)))


def gauge(value: int | float = 0.75, **attrs: Any) -> bytes:
    return request(m.Metric(name="pool.usage", unit="1",
                            gauge=m.Gauge(data_points=[number(value, **attrs)])))


def histogram(**attrs: Any) -> bytes:
    p = m.HistogramDataPoint(attributes=[kv(k, v) for k, v in attrs.items()],
                             start_time_unix_nano=T0, time_unix_nano=T1, count=6, sum=1.25,
                             explicit_bounds=[0.1, 0.5, 1.0], bucket_counts=[1, 3, 2, 0],
                             min=0.05, max=0.9)
    return request(m.Metric(name="latency", unit="s", histogram=m.Histogram(
        data_points=[p], aggregation_temporality=DELTA)))


def exponential() -> bytes:
    p = m.ExponentialHistogramDataPoint(
        start_time_unix_nano=T0, time_unix_nano=T1, count=7, sum=40.5, scale=2,
        zero_count=1, positive=m.ExponentialHistogramDataPoint.Buckets(
            offset=3, bucket_counts=[2, 0, 3]),
        negative=m.ExponentialHistogramDataPoint.Buckets(offset=-1, bucket_counts=[1]),
        min=-1.5, max=20.0)
    return request(m.Metric(name="size", unit="By", exponential_histogram=m.ExponentialHistogram(
        data_points=[p], aggregation_temporality=CUMULATIVE)))


def rust_record(buffer: bytes) -> bytes:
    """Return the payload the Rust exporter writes after the write index, byte for byte:
    its descriptors are the protocol value, the version slice, the ``__rel_loc`` value
    and the buffer slice, each native-endian (little-endian on every target it builds)."""
    return (struct.pack("<I", 0) + b"v0.19.00" + struct.pack("<I", len(buffer) << 16)
            + buffer)


def header(tid: int, tp_id: int = 2341) -> bytes:
    """Return the 8-byte common header the kernel puts before a tracepoint's fields."""
    return struct.pack("<HBBi", tp_id, 0, 0, tid)


def otlp_record(buffer: bytes, *, pid: int = 4321, comm: str = "checkout", t: int = 10**12,
                protocol: int = 0, version: str = "v0.19.00") -> Record:
    """Return an otlp_metrics record as a subscription hands it on."""
    return Record(wire.EVENT, t, 1, pid, {"protocol": protocol, "version": version,
                                          "buffer": buffer, "pid": pid, "comm": comm})


# --- decode ---------------------------------------------------------------------------------


def test_a_monotonic_delta_sum_with_every_attribute_type() -> None:
    attrs = {"route": "/cart", "code": 200, "ok": True, "ratio": 0.5, "raw": b"\x01\xff",
             "tags": ["a", 1], "nested": {"k": "v"}}
    (p,) = otlp.decode(counter(value=5, **attrs), pid=77, comm="shop")
    assert p == DataPoint(
        metric="requests", description="requests served", unit="{request}", kind="sum",
        monotonic=True, temporality="delta", attributes=attrs, resource=RESOURCE,
        scope="shop", start_ns=T0, time_ns=T1, value=5, pid=77, comm="shop")


def test_gauge_double_and_int() -> None:
    (p,) = otlp.decode(gauge(0.75))
    assert (p.kind, p.value, p.monotonic, p.temporality) == ("gauge", 0.75, False, "cumulative")
    assert otlp.decode(gauge(-3))[0].value == -3


def test_histograms() -> None:
    (p,) = otlp.decode(histogram(route="/"))
    assert (p.kind, p.temporality, p.value, p.exponential) == ("histogram", "delta", None,
                                                                None)
    assert p.histogram == HistogramValue(6, 1.25, (0.1, 0.5, 1.0), (1, 3, 2, 0), 0.05, 0.9)
    (e,) = otlp.decode(exponential())
    assert (e.kind, e.temporality) == ("exponential_histogram", "cumulative")
    assert e.exponential == ExponentialValue(2, 1, 3, (2, 0, 3), -1, (1,), 7, 40.5, -1.5, 20.0)


def test_optional_fields_absent_are_none() -> None:
    p = m.HistogramDataPoint(count=0, explicit_bounds=[], bucket_counts=[])
    buf = request(m.Metric(name="h", histogram=m.Histogram(data_points=[p],
                                                           aggregation_temporality=DELTA)))
    assert otlp.decode(buf)[0].histogram == HistogramValue(0, None, (), (), None, None)
    none = m.NumberDataPoint(time_unix_nano=T1)  # neither as_int nor as_double
    gap = m.NumberDataPoint(time_unix_nano=T1, as_int=3, flags=1)  # no recorded value
    buf = request(m.Metric(name="g", gauge=m.Gauge(data_points=[none, gap])))
    assert [p.value for p in otlp.decode(buf)] == [None, None]


def test_several_points_and_metrics_keep_their_order() -> None:
    buf = request(m.Metric(name="a", gauge=m.Gauge(data_points=[number(1), number(2)])),
                  m.Metric(name="b", gauge=m.Gauge(data_points=[number(3)])))
    assert [(p.metric, p.value) for p in otlp.decode(buf)] == [("a", 1), ("a", 2), ("b", 3)]
    assert otlp.decode(b"\n\0") == []  # one empty ResourceMetrics: valid, no point


@pytest.mark.parametrize("buffer, kind", [
    (b"", "empty"),
    (b"\xff\xff\xff", "protobuf"),
    (counter()[:-3], "protobuf"),
    (request(m.Metric(name="s", sum=m.Sum(data_points=[number(1)]))), "invalid"),
    (request(m.Metric(name="h", histogram=m.Histogram(aggregation_temporality=DELTA,
     data_points=[m.HistogramDataPoint(explicit_bounds=[1.0], bucket_counts=[1])]))),
     "invalid"),
    (request(m.Metric(name="h", histogram=m.Histogram(aggregation_temporality=DELTA,
     data_points=[m.HistogramDataPoint(explicit_bounds=[2.0, 1.0], bucket_counts=[0, 1, 0])]))),
     "invalid"),
    (request(m.Metric(name="e", exponential_histogram=m.ExponentialHistogram(
        aggregation_temporality=DELTA,
        data_points=[m.ExponentialHistogramDataPoint(scale=21)]))), "invalid"),
])
def test_malformed_buffers_say_how(buffer: bytes, kind: str) -> None:
    with pytest.raises(MalformedPayload) as e:
        otlp.decode(buffer)
    assert e.value.kind == kind
    assert "\n" not in str(e.value)


def test_summaries_are_left_out_and_counted() -> None:
    s = m.Metric(name="rpc", summary=m.Summary(data_points=[m.SummaryDataPoint(count=1)]))
    buf = request(s, m.Metric(name="g", gauge=m.Gauge(data_points=[number(1)])))
    assert [p.metric for p in otlp.decode(buf)] == ["g"]
    d = Decoder()
    assert [p.metric for p in d.points(otlp_record(buf))] == ["g"]
    assert d.unsupported == 1 and not d.malformed


def test_decoder_counts_and_says_once_per_publisher_and_kind() -> None:
    said: list[str] = []
    d = Decoder(on_malformed=said.append)
    bad = [otlp_record(b"", pid=1), otlp_record(b"", pid=1), otlp_record(b"\xff", pid=1),
           otlp_record(counter(), pid=1, protocol=1), otlp_record(counter(), pid=2,
                                                                  version="v0.20.00"),
           otlp_record(b"", pid=2, comm="other")]
    assert all(d.points(r) == [] for r in bad)
    assert d.malformed == {"empty": 3, "protobuf": 1, "protocol": 1, "version": 1}
    assert len(said) == 5
    assert said[0].startswith("pid 1 (checkout): malformed otlp_metrics payload (empty)")
    assert [p.value for p in d.points(otlp_record(counter(value=9)))] == [9]


def test_decoder_logs_a_warning_by_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "rezolus_ue"):
        Decoder().points(otlp_record(b"junk"))
    assert "malformed otlp_metrics payload (protobuf)" in caplog.text


def test_without_the_extra_naming_it_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_events(None)[-1] == wire.EVENT
    assert resolve_events(["user_events:otlp_metrics"]) == [wire.EVENT]
    monkeypatch.setattr(otlp, "available", lambda: False)
    assert wire.EVENT not in resolve_events(None)
    assert wire.EVENT not in resolve_events(["*"])
    for name in ("otlp_metrics", "rezolus_ue:otlp_metrics"):
        with pytest.raises(ConfigError, match=r"pip install 'rezolus-ue\[otel\]'"):
            resolve_events([name])
    with pytest.raises(ConfigError, match=r"pip install 'rezolus-ue\[otel\]'"):
        Decoder()


def test_without_the_extra_the_cli_says_so_in_one_line() -> None:
    code = ("import sys, importlib.util as u; real = u.find_spec;"
            " u.find_spec = lambda n, *a: None if n.startswith('opentelemetry')"
            " else real(n, *a); from rezolus_ue.cli import main;"
            " sys.exit(main(['tail', '--no-wait', 'otlp_metrics']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "rezolus-ue: error: reading otlp_metrics needs opentelemetry-proto:"
        " pip install 'rezolus-ue[otel]'"]


# --- records as the kernel hands them over ----------------------------------------------------


def fake_proc(root: Path, tid: int, pid: int, comm: str) -> Path:
    (root / str(tid)).mkdir(parents=True, exist_ok=True)
    (root / str(tid) / "status").write_text(f"Name:\tworker\nTgid:\t{pid}\nPid:\t{tid}\n")
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "comm").write_text(comm + "\n")
    return root


def test_publishers_name_the_process_of_the_writing_thread(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 4330, 4321, "checkout")
    who = Publishers(proc, size=2)
    assert who(4330) == (4321, "checkout")
    (proc / "4321" / "comm").write_text("renamed\n")
    assert who(4330) == (4321, "checkout")  # cached at first sight
    assert who(999) == (999, "")  # gone before it was seen
    who(998)
    assert who(4330) == (4321, "renamed")  # evicted by newer threads, looked up again


def test_the_rust_exporters_record_is_ours_byte_for_byte_and_decodes_the_same(
        tmp_path: Path) -> None:
    buf = histogram(route="/pay")
    assert rust_record(buf) == wire.payload(buf)
    assert wire.decode(rust_record(buf)) == (0, b"v0.19.00", buf)
    fmt = parse_format(USER_EVENTS_FORMAT)
    fields = decode_fields(fmt, header(4330) + rust_record(buf) + b"\0" * 4, uprobe=False)
    assert fields == {"protocol": 0, "version": "v0.19.00", "buffer": buf}
    who = Publishers(fake_proc(tmp_path, 4330, 4321, "checkout"))
    rec = Record(wire.EVENT, 1, 0, 4330, otlp.record_fields(fields, 4330, who, uprobe=False))
    assert Decoder().points(rec) == otlp.decode(buf, 4321, "checkout")


def uprobe_raw(payload: bytes, tid: int) -> bytes:
    """Return what the kernel records for a uprobe hit on ``wire.SCHEMA``'s stub record:
    the probe address, the u32, then each ``:string`` as a ``__data_loc`` (offset from
    the record's start, length with the NUL) and its bytes."""
    rec = wire.SCHEMA.uprobe.record(payload)
    strings = []
    for arg in wire.SCHEMA.uprobe.args[1:]:
        at = int(arg.split("=+")[1].split("(")[0])
        strings.append(rec[at:].split(b"\0", 1)[0] + b"\0")
    fixed = 8 + 8 + 4 + 4 * len(strings)
    locs, data = b"", b""
    for s in strings:
        locs += struct.pack("<I", len(s) << 16 | (fixed + len(data)))
        data += s
    return (header(tid, 2342) + struct.pack("<Q", 0x7F5DFF9CF000) + rec[:4] + locs + data)


def test_a_uprobe_record_decodes_to_the_same_record(tmp_path: Path) -> None:
    buf = counter(route="/a")
    raw = uprobe_raw(wire.payload(buf), 4330)
    fields = decode_fields(parse_format(UPROBE_FORMAT), raw, uprobe=True)
    assert fields == {"protocol": 0, "version": "v0.19.00",
                      "buffer": base64.b64encode(buf).decode()}
    who = Publishers(fake_proc(tmp_path, 4330, 4321, "checkout"))
    assert otlp.record_fields(fields, 4330, who, uprobe=True) == {
        "protocol": 0, "version": "v0.19.00", "buffer": buf, "pid": 4321, "comm": "checkout"}
    cut = {"protocol": 0, "version": "v0.19.00", "buffer": base64.b64encode(buf).decode()[:-3]}
    with pytest.raises(MalformedPayload) as e:
        otlp.record_fields(cut, 4330, who, uprobe=True)
    assert e.value.kind == "truncated"


# --- every consumer's path --------------------------------------------------------------------


def records() -> list[Record]:
    return [otlp_record(counter(value=5, route="/a b"), t=10**12),
            otlp_record(b"junk", t=10**12 + 1, pid=99, comm=""),
            otlp_record(histogram(), t=10**12 + 2),
            otlp_record(exponential(), t=10**12 + 3),
            otlp_record(gauge(0.5), t=10**12 + 4)]


def test_tail_prints_a_line_per_data_point() -> None:
    out = io.StringIO()
    said: list[str] = []
    n = tail.write_records(records(), "text", out, 0, points=Decoder(on_malformed=said.append))
    assert n == 5 and len(said) == 1 and said[0].startswith("pid 99:")
    got = [ln.split("] ", 1)[1] for ln in out.getvalue().splitlines()]
    assert got == [
        "otlp_metrics: requests{route='/a b'} sum delta monotonic value=5 unit={request}"
        " pid=4321 comm=checkout",
        "otlp_metrics: latency{} histogram delta count=6 sum=1.25 min=0.05 max=0.9"
        " buckets=<3 non-zero> unit=s pid=4321 comm=checkout",
        "otlp_metrics: size{} exponential_histogram cumulative count=7 sum=40.5 min=-1.5"
        " max=20.0 scale=2 buckets=<4 non-zero> unit=By pid=4321 comm=checkout",
        "otlp_metrics: pool.usage{} gauge cumulative value=0.5 unit=1 pid=4321 comm=checkout"]


def test_tail_json_is_a_point_per_line_with_the_records_metadata() -> None:
    out = io.StringIO()
    tail.write_records(records()[:3], "json", out, 5, points=Decoder(on_malformed=print))
    first, hist = (json.loads(ln) for ln in out.getvalue().splitlines())
    assert first == {
        "event": "otlp_metrics", "time_ns": 10**12, "common_cpu": 1, "common_pid": 4321,
        "pid": 4321, "comm": "checkout", "metric": "requests",
        "description": "requests served", "unit": "{request}", "kind": "sum",
        "monotonic": True, "temporality": "delta", "attributes": {"route": "/a b"},
        "resource": RESOURCE, "scope": "shop", "start_time_unix_nano": T0,
        "time_unix_nano": T1, "value": 5, "time": 10**12 + 5}
    assert hist["histogram"] == {"count": 6, "sum": 1.25, "bounds": [0.1, 0.5, 1.0],
                                 "counts": [1, 3, 2, 0], "min": 0.05, "max": 0.9}
    assert "value" not in hist


def test_recordings_keep_the_buffer_and_publisher(tmp_path: Path) -> None:
    recs = records()
    recnative.write_native(recs, tmp_path / "a.rzr")
    assert list(recfile.read_records(tmp_path / "a.rzr")) == recs
    assert list(recfile.read_records(tmp_path / "a.rzr", [wire.EVENT])) == recs
    tables = recfile.read_tables(tmp_path / "a.rzr")[wire.EVENT]
    assert tables["buffer"][0] == recs[0].fields["buffer"] and list(tables["pid"]) == [
        4321, 99, 4321, 4321, 4321]
    for r in recs:
        assert record_from_json(json.loads(json.dumps(r.to_json()))) == r


@pytest.mark.skipif(not recparquet.have_pyarrow(), reason="pyarrow is not installed")
def test_parquet_keeps_the_records_whole(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    recs = records()
    recparquet.write_parquet(recs, tmp_path / "run.parquet")
    assert pq.read_table(tmp_path / "run.parquet").num_rows >= 1
    assert list(recfile.read_records(tmp_path / "run.parquet")) == recs


def test_tail_from_a_recording_decodes_them(tmp_path: Path) -> None:
    recnative.write_native(records(), tmp_path / "a.rzr")
    r = subprocess.run([sys.executable, "-m", "rezolus_ue", "tail", "--from",
                        str(tmp_path / "a.rzr"), "--format", "json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    points = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert [p["metric"] for p in points] == ["requests", "latency", "size", "pool.usage"]
    assert r.stderr.count("malformed otlp_metrics payload (protobuf)") == 1


# --- waiting for applications ---------------------------------------------------------------


class _Tracefs:
    def __init__(self, user_events: bool) -> None:
        self.has_user_events = user_events


@pytest.mark.parametrize("user_events, agent, subscribed, wanted_ours, ready, note", [
    (True, None, False, False, False, "no application has registered otlp_metrics yet"),
    (True, None, True, False, True, None),
    (False, None, False, False, False, "otlp_metrics needs the agent on this kernel"),
    (False, AgentSeen(7, {}), False, False, False,
     "the agent (pid 7) has not defined rezolus_ue:otlp_metrics"),
    (False, AgentSeen(7), False, False, False, "the agent (pid 7) is starting"),
    # Beside our events, unasked for (a default set): a word only about ours.
    (True, None, True, True, True, "no agent is running"),
])
def test_what_a_subscription_says_while_it_waits_for_applications(
        user_events: bool, agent: AgentSeen | None, subscribed: bool, wanted_ours: bool,
        ready: bool, note: str | None) -> None:
    said: list[str] = []
    sub = Subscription.__new__(Subscription)
    sub._apps = [wire.EVENT]
    sub._tfs = _Tracefs(user_events)
    sub._subs = {("user_events", wire.EVENT): 1} if subscribed else {}
    sub._blocked = {}
    sub._app_said = None
    sub._watch = Watch(["rezolus_cpu_usage"] if wanted_ours else [], said.append,
                       asked=not wanted_ours)
    sub._watch.agent = agent
    ours = explain(Situation(["rezolus_cpu_usage"], None, {}, set())) if wanted_ours else \
        Verdict(False, None)
    v = sub._judge_apps(ours)
    assert v.ready is ready
    if note is None:
        assert v.message is None and not said
    else:
        assert v.message is not None and v.message.startswith(note), v.message
        assert said == ([] if wanted_ours else [v.message])
    sub._judge_apps(ours)
    assert len(said) <= 1  # said once, not at every look
