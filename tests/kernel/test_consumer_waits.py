"""No consumer waits in silence: what ``tail``, ``top``, ``record`` and ``exporter`` say
while records do not come, against the real agent (the installed CLI, shipped defaults)
on this host's transport, case by case: no agent; a killed agent's events left defined;
an event whose sampler cannot run here; an event ftrace holds (uprobe transport); the
agent stopping and coming back. ``--no-wait`` never waits. The decisions themselves are
tests/test_readiness.py's, in-process."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rezolus_ue.agent import read_status
from rezolus_ue.consume.readiness import unpublished
from rezolus_ue.schema import CPU_USAGE, GROUPS

from .conftest import Bus, wait_for
from .test_agent_e2e import AgentProcess
from .test_consumers import DIRTY, Consumer, _cli

pytestmark = pytest.mark.live
#: A consumer must say what it waits for within a second; this only bounds a failure on
#: a loaded host (Python's start-up is most of it).
SAY_S = 60.0
START = "start it with `sudo rezolus-ue run`"


def no_wait(*args: str) -> subprocess.CompletedProcess:
    """Run a consumer with --no-wait: it must exit by itself (the timeout bounds a hang)."""
    return subprocess.run([_cli(), *args, "--no-wait"], capture_output=True, text=True,
                          timeout=SAY_S, stdin=subprocess.DEVNULL)


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("rezolus-ue: error: "), p.stderr
    assert not DIRTY.search(p.stderr.replace("rezolus-ue: error: ", "")), p.stderr
    for n in needles:
        assert n in p.stderr, p.stderr


def agent_cli() -> tuple[str, ...]:
    return (_cli(), "run")


@pytest.fixture
def idle(bus: Bus) -> Bus:
    """No agent runs and none of our events is defined."""
    wait_for(lambda: read_status() is None and not bus.ours(), timeout=120, step=0.5,
             what=f"no agent and no rezolus_* event on {bus}", seen=bus.ours)
    return bus


@pytest.fixture
def agent(idle: Bus) -> Iterator[AgentProcess]:
    a = AgentProcess(command=agent_cli())
    try:
        a.wait_registered(idle)
        wait_for(lambda: read_status() is not None, timeout=120, what="the agent's status")
        yield a
    finally:
        a.stop()
        a.log.close()


CONSUMERS = {
    "tail": ("tail",),
    "top": ("top", "--once"),
    "record": ("record", "{tmp}/r.rzr"),
    "exporter": ("exporter", "--listen", "127.0.0.1:0"),
}


@pytest.mark.parametrize("name", CONSUMERS)
def test_no_wait_without_an_agent_says_how_to_start_it(idle: Bus, name: str,
                                                       tmp_path: Path) -> None:
    args = [a.format(tmp=tmp_path) for a in CONSUMERS[name]]
    one_line_error(no_wait(*args), f"no agent is running: {START}")
    assert not (tmp_path / "r.rzr").exists()


def test_a_killed_agents_events_are_named_stale_and_cleanup_is_not_blocked(
        idle: Bus, tmp_path: Path) -> None:
    a = AgentProcess(command=agent_cli())
    try:
        a.wait_registered(idle)
    finally:
        a.proc.kill()
        a.proc.wait()
        a.log.close()
    left = idle.ours()
    try:
        if idle.transport == "user_events":
            # The kernel deletes a killed agent's events with its last reference:
            # nothing is left to be stale (persist = true aside).
            wait_for(lambda: not idle.ours(), timeout=120, seen=idle.ours)
            one_line_error(no_wait("tail"), f"no agent is running: {START}")
            return
        assert left, "the uprobe definitions went with the agent"
        stale = f"{len(left)} {GROUPS['uprobe']} events are still defined"
        one_line_error(no_wait("tail"), stale, "`sudo rezolus-ue cleanup` removes them")
        one_line_error(no_wait("top", "--once"), stale)
        # A waiting consumer says so, and holds nothing that keeps cleanup from working.
        tail = Consumer(tmp_path, "tail", "tail", "--format", "json")
        try:
            wait_for(lambda: tail.alive() and stale in tail.stderr(), timeout=SAY_S,
                     what="tail to say the events are stale", seen=tail.stderr)
            done = subprocess.run([_cli(), "cleanup"], capture_output=True, text=True,
                                  timeout=SAY_S)
            assert done.returncode == 0, done.stderr
            assert not idle.ours()
            wait_for(lambda: f"no agent is running: {START}" in tail.stderr(),
                     timeout=SAY_S, what="tail to see the cleanup", seen=tail.stderr)
            assert tail.stop(signal.SIGINT) in (0, 130)
        finally:
            tail.kill()
    finally:
        subprocess.run([_cli(), "cleanup"], capture_output=True, timeout=SAY_S)


def test_an_event_this_host_cannot_feed_gives_the_samplers_reason(agent: AgentProcess,
                                                                  tmp_path: Path) -> None:
    gone = unpublished(read_status())
    if not gone:
        pytest.skip("every sampler runs on this host: no event to ask for in vain")
    event, why = sorted(gone.items())[0]
    one_line_error(no_wait("tail", event), f"not published here: {event}", why)
    # Asked for beside events that do come: said once, and the others flow.
    tail = Consumer(tmp_path, "tail", "tail", event, CPU_USAGE.name, "--format", "json")
    try:
        wait_for(lambda: tail.alive() and tail.records(), timeout=SAY_S,
                 what="records of the event that comes", seen=tail.stderr)
        assert f"not published here: {event}" in tail.stderr()
        assert tail.stop(signal.SIGINT) in (0, 130)
    finally:
        tail.kill()


def test_an_event_ftrace_holds_is_named_with_where_to_disable_it(
        bus: Bus, agent: AgentProcess, tmp_path: Path) -> None:
    if bus.transport != "uprobe":
        pytest.skip("user_events take ftrace and perf readers at once")
    inst = f"waits{time.monotonic_ns()}"
    bus.tfs.create_instance(inst)
    tail = None
    try:
        bus.enable(CPU_USAGE.name, instance=inst)
        where = str(bus.tfs.path("events", bus.group, CPU_USAGE.name, "enable",
                                 instance=inst))
        one_line_error(no_wait("tail", CPU_USAGE.name),
                       f"{CPU_USAGE.name} is enabled in ftrace ({where})")
        tail = Consumer(tmp_path, "tail", "tail", CPU_USAGE.name, "--format", "json")
        wait_for(lambda: tail.alive() and where in tail.stderr(), timeout=SAY_S,
                 what="tail to name the instance", seen=tail.stderr)
        bus.disable(CPU_USAGE.name, instance=inst)
        wait_for(lambda: tail.alive() and tail.records(), timeout=SAY_S,
                 what="tail to take the event once ftrace let it go", seen=tail.stderr)
        assert tail.stop(signal.SIGINT) in (0, 130)
    finally:
        if tail is not None:
            tail.kill()
        bus.disable(CPU_USAGE.name, instance=inst)
        bus.tfs.remove_instance(inst)


def test_a_running_tail_says_when_the_agent_stops_and_comes_back(
        idle: Bus, tmp_path: Path) -> None:
    a = AgentProcess(command=agent_cli())
    b = None
    tail = Consumer(tmp_path, "tail", "tail", CPU_USAGE.name, "--format", "json")
    try:
        a.wait_registered(idle)
        wait_for(lambda: tail.alive() and tail.records(), timeout=SAY_S,
                 what="tail's first records", seen=tail.stderr)
        pid = a.proc.pid
        assert a.stop() == 0, a.output()
        wait_for(lambda: f"the agent (pid {pid}) stopped" in tail.stderr(), timeout=SAY_S,
                 what="tail to say the agent stopped", seen=tail.stderr)
        n = len(tail.records())
        b = AgentProcess(command=agent_cli())
        wait_for(lambda: f"the agent is back (pid {b.proc.pid})" in tail.stderr(),
                 timeout=SAY_S * 4, what="tail to say the agent is back", seen=tail.stderr)
        wait_for(lambda: len(tail.records()) > n, timeout=SAY_S * 4,
                 what="records again after the restart", seen=tail.stderr)
        assert tail.stop(signal.SIGINT) in (0, 130)
        assert not DIRTY.search(tail.stderr()), tail.stderr()
    finally:
        tail.kill()
        a.log.close()
        if b is not None:
            b.stop()
            b.log.close()
        subprocess.run([_cli(), "cleanup"], capture_output=True, timeout=SAY_S)


def test_silence_while_subscribed_names_the_agent_and_its_samplers(
        agent: AgentProcess, tmp_path: Path) -> None:
    """The agent runs but publishes nothing (stopped with SIGSTOP here; starved or wedged
    in life): tail says so, with what the agent's status says of the samplers."""
    tail = Consumer(tmp_path, "tail", "tail", CPU_USAGE.name, "--format", "json")
    try:
        wait_for(lambda: tail.alive() and tail.records(), timeout=SAY_S,
                 what="tail's first records", seen=tail.stderr)
        agent.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: "no record came for" in tail.stderr(), timeout=SAY_S,
                     what="tail to say records stopped coming", seen=tail.stderr)
        finally:
            agent.proc.send_signal(signal.SIGCONT)
        err = tail.stderr()
        assert f"although the agent (pid {agent.proc.pid}) runs" in err, err
        assert "its samplers say: cpu_usage active" in err, err
        assert tail.stop(signal.SIGINT) in (0, 130)
    finally:
        tail.kill()
