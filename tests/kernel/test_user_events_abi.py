"""The user_events ABI as our binding uses it, against a real kernel (host or VM).

Covers what the kernel's own selftests (tools/testing/selftests/user_events) check, written
for our binding: enablement via ftrace and perf, write indexes, sharing, format conflicts,
bad indexes, disabled writes, auto-delete, fork semantics, raw sample layout and ftrace
output.
"""

from __future__ import annotations

import errno
import os
import time

import pytest

from rezolus_ue import schema as S
from rezolus_ue.errors import EventConflict, PermissionDenied, RezolusError
from rezolus_ue.linux.perf_ring import RingEvent, TracepointSubscription
from rezolus_ue.linux.user_events import REG_MULTI_FORMAT, REG_PERSIST, UserEventsData

from .conftest import wait_for

pytestmark = pytest.mark.kernel
G = "user_events"


def probe(name: str) -> S.EventSchema:
    """Return a test event with every kind of field."""
    return S.EventSchema(name, "test", (
        S.Field("cpu", S.U32, "", ""),
        S.Field("value", S.U64, "", ""),
        S.Field("delta", S.S32, "", ""),
        S.Field("comm", S.char_array(16), "", ""),
        S.Field("note", S.REL_STR, "", "", max_len=64),
        S.Field("blob", S.REL_BYTES, "", "", max_len=64),
    ), sampler="test")


VALUES = (3, 2**63 + 5, -7, "worker", "hello world", b"\x00\x01\xfe\xff")


def test_enable_bit_follows_ftrace(tracefs, ue, event_name):
    reg = ue.register(probe(event_name).name_args)
    assert not reg.enabled
    tracefs.enable(G, event_name)
    assert reg.enabled  # the kernel updates the word before the write(2) to enable returns
    tracefs.disable(G, event_name)
    assert not reg.enabled
    tracefs.enable(G, event_name)
    reg.unregister()  # after DIAG_IOCSUNREG the kernel clears our bit and stops updating it
    tracefs.disable(G, event_name)
    tracefs.enable(G, event_name)
    assert reg.word.value == 0
    tracefs.disable(G, event_name)


def test_enable_bit_follows_perf_event_open(tracefs, ue, event_name):
    reg = ue.register(probe(event_name).name_args)
    tp_id = tracefs.event_id(G, event_name)
    ev = RingEvent.tracepoint(tp_id, cpu=0)
    try:
        assert reg.enabled
        assert "perf" in tracefs.user_events_status().events[event_name].consumers
    finally:
        ev.close()
    assert not reg.enabled


def test_write_index_per_file(tracefs, ue, event_name):
    a = ue.register(f"{event_name}_a u32 x")
    b = ue.register(f"{event_name}_b u32 x")
    assert (a.write_index, b.write_index) == (0, 1)
    with UserEventsData(tracefs.root) as other:
        # Indexes are per open file: a fresh file starts again at 0.
        assert other.register(f"{event_name}_b u32 x").write_index == 0


def test_same_name_and_format_is_shared(tracefs, ue, event_name):
    args = probe(event_name).name_args
    mine = ue.register(args)
    with UserEventsData(tracefs.root) as other:
        theirs = other.register(args)
        tracefs.enable(G, event_name)
        assert mine.enabled and theirs.enabled
        tracefs.disable(G, event_name)
        assert list(tracefs.user_events_status().events).count(event_name) == 1


def test_other_format_is_our_conflict_error(tracefs, ue, event_name):
    ue.register(f"{event_name} u32 a")
    with UserEventsData(tracefs.root) as other, pytest.raises(EventConflict) as exc:
        other.register(f"{event_name} u64 b")
    msg = str(exc.value)
    assert "u32 a" in msg and "u64 b" in msg and event_name in msg


def test_bad_write_index_is_enoent(ue, event_name):
    ue.register(f"{event_name} u32 a")
    with pytest.raises(OSError) as exc:
        os.writev(ue.fd, [(99).to_bytes(4, "little"), b"\0\0\0\0"])
    assert exc.value.errno == errno.ENOENT


def test_write_while_disabled_is_counted_not_raised(ue, event_name):
    sch = probe(event_name)
    reg = ue.register(sch.name_args)
    assert reg.write(sch.pack(*VALUES)) is False
    assert (ue.stats.ebadf, ue.stats.written) == (1, 0)


def test_event_deleted_after_last_close(tracefs, event_name):
    data = UserEventsData(tracefs.root)
    data.register(f"{event_name} u32 a")
    assert event_name in tracefs.user_events_status().events
    data.close()
    wait_for(lambda: event_name not in tracefs.user_events_status().events, timeout=5)
    assert not tracefs.event_exists(G, event_name)


