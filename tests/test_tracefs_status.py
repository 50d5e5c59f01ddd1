"""Pure tests of user_events_status and /proc/mounts parsing, and Tracefs over a fake tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracefs_tools import (
    EventNotFound,
    Tracefs,
    TracefsError,
    TracefsNotFound,
    UserEventStatus,
    find_tracefs,
    parse_mounts,
    parse_user_events_status,
    tracefs_candidates,
)
from tracefs_tools import mounts as mounts_module

FIXTURES = Path(__file__).parent / "fixtures" / "tracefs"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# -- user_events_status ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "events", "active", "busy", "max_"),
    [
        (
            "user_events_status_6x",
            {
                "tt_probe": ("ftrace", "perf"),
                "tt_idle": (),
                "net_stats.1a2b3c": ("perf", "other"),
                "cpu_stats": ("ftrace",),
            },
            4, 3, None,
        ),
        ("user_events_status_empty", {}, 0, 0, None),
        (
            "user_events_status_5x",
            {"test": ("ftrace",), "bpf_only": (), "both": ("ftrace", "perf"), "idle": ()},
            4, 2, 4096,
        ),
    ],
)  # fmt: skip
def test_parse_user_events_status(name, events, active, busy, max_):
    status = parse_user_events_status(fixture(name))
    assert {n: e.consumers for n, e in status.events.items()} == events
    assert all(e.name == n for n, e in status.events.items())
    assert (status.active, status.busy, status.max) == (active, busy, max_)
    assert sum(e.busy for e in status.events.values()) == busy


@pytest.mark.parametrize(
    ("text", "active", "busy"),
    [
        ("a # Used by ftrace\nb\n", 2, 1),  # summary cut off: counted from the lines
        ("", 0, 0),
    ],
)
def test_parse_user_events_status_without_summary(text, active, busy):
    status = parse_user_events_status(text)
    assert (status.active, status.busy, status.max) == (active, busy, None)


def test_user_event_status_busy():
    assert UserEventStatus("x", ("perf",)).busy
    assert not UserEventStatus("x").busy


# -- /proc/mounts ------------------------------------------------------------------------------


def test_parse_mounts_unescapes_octal():
    entries = parse_mounts(fixture("mounts_nonstandard"))
    tracefs = [e for e in entries if e.fstype == "tracefs"]
    assert tracefs[0].target == "/mnt/my traces"
    assert tracefs[0].options == "rw,relatime,gid=1001,mode=750"
    assert parse_mounts(r"a /x\011y\012z\134 ext4 rw 0 0")[0].target == "/x\ty\nz\\"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mounts_nonstandard", [Path("/mnt/my traces"), Path("/srv/second")]),
        ("mounts_debugfs_only", [Path("/sys/kernel/debug/tracing")]),
    ],
)
def test_tracefs_candidates(name, expected):
    assert tracefs_candidates(fixture(name)) == expected


def test_tracefs_candidates_none():
    assert tracefs_candidates("proc /proc proc rw 0 0\n") == []


def fake_tracefs(root: Path) -> Path:
    """Return `root` after filling it with a minimal tracefs-like tree."""
    event = root / "events" / "sched" / "sched_switch"
    event.mkdir(parents=True)
    (event / "format").write_text(fixture("sched_switch.format"))
    (event / "id").write_text("372\n")
    (event / "enable").write_text("1*\n")
    (root / "events" / "sched" / "enable").write_text("X\n")
    (root / "events" / "header_page").write_text("")
    (root / "events" / "ftrace").mkdir()
    (root / "instances").mkdir()
    (root / "trace").write_text("# tracer: nop\n")
    (root / "dynamic_events").write_text("u:tt_probe u32 cpu\n\n")
    (root / "user_events_status").write_text(fixture("user_events_status_6x"))
    (root / "user_events_data").write_text("")
    return root


def test_find_tracefs_prefers_standard_path(tmp_path, monkeypatch):
    monkeypatch.setattr(mounts_module, "DEFAULT_ROOT", fake_tracefs(tmp_path / "std"))
    assert find_tracefs(mount=False, proc_mounts=tmp_path / "none") == tmp_path / "std"


def test_find_tracefs_from_proc_mounts(tmp_path, monkeypatch):
    monkeypatch.setattr(mounts_module, "DEFAULT_ROOT", tmp_path / "unmounted")
    other = fake_tracefs(tmp_path / "my traces")
    mounts = tmp_path / "mounts"
    escaped = str(other).replace(" ", "\\040")
    mounts.write_text(f"proc /proc proc rw 0 0\nnodev {escaped} tracefs rw 0 0\n")
    assert find_tracefs(mount=False, proc_mounts=mounts) == other


def test_find_tracefs_via_debugfs(tmp_path, monkeypatch):
    monkeypatch.setattr(mounts_module, "DEFAULT_ROOT", tmp_path / "unmounted")
    debugfs = tmp_path / "debug"
    fake_tracefs(debugfs / "tracing")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"debugfs {debugfs} debugfs rw 0 0\n")
    assert find_tracefs(mount=False, proc_mounts=mounts) == debugfs / "tracing"


def test_find_tracefs_not_found_says_how_to_mount(tmp_path, monkeypatch):
    monkeypatch.setattr(mounts_module, "DEFAULT_ROOT", tmp_path / "unmounted")
    mounts = tmp_path / "mounts"
    mounts.write_text(fixture("mounts_debugfs_only").replace("/sys/kernel/debug", "/nonexistent"))
    with pytest.raises(TracefsNotFound, match=r"mount -t tracefs nodev /sys/kernel/tracing"):
        find_tracefs(mount=False, proc_mounts=mounts)


# -- Tracefs over a fake tree (the I/O boundary, without a kernel) ----------------------------


@pytest.fixture
def fake(tmp_path) -> Tracefs:
    return Tracefs(fake_tracefs(tmp_path))


def test_fake_listing(fake):
    assert fake.groups() == ["ftrace", "sched"]
    assert fake.events("sched") == ["sched_switch"]
    assert fake.events("nope") == []
    assert fake.event_exists("sched", "sched_switch")
    assert not fake.event_exists("sched", "nope")
    assert fake.has_user_events
    assert fake.dynamic_events() == ["u:tt_probe u32 cpu"]
    assert fake.user_events_status().busy == 3


def test_fake_event_files(fake):
    assert fake.event_id("sched", "sched_switch") == 372
    assert fake.event_format("sched", "sched_switch").name == "sched_switch"
    assert fake.is_enabled("sched", "sched_switch")  # "1*": soft-enabled reads as enabled
    fake.disable("sched", "sched_switch")
    assert not fake.is_enabled("sched", "sched_switch")


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.event_format("user_events", "foo"),
        lambda t: t.event_id("sched", "nope"),
        lambda t: t.is_enabled("sched", "nope"),
        lambda t: t.enable("user_events", "foo"),
        lambda t: t.disable("sched", "sched_switch", instance="missing"),
        lambda t: t.read_trace(instance="missing"),
        lambda t: t.clear_trace(instance="missing"),
        lambda t: t.remove_instance("missing"),
    ],
)
def test_fake_missing_is_event_not_found(fake, call):
    with pytest.raises(EventNotFound, match="not found in"):
        call(fake)


def test_fake_event_not_found_message(fake):
    with pytest.raises(EventNotFound) as info:
        fake.event_format("user_events", "foo")
    assert str(info.value) == (f"event user_events/foo not found in {fake.root}; is it registered?")


def test_fake_other_errors_are_tracefs_errors(fake, tmp_path):
    # enable is a directory here: EISDIR must come out as TracefsError, not OSError.
    (fake.root / "events" / "ftrace" / "print" / "enable").mkdir(parents=True)
    with pytest.raises(TracefsError, match="enable: Is a directory"):
        fake.is_enabled("ftrace", "print")
    (fake.root / "user_events_status").unlink()
    with pytest.raises(TracefsError, match="CONFIG_USER_EVENTS"):
        fake.user_events_status()
    with pytest.raises(TracefsError, match="no such directory"):
        Tracefs(tmp_path / "nowhere").groups()


def test_fake_instances_and_trace(fake):
    assert fake.instances() == []
    assert fake.create_instance("mine") == fake.root / "instances" / "mine"
    assert fake.create_instance("mine") == fake.root / "instances" / "mine"  # exists: fine
    assert fake.instances() == ["mine"]
    assert fake.path("trace", instance="mine") == fake.root / "instances" / "mine" / "trace"
    assert fake.read_trace() == "# tracer: nop\n"
    fake.clear_trace()
    assert fake.read_trace() == ""


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b"])
def test_names_must_be_one_component(fake, bad):
    with pytest.raises(ValueError, match="not a valid tracefs name"):
        fake.path(instance=bad)
