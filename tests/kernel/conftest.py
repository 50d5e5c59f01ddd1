"""Fixtures for tests against a real kernel (see tests/conftest.py): ``tracefs`` for tests
of user_events itself, ``bus`` for tests above the transport, which run on whichever the
agent takes on this kernel (the ``live`` tier: on this host, uprobe events).

The ``kernel`` tier keeps only what needs the test kernel (in the VM on this host):

* user_events itself: its ABI (test_user_events_abi), the transport end to end under the
  shipped privileges (test_as_shipped's sudo and unit runs), the docs' user_events forms,
  ``persist``, ``user_events_data`` modes and BPF seeing no record
  (test_doc_examples_user_events), the kernel deleting a killed agent's events
  (reliability/test_kill9);
* hooks this host lacks: kprobes and fentry (test_tcp_traffic, the function-hook check
  after the privilege drop in test_bpf_under_the_agents_privileges), null_blk's bad blocks
  (test_blockio_requests), an older kernel's tracepoint arguments (test_tcp_traffic), and
  a writable ``ftrace_enabled``, which trace-cmd needs (the README's trace-cmd example,
  on both transports, in test_doc_examples_user_events).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import wait_for  # noqa: F401 - the kernel tests' wait, re-exported

from rezolus_ue.linux.uprobe_stub import Stub, stub_path
from rezolus_ue.linux.user_events import UserEventsData
from rezolus_ue.publisher import Stats, UprobeHandle, choose_transport, owned_uprobes, slot_of
from rezolus_ue.schema import GROUPS, EventSchema
from tracefs_tools import Tracefs, UprobeEvents, find_tracefs

_seq = itertools.count()


@pytest.fixture(scope="session")
def tracefs() -> Tracefs:
    tfs = Tracefs(find_tracefs(mount=True))
    if not tfs.has_user_events:
        pytest.skip("this kernel has no user_events")
    remove_stale_instances(tfs)
    return tfs


class Bus:
    """The tracepoints the agent publishes on this kernel with ``transport = "auto"``:
    user_events where the kernel has them, else uprobe events on the installed stub.

    Tests of the agent and its consumers ask this, not ``user_events_status``, so the same
    test runs on this host (uprobe events) and on a kernel with user_events.
    """

    def __init__(self, tfs: Tracefs) -> None:
        self.tfs = tfs
        self.transport, _why = choose_transport(tfs.root)
        self.group = GROUPS[self.transport]
        self._stub: Stub | None = None

    def __repr__(self) -> str:
        return f"Bus({self.transport}, group {self.group})"

    @property
    def stub(self) -> Stub:
        """The installed stub, mapped in this process: the kernel keeps each slot's counter
        here as in the agent, so this process reads who listens and can write records."""
        if self._stub is None:
            self._stub = Stub()
        return self._stub

    def registered(self) -> set[str]:
        """Return the events registered (user_events) or defined on our stub (uprobe)."""
        if self.transport == "user_events":
            return set(self.tfs.user_events_status().events)
        with UprobeEvents(self.tfs.root) as ev:
            return {d.event for d in owned_uprobes(ev, stub_path().resolve())}

    def ours(self) -> list[str]:
        """Return the registered ``rezolus_*`` events, sorted."""
        return sorted(e for e in self.registered() if e.startswith("rezolus_"))

    def _slot(self, name: str) -> int:
        with UprobeEvents(self.tfs.root) as ev:
            d = next((d for d in owned_uprobes(ev, stub_path().resolve()) if d.event == name),
                     None)
        assert d is not None, f"{name} is not defined"
        return slot_of(d, self.stub)

    def consumers(self, name: str) -> bool:
        """Return whether a consumer (perf, ftrace, ours) has ``name`` enabled, as the kernel
        says: user_events_status, or the reference counter it keeps for the uprobe."""
        if self.transport == "user_events":
            st = self.tfs.user_events_status().events.get(name)
            return bool(st and st.consumers)
        return self.stub.counter(self._slot(name)).value != 0

    def writer(self, schema: EventSchema) -> Writer:
        """Return a writer of records of ``schema``'s event into the agent's tracepoint
        (same name and format), for a test's own marks among the agent's records."""
        return Writer(self, schema)

    def enable(self, name: str, instance: str | None = None) -> None:
        self.tfs.enable(self.group, name, instance=instance)

    def disable(self, name: str, instance: str | None = None) -> None:
        self.tfs.disable(self.group, name, instance=instance)


class Writer:
    """Writes records of one event beside the agent: on user_events, a registration of the
    same name and format (one tracepoint); on uprobe events, a call of the agent's slot
    function in this process's mapping of the stub, which the kernel probes alike."""

    def __init__(self, bus: Bus, schema: EventSchema) -> None:
        self.schema = schema
        self._data: UserEventsData | None = None
        if bus.transport == "user_events":
            self._data = UserEventsData(bus.tfs.root)
            self._handle = self._data.register(schema.name_args)
        else:
            slot = bus._slot(schema.name)
            self._handle = UprobeHandle(schema.name, bus.stub.counter(slot),
                                        bus.stub.function(slot), schema.uprobe.record,
                                        Stats())

    @property
    def enabled(self) -> bool:
        return self._handle.enabled

    def write(self, payload: bytes) -> bool:
        return self._handle.write(payload)

    def close(self) -> None:
        if self._data is not None:
            self._data.close()


@pytest.fixture(scope="session")
def bus() -> Bus:
    """The transport the agent takes on this kernel (see Bus)."""
    tfs = Tracefs(find_tracefs(mount=True))
    if tfs.has_uprobe_events and not tfs.has_user_events:
        assert stub_path().exists(), f"{stub_path()} missing: scripts/setup.sh installs it"
    remove_stale_instances(tfs)
    return Bus(tfs)


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


@pytest.fixture
def bus_instance(bus: Bus) -> Iterator[str]:
    """Return a private ftrace instance (any kernel with tracefs)."""
    with private_instance(bus.tfs) as name:
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
