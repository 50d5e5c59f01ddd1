"""The processes sampler's two events through the real transport (uprobe events on this
host, user_events where the kernel has them), read back by a subscription and by ``tail``:
a comm not ASCII, one cut inside a character as the kernel cuts it, a long cgroup path.

No agent runs: this process publishes through the product's own publisher, as the agent
does, and its status file says so (consumers subscribe only while an agent runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_recorder import COMMS, LONG_CGROUP
from waiting import scaled

import rezolus_ue.agent
from rezolus_ue.consume.records import JSON_META, Record
from rezolus_ue.consume.subscription import Subscription
from rezolus_ue.publisher import EventHandle, open_publisher
from rezolus_ue.samplers.processes import PROCESS, PROCESSES

from .conftest import Bus, wait_for

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]
EVENTS = [PROCESS.event, PROCESSES.event]


@pytest.fixture
def handles(bus: Bus, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, EventHandle]]:
    """Both events, registered as the agent registers them, by this process."""
    (tmp_path / "status.json").write_text(json.dumps(
        {"pid": os.getpid(), "transport": bus.transport, "samplers": {}}))
    monkeypatch.setattr(rezolus_ue.agent, "RUNTIME_DIR", tmp_path)
    monkeypatch.setenv("REZOLUS_UE_RUNTIME_DIR", str(tmp_path))  # for tail's process
    pub = open_publisher(bus.tfs.root, "auto")
    try:
        yield pub.register([PROCESS.schema, PROCESSES.schema])
    finally:
        pub.close()


def payloads() -> list[tuple[str, bytes]]:
    """Return one interval: a record per comm of ``COMMS``, then the summary."""
    out = []
    for i, comm in enumerate(COMMS):
        values = {"start_ns": (i + 1) * 10**9, "rss_bytes": 2**40 + i,
                  "io_read_bytes": 2**64 - 1}
        out.append((PROCESS.event, PROCESS.schema.pack(
            1000 + i, comm, "wörker", LONG_CGROUP, "S",
            *(values.get(m.name, i) for m in PROCESS.scalars))))
    out.append((PROCESSES.event, PROCESSES.schema.pack(
        *(len(COMMS) if m.name == "published" else 7 for m in PROCESSES.scalars))))
    return out


def write(handles: dict[str, EventHandle]) -> list[dict[str, object]]:
    """Write one interval; return the fields a consumer should decode."""
    schemas = {PROCESS.event: PROCESS.schema, PROCESSES.event: PROCESSES.schema}
    out = []
    for event, payload in payloads():
        assert handles[event].write(payload), f"{event}: the write went nowhere"
        out.append(schemas[event].unpack(payload))
    return out


def test_a_subscription_decodes_both_events(bus: Bus,
                                            handles: dict[str, EventHandle]) -> None:
    with Subscription(EVENTS, wait=False, tracefs=bus.tfs) as sub:
        assert all(h.enabled for h in handles.values())
        want = write(handles)
        got: list[Record] = []
        wait_for(lambda: got.extend(sub.poll(100)) or len(got) >= len(want),
                 timeout=scaled(30), what="the interval's records",
                 seen=lambda: [r.event for r in got])
        assert sub.lost == 0
    assert [r.fields for r in got] == want
    assert [r["comm"] for r in got[:3]] == ["café-wörker", "ab日本語プ\ufffd",
                                            "kworker/0:1H-kb"]
    assert got[0]["cgroup"] == LONG_CGROUP and got[0]["io_read_bytes"] == 2**64 - 1


def test_tail_prints_both_events(bus: Bus, handles: dict[str, EventHandle]) -> None:
    n = len(payloads())
    tail = subprocess.Popen(
        [sys.executable, "-m", "rezolus_ue", "tail", *EVENTS, "--format", "json",
         "--count", str(n), "--no-wait"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    try:
        wait_for(lambda: all(h.enabled for h in handles.values()), timeout=scaled(60),
                 what="tail to enable both events",
                 seen=lambda: tail.poll() is not None and tail.stderr.read())  # type: ignore[union-attr]
        want = write(handles)
        out, err = tail.communicate(timeout=scaled(60))
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert tail.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["event"] for line in lines] == [PROCESS.event] * len(COMMS) + [PROCESSES.event]
    fields = [{k: v for k, v in line.items() if k not in JSON_META} for line in lines]
    assert fields == want
