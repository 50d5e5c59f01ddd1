"""An application's OpenTelemetry metrics on the uprobe transport: the example service of
docs/applications.md, run as an unprivileged user beside `rezolus-ue run` (which defines
``rezolus_ue:otlp_metrics``), is idle with no consumer and publishes to perf once one
arrives: protocol 0, the version, and a buffer that decodes into the service's metrics.
Root (perf, the agent); the application itself runs as nobody."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel.conftest import wait_for
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from waiting import running, scaled

from rezolus_ue.otel import wire

from .conftest import GROUP, ROOT, field

pytestmark = pytest.mark.uprobe
APP = ROOT / "tests" / "fixtures" / "docs_example_app.py"
NOBODY = 65534


class Service:
    """The docs' example service as ``nobody``, its exporter's counters in a status file."""

    def __init__(self) -> None:
        # A directory nobody can write its status into (tmp_path's parents are root's 0700).
        self.dir = Path(tempfile.mkdtemp(prefix="otel-app-"))
        self.dir.chmod(0o777)
        self.status = self.dir / "status.json"
        self.log = self.dir / "app.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 sys.executable, str(APP), str(self.status)],
                cwd=self.dir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def output(self) -> str:
        return self.log.read_text()

    def counters(self) -> dict:
        running(self.proc, self.output, "the example service")
        try:
            return json.loads(self.status.read_text())
        except FileNotFoundError:
            return {}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=scaled(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def service() -> Iterator[Service]:
    s = Service()
    try:
        yield s
    finally:
        s.close()


def test_an_unprivileged_app_publishes_otlp_metrics_that_perf_sees(tfs, agent, service,
                                                                   tmp_path):
    agent.wait_defined(tfs, wire.EVENT)
    # Exports with nobody listening: counted, nothing written.
    idle = wait_for(lambda: service.counters().get("not_enabled", 0) > 0 and
                    service.counters(), timeout=60, what="an export with no consumer",
                    seen=service.output)
    assert idle["transport"] == "uprobe" and idle["written"] == 0, idle
    data = tmp_path / "perf.data"
    perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{GROUP}:{wire.EVENT}", "-a",
                             "-o", str(data)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: service.counters().get("written", 0) >= 3, timeout=60,
                 what="the service to write 3 records to perf", seen=service.counters)
    finally:
        perf.send_signal(signal.SIGINT)
        _, err = perf.communicate(timeout=scaled(60))
    assert perf.returncode in (0, -signal.SIGINT), err
    script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True,
                            text=True, timeout=120)
    assert script.returncode == 0, script.stderr[-2000:]
    lines = [ln for ln in script.stdout.splitlines() if f"{GROUP}:{wire.EVENT}:" in ln]
    assert len(lines) >= 3, script.stdout[-2000:]
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
