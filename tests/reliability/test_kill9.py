"""kill -9 of the agent, 100 times, with restarts: the kernel keeps nothing of ours that
would pile up or stand in the next start's way.

The cycles run on this host through whichever transport the kernel gives the agent
(``bus``). After each SIGKILL: no BPF program or link of ours (they die with their fds),
the agent's events are gone (user_events: the kernel drops a non-persistent event with its
last reference) or, on the uprobe transport, exactly the killed agent's definitions are
left, which the next start removes before defining its own (and ``rezolus-ue cleanup``
removes after the last); and the next start succeeds. Every tenth cycle a consumer is
attached before the kill, so the agent dies with BPF programs loaded and attached and an
event enabled.

The kernel deleting a killed agent's user_events, with and without a consumer holding one,
is user_events' own behaviour: ``test_kill9_user_events_go_with_the_last_reference`` checks
it in the ``kernel`` tier. tests/uprobe/test_uprobe_transport.py checks the uprobe side's
leftovers, ``cleanup --dry-run`` and that cleanup leaves other tools' probes alone.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kernel.conftest import Bus
from waiting import scaled

from rezolus_ue.agent import RUNTIME_DIR, read_status
from rezolus_ue.samplers.agent import AGENT
from rezolus_ue.samplers.cpu_usage import CPU_USAGE
from rezolus_ue.samplers.scheduler_runqueue import SCHEDULER_RUNQUEUE_LATENCY
from tracefs_tools import Tracefs

from .agentproc import ForkedAgent, config_with, ours_in_kernel, program_names
from .conftest import wait_for

CYCLES = 100
ROOT = Path(__file__).resolve().parents[2]
STALE = "stale uprobe events of an earlier agent"


def _started(a: ForkedAgent, cycle: int, bus: Bus, want: set[str]) -> bool:
    """Return whether this agent finished its start (its status names it) with ``want``
    on the bus; a leftover definition of the same name must not count as this agent's."""
    if not a.alive():
        raise AssertionError(f"cycle {cycle}: agent exited early: {a.output()[-2000:]}")
    st = read_status(RUNTIME_DIR)
    return st is not None and st["pid"] == a.pid and want <= set(bus.ours())


@pytest.mark.live
def test_kill9_leaves_nothing_behind(bus: Bus, bus_instance: str, tmp_path: Path) -> None:
    left = bus.ours()
    assert not left, f"events of ours registered before the first kill (an earlier test's): {left}"
    names = program_names()
    if not names:
        pytest.skip("BPF objects not built")
    # Every tenth agent also runs a BPF sampler, with a consumer attached when it dies;
    # the others only procfs ones (BPF start-up is the slow part of a start).
    bpf_dir, plain_dir = tmp_path / "bpf", tmp_path / "plain"
    bpf_dir.mkdir()
    plain_dir.mkdir()
    with_bpf = config_with(bpf_dir, "cpu_usage", "agent", "scheduler_runqueue",
                           publish_interval='"100ms"')
    plain = config_with(plain_dir, "cpu_usage", "agent", publish_interval='"100ms"')
    logs: list[Path] = []
    started, waits = [], []
    try:
        for cycle in range(CYCLES):
            consumer = cycle % 10 == 9
            want = {CPU_USAGE.event, AGENT.event}
            if consumer:
                want.add(SCHEDULER_RUNQUEUE_LATENCY.event)
            # One log per agent: what each start said about the previous one's leftovers.
            logs.append(tmp_path / f"agent{cycle}.log")
            t0 = time.monotonic()
            a = ForkedAgent(with_bpf if consumer else plain, logs[-1])
            try:
                wait_for(lambda a=a, cycle=cycle, want=want: _started(a, cycle, bus, want),
                         timeout=120, what=f"cycle {cycle}: the agent's start",
                         seen=lambda: (read_status(RUNTIME_DIR), bus.ours()))
                started.append(time.monotonic() - t0)
                if bus.transport == "uprobe" and cycle:
                    assert STALE in a.output(), f"cycle {cycle}: {a.output()[-2000:]}"
                if consumer:
                    bus.enable(SCHEDULER_RUNQUEUE_LATENCY.event, instance=bus_instance)
                    wait_for(lambda: ours_in_kernel(names)[1], timeout=180,
                             what=f"cycle {cycle}: the consumer's BPF links")
                mine = bus.ours()
            finally:
                a.kill9()
            if consumer:
                bus.disable(SCHEDULER_RUNQUEUE_LATENCY.event, instance=bus_instance)
            t1 = time.monotonic()
            if bus.transport == "user_events":
                wait_for(lambda: not bus.ours(), timeout=30, seen=bus.ours,
                         what=f"cycle {cycle}: our events to go with the killed agent")
            else:
                # uprobe definitions outlive their definer: the killed agent's alone (its
                # start removed the previous ones), none held by a consumer.
                assert bus.ours() == mine, f"cycle {cycle}"
                assert not [e for e in mine if bus.consumers(e)], f"cycle {cycle}"
            wait_for(lambda: ours_in_kernel(names) == ([], []), timeout=30,
                     seen=lambda: ours_in_kernel(names),
                     what=f"cycle {cycle}: our BPF programs and links to go")
            waits.append(time.monotonic() - t1)
    finally:
        if bus.transport == "uprobe":  # the last agent's definitions: leave the host clean
            clean = subprocess.run([sys.executable, "-m", "rezolus_ue", "cleanup"], cwd=ROOT,
                                   capture_output=True, text=True, timeout=scaled(120))
    if bus.transport == "uprobe":
        assert clean.returncode == 0, clean.stderr
        assert not bus.ours(), clean.stderr
    started.sort()
    waits.sort()
    print(f"{CYCLES} kill -9 cycles: start to registered median {started[len(started) // 2]:.2f}s"
          f" (max {started[-1]:.2f}s); gone after kill median {waits[len(waits) // 2]:.3f}s"
          f" (max {waits[-1]:.3f}s)")
    for log in logs:
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


@pytest.mark.kernel
def test_kill9_user_events_go_with_the_last_reference(tracefs: Tracefs, instance: str,
                                                      tmp_path: Path) -> None:
    """user_events itself: a killed agent's events go when its fd closes, or, when a
    consumer has one enabled, when that consumer lets go (the live test above runs the
    kill -9 cycles with BPF; two kills prove this part)."""
    def ours() -> list[str]:
        return [e for e in tracefs.user_events_status().events if e.startswith("rezolus_")]

    assert not ours(), f"events of ours registered before the first kill: {ours()}"
    conf = config_with(tmp_path, "cpu_usage", "agent", publish_interval='"100ms"')
    log = tmp_path / "agent.log"
    for consumer in (False, True):
        a = ForkedAgent(conf, log)
        try:
            wait_for(lambda a=a: (not a.alive() and _exited(a))
                     or {CPU_USAGE.event, AGENT.event} <= set(ours()), timeout=120)
            if consumer:
                tracefs.enable("user_events", CPU_USAGE.event, instance=instance)
        finally:
            a.kill9()
        if consumer:
            tracefs.disable("user_events", CPU_USAGE.event, instance=instance)
        wait_for(lambda: not ours(), timeout=30, seen=ours,
                 what=f"our events to go with the killed agent (consumer: {consumer})")
    assert "Traceback" not in log.read_text()


def _exited(a: ForkedAgent) -> bool:
    raise AssertionError(f"agent exited early: {a.output()[-2000:]}")
