"""tracefs_tools against the running kernel: needs root and a tracefs (mounted if missing).

Everything that enables an event does it inside a private instance, so the global tracing
state of the host is never changed.
"""

from __future__ import annotations

import os
import time

import pytest

from tracefs_tools import (
    EventNotFound,
    Tracefs,
    TracefsNotFound,
    TracefsPermissionError,
    find_tracefs,
)

pytestmark = pytest.mark.host

NOBODY = 65534


@pytest.fixture(scope="module")
def tracefs() -> Tracefs:
    if os.geteuid() != 0:
        pytest.skip("needs root to read and write tracefs")
    try:
        return Tracefs(find_tracefs())
    except TracefsNotFound as e:
        pytest.skip(f"no tracefs: {e}")


@pytest.fixture
def instance(tracefs: Tracefs):
    name = f"tracefs_tools_test_{os.getpid()}"
    try:
        yield name
    finally:
        if name in tracefs.instances():
            tracefs.remove_instance(name)


def test_groups(tracefs):
    groups = tracefs.groups()
    assert "sched" in groups
    assert groups == sorted(groups)
    assert "sched_switch" in tracefs.events("sched")
    assert tracefs.event_exists("sched", "sched_switch")
    assert not tracefs.event_exists("sched", "no_such_event")


def test_sched_switch_format(tracefs):
    fmt = tracefs.event_format("sched", "sched_switch")
    assert fmt.name == "sched_switch"
    assert isinstance(fmt.id, int) and fmt.id > 0
    assert fmt.id == tracefs.event_id("sched", "sched_switch")
    comm = fmt.field("prev_comm")
    assert (comm.type, comm.size, comm.array_len) == ("char[16]", 16, 16)
    assert {"prev_pid", "next_comm", "next_pid"} <= {f.name for f in fmt.payload_fields}
    assert [f.name for f in fmt.common_fields][:2] == ["common_type", "common_flags"]


def test_enable_in_instance_leaves_global_alone(tracefs, instance):
    global_enable = tracefs.path("events", "sched", "sched_switch", "enable")
    before = global_enable.read_text()

    path = tracefs.create_instance(instance)
    assert path.is_dir() and instance in tracefs.instances()
    assert not tracefs.is_enabled("sched", "sched_switch", instance=instance)

    tracefs.enable("sched", "sched_switch", instance=instance)
    assert tracefs.is_enabled("sched", "sched_switch", instance=instance)
    time.sleep(0.2)  # sleeping itself switches tasks
    assert "sched_switch:" in tracefs.read_trace(instance=instance)

    tracefs.disable("sched", "sched_switch", instance=instance)
    assert not tracefs.is_enabled("sched", "sched_switch", instance=instance)
    tracefs.clear_trace(instance=instance)
    assert "sched_switch:" not in tracefs.read_trace(instance=instance)

    tracefs.enable("sched", "sched_switch", instance=instance)  # left on: remove must cope
    tracefs.remove_instance(instance)
    assert instance not in tracefs.instances()
    assert not path.exists()
    assert global_enable.read_text() == before


def test_missing_event(tracefs):
    with pytest.raises(EventNotFound, match="user_events/tracefs_tools_nope not found"):
        tracefs.event_format("user_events", "tracefs_tools_nope")
    with pytest.raises(EventNotFound):
        tracefs.is_enabled("sched", "tracefs_tools_nope")
    assert tracefs.events("tracefs_tools_no_group") == []



def test_permission_denied_for_nobody(tracefs):
    # A forked child drops to uid 65534 and must see TracefsPermissionError, not OSError.
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            Tracefs(tracefs.root).event_format("sched", "sched_switch")
            code = 3  # readable by anyone here
        except TracefsPermissionError as e:
            code = 0 if "Run as root" in str(e) else 4
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 3:
        pytest.skip(f"{tracefs.root} is readable by uid {NOBODY} on this host")
    assert code == 0, f"child exited {code} (2: other exception, 4: message lacks remedy)"


def test_enabled_in_names_each_buffer(tracefs, instance):
    other = f"{instance}_b"
    tracefs.create_instance(instance)
    tracefs.create_instance(other)
    try:
        assert instance not in tracefs.enabled_in("sched", "sched_switch")
        tracefs.enable("sched", "sched_switch", instance=instance)
        where = tracefs.enabled_in("sched", "sched_switch")
        assert instance in where and other not in where
        tracefs.enable("sched", "sched_switch", instance=other)
        assert {instance, other} <= set(tracefs.enabled_in("sched", "sched_switch"))
        tracefs.remove_instance(instance)
        assert instance not in tracefs.enabled_in("sched", "sched_switch")
    finally:
        tracefs.remove_instance(other)
    assert tracefs.enabled_in("sched", "tracefs_tools_nope") == []


def test_enabled_in_takes_a_vanishing_event_or_instance_in_its_stride(tmp_path):
    # A fixture tree: the top level and instance "a" enable the event, "b" has lost it
    # (removed between the listing and the read), "c" is an instance being removed.
    for base, state in ((tmp_path, "1\n"), (tmp_path / "instances" / "a", "1*\n")):
        d = base / "events" / "rezolus_ue" / "rezolus_memory"
        d.mkdir(parents=True)
        (d / "enable").write_text(state)
    (tmp_path / "instances" / "b" / "events" / "rezolus_ue").mkdir(parents=True)
    (tmp_path / "instances" / "c").mkdir()
    tfs = Tracefs(tmp_path)
    assert tfs.enabled_in("rezolus_ue", "rezolus_memory") == [None, "a"]
    (tmp_path / "events" / "rezolus_ue" / "rezolus_memory" / "enable").write_text("0\n")
    assert tfs.enabled_in("rezolus_ue", "rezolus_memory") == ["a"]
    assert tfs.enabled_in("rezolus_ue", "rezolus_cpu_usage") == []
