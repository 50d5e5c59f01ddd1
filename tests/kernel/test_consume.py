"""The consumer side against a real kernel: perf_event_open subscriptions and `tail`.

These run on this host, on whichever transport ``transport = "auto"`` takes on its kernel
(uprobe events here, user_events where the kernel has them). Tests without an agent publish
``rezolus_cpu_usage`` themselves through the product's own publisher, as the agent does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import scaled

import rezolus_ue
from rezolus_ue import schema as S
from rezolus_ue.consume.subscription import Subscription
from rezolus_ue.publisher import EventHandle, open_publisher

from .conftest import Bus, wait_for
from .test_agent_e2e import AgentProcess

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]
CPU = S.CPU_USAGE


@pytest.fixture
def reg(bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EventHandle]:
    """The real rezolus_cpu_usage event, published as the agent would (no agent runs: the
    uprobe publisher deletes an agent's definitions as stale). This process is the
    publisher, and its status file says so: consumers subscribe only while an agent runs."""
    import json

    import rezolus_ue.agent

    (tmp_path / "status.json").write_text(json.dumps(
        {"pid": os.getpid(), "transport": bus.transport, "samplers": {}}))
    monkeypatch.setattr(rezolus_ue.agent, "RUNTIME_DIR", tmp_path)
    pub = open_publisher(bus.tfs.root, "auto")
    try:
        yield pub.register([CPU])[CPU.name]
    finally:
        pub.close()


def _row(i: int) -> bytes:
    return CPU.pack(i, *range(1, 9), 500_000)


def _drain(sub: Subscription, want: int, timeout: float = 20) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        out += sub.poll(100)
    return out


def test_two_subscriptions_each_get_every_record(bus: Bus, reg: EventHandle) -> None:
    tracing_on = (bus.tfs.root / "tracing_on").read_text()
    a = Subscription([CPU.name], wait=False, tracefs=bus.tfs)
    b = Subscription([CPU.name], wait=False, tracefs=bus.tfs)
    try:
        assert reg.enabled
        for i in range(50):
            assert reg.write(_row(i))
        ra, rb = _drain(a, 50), _drain(b, 50)
        assert [r.fields["cpu"] for r in ra] == list(range(50))
        assert [r.fields["cpu"] for r in rb] == list(range(50))
        assert ra[0].fields == CPU.unpack(_row(0))
        a.close()  # closing one leaves the other running
        for i in range(50, 60):
            assert reg.write(_row(i))
        assert [r.fields["cpu"] for r in _drain(b, 10)] == list(range(50, 60))
        assert (a.lost, b.lost) == (0, 0)
    finally:
        a.close()
        b.close()
    assert not reg.enabled
    assert (bus.tfs.root / "tracing_on").read_text() == tracing_on


def test_subscribe_live_keeps_fields_and_metadata_apart(reg: EventHandle) -> None:
    """The public API on live tracepoints: ``r["cpu"]`` is the event's field, ``r.meta``
    where the record was written; closing the iterator releases the event."""
    writer: list[int] = []
    done = threading.Event()

    def write() -> None:
        # Written until the reader has its 20: the enable bit is set when subscribe()
        # opened its first CPU's perf event, and a record written on a CPU whose event
        # is not open yet reaches no ring (a subscription sees what comes after it).
        # One CPU, the first the subscription opens (rings are opened in CPU order):
        # from its first record on, every one has a ring to reach.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        wait_for(lambda: reg.enabled, timeout=120, what="subscribe() to enable the event")
        writer.append(threading.get_native_id())
        i = 1000
        while not done.is_set() and reg.enabled:
            reg.write(_row(i))
            i += 1
            done.wait(0.01)

    t = threading.Thread(target=write)
    t.start()
    it = rezolus_ue.subscribe(CPU.name, wait=False)

    def timed_out(_sig: int, _frame: object) -> None:
        raise TimeoutError(f"subscribe() yielded {len(got)} of 20 records in 300 s")

    got: list = []
    # next() has no deadline of its own: a lost record must fail the test, not hang it.
    old = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(300)
    try:
        for _ in range(20):
            got.append(next(it))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        done.set()
        it.close()
        t.join()
    first = int(got[0]["cpu"])  # type: ignore[call-overload]
    assert [r["cpu"] for r in got] == list(range(first, first + 20))  # none lost once in
    assert all(r.meta.pid == writer[0] and 0 <= r.meta.cpu < os.cpu_count() for r in got)
    assert got == sorted(got, key=lambda r: r.meta.time_ns)
    assert not reg.enabled


def test_lost_records_are_counted(bus: Bus, reg: EventHandle) -> None:
    """A full ring's drops are counted. One CPU writes every record: the kernel reports a
    ring's loss (PERF_RECORD_LOST) in that ring, at its first write once space frees up, so
    a writer that moved to another CPU before its last write leaves the loss unreported
    until that CPU writes again (seen once in the VM: lost 0)."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        with Subscription([CPU.name], wait=False, tracefs=bus.tfs, ring_pages=1) as sub:
            written = sum(bool(reg.write(_row(i))) for i in range(2000))
            assert written == 2000, f"{written} of 2000 writes went out"
            got = _drain(sub, 2000, timeout=3)  # one page holds far fewer: the rest dropped
            reg.write(_row(0))  # the LOST record is emitted when space frees up

            def lost() -> int:
                got.extend(sub.poll(100))
                return sub.lost

            wait_for(lost, timeout=60, what="the ring's LOST record",
                     seen=lambda: f"{len(got)} records read, lost {sub.lost}")
            assert len(got) + sub.lost >= 2000
    finally:
        os.sched_setaffinity(0, cpus)


def test_no_wait_without_agent_is_one_line(bus: Bus) -> None:
    p = subprocess.run([sys.executable, "-m", "rezolus_ue", "tail", "--no-wait"], cwd=ROOT,
                       capture_output=True, text=True, timeout=scaled(120))
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "rezolus-ue run" in p.stderr, p.stderr


def test_tail_waits_for_the_agent_then_prints_json(bus: Bus) -> None:
    tail = subprocess.Popen(
        [sys.executable, "-m", "rezolus_ue", "tail", CPU.name, "--format", "json",
         "--count", "4"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    agent = None
    try:
        # tail is up and waiting before the agent exists.
        wait_for(lambda: tail.poll() is not None or _waiting(tail), timeout=60, step=0.2)
        assert tail.poll() is None
        agent = AgentProcess("--interval", "200ms")
        out, err = tail.communicate(timeout=scaled(120))
    finally:
        if tail.poll() is None:
            tail.kill()
        if agent is not None:
            agent.stop()
            agent.log.close()
    assert tail.returncode == 0, err
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert len(lines) == 4
    assert all(d["event"] == CPU.name and set(CPU.field_names) <= d.keys() for d in lines)
    assert "no agent is running: start it with `sudo rezolus-ue run`" in err, err


def _waiting(p: subprocess.Popen) -> bool:
    # The "waiting" warning is the first thing tail prints on stderr.
    import select

    r, _, _ = select.select([p.stderr], [], [], 0)
    return bool(r)


def test_top_in_tmux_with_a_live_agent(bus: Bus) -> None:
    """The full-screen UI end to end: agent running, keys sent, screen captured."""
    from .tmux import tmux_session

    agent = AgentProcess("--interval", "500ms")
    try:
        agent.wait_registered(bus)
        with tmux_session(f"cd {ROOT} && {sys.executable} -m rezolus_ue top --interval 1s",
                          100, 30) as t:
            # A frame with data: the agent's pid in the header, memory and CPU rows.
            wait_for(lambda: f"agent {agent.proc.pid}" in t.screen() and "Mem" in t.screen(),
                     timeout=120, step=0.5)
            text = t.screen()
            assert "q quit" in text and "lost 0" in text, text
            t.keys("h")
            wait_for(lambda: "Keys and panels" in t.screen(), timeout=30, step=0.2)
            t.keys("h")
            t.keys("p")
            wait_for(lambda: "PAUSED" in t.screen(), timeout=30, step=0.2)
            t.keys("q")
            # q ends top, which ends the tmux session.
            wait_for(t.ended, timeout=30, step=0.2)
    finally:
        agent.stop()
        agent.log.close()
