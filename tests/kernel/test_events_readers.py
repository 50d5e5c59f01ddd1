"""`rezolus-ue events` says who reads each event, as the kernel knows it: nobody, perf, an
ftrace instance by name, and, once the agent is killed by SIGKILL, that its events are
stale and which command removes them.

The agent is the installed CLI with the shipped configs/default.toml, on whichever
transport ``transport = "auto"`` takes on this kernel (the ``bus`` fixture): on this host
uprobe events, whose readers `events` finds in the stub's reference counter and ftrace's
enable files. Each state is waited for through the kernel (``bus.consumers``), then
`events` is run once and its row compared.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import scaled

from rezolus_ue.samplers.memory import MEMORY

from .conftest import Bus, private_instance, wait_for
from .test_agent_e2e import ROOT, AgentProcess

pytestmark = pytest.mark.live
#: A cheap event: a reader costs one procfs read per interval.
EVENT = MEMORY.schema.name
CLI = Path(sys.executable).parent / "rezolus-ue"


def events() -> subprocess.CompletedProcess[str]:
    """Run `rezolus-ue events` as a user would (piped: whole cells, one line a row)."""
    return subprocess.run([str(CLI), "events"], cwd=ROOT, capture_output=True, text=True,
                          timeout=scaled(120))


def row(out: str, event: str = EVENT) -> list[str]:
    """Return the registered, enabled and consumers cells of ``event``'s row."""
    line = next((ln for ln in out.splitlines() if ln.startswith(f"│ {event} ")), None)
    assert line is not None, out
    return [c.strip() for c in line.strip("│ ").split("│")][3:]


@pytest.fixture
def agent(bus: Bus) -> Iterator[AgentProcess]:
    if not CLI.exists():
        pytest.skip(f"{CLI} is not installed (run scripts/setup.sh)")
    a = AgentProcess("--config", str(ROOT / "configs" / "default.toml"),
                     command=(str(CLI), "run"))
    try:
        a.wait_registered(bus)
        wait_for(lambda: EVENT in bus.registered(), timeout=240, step=0.2, log=a.output)
        yield a
    finally:
        a.stop()
        a.log.close()
        if bus.transport == "uprobe" and bus.ours():  # a killed agent's: leave none
            subprocess.run([str(CLI), "cleanup"], capture_output=True, timeout=scaled(120))


def test_events_names_who_reads(bus: Bus, agent: AgentProcess, tmp_path: Path) -> None:
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed")
    assert not bus.consumers(EVENT), "something else reads it: the test cannot say who"
    p = events()
    assert p.returncode == 0, p.stderr
    assert row(p.stdout) == ["yes", "no", "-"], p.stdout

    perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{bus.group}:{EVENT}", "-a",
                             "-o", str(tmp_path / "perf.data")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: bus.consumers(EVENT), timeout=60, step=0.05)
        p = events()
        assert p.returncode == 0, p.stderr
        assert row(p.stdout) == ["yes", "yes", "perf"], p.stdout
    finally:
        perf.send_signal(signal.SIGINT)
        perf.communicate(timeout=scaled(60))
    wait_for(lambda: not bus.consumers(EVENT), timeout=60, step=0.05)

    with private_instance(bus.tfs) as name:
        bus.enable(EVENT, instance=name)
        wait_for(lambda: bus.consumers(EVENT), timeout=60, step=0.05)
        p = events()
        assert p.returncode == 0, p.stderr
        assert row(p.stdout) == ["yes", "yes", f"ftrace (instance {name})"], p.stdout
        if bus.transport == "uprobe":  # ftrace shuts perf-based readers out
            said = " ".join(p.stdout.split())  # the note as one line, however wrapped
            assert re.search(rf"ftrace \(instance {name}\) holds [^.;]*\b{EVENT}\b[^.]*\."
                             r" Until ftrace disables them, perf and our consumers", said), said
        bus.disable(EVENT, instance=name)
    wait_for(lambda: not bus.consumers(EVENT), timeout=60, step=0.05)

    if bus.transport != "uprobe":
        return  # user_events: the kernel deletes a killed agent's (unpersisted) events
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(timeout=scaled(60))
    p = events()
    assert p.returncode == 0, p.stderr
    assert row(p.stdout) == ["stale", "no", "-"], p.stdout
    assert "No running agent" in p.stdout and "`sudo rezolus-ue cleanup`" in p.stdout, p.stdout

    clean = subprocess.run([str(CLI), "cleanup"], capture_output=True, text=True,
                           timeout=scaled(120))
    assert clean.returncode == 0, clean.stderr
    p = events()
    assert p.returncode == 0, p.stderr
    assert row(p.stdout) == ["no", "no", "-"], p.stdout
    assert "Stale" not in p.stdout, p.stdout
