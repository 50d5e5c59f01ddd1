"""``tail`` and ``record`` read an application's OpenTelemetry metrics on the uprobe
transport: the example service of docs/applications.md (``tests/otel_app.py``) publishes
``rezolus_ue:otlp_metrics`` through the stub, the installed CLI decodes its data points and
names the process that wrote them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel.conftest import wait_for
from waiting import running, scaled

from .conftest import CLI, ROOT

pytestmark = pytest.mark.uprobe


@pytest.fixture
def app(agent, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:  # type: ignore[no-untyped-def]
    """The example service, once it has exported (to nobody) on the uprobe transport."""
    status = tmp_path / "app.json"
    log = tmp_path / "app.log"
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, str(ROOT / "tests" / "otel_app.py"), str(status)],
                             cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                             stdin=subprocess.DEVNULL)
    try:
        def exported() -> object:
            running(p, log.read_text, "the example service")
            return status.exists() and json.loads(status.read_text())

        seen = wait_for(exported, timeout=120, step=0.1, what="the service's first export",
                        seen=log.read_text)
        assert seen["transport"] == "uprobe", seen
        yield p
    finally:
        p.terminate()
        p.wait(timeout=scaled(60))


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *argv], capture_output=True, text=True,
                          timeout=scaled(180))


def test_tail_and_record_decode_an_applications_points(app, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    comm = Path(f"/proc/{app.pid}/comm").read_text().strip()
    p = _cli("tail", "otlp_metrics", "--format", "json", "-n", "4")
    assert p.returncode == 0, p.stderr
    points = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert len(points) == 4, p.stdout
    for pt in points:
        assert (pt["event"], pt["pid"], pt["comm"]) == ("otlp_metrics", app.pid, comm), pt
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
    assert "otlp_metrics: checkout." in p.stdout and f"pid={app.pid} comm={comm}" in p.stdout

    rec = tmp_path / "rec.rzr"
    p = _cli("record", "--duration", "3s", str(rec), "otlp_metrics")
    assert p.returncode == 0, p.stderr
    p = _cli("tail", "--from", str(rec), "--format", "json")
    assert p.returncode == 0, p.stderr
    got = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert got and {(g["metric"], g["pid"], g["comm"]) for g in got} <= {
        ("checkout.requests", app.pid, comm), ("checkout.duration", app.pid, comm)}, got
