"""The uprobe tier: the uprobe transport against a real kernel (root, uprobe_events).

It runs on this host (whose kernel has uprobe events and no user_events); every agent
here is the installed CLI with the shipped default config, ``transport`` forced to
``"uprobe"``, so the tier runs the same on a kernel that also has user_events.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel.conftest import private_instance, remove_stale_instances, wait_for
from waiting import running, scaled

from rezolus_ue.linux.uprobe_stub import stub_path
from tracefs_tools import Tracefs, UprobeEvents, find_tracefs

ROOT = Path(__file__).resolve().parents[2]
#: What scripts/setup.sh installs: the CLI users run.
CLI = Path(sys.executable).parent / "rezolus-ue"
GROUP = "rezolus_ue"
#: The other tools' events the tier defines to prove they are left alone. A run killed
#: mid-test (CI's time limit, a Ctrl-C) leaves them in the kernel, which outlives the
#: run; the session removes them first, or the next run fails defining them.
FOREIGN = (("rezolus_ue", "someone_elses"), ("not_rezolus", "on_our_stub"))


def shipped_config(tmp: Path, extra: str = "") -> Path:
    """Return the shipped default config with ``transport = "uprobe"`` (and ``extra``
    lines added to [agent])."""
    text = (ROOT / "configs" / "default.toml").read_text()
    assert 'transport = "auto"' in text, "the shipped config no longer names transport"
    text = text.replace('transport = "auto"', 'transport = "uprobe"' + extra, 1)
    out = tmp / "uprobe.toml"
    out.write_text(text)
    return out


def remove_foreign(tfs: Tracefs) -> list[tuple[str, str]]:
    """Delete the FOREIGN events that are defined; return them."""
    with UprobeEvents(tfs.root) as ev:
        left = sorted({(d.group, d.event) for d in ev.list()} & set(FOREIGN))
        for group, event in left:
            ev.delete(group, event)
    return left


def owned(tfs: Tracefs) -> list[str]:
    """Return our group's uprobe events on the installed stub."""
    with UprobeEvents(tfs.root) as ev:
        return [d.event for d in ev.list()
                if d.group == GROUP and Path(d.path) == stub_path().resolve()]


class Agent:
    """``rezolus-ue run`` (the installed CLI) with its output in a file."""

    def __init__(self, *args: str, prefix: tuple[str, ...] = ()) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix="agent-", suffix=".log")  # noqa: SIM115
        self.proc = subprocess.Popen([*prefix, str(CLI), *args], cwd=ROOT, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_defined(self, tfs: Tracefs, *names: str) -> None:
        names = names or ("rezolus_cpu_usage", "rezolus_agent")

        def ready() -> bool:
            running(self.proc, self.output, "agent")
            return all(tfs.event_exists(GROUP, n) for n in names) and "publishing" in \
                self.output()

        wait_for(ready, timeout=240, step=0.2, what=f"the agent to define {names}",
                 seen=self.output)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=scaled(60))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def close(self) -> None:
        self.stop()
        self.log.close()


@pytest.fixture(scope="session")
def tfs() -> Tracefs:
    t = Tracefs(find_tracefs(mount=True))
    assert t.has_uprobe_events, "the uprobe tier runs only where uprobe_events exists"
    assert stub_path().exists(), f"{stub_path()} missing: scripts/setup.sh installs it"
    stale = remove_foreign(t) + remove_stale_instances(t)
    if stale:
        print(f"uprobe tier: removed {stale}, left by a run killed mid-test", file=sys.stderr)
    return t


@pytest.fixture
def agent(tfs: Tracefs, tmp_path: Path) -> Iterator[Agent]:
    """The shipped config on the uprobe transport, publishing every 200 ms."""
    a = Agent("run", "--config", str(shipped_config(tmp_path)), "--interval", "200ms")
    try:
        a.wait_defined(tfs)
        yield a
    finally:
        a.close()


@pytest.fixture
def instance(tfs: Tracefs) -> Iterator[str]:
    """Return a private ftrace instance (any kernel with tracefs)."""
    with private_instance(tfs) as name:
        yield name


def field(line: str, name: str) -> str:
    m = re.search(rf"\b{name}=(\"[^\"]*\"|\S+)", line)
    assert m, f"no {name} in {line!r}"
    return m.group(1)
