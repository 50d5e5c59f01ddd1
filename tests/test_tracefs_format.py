"""Pure tests of tracefs_tools.parse_format and EventFormat.decode, on captured formats."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tracefs_tools import EventFormat, FormatField, parse_format

FIXTURES = Path(__file__).parent / "fixtures" / "tracefs"


def load(name: str) -> EventFormat:
    return parse_format((FIXTURES / name).read_text())


def record(size: int, *items: tuple[int, str, object]) -> bytes:
    """Return `size` zero bytes with each (offset, struct code, value) packed natively."""
    buf = bytearray(size)
    for offset, code, value in items:
        struct.pack_into("=" + code, buf, offset, value)
    return bytes(buf)


COMMON = ("common_type", "common_flags", "common_preempt_count", "common_pid")


@pytest.mark.parametrize(
    ("fixture", "name", "event_id", "payload"),
    [
        (
            "sched_switch.format",
            "sched_switch",
            372,
            ("prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid",
             "next_prio"),
        ),
        ("sched_process_exec.format", "sched_process_exec", 365, ("filename", "pid", "old_pid")),
        ("ftrace_print.format", "print", 5, ("ip", "buf")),
        ("user_events_tt_probe.format", "tt_probe", 2340, ("cpu", "msg", "blob", "name", "delta")),
    ],
)  # fmt: skip
def test_parse_header_and_field_split(fixture, name, event_id, payload):
    fmt = load(fixture)
    assert (fmt.name, fmt.id) == (name, event_id)
    assert tuple(f.name for f in fmt.common_fields) == COMMON
    assert tuple(f.name for f in fmt.payload_fields) == payload
    assert fmt.fields == fmt.common_fields + fmt.payload_fields
    assert fmt.print_fmt.startswith('"')


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("sched_switch.format",
         FormatField("common_type", "unsigned short", 0, 2, False, is_common=True)),
        ("sched_switch.format", FormatField("common_pid", "int", 4, 4, True, is_common=True)),
        ("sched_switch.format", FormatField("prev_comm", "char[16]", 8, 16, False, array_len=16)),
        ("sched_switch.format", FormatField("prev_pid", "pid_t", 24, 4, True)),
        ("sched_switch.format", FormatField("prev_state", "long", 32, 8, True)),
        ("sched_process_exec.format",
         FormatField("filename", "__data_loc char[]", 8, 4, False, loc="data_loc")),
        ("ftrace_print.format", FormatField("buf", "char[]", 16, 0, False)),
        ("user_events_tt_probe.format", FormatField("cpu", "u32", 8, 4, False)),
        # The kernel prints `__rel_loc char msg[]`; the brackets go back on the type.
        ("user_events_tt_probe.format",
         FormatField("msg", "__rel_loc char[]", 12, 4, True, loc="rel_loc")),
        ("user_events_tt_probe.format",
         FormatField("blob", "__rel_loc u8[]", 16, 4, True, loc="rel_loc")),
        # user_events print `char name[]` with size:16: the length comes from the size.
        ("user_events_tt_probe.format",
         FormatField("name", "char[]", 20, 16, True, array_len=16)),
        ("user_events_tt_probe.format", FormatField("delta", "s64", 36, 8, True)),
    ],
)  # fmt: skip
def test_parse_fields(fixture, expected):
    assert load(fixture).field(expected.name) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # Before 2.6.33 there was no signed: column.
        ("\tfield:int foo;\toffset:8;\tsize:4;",
         FormatField("foo", "int", 8, 4, False)),
        ("\tfield special:const char * name;\toffset:8;\tsize:8;\tsigned:0;",
         FormatField("name", "const char *", 8, 8, False)),
        # A kernel without a length macro expanded (`char comm[TASK_COMM_LEN]`).
        ("\tfield:char comm[TASK_COMM_LEN];\toffset:8;\tsize:16;\tsigned:0;",
         FormatField("comm", "char[TASK_COMM_LEN]", 8, 16, False, array_len=16)),
        ("\tfield:struct foo bar[];\toffset:8;\tsize:24;\tsigned:0;",
         FormatField("bar", "struct foo[]", 8, 24, False)),
        ("\tfield:__data_loc u8[] raw;\toffset:8;\tsize:4;\tsigned:0;",
         FormatField("raw", "__data_loc u8[]", 8, 4, False, loc="data_loc")),
        ("\tfield:unsigned char common_preempt_lazy_count;\toffset:8;\tsize:1;\tsigned:0;",
         FormatField("common_preempt_lazy_count", "unsigned char", 8, 1, False,
                     is_common=True)),
    ],
)  # fmt: skip
def test_parse_field_variants(line, expected):
    fmt = parse_format(f'name: x\nID: 1\nformat:\n{line}\n\nprint fmt: ""\n')
    assert fmt.fields == (expected,)


@pytest.mark.parametrize("text", ["", "hello\n", "name: x\nformat:\n", "ID: 3\n"])
def test_parse_rejects_non_format(text):
    with pytest.raises(ValueError, match="not a tracefs event format"):
        parse_format(text)


def test_decode_sched_switch():
    raw = record(
        64,
        (0, "H", 372), (2, "B", 1), (3, "B", 2), (4, "i", 4242),
        (8, "16s", b"python3\0garbage!"), (24, "i", 4242), (28, "i", 120), (32, "q", -1),
        (40, "16s", b"swapper/0"), (56, "i", 0), (60, "i", -5),
    )  # fmt: skip
    assert load("sched_switch.format").decode(raw) == {
        "prev_comm": "python3",
        "prev_pid": 4242,
        "prev_prio": 120,
        "prev_state": -1,
        "next_comm": "swapper/0",
        "next_pid": 0,
        "next_prio": -5,
    }


def test_decode_keeps_format_order_and_ignores_perf_padding():
    raw = record(72, (8, "16s", b"a"), (40, "16s", b"b")) + b"\xff" * 4
    assert list(load("sched_switch.format").decode(raw)) == [
        f.name for f in load("sched_switch.format").payload_fields
    ]


def test_decode_data_loc_string():
    # __data_loc: offset from the start of the record.
    name = b"/usr/bin/true\0"
    raw = record(20, (8, "I", (len(name) << 16) | 20), (12, "i", 7), (16, "i", 6)) + name
    assert load("sched_process_exec.format").decode(raw) == {
        "filename": "/usr/bin/true",
        "pid": 7,
        "old_pid": 6,
    }


def test_decode_user_event_rel_loc():
    msg, blob = b"hello\0", b"\x01\x00\xfe"
    fixed_end = 44
    msg_at, blob_at = fixed_end, fixed_end + len(msg)
    raw = (
        record(
            fixed_end,
            (8, "I", 3),
            # __rel_loc: offset from the end of the 4-byte loc field itself.
            (12, "I", (len(msg) << 16) | (msg_at - (12 + 4))),
            (16, "I", (len(blob) << 16) | (blob_at - (16 + 4))),
            (20, "16s", "héllo".encode()),
            (36, "q", -(2**40)),
        )
        + msg
        + blob
    )
    assert load("user_events_tt_probe.format").decode(raw) == {
        "cpu": 3,
        "msg": "hello",
        "blob": blob,
        "name": "héllo",
        "delta": -(2**40),
    }


def test_decode_flexible_array_runs_to_end():
    raw = record(16, (8, "Q", 0xFFFF_FFFF_8100_0000)) + b"hi there\n\0\0\0"
    assert load("ftrace_print.format").decode(raw) == {
        "ip": 0xFFFF_FFFF_8100_0000,
        "buf": "hi there\n",
    }


def test_decode_invalid_utf8_is_replaced():
    raw = record(64, (8, "16s", b"\xffab"))
    assert load("sched_switch.format").decode(raw)["prev_comm"] == "\ufffdab"


def test_decode_overlapping_fields():
    text = (
        "name: u\nID: 9\nformat:\n"
        "\tfield:u32 whole;\toffset:8;\tsize:4;\tsigned:0;\n"
        "\tfield:u16 low;\toffset:8;\tsize:2;\tsigned:0;\n"
        "\tfield:s8 top;\toffset:11;\tsize:1;\tsigned:1;\n"
    )
    raw = record(12, (8, "I", 0xFF00_1234))
    assert parse_format(text).decode(raw) == {"whole": 0xFF00_1234, "low": 0x1234, "top": -1}


@pytest.mark.parametrize(
    ("fixture", "raw", "match"),
    [
        ("sched_switch.format", bytes(63), "truncated sched_switch record: 63 bytes"),
        ("user_events_tt_probe.format", b"", "truncated tt_probe record: 0 bytes"),
        # The fixed part is whole but msg points past the end.
        ("user_events_tt_probe.format", record(44, (12, "I", (8 << 16) | 28)),
         "truncated tt_probe record: msg"),
        ("sched_process_exec.format", record(20, (8, "I", (1 << 16) | 20)),
         "truncated sched_process_exec record: filename"),
    ],
)  # fmt: skip
def test_decode_truncated(fixture, raw, match):
    with pytest.raises(ValueError, match=match):
        load(fixture).decode(raw)


def test_field_lookup_missing():
    with pytest.raises(KeyError, match="no field 'nope'"):
        load("sched_switch.format").field("nope")
