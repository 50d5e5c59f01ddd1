"""Activating BPF samplers on demand: one background loader, one object at a time, at the
agent's own priority, so the publishing thread never waits long for it (pure threading logic,
in-process: the samplers here are stand-ins whose activate() only records how it ran);
and the loader's start-up probe of a classic tracepoint's id (a fixture tracefs).
Publishing cadence while real objects load is proven against the kernel
(tests/kernel/test_bpf_under_the_agents_privileges.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_for

from rezolus_ue.bpf.loader import Features
from rezolus_ue.errors import RezolusError
from rezolus_ue.samplers.bpf_sampler import Loader


class StandIn:
    """Records the thread, its nice value and the overlap of each activate() call."""

    running = 0
    lock = threading.Lock()

    def __init__(self, name: str, log: list, gate: threading.Event | None = None,
                 error: BaseException | None = None) -> None:
        self.name, self.log, self.gate, self.error = name, log, gate, error
        self.outcome: list[BaseException | None] = []
        self.started = threading.Event()
        self.done = threading.Event()

    def activate(self) -> None:
        self.started.set()
        with StandIn.lock:
            StandIn.running += 1
            overlap = StandIn.running
        if self.gate is not None:
            assert self.gate.wait(30), "gate never opened"
        self.log.append((self.name, threading.current_thread().name,
                         os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), overlap))
        with StandIn.lock:
            StandIn.running -= 1
        if self.error is not None:
            raise self.error

    def loaded_with(self, error: BaseException | None) -> None:
        self.outcome.append(error)
        self.done.set()


def test_one_thread_activates_one_sampler_at_a_time_at_the_agents_priority() -> None:
    # A lower priority than the publishing thread's would leave the loader holding the GIL
    # whenever the CPUs are busy, and the publishing thread waiting for it.
    agents = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    loader, log, gate = Loader(), [], threading.Event()
    boom = RezolusError("verifier said no")
    samplers = [StandIn("a", log, gate), StandIn("b", log), StandIn("c", log, error=boom)]
    for s in samplers:
        loader.submit(s)  # type: ignore[arg-type]
    gate.set()
    for s in samplers:
        assert s.done.wait(30), f"{s.name} never activated"
    assert [entry[0] for entry in log] == ["a", "b", "c"]  # in order of arrival
    assert {entry[1] for entry in log} == {"bpf-loader"}
    assert {entry[2] for entry in log} == {agents}
    assert {entry[3] for entry in log} == {1}, "two activations overlapped"
    assert [s.outcome for s in samplers] == [[None], [None], [boom]]
    # Idle, the thread ends; the next submission starts a new one.
    thread = loader._thread
    if thread is not None:
        thread.join(30)
    assert loader._thread is None, "the loader thread outlived its queue"
    d = StandIn("d", log)
    loader.submit(d)  # type: ignore[arg-type]
    assert d.done.wait(30) and log[-1][1:3] == ("bpf-loader", agents)


def test_forget_drops_a_queued_sampler_and_waits_for_one_in_progress() -> None:
    loader, log, gate = Loader(), [], threading.Event()
    busy, queued = StandIn("busy", log, gate), StandIn("queued", log)
    loader.submit(busy)  # type: ignore[arg-type]
    loader.submit(queued)  # type: ignore[arg-type]
    loader.forget(queued)  # type: ignore[arg-type]
    assert busy.started.wait(30), "the loader never started"
    waiter = threading.Thread(target=loader.forget, args=(busy,))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive(), "forget returned while the activation was in progress"
    gate.set()
    waiter.join(30)
    assert not waiter.is_alive() and busy.outcome == [None]
    assert [entry[0] for entry in log] == ["busy"] and queued.outcome == []


def test_a_classic_tracepoints_id_is_read_once_at_probe_time(tmp_path: Path) -> None:
    tp = tmp_path / "tracing/events/sched/sched_switch"
    tp.mkdir(parents=True)
    (tp / "id").write_text("316\n")
    f = Features(tracefs=tmp_path / "tracing", procfs=tmp_path, sysfs=tmp_path)
    assert f.tracefs_event("sched_switch", "sched") and f.tracefs_event("sched_switch")
    assert f.tracepoint_id("sched_switch", "sched") == 316
    (tp / "id").unlink()  # later (e.g. after the agent's drop) tracefs may be unreadable
    assert f.tracepoint_id("sched_switch", "sched") == 316
    assert f.tracepoint_id("sched_wakeup", "sched") is None


@pytest.mark.parametrize(("value", "noted"), [("0", True), ("1", False), (None, False)])
def test_sched_stat_runtime_warns_only_where_the_kernel_logs_it(
        tmp_path: Path, value: str | None, noted: bool) -> None:
    if value is not None:
        (tmp_path / "sys/kernel").mkdir(parents=True)
        (tmp_path / "sys/kernel/sched_schedstats").write_text(value + "\n")
    f = Features(tracefs=None, procfs=tmp_path, sysfs=tmp_path)
    notes = f.notes(["sched_switch", "sched_stat_runtime"])
    assert len(notes) == noted and all("harmless" in n for n in notes)


class Hooks:
    """Stands in for a BpfObject's attach_hook/detach_hook: records the calls in order and
    fails the attach numbered ``fail_at``, as the kernel would refuse one."""

    name = "standin"

    def __init__(self, fail_at: int = 0) -> None:
        self.calls: list[str] = []
        self.fail_at = fail_at
        self.changed = threading.Condition()

    def attach_hook(self, tp: str) -> None:
        with self.changed:
            if self.fail_at and self.calls.count("attach") + 1 == self.fail_at:
                raise RezolusError(f"attaching {tp} refused")
            self.calls.append("attach")
            self.changed.notify_all()

    def detach_hook(self, tp: str) -> None:
        with self.changed:
            self.calls.append("detach")
            self.changed.notify_all()

    def wait(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.calls) >= n, 60), self.calls


def test_part_time_windows_alternate_and_end_detached() -> None:
    """Windows open and close in turn, stop closes an open one, and ``take`` hands each
    attached nanosecond out once (pure threading logic; the kernel side is
    tests/test_bpf_syscall.py's)."""
    from rezolus_ue.samplers.bpf_sampler import PartTime

    hooks = Hooks()
    pt = PartTime(hooks, "sys_enter", window_ns=20_000_000, period_ns=40_000_000)  # type: ignore[arg-type]
    t0 = time.monotonic_ns()
    pt.start()
    hooks.wait(5)  # three windows opened, two closed
    taken = pt.take()
    pt.stop()
    taken += pt.take()
    elapsed = time.monotonic_ns() - t0
    calls = hooks.calls
    assert calls[::2] == ["attach"] * len(calls[::2]), calls
    assert calls[1::2] == ["detach"] * len(calls[1::2]), calls
    assert calls[-1] == "detach", "stop left the program attached"
    assert 2 * 20_000_000 <= taken <= elapsed, (taken, elapsed)
    assert pt.take() == 0


def test_part_time_restarted_counts_only_its_new_windows() -> None:
    """Time attached before a stop and never taken is not handed out after the next start
    (a new activation's first interval, like the histograms' baseline, starts then)."""
    from rezolus_ue.samplers.bpf_sampler import PartTime

    hooks = Hooks()
    pt = PartTime(hooks, "sys_enter", window_ns=20_000_000, period_ns=20_000_001)  # type: ignore[arg-type]
    pt.start()
    hooks.wait(4)  # two windows closed: about 40 ms attached, not taken
    pt.stop()
    t0 = time.monotonic_ns()
    pt.start()
    taken = pt.take()
    since = time.monotonic_ns() - t0
    pt.stop()
    assert taken <= since, (taken, since)


def test_part_time_reports_a_refused_attach() -> None:
    from rezolus_ue.samplers.bpf_sampler import PartTime

    hooks = Hooks(fail_at=2)
    pt = PartTime(hooks, "sys_enter", window_ns=1_000_000, period_ns=2_000_000)  # type: ignore[arg-type]
    pt.start()
    hooks.wait(2)
    wait_for(lambda: pt.error is not None, timeout=60, step=0.05,
             what="the refused attach to be kept as pt.error")
    with pytest.raises(RezolusError, match="refused"):
        pt.take()
    pt.stop()
    assert hooks.calls == ["attach", "detach"]

