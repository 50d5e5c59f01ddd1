"""perf_event binding against the running kernel: counters, tracepoint sampling, isolation.

Needs root (per-CPU tracepoint events with pid=-1 need CAP_PERFMON) and tracefs, which is
mounted at /sys/kernel/tracing if missing. Only tracepoint ids are read from tracefs;
nothing there is written.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rezolus_ue.errors import KernelFeatureMissing
from rezolus_ue.linux import perf_event as pe
from rezolus_ue.linux import perf_ring as pr

pytestmark = [
    pytest.mark.host,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for per-CPU perf events"),
]

TRACEFS = Path("/sys/kernel/tracing")
N = 25
SAMPLE_TYPE = pe.PERF_SAMPLE_TID | pe.PERF_SAMPLE_TIME | pe.PERF_SAMPLE_CPU | pe.PERF_SAMPLE_RAW


@pytest.fixture(scope="module")
def tracefs() -> Path:
    """Return the tracefs mount, mounting it if needed."""
    if not (TRACEFS / "events").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False)
    if not (TRACEFS / "events").is_dir():
        pytest.skip(f"tracefs is not mounted at {TRACEFS} and could not be mounted")
    return TRACEFS


def tracepoint_id(tracefs: Path, group: str, name: str) -> int | None:
    """Return the id of tracepoint group/name, or None if this kernel lacks it."""
    try:
        return int((tracefs / "events" / group / name / "id").read_text())
    except FileNotFoundError:
        return None


@pytest.fixture(scope="module")
def trigger(tracefs: Path) -> tuple[Path, int, Callable[[], None]]:
    """Return (event dir, tracepoint id, fire-once) for a tracepoint this process can hit."""
    tp = tracepoint_id(tracefs, "syscalls", "sys_enter_getppid")
    if tp is not None:
        return tracefs / "events/syscalls/sys_enter_getppid", tp, os.getppid
    tp = tracepoint_id(tracefs, "sched", "sched_process_fork")
    if tp is None:
        pytest.skip("neither syscalls/sys_enter_getppid nor sched/sched_process_fork exists")

    def fork_true() -> None:
        subprocess.run(["true"], check=True)

    return tracefs / "events/sched/sched_process_fork", tp, fork_true


def collect_own(
    sub: pr.TracepointSubscription, want: int, timeout_s: float = 3.0
) -> list[pr.Sample]:
    """Return samples of this process from ``sub`` until ``want`` arrived or time is up."""
    got: list[pr.Sample] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got += [s for s in sub.poll(50) if s.pid == os.getpid()]
    # One more drain: anything beyond ``want`` would be a bug worth seeing.
    got += [s for s in sub.poll(0) if s.pid == os.getpid()]
    return got


def test_software_context_switches_rise_on_sleep() -> None:
    with pe.PerfEvent.software(pe.PERF_COUNT_SW_CONTEXT_SWITCHES, cpu=-1, pid=0) as ev:
        before = ev.read_count()
        for _ in range(20):
            time.sleep(0.01)
        after = ev.read_count()
        assert after - before >= 20
        ev.disable()
        frozen = ev.read_count()
        time.sleep(0.01)
        assert ev.read_count() == frozen
        ev.reset()
        assert ev.read_count() == 0


def test_software_counter_with_times() -> None:
    rf = pe.PERF_FORMAT_TOTAL_TIME_ENABLED | pe.PERF_FORMAT_TOTAL_TIME_RUNNING
    with pe.PerfEvent.software(pe.PERF_COUNT_SW_TASK_CLOCK, -1, 0, read_format=rf) as ev:
        sum(range(100_000))
        value = ev.read_counter()
    assert value.value > 0
    assert value.time_enabled and value.time_running
    assert value.scaled >= value.value


def test_hardware_cycles_work_or_are_a_missing_feature() -> None:
    try:
        ev = pe.PerfEvent.hardware(pe.PERF_COUNT_HW_CPU_CYCLES, cpu=-1, pid=0)
    except KernelFeatureMissing as e:
        assert e.feature == "hardware perf counters"
        return
    with ev:
        sum(range(100_000))
        assert ev.read_counter().scaled > 0


def test_tracepoint_subscription_receives_every_hit(
    tracefs: Path, trigger: tuple[Path, int, Callable[[], None]]
) -> None:
    event_dir, tp, fire = trigger
    tracing_on = (tracefs / "tracing_on").read_text()
    enable = (event_dir / "enable").read_text()
    in_trace = (tracefs / "trace").read_text().count(event_dir.name.removeprefix("sys_enter_"))
    cpus = pr.online_cpus()

    with pr.TracepointSubscription(tp, sample_type=SAMPLE_TYPE) as sub:
        assert len(sub.events) == len(cpus)
        assert (event_dir / "enable").read_text() == enable
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        for _ in range(N):
            fire()
        t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        samples = collect_own(sub, N)
        assert len(samples) == N
        for s in samples:
            assert struct.unpack_from("=H", s.raw)[0] == tp  # common_type
            assert s.cpu in cpus
            assert t0 <= s.time <= t1  # CLOCK_MONOTONIC timestamps
        assert [s.time for s in samples] == sorted(s.time for s in samples)
        assert sub.lost == 0

    # perf sampling is private to our fds: ftrace's global switches and buffer stay as-is.
    assert (tracefs / "tracing_on").read_text() == tracing_on
    assert (event_dir / "enable").read_text() == enable
    trace = (tracefs / "trace").read_text()
    assert trace.count(event_dir.name.removeprefix("sys_enter_")) == in_trace


def test_two_subscriptions_are_independent(trigger: tuple[Path, int, Callable[[], None]]) -> None:
    _, tp, fire = trigger
    a = pr.TracepointSubscription(tp, sample_type=SAMPLE_TYPE)
    b = pr.TracepointSubscription(tp, sample_type=SAMPLE_TYPE)
    try:
        for _ in range(N):
            fire()
        assert len(collect_own(a, N)) == N
        assert len(collect_own(b, N)) == N

        a.close()
        for _ in range(N):
            fire()
        assert len(collect_own(b, N)) == N
        assert a.poll(0) == []
        assert b.lost == 0
    finally:
        a.close()
        b.close()


def test_tracepoint_event_disable_stops_samples(
    trigger: tuple[Path, int, Callable[[], None]],
) -> None:
    _, tp, fire = trigger
    with pr.TracepointSubscription(tp, sample_type=SAMPLE_TYPE) as sub:
        for ev in sub.events:
            ev.disable()
        for _ in range(5):
            fire()
        assert [s for s in sub.poll(20) if s.pid == os.getpid()] == []
        for ev in sub.events:
            ev.enable()
        fire()
        assert len(collect_own(sub, 1)) == 1


def test_small_ring_wraps_and_reports_overflow_as_lost(
    trigger: tuple[Path, int, Callable[[], None]],
) -> None:
    _, tp, fire = trigger
    affinity = os.sched_getaffinity(0)
    # Pinned, so the overflowing ring and the event that reports its drops share a CPU.
    os.sched_setaffinity(0, {min(affinity)})
    try:
        with pr.TracepointSubscription(tp, sample_type=SAMPLE_TYPE, ring_pages=1) as sub:
            # Drained often: the one-page ring wraps many times without losing anything.
            got = 0
            for _ in range(40):
                for _ in range(10):
                    fire()
                got += len([s for s in sub.poll(0) if s.pid == os.getpid()])
            assert got == 400
            assert sub.lost == 0
            # Not drained: the kernel refuses to overwrite unread data and counts drops.
            for _ in range(2000):
                fire()
            kept = len([s for s in sub.poll(0) if s.pid == os.getpid()])
            assert 0 < kept < 2000
            # PERF_RECORD_LOST is written once space frees up, ahead of the next record:
            # the drop count arrives with the next event.
            fire()
            kept += len([s for s in sub.poll(0) if s.pid == os.getpid()])
            assert sub.lost > 0
            assert kept + sub.lost >= 2001
            assert all(ev.ring is not None and ev.ring.malformed == 0 for ev in sub.events)
    finally:
        os.sched_setaffinity(0, affinity)


# --- TracepointRings: one ring per CPU shared by every tracepoint -----------------------------


def _second_tracepoint(tracefs: Path) -> tuple[int, Callable[[], None]]:
    """Return (id, fire-once) of a second tracepoint this process can hit."""
    tp = tracepoint_id(tracefs, "syscalls", "sys_enter_getpid")
    if tp is None:
        pytest.skip("syscalls/sys_enter_getpid does not exist")
    return tp, os.getpid


def own(samples: list[pr.Sample]) -> list[pr.Sample]:
    return [s for s in samples if s.pid == os.getpid()]


def test_rings_carry_every_tracepoint_added_while_sampling(
    tracefs: Path, trigger: tuple[Path, int, Callable[[], None]]
) -> None:
    _, tp, fire = trigger
    tp2, fire2 = _second_tracepoint(tracefs)
    cpus = pr.online_cpus()
    with pr.TracepointRings(sample_type=SAMPLE_TYPE, ring_pages=8) as rings:
        assert len(rings.owners) == len(cpus)  # one ring per CPU, before any tracepoint
        rings.add(tp)
        for _ in range(N):
            fire()
        assert len(own(rings.poll(100))) == N
        rings.add(tp2)  # while sampling: into the same rings
        for _ in range(N):
            fire()
            fire2()
        got = own(rings.poll(100))
        kinds = [struct.unpack_from("=H", s.raw)[0] for s in got]
        assert sorted(kinds) == sorted([tp] * N + [tp2] * N)
        assert [s.time for s in got] == sorted(s.time for s in got)
        rings.remove(tp)
        for _ in range(N):
            fire()
            fire2()
        assert {struct.unpack_from("=H", s.raw)[0] for s in own(rings.poll(100))} == {tp2}
        assert (rings.lost, rings.malformed) == (0, 0)
    assert rings.owners == [] and rings.tracepoints == []


def test_two_rings_are_independent_and_count_their_drops(
    trigger: tuple[Path, int, Callable[[], None]],
) -> None:
    _, tp, fire = trigger
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(affinity)})  # the overflowing ring is this CPU's
    try:
        with pr.TracepointRings(sample_type=SAMPLE_TYPE, ring_pages=1) as small, \
                pr.TracepointRings(sample_type=SAMPLE_TYPE, ring_pages=64) as big:
            small.add(tp)
            big.add(tp)
            for _ in range(1000):  # a page holds far fewer
                fire()
            assert len(own(big.drain())) == 1000 and big.lost == 0
            kept = len(own(small.drain()))
            fire()  # the drop report is written once space frees up
            kept += len(own(small.drain()))
            assert 0 < kept < 1001 and small.lost > 0 and kept + small.lost >= 1001
    finally:
        os.sched_setaffinity(0, affinity)


def test_close_interrupted_after_os_close_never_closes_the_fd_again(
    trigger: tuple[Path, int, Callable[[], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C arriving as ``os.close`` returns (closing a tracepoint's last perf event waits
    for an RCU grace period, so it often does): the event must not keep the dead fd for
    ``__del__`` to close again ("Exception ignored in PerfEvent.__del__ ... EBADF", or
    worse, closing a file that reused the number)."""
    import gc
    import sys

    _, tp, _fire = trigger
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    real_close = os.close

    def close_then_interrupt(fd: int) -> None:
        real_close(fd)
        raise KeyboardInterrupt

    rings = pr.TracepointRings(sample_type=SAMPLE_TYPE, ring_pages=1)
    rings.add(tp)
    fds = [e.fd for es in rings._events.values() for e in es] + [o.fd for o in rings.owners]
    monkeypatch.setattr(pe.os, "close", close_then_interrupt)
    for _ in fds:
        with pytest.raises(KeyboardInterrupt):
            rings.close()
    monkeypatch.setattr(pe.os, "close", real_close)
    rings.close()
    assert rings.owners == [] and rings.tracepoints == []
    # A file that takes a freed number is left alone by the collected events.
    reused = os.open("/dev/null", os.O_RDONLY)
    try:
        del rings
        gc.collect()
        os.fstat(reused)
    finally:
        os.close(reused)
    assert unraisable == []
