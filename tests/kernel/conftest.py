"""Fixtures for tests against a kernel with user_events (see tests/conftest.py)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import wait_for  # noqa: F401 - the kernel tests' wait, re-exported

from rezolus_ue.linux.user_events import UserEventsData
from tracefs_tools import Tracefs, find_tracefs

_seq = itertools.count()


@pytest.fixture(scope="session")
def tracefs() -> Tracefs:
    tfs = Tracefs(find_tracefs(mount=True))
    if not tfs.has_user_events:
        pytest.skip("this kernel has no user_events")
    remove_stale_instances(tfs)
    return tfs


@pytest.fixture
def ue(tracefs: Tracefs) -> Iterator[UserEventsData]:
    data = UserEventsData(tracefs.root)
    yield data
    data.close()


@pytest.fixture
def event_name() -> str:
    """Return a fresh event name, so no test sees another's registration."""
    return f"rezolus_t{os.getpid()}_{next(_seq)}"


#: Our test instances' names: this prefix, the run's pid, a sequence number.
INSTANCE_PREFIX = "rezolus_test_"


def remove_stale_instances(tfs: Tracefs) -> list[str]:
    """Remove the ftrace instances of test runs that no longer live (killed mid-test: the
    kernel outlives the run), whose enabled events would make a later test's "nobody
    listens" untrue; return their names."""
    gone = []
    for name in tfs.instances():
        m = re.fullmatch(rf"{INSTANCE_PREFIX}(\d+)_\d+", name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            tfs.remove_instance(name)
            gone.append(name)
    return gone


@contextlib.contextmanager
def private_instance(tfs: Tracefs) -> Iterator[str]:
    """Yield the name of a new ftrace instance, removed after: tests never touch the
    global buffer."""
    name = f"{INSTANCE_PREFIX}{os.getpid()}_{next(_seq)}"
    tfs.create_instance(name)
    try:
        yield name
    finally:
        tfs.remove_instance(name)


@pytest.fixture
def instance(tracefs: Tracefs) -> Iterator[str]:
    """Return a private ftrace instance (user_events kernels)."""
    with private_instance(tracefs) as name:
        yield name


def threads_of(pid: int) -> list[str]:
    """Return each thread of ``pid`` as "tid name state wchan": what a process that stopped
    making progress is blocked in (for a timeout's report; D state = the kernel)."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            name = (task / "comm").read_text().strip()
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (task / "wchan").read_text().strip() or "-"
        except OSError:
            continue
        out.append(f"{task.name} {name} {state} {wchan}")
    return out
