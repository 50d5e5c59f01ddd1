"""``tail`` and ``record`` read an application's OpenTelemetry metrics on the uprobe
transport: the example service of docs/applications.md (``tests/example_service.py``)
publishes ``rezolus_ue:otlp_metrics`` through the stub, the installed CLI decodes its data
points and names the process that wrote them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from example_service import Service, service
from kernel.conftest import wait_for
from waiting import scaled

from .conftest import CLI

pytestmark = pytest.mark.uprobe


@pytest.fixture
def app(agent) -> Iterator[Service]:  # type: ignore[no-untyped-def]
    """The example service, once it has exported (to nobody) on the uprobe transport."""
    with service() as s:
        seen = wait_for(lambda: s.counters(), timeout=120, step=0.1,
                        what="the service's first export", seen=s.output)
        assert seen["transport"] == "uprobe", seen
        yield s


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *argv], capture_output=True, text=True,
                          timeout=scaled(180))


def test_tail_and_record_decode_an_applications_points(app, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    comm = Path(f"/proc/{app.proc.pid}/comm").read_text().strip()
    p = _cli("tail", "otlp_metrics", "--format", "json", "-n", "4")
    assert p.returncode == 0, p.stderr
    points = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert len(points) == 4, p.stdout
    for pt in points:
        assert (pt["event"], pt["pid"], pt["comm"]) == ("otlp_metrics", app.proc.pid, comm), pt
        assert pt["attributes"] == {"route": "/pay"} and pt["scope"] == "checkout", pt
        assert pt["resource"]["service.name"] == "checkout", pt
        assert pt["temporality"] == "delta", pt
    kinds = {pt["metric"]: pt["kind"] for pt in points}
    assert kinds == {"checkout.requests": "sum", "checkout.duration": "histogram"}, points
    for pt in points:
        if pt["kind"] == "sum":
            assert pt["monotonic"] and pt["value"] > 0 and pt["unit"] == "{request}", pt
        else:
            h = pt["histogram"]
            assert h["count"] == sum(h["counts"]) > 0 and pt["unit"] == "ms", pt

    p = _cli("tail", "otlp_metrics", "-n", "1")
    assert p.returncode == 0, p.stderr
    assert "otlp_metrics: checkout." in p.stdout and f"pid={app.proc.pid} comm={comm}" in p.stdout

    rec = tmp_path / "rec.rzr"
    p = _cli("record", "--duration", "3s", str(rec), "otlp_metrics")
    assert p.returncode == 0, p.stderr
    p = _cli("tail", "--from", str(rec), "--format", "json")
    assert p.returncode == 0, p.stderr
    got = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert got and {(g["metric"], g["pid"], g["comm"]) for g in got} <= {
        ("checkout.requests", app.proc.pid, comm), ("checkout.duration", app.proc.pid, comm)}, got
