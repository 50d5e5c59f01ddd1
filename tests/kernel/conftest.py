"""Fixtures for tests against a kernel with user_events (see tests/conftest.py)."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator

import pytest

from rezolus_ue.user_events import UserEventsData
from tracefs_tools import Tracefs, find_tracefs

_seq = itertools.count()


@pytest.fixture(scope="session")
def tracefs() -> Tracefs:
    tfs = Tracefs(find_tracefs(mount=True))
    if not tfs.has_user_events:
        pytest.skip("this kernel has no user_events")
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


@pytest.fixture
def instance(tracefs: Tracefs) -> Iterator[str]:
    """Return a private ftrace instance: tests never touch the global buffer."""
    name = f"rezolus_test_{os.getpid()}_{next(_seq)}"
    tracefs.create_instance(name)
    yield name
    tracefs.remove_instance(name)


def wait_for(cond: Callable[[], object], timeout: float = 10.0, step: float = 0.02) -> object:
    """Return cond()'s first truthy value, polling; raise AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {cond}")
        time.sleep(step)
