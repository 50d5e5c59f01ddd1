"""Pure tests of the user_events binding: ioctl numbers, struct layouts, enable-word slots.

Expected numbers come from include/uapi/linux/user_events.h (Linux 6.4+) on a 64-bit
kernel, not from the module; nothing here needs user_events in the running kernel.
"""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import pytest

from rezolus_ue.encoding import MAX_NAME_ARGS, EventSchema
from rezolus_ue.errors import KernelFeatureMissing, RezolusError
from rezolus_ue.linux import user_events as ue
from rezolus_ue.schema import EVENTS

pytestmark = pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8,
                                reason="expected ioctl numbers are for 64-bit userspace")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # _IOWR('*', 0, struct user_reg *)
        ("DIAG_IOCSREG", 0xC0082A00),
        # _IOW('*', 1, char *)
        ("DIAG_IOCSDEL", 0x40082A01),
        # _IOW('*', 2, struct user_unreg *)
        ("DIAG_IOCSUNREG", 0x40082A02),
    ],
)
def test_ioctl_numbers(name: str, expected: int) -> None:
    assert getattr(ue, name) == expected


def test_reg_flags() -> None:
    assert (ue.REG_PERSIST, ue.REG_MULTI_FORMAT) == (1, 2)


@pytest.mark.parametrize(
    ("struct", "size", "layout"),
    [
        (ue.UserReg, 28, [("size", 0, 4), ("enable_bit", 4, 1), ("enable_size", 5, 1),
                          ("flags", 6, 2), ("enable_addr", 8, 8), ("name_args", 16, 8),
                          ("write_index", 24, 4)]),
        (ue.UserUnreg, 16, [("size", 0, 4), ("disable_bit", 4, 1), ("reserved", 5, 1),
                            ("reserved2", 6, 2), ("disable_addr", 8, 8)]),
    ],
    ids=["user_reg", "user_unreg"],
)  # fmt: skip
def test_struct_layout(struct: type[ctypes.Structure], size: int,
                       layout: list[tuple[str, int, int]]) -> None:
    assert ctypes.sizeof(struct) == size
    got = [(name, getattr(struct, name).offset, getattr(struct, name).size)
           for name, *_ in struct._fields_]
    assert got == layout


def test_user_reg_bytes() -> None:
    """The bytes handed to the kernel, field by field (little- or big-endian alike)."""
    reg = ue.UserReg(size=28, enable_bit=31, enable_size=4, flags=3,
                     enable_addr=0x1122334455667788, name_args=0x0102030405060708,
                     write_index=0xAABBCCDD)
    raw = bytes(reg)
    assert len(raw) == 28
    back = ue.UserReg.from_buffer_copy(raw)
    assert (back.size, back.enable_bit, back.enable_size, back.flags) == (28, 31, 4, 3)
    assert (back.enable_addr, back.name_args, back.write_index) == (
        0x1122334455667788, 0x0102030405060708, 0xAABBCCDD)
    assert raw[4:6] == bytes([31, 4])


# --- enable words ----------------------------------------------------------------------


def test_enable_words_distinct_aligned_zeroed() -> None:
    words = ue.EnableWords()
    slots = [words.allocate() for _ in range(8)]
    addrs = [ctypes.addressof(word) for _, word in slots]
    assert len(set(addrs)) == len(addrs)
    assert len({slot for slot, _ in slots}) == len(slots)
    assert all(addr % 4 == 0 for addr in addrs)
    assert all(word.value == 0 for _, word in slots)
    assert all(ctypes.sizeof(word) == 4 for _, word in slots)


def test_enable_word_reads_what_is_written_at_its_address() -> None:
    """What the kernel writes at the registered address is what the agent reads."""
    words = ue.EnableWords()
    _, word = words.allocate()
    ctypes.c_uint32.from_address(ctypes.addressof(word)).value = 1 << ue.ENABLE_BIT
    assert word.value == 1


def test_enable_words_release_then_allocate_reuses_zeroed() -> None:
    words = ue.EnableWords()
    _keep = words.allocate()
    slot, word = words.allocate()
    word.value = 0xFFFFFFFF
    addr = ctypes.addressof(word)
    words.release(slot)
    slot2, word2 = words.allocate()
    assert slot2 == slot
    assert ctypes.addressof(word2) == addr
    assert word2.value == 0


def test_enable_words_spill_to_a_new_page() -> None:
    words = ue.EnableWords()
    per_page = mmap.PAGESIZE // 4
    slots = [words.allocate() for _ in range(per_page + 2)]
    addrs = {ctypes.addressof(word) for _, word in slots}
    assert len(addrs) == per_page + 2
    assert {page for (page, _), _ in slots} == {0, 1}
    pages = {addr // mmap.PAGESIZE for addr in addrs}
    assert len(pages) == 2


def test_registration_exposes_its_enable_word() -> None:
    """Samplers read ``handle.word.value`` directly: it must be the registered word."""
    words = ue.EnableWords()
    slot, word = words.allocate()
    reg = ue.Registration(None, "rezolus_x", "rezolus_x u32 a", 3, slot, word, 0)  # type: ignore[arg-type]
    assert isinstance(reg.word, ctypes.c_uint32)
    assert reg.address == ctypes.addressof(word)
    assert not reg.enabled and reg.word.value == 0
    ctypes.c_uint32.from_address(reg.address).value = 1 << ue.ENABLE_BIT
    assert reg.enabled and reg.word.value != 0


# --- registration strings --------------------------------------------------------------

#: MAX_EVENT_DESC in kernel/trace/trace_events_user.c: the registration buffer, NUL included.
MAX_EVENT_DESC = 512


def test_name_args_limit_matches_the_kernel() -> None:
    assert MAX_NAME_ARGS + 1 == MAX_EVENT_DESC


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.name)
def test_every_event_fits_the_registration_buffer(event: EventSchema) -> None:
    assert len(event.name_args.encode()) + 1 <= MAX_EVENT_DESC


# --- missing kernel feature ------------------------------------------------------------


def test_missing_user_events_hint() -> None:
    hint = ue.missing_user_events_hint(Path("/sys/kernel/tracing"))
    assert "/sys/kernel/tracing/user_events_data" in hint
    for needle in ("CONFIG_USER_EVENTS", "6.4", "Ubuntu 24.04"):
        assert needle in hint
    assert "\n" not in hint


def test_user_events_data_without_the_file(tmp_path: Path) -> None:
    with pytest.raises(KernelFeatureMissing) as ei:
        ue.UserEventsData(tmp_path)
    err = ei.value
    assert isinstance(err, RezolusError) and err.exit_code == 1
    assert err.feature == "user_events"
    assert "CONFIG_USER_EVENTS" in str(err)
    assert str(tmp_path / "user_events_data") in str(err)
    assert "\n" not in str(err)
    assert err.__suppress_context__  # the FileNotFoundError is not chained into a report
