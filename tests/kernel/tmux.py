"""A terminal program under tmux: started detached, keys sent, its screen captured."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from waiting import scaled


class Tmux:
    """One detached tmux session running one command."""

    def __init__(self, tmux: str, session: str) -> None:
        self.tmux = tmux
        self.session = session
        self.env = {**os.environ, "TERM": "xterm-256color"}

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.tmux, *args], capture_output=True, text=True,
                              env=self.env, timeout=scaled(30))

    def screen(self) -> str:
        """Return the text on the screen now."""
        return self.run("capture-pane", "-p", "-t", self.session).stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def ended(self) -> bool:
        """Return whether the command (so the session) has ended."""
        return self.run("has-session", "-t", self.session).returncode != 0


@contextmanager
def tmux_session(command: str, width: int, height: int) -> Iterator[Tmux]:
    """Run ``command`` in a detached ``width`` x ``height`` tmux session; kill it on exit.
    Skip the test where tmux is not installed."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (scripts/setup.sh --dev installs it)")
    t = Tmux(tmux, f"rezolus_{os.getpid()}_{width}x{height}")
    t.run("new-session", "-d", "-s", t.session, "-x", str(width), "-y", str(height), command)
    try:
        yield t
    finally:
        t.run("kill-session", "-t", t.session)
