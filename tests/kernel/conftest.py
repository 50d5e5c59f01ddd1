"""Fixtures for tests against a kernel with user_events (see tests/conftest.py)."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rezolus_ue.linux.user_events import UserEventsData
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


@contextlib.contextmanager
def private_instance(tfs: Tracefs) -> Iterator[str]:
    """Yield the name of a new ftrace instance, removed after: tests never touch the
    global buffer."""
    name = f"rezolus_test_{os.getpid()}_{next(_seq)}"
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


#: Every deadline is multiplied by this: the VM's emulated CPU runs code several times
#: slower than the host, and more so on a shared CI machine (a 12 s wait took over 60 s
#: there once). A deadline only ends a hung test, so a generous one costs nothing when
#: the test passes. ``REZOLUS_UE_TIMEOUT_SCALE`` overrides it (e.g. beside a CPU hog).
TIMEOUT_SCALE = float(os.environ.get("REZOLUS_UE_TIMEOUT_SCALE")
                      or (3 if os.environ.get("REZOLUS_UE_IN_VM") == "1" else 1))


def wait_for(cond: Callable[[], object], timeout: float = 10.0, step: float = 0.02, *,
             what: str = "", seen: Callable[[], object] | None = None) -> object:
    """Return cond()'s first truthy value, polling; on timeout raise AssertionError saying
    what was awaited (``what``, else cond's name) and what was seen last (``seen()``, else
    cond's last value).

    Deadlines are far above what a normal run needs: they end a hung test, they do not
    measure speed (the VM's CPU is emulated, and CI machines are shared).
    """
    timeout *= TIMEOUT_SCALE
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            try:
                last = seen() if seen is not None else v
            except Exception as e:  # the report must not hide the timeout
                last = f"<seen() raised {e!r}>"
            text = repr(last)
            if len(text) > 2000:
                text = text[:1000] + " ... " + text[-1000:]
            raise AssertionError(f"timed out after {timeout}s waiting for"
                                 f" {what or getattr(cond, '__name__', cond)}; last seen:"
                                 f" {text}")
        time.sleep(step)


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
