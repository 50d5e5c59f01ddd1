"""An application's OpenTelemetry metrics on the uprobe transport: the example service of
docs/applications.md, run as an unprivileged user beside `rezolus-ue run` (which defines
``rezolus_ue:otlp_metrics``), is idle with no consumer and publishes to perf once one
arrives: protocol 0, the version, and a buffer that decodes into the service's metrics.
Root (perf, the agent); the application itself runs as nobody."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from example_service import NOBODY, Service, perf_records
from example_service import service as run_service
from kernel.conftest import wait_for
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from rezolus_ue.otel import wire

from .conftest import GROUP, field

pytestmark = pytest.mark.uprobe


@pytest.fixture
def service() -> Iterator[Service]:
    """The docs' example service, as nobody."""
    with run_service(NOBODY) as s:
        yield s


def test_an_unprivileged_app_publishes_otlp_metrics_that_perf_sees(tfs, agent, service,
                                                                   tmp_path):
    agent.wait_defined(tfs, wire.EVENT)
    # Exports with nobody listening: counted, nothing written.
    idle = wait_for(lambda: service.counters().get("not_enabled", 0) > 0 and
                    service.counters(), timeout=60, what="an export with no consumer",
                    seen=service.output)
    assert idle["transport"] == "uprobe" and idle["written"] == 0, idle
    lines, wrote = perf_records(service, f"{GROUP}:{wire.EVENT}", tmp_path / "perf.data")
    assert len(lines) >= wrote >= 3, (wrote, lines)
    names = set()
    for ln in lines:
        assert field(ln, "protocol") == "0", ln
        assert field(ln, "version") == '"v0.19.00"', ln
        req = ExportMetricsServiceRequest.FromString(
            wire.buffer_from_text(field(ln, "buffer").strip('"')))
        (rm,) = req.resource_metrics
        assert {kv.key: kv.value.string_value for kv in rm.resource.attributes
                }["service.name"] == "checkout"
        (sm,) = rm.scope_metrics
        (m,) = sm.metrics
        names.add(m.name)
    assert names <= {"checkout.requests", "checkout.duration"} and names, names
    assert os.stat(f"/proc/{service.proc.pid}").st_uid == NOBODY
    assert service.counters()["dropped"] == 0
