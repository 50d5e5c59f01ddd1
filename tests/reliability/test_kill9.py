"""kill -9 of the agent, 100 times, with restarts: the kernel keeps nothing of ours.

After each SIGKILL: no ``rezolus_*`` event left in ``user_events_status`` (the kernel
drops a non-persistent event with its last reference: the agent's fd and any consumer),
no BPF program or link of ours (they die with their fds), and the next start succeeds.
Every tenth cycle a consumer is attached before the kill, so the agent dies with BPF
programs loaded and attached and an event enabled.
"""

from __future__ import annotations

import time

import pytest

from rezolus_ue.samplers.agent import AGENT
from rezolus_ue.samplers.cpu_usage import CPU_USAGE
from rezolus_ue.samplers.scheduler_runqueue import SCHEDULER_RUNQUEUE_LATENCY

from .agentproc import ForkedAgent, config_with, ours_in_kernel, program_names
from .conftest import wait_for

pytestmark = pytest.mark.kernel
G = "user_events"
CYCLES = 100


def _ours(tracefs) -> list[str]:
    return [e for e in tracefs.user_events_status().events if e.startswith("rezolus_")]


def test_kill9_leaves_nothing_behind(tracefs, instance, tmp_path):
    left = _ours(tracefs)
    assert not left, f"events of ours registered before the first kill (an earlier test's): {left}"
    names = program_names()
    if not names:
        pytest.skip("BPF objects not built")
    # Every tenth agent also runs a BPF sampler, with a consumer attached when it dies;
    # the others only procfs ones (under the VM's emulated CPU, BPF start-up is the slow
    # part, and 100 of them would take most of the VM tier's time).
    bpf_dir, plain_dir = tmp_path / "bpf", tmp_path / "plain"
    bpf_dir.mkdir()
    plain_dir.mkdir()
    with_bpf = config_with(bpf_dir, "cpu_usage", "agent", "scheduler_runqueue",
                           publish_interval='"100ms"')
    plain = config_with(plain_dir, "cpu_usage", "agent", publish_interval='"100ms"')
    log = tmp_path / "agent.log"
    started, waits = [], []
    for cycle in range(CYCLES):
        consumer = cycle % 10 == 9
        want = {CPU_USAGE.event, AGENT.event}
        if consumer:
            want.add(SCHEDULER_RUNQUEUE_LATENCY.event)
        t0 = time.monotonic()
        a = ForkedAgent(with_bpf if consumer else plain, log)
        try:
            wait_for(lambda a=a, cycle=cycle, want=want: (not a.alive() and _fail(a, cycle))
                     or want <= set(_ours(tracefs)), timeout=120)
            started.append(time.monotonic() - t0)
            if consumer:
                tracefs.enable(G, SCHEDULER_RUNQUEUE_LATENCY.event, instance=instance)
                wait_for(lambda: ours_in_kernel(names)[1], timeout=180)
        finally:
            a.kill9()
        if consumer:
            tracefs.disable(G, SCHEDULER_RUNQUEUE_LATENCY.event, instance=instance)
        t1 = time.monotonic()
        wait_for(lambda: not _ours(tracefs), timeout=30, seen=lambda: _ours(tracefs),
                 what=f"cycle {cycle}: our events to go with the killed agent")
        wait_for(lambda: ours_in_kernel(names) == ([], []), timeout=30,
                 seen=lambda: ours_in_kernel(names),
                 what=f"cycle {cycle}: our BPF programs and links to go")
        waits.append(time.monotonic() - t1)
    started.sort()
    waits.sort()
    print(f"{CYCLES} kill -9 cycles: start to registered median {started[len(started) // 2]:.2f}s"
          f" (max {started[-1]:.2f}s); gone after kill median {waits[len(waits) // 2]:.3f}s"
          f" (max {waits[-1]:.3f}s)")
    assert "Traceback" not in log.read_text()


def _fail(a: ForkedAgent, cycle: int) -> bool:
    raise AssertionError(f"cycle {cycle}: agent exited early: {a.output()[-2000:]}")
