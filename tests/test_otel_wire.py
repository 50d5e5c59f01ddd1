"""The ``otlp_metrics`` declaration against the Rust and .NET exporters' facts, its uprobe
form, and the encoding rules that let a foreign event be declared (pure logic)."""

from __future__ import annotations

import re
import sys

import pytest

from rezolus_ue import publisher
from rezolus_ue.encoding import REL_BYTES, U32, EventSchema, Field, char_array
from rezolus_ue.otel import wire

#: From the Rust exporter's tracepoint module and the .NET exporter's transport.
RUST_EVENT_DEF = "otlp_metrics u32 protocol;char[8] version;__rel_loc u8[] buffer"
RUST_MAX_EVENT_SIZE = 65360
#: What the kernel puts before a uprobe event's fields, and a margin for the ring buffer's
#: own headers: a record must fit one 4 KiB page (as in tests/test_uprobe_layout.py).
KERNEL_ROOM = 4096 - 8 - 8 - 64
ARG = re.compile(r"(\w+)=\+(\d+)\(%di\):(\w+)")


def _u32(v: int) -> bytes:
    return v.to_bytes(4, sys.byteorder)


def test_registration_string_is_the_rust_and_dotnet_one() -> None:
    assert wire.SCHEMA.name_args == RUST_EVENT_DEF
    assert (wire.EVENT, wire.PROTOCOL_OTLP, wire.VERSION) == ("otlp_metrics", 0, b"v0.19.00")
    assert wire.MAX_BUFFER == RUST_MAX_EVENT_SIZE


@pytest.mark.parametrize("n", [0, 1, 300, RUST_MAX_EVENT_SIZE])
def test_payload_is_the_rust_layout_byte_for_byte(n: int) -> None:
    """protocol (native u32), the 8 version bytes with no NUL, the buffer's __rel_loc word
    (length in the high 16 bits, offset 0: the buffer follows it), then the buffer."""
    buffer = bytes(i % 251 for i in range(n))
    want = _u32(0) + b"v0.19.00" + _u32(n << 16) + buffer
    assert wire.payload(buffer) == want
    assert wire.decode(want) == (0, b"v0.19.00", buffer)


def test_a_buffer_over_the_limit_is_refused_by_the_packer() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        wire.payload(bytes(RUST_MAX_EVENT_SIZE + 1))


@pytest.mark.parametrize("data", [b"", bytes(15), _u32(0) + b"v0.19.00" + _u32(9 << 16) + b"x"])
def test_decode_refuses_a_truncated_payload(data: bytes) -> None:
    with pytest.raises(ValueError):
        wire.decode(data)


def test_uprobe_fields_are_the_same_names_with_text_for_bytes() -> None:
    layout = wire.SCHEMA.uprobe
    args = ARG.findall(layout.fetch_args("%di"))
    assert [(a[0], a[2]) for a in args] == [("protocol", "u32"), ("version", "string"),
                                            ("buffer", "string")]
    # The kernel's record: protocol, a __data_loc word per string, then the strings.
    strings = sum(f.text_len for f in wire.SCHEMA.fields if f.text_len)
    assert 4 + 2 * 4 + strings <= KERNEL_ROOM


@pytest.mark.parametrize("n", [0, 5, wire.UPROBE_MAX_BUFFER])
def test_uprobe_record_carries_the_whole_version_and_the_buffer_as_base64(n: int) -> None:
    buffer = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
    rec = wire.SCHEMA.uprobe.record(wire.payload(buffer))
    assert len(rec) == wire.SCHEMA.uprobe.size
    offsets = {a[0]: int(a[1]) for a in ARG.findall(wire.SCHEMA.uprobe.fetch_args("%di"))}
    assert rec[:4] == _u32(0)

    def string_at(off: int) -> bytes:
        return rec[off:rec.index(b"\0", off)]

    assert string_at(offsets["version"]) == b"v0.19.00"
    assert wire.buffer_from_text(string_at(offsets["buffer"]).decode()) == buffer


def test_uprobe_max_buffer_is_the_largest_whose_text_fits() -> None:
    text = wire.buffer_to_text(bytes(wire.UPROBE_MAX_BUFFER))
    assert len(text) < wire.UPROBE_TEXT_LEN  # its NUL fits too
    assert len(wire.buffer_to_text(bytes(wire.UPROBE_MAX_BUFFER + 3))) >= wire.UPROBE_TEXT_LEN


@pytest.mark.parametrize("text", ["not base64!", "abc", "YWJj\n"])
def test_buffer_from_text_refuses_what_is_not_base64(text: str) -> None:
    with pytest.raises(ValueError, match="not base64"):
        wire.buffer_from_text(text)


def test_otlp_metrics_has_a_slot_no_catalog_event_takes() -> None:
    """Applications call ``event_slot``'s slot; the agent defines the event on the slot
    its publisher gives a name outside the catalog: the same one only while no catalog
    event hashes there (else give that event a free slot in SLOT_OVERRIDES)."""
    slots = publisher.catalog_slots()
    assert publisher.event_slot(wire.EVENT) not in slots.values()
    assert publisher.free_slot(wire.EVENT, slots.values()) == publisher.event_slot(wire.EVENT)


def test_a_foreign_name_needs_the_foreign_flag() -> None:
    fields = (Field("protocol", U32, "", ""),)
    with pytest.raises(ValueError, match="must match"):
        EventSchema("otlp_metrics", "", fields, sampler="")
    assert EventSchema("otlp_metrics", "", fields, sampler="", foreign=True).name_args == \
        "otlp_metrics u32 protocol"
    # Ours keep their separator and the 4 KiB bound.
    with pytest.raises(ValueError, match="exceeds"):
        EventSchema("rezolus_big", "", (Field("b", REL_BYTES, "", "", max_len=5000,
                                              to_text=bytes.hex, text_len=1),), sampler="")


def test_a_char_field_with_text_len_needs_room_for_the_nul() -> None:
    s = EventSchema("rezolus_x", "", (Field("v", char_array(8), "", "", text_len=8),),
                    sampler="")
    with pytest.raises(ValueError, match="room for a NUL"):
        _ = s.uprobe