def test_persist_flag_keeps_event_until_deleted(tracefs, event_name):
    data = UserEventsData(tracefs.root)
    reg = data.register(f"{event_name} u32 a", REG_PERSIST)
    assert reg.flags == REG_PERSIST  # 6.12 supports it
    data.close()
    time.sleep(0.2)
    assert event_name in tracefs.user_events_status().events
    with UserEventsData(tracefs.root) as d:
        d.delete(event_name)
    assert event_name not in tracefs.user_events_status().events


def test_delete_in_use_is_refused(tracefs, ue, event_name):
    ue.register(f"{event_name} u32 a")
    with pytest.raises(RezolusError, match="in use"):
        ue.delete(event_name)


def test_multi_format_flag(tracefs, ue, event_name):
    reg = ue.register(f"{event_name} u32 a", REG_MULTI_FORMAT)
    assert reg.flags == REG_MULTI_FORMAT
    # Multi-format events live in their own group, as name.<unique id>.
    assert any(e.startswith(event_name + ".") for e in tracefs.events("user_events_multi"))
    with UserEventsData(tracefs.root) as other:
        # ...so a different format under the same name is no conflict.
        other.register(f"{event_name} u64 b", REG_MULTI_FORMAT)


def test_fork_child_sees_enablement_and_can_write(tracefs, ue, event_name, instance):
    sch = probe(event_name)
    reg = ue.register(sch.name_args)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: its copy-on-write enable word must still be kept current
        code = 1
        try:
            os.close(r)
            reg.word.value = 0  # force the page to be copied
            os.write(w, b"x")
            deadline = time.monotonic() + 10
            while not reg.enabled and time.monotonic() < deadline:
                time.sleep(0.01)
            code = 0 if reg.enabled and reg.write(sch.pack(*VALUES)) else 2
        finally:
            os._exit(code)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    tracefs.enable(G, event_name, instance=instance)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "note=hello world" in tracefs.read_trace(instance)
    # A child's DIAG_IOCSUNREG affects only the child.
    pid = os.fork()
    if pid == 0:
        try:
            ue.unregister(reg)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reg.enabled
    tracefs.disable(G, event_name, instance=instance)
    # After a fork our enable page is copy-on-write: the kernel cannot write it in place,
    # so it faults the page in from a workqueue and the update lands a moment later.
    wait_for(lambda: not reg.enabled, timeout=5, step=0.005)


def test_raw_sample_matches_format_offsets(tracefs, ue, event_name):
    sch = probe(event_name)
    reg = ue.register(sch.name_args)
    fmt = tracefs.event_format(G, event_name)
    # The kernel's layout of our fields is exactly the schema's, after the common header.
    header = max(f.offset + f.size for f in fmt.common_fields)
    offset = header
    for field, ours in zip(fmt.payload_fields, sch.fields, strict=True):
        assert (field.name, field.offset, field.size) == (ours.name, offset, ours.type.size)
        offset += ours.type.size
    with TracepointSubscription(tracefs.event_id(G, event_name)) as sub:
        assert reg.enabled
        assert reg.write(sch.pack(*VALUES))
        samples = []
        deadline = time.monotonic() + 10
        while not samples and time.monotonic() < deadline:
            samples = sub.poll(100)
        assert sub.lost == 0
    assert len(samples) == 1
    raw = samples[0].raw
    assert int.from_bytes(raw[:2], "little") == fmt.id
    expected = dict(zip(sch.field_names, VALUES, strict=True))
    assert sch.unpack(raw[header:]) == expected
    assert fmt.decode(raw) == expected


def test_ftrace_shows_fields_by_name(tracefs, ue, event_name, instance):
    sch = probe(event_name)
    reg = ue.register(sch.name_args)
    tracefs.enable(G, event_name, instance=instance)
    assert reg.write(sch.pack(*VALUES))
    text = tracefs.read_trace(instance)
    assert f"{event_name}: cpu=" in text
    for part in ("(3)", "comm=worker", "note=hello world", "blob=00,01,fe,ff"):
        assert part in text
    tracefs.disable(G, event_name, instance=instance)
    assert not reg.enabled


def test_permission_denied_names_the_file(tracefs):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            UserEventsData(tracefs.root)
            code = 3
        except PermissionDenied as e:
            code = 0 if "user_events_data" in str(e) and "group" in str(e) else 4
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_enable_word_read_needs_no_syscall(tracefs, ue, event_name):
    # `enabled` is a memory read: it changes with no call into our binding in between.
    reg = ue.register(f"{event_name} u32 a")
    tracefs.enable(G, event_name)
    assert reg.word.value == 1 << 0
    tracefs.disable(G, event_name)
    assert reg.word.value == 0
