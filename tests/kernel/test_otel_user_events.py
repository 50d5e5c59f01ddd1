"""An application's OpenTelemetry metrics on user_events, with no agent: the example service
of docs/applications.md registers ``user_events:otlp_metrics`` itself, is idle with no
consumer, and writes records that perf and a raw perf_event_open subscription see as the
Rust and .NET exporters write them; it also runs as an unprivileged user given only
``user_events_data`` (and a search of tracefs) through a group."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from example_service import NOBODY, Service, perf_records, service
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from rezolus_ue.linux.perf_ring import TracepointSubscription
from rezolus_ue.otel import wire

from .conftest import wait_for

pytestmark = pytest.mark.kernel
G = "user_events"
ROOT = Path(__file__).resolve().parents[2]
#: The Rust exporter's registration string: a trailing ';' the .NET one lacks.
RUST_EVENT_DEF = "otlp_metrics u32 protocol;char[8] version;__rel_loc u8[] buffer;"


def _requests(tracefs, s: Service, count: int = 3) -> list[bytes]:
    """Return ``count`` raw records of the service, taken with perf_event_open."""
    wait_for(lambda: tracefs.event_exists(G, wire.EVENT), timeout=60,
             what="the service to register otlp_metrics", seen=s.output)
    idle = wait_for(lambda: s.counters().get("not_enabled", 0) > 0 and s.counters(),
                    timeout=60, what="an export with no consumer", seen=s.output)
    assert idle["transport"] == "user_events" and idle["written"] == 0, idle
    samples = []
    with TracepointSubscription(tracefs.event_id(G, wire.EVENT)) as sub:
        def enough() -> bool:
            samples.extend(sub.poll(100))
            return len(samples) >= count
        wait_for(enough, timeout=60, what=f"{count} otlp_metrics records",
                 seen=s.counters)
        assert sub.lost == 0
    return [bytes(x.raw) for x in samples]


def _check(tracefs, raws: list[bytes]) -> set[str]:
    """Assert each record is the Rust layout and decodes; return the metric names."""
    fmt = tracefs.event_format(G, wire.EVENT)
    header = max(f.offset + f.size for f in fmt.common_fields)
    names = set()
    for raw in raws:
        w = wire.decode(raw[header:])
        assert (w.protocol, w.version) == (0, b"v0.19.00")
        assert raw[header:header + len(wire.payload(w.buffer))] == wire.payload(w.buffer)
        fields = fmt.decode(raw)
        assert (fields["protocol"], fields["version"]) == (0, "v0.19.00"), fields
        assert bytes(fields["buffer"]) == w.buffer
        (rm,) = ExportMetricsServiceRequest.FromString(w.buffer).resource_metrics
        assert {kv.key: kv.value.string_value for kv in rm.resource.attributes
                }["service.name"] == "checkout"
        (m,) = rm.scope_metrics[0].metrics
        names.add(m.name)
    assert names and names <= {"checkout.requests", "checkout.duration"}, names
    return names


def test_the_example_service_publishes_otlp_metrics_without_an_agent(tracefs, ue, tmp_path):
    with service() as s:
        _check(tracefs, _requests(tracefs, s))
        # A Rust application on the same host registers the same event (its string's
        # trailing ';' is no other format), so both write into one tracepoint.
        ue.register(RUST_EVENT_DEF).unregister()
        lines, wrote = perf_records(s, f"{G}:{wire.EVENT}", tmp_path / "perf.data")
    assert len(lines) >= wrote >= 3, (wrote, lines)
    assert all("protocol=0" in ln and "v0.19.00" in ln for ln in lines), lines[:3]


def test_an_unprivileged_service_needs_only_write_access_to_user_events_data(tracefs):
    """tracefs's root directory group-searchable and ``user_events_data`` group-writable,
    for a group the service's user is in (here nobody's own), as docs/applications.md
    sets it up; the machine's owners and modes are restored after."""
    paths = [tracefs.root, tracefs.root / "user_events_data"]
    saved = [os.stat(p) for p in paths]
    try:
        for p, mode in zip(paths, (0o050, 0o060), strict=True):
            os.chown(p, -1, NOBODY)
            os.chmod(p, os.stat(p).st_mode | mode)
        with service(user=NOBODY) as s:
            _check(tracefs, _requests(tracefs, s))
            assert os.stat(f"/proc/{s.proc.pid}").st_uid == NOBODY
    finally:
        for p, st in zip(paths, saved, strict=True):
            os.chown(p, st.st_uid, st.st_gid)
            os.chmod(p, st.st_mode & 0o7777)
