"""Pure tests of the event schemas: name_args, packing, rel_loc layout and validation.

Expected bytes are built by hand from the wire rules in the ``rezolus_ue.encoding``
docstring (and the kernel's ``include/linux/trace_events.h`` ``__rel_loc`` convention), not
with the packer. ``rezolus_ue.schema`` re-exports the encoding vocabulary and derives the
declared events from the metric catalog.
"""

from __future__ import annotations

import struct
import sys

import pytest

from rezolus_ue import encoding
from rezolus_ue import schema as S
from rezolus_ue.metrics import catalog
from rezolus_ue.samplers import REGISTRY


def event(*fields: S.Field, name: str = "rezolus_test") -> S.EventSchema:
    return S.EventSchema(name, "test", tuple(fields), sampler="test")


def f(name: str, ftype: S.FieldType, max_len: int = 0) -> S.Field:
    return S.Field(name, ftype, "", "", max_len=max_len)


def ne(value: int, size: int, signed: bool = False) -> bytes:
    """Return ``value`` in native byte order (what the kernel expects from a writer)."""
    return value.to_bytes(size, sys.byteorder, signed=signed)


# --- name_args -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ((), "rezolus_test"),
        ((f("cpu", S.U32),), "rezolus_test u32 cpu"),
        ((f("a", S.U8), f("b", S.S16), f("c", S.U64)), "rezolus_test u8 a; s16 b; u64 c"),
        ((f("msg", S.REL_STR, 64),), "rezolus_test __rel_loc char[] msg"),
        ((f("blob", S.REL_BYTES, 64),), "rezolus_test __rel_loc u8[] blob"),
        ((f("comm", S.char_array(16)),), "rezolus_test char[16] comm"),
        # The definition the tracefs fixture user_events_tt_probe.format was captured from.
        ((f("cpu", S.U32), f("msg", S.REL_STR, 8), f("blob", S.REL_BYTES, 8),
          f("name", S.char_array(16)), f("delta", S.S64)),
         "rezolus_test u32 cpu; __rel_loc char[] msg; __rel_loc u8[] blob; char[16] name;"
         " s64 delta"),
    ],
)  # fmt: skip
def test_name_args(fields: tuple[S.Field, ...], expected: str) -> None:
    assert event(*fields).name_args == expected


def test_cpu_usage_name_args() -> None:
    assert S.CPU_USAGE.name_args == (
        "rezolus_cpu_usage u32 cpu; u64 user_ns; u64 nice_ns; u64 system_ns; u64 idle_ns;"
        " u64 iowait_ns; u64 irq_ns; u64 softirq_ns; u64 steal_ns; u64 busy_ppm"
    )


def test_cpu_usage_dist_name_args() -> None:
    assert S.by_name()["rezolus_cpu_usage_dist"].name_args == (
        "rezolus_cpu_usage_dist u32 cpu; char[24] metric; u64 value; u64 p50; u64 p90;"
        " u64 p99; u64 max"
    )


def test_agent_fields_are_u64() -> None:
    assert S.AGENT.field_names == (
        "pid", "uptime_ns", "cpu_user_ns", "cpu_system_ns", "rss_bytes", "fds", "threads",
        "events_written", "ebadf_races", "write_errors", "sampler_errors", "samplers_active",
        "samplers_unavailable")
    assert all(fd.type == S.U64 for fd in S.AGENT.fields)


def test_schema_reexports_the_encoding_and_derives_from_the_catalog() -> None:
    for name in ("EventSchema", "Field", "FieldType", "MAX_PAYLOAD", "NAME_RE", "U32", "U64",
                 "REL_STR", "REL_BYTES", "char_array"):
        assert getattr(S, name) is getattr(encoding, name), name
    assert tuple(s for f in catalog.FAMILIES for s in f.schemas) == S.EVENTS
    assert S.CPU_USAGE is catalog.CPU_USAGE.schema
    assert S.AGENT is catalog.AGENT.schema


# --- fixed-size fields -----------------------------------------------------------------

INT_CASES = [
    (S.U8, 0), (S.U8, 0xFF),
    (S.U16, 0), (S.U16, 0xFFFF),
    (S.U32, 0), (S.U32, 0xFFFF_FFFF),
    (S.U64, 0), (S.U64, 2**64 - 1),
    (S.S8, -(2**7)), (S.S8, 2**7 - 1), (S.S8, -1),
    (S.S16, -(2**15)), (S.S16, 2**15 - 1),
    (S.S32, -(2**31)), (S.S32, 2**31 - 1),
    (S.S64, -(2**63)), (S.S64, 2**63 - 1), (S.S64, -1),
]  # fmt: skip


@pytest.mark.parametrize(("ftype", "value"), INT_CASES, ids=lambda v: str(v))
def test_int_round_trip(ftype: S.FieldType, value: int) -> None:
    ev = event(f("v", ftype))
    payload = ev.pack(value)
    assert payload == ne(value, ftype.size, ftype.signed)
    assert len(payload) == ev.fixed_size == ev.max_payload == ftype.size
    assert ev.unpack(payload) == {"v": value}


@pytest.mark.parametrize(
    ("ftype", "value"),
    [(S.U8, 256), (S.U8, -1), (S.U32, 2**32), (S.S8, 128), (S.S64, 2**63), (S.U64, -1)],
)
def test_int_out_of_range_is_rejected_not_wrapped(ftype: S.FieldType, value: int) -> None:
    with pytest.raises(struct.error):
        event(f("v", ftype)).pack(value)


def test_fixed_fields_are_packed_without_padding() -> None:
    ev = event(f("a", S.U8), f("b", S.U64), f("c", S.S16), f("d", S.U32))
    payload = ev.pack(1, 2, -3, 4)
    assert payload == ne(1, 1) + ne(2, 8) + ne(-3, 2, True) + ne(4, 4)
    assert ev.fixed_size == 15
    assert ev.unpack(payload) == {"a": 1, "b": 2, "c": -3, "d": 4}


@pytest.mark.parametrize(
    ("value", "wire", "decoded"),
    [
        ("abc", b"abc" + b"\0" * 13, "abc"),
        (b"abc", b"abc" + b"\0" * 13, "abc"),
        ("", b"\0" * 16, ""),
        ("a" * 16, b"a" * 16, "a" * 16),
        ("kworker/0:1", b"kworker/0:1\0\0\0\0\0", "kworker/0:1"),
    ],
)
def test_char_array_packs_str_and_bytes(value: str | bytes, wire: bytes, decoded: str) -> None:
    ev = event(f("cpu", S.U32), f("comm", S.char_array(16)))
    payload = ev.pack(7, value)
    assert payload == ne(7, 4) + wire
    assert ev.unpack(payload) == {"cpu": 7, "comm": decoded}


@pytest.mark.parametrize("n", [0, -1, 257])
def test_char_array_size_bounds(n: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.256"):
        S.char_array(n)


@pytest.mark.parametrize("n", [1, 256])
def test_char_array_size_limits_accepted(n: int) -> None:
    t = S.char_array(n)
    assert (t.decl, t.size, t.text, t.dynamic) == (f"char[{n}]", n, True, False)


# --- __rel_loc fields ------------------------------------------------------------------


def rel_loc(length: int, offset: int) -> bytes:
    return ne(length << 16 | offset, 4)


def test_rel_loc_offset_counts_from_end_of_loc_field() -> None:
    # u32 a @0, loc s @4, loc b @8, u64 c @12: fixed part 20 bytes, then s data, b data.
    ev = event(f("a", S.U32), f("s", S.REL_STR, 16), f("b", S.REL_BYTES, 16), f("c", S.U64))
    payload = ev.pack(1, "hello", b"\x01\x02\x03", 9)
    # s: loc ends at 8, data at 20 -> offset 12, len 6 ("hello\0")
    # b: loc ends at 12, data at 26 -> offset 14, len 3
    expected = (ne(1, 4) + rel_loc(6, 12) + rel_loc(3, 14) + ne(9, 8)
                + b"hello\0" + b"\x01\x02\x03")
    assert payload == expected
    assert ev.unpack(payload) == {"a": 1, "s": "hello", "b": b"\x01\x02\x03", "c": 9}


def test_rel_loc_first_field() -> None:
    ev = event(f("s", S.REL_STR, 16))
    assert ev.pack("x") == rel_loc(2, 0) + b"x\0"


@pytest.mark.parametrize(
    ("ftype", "value", "data"),
    [
        (S.REL_STR, "hi", b"hi\0"),  # str: NUL appended
        (S.REL_STR, "", b"\0"),
        (S.REL_STR, b"hi", b"hi\0"),  # char[] data always ends with NUL
        (S.REL_STR, b"hi\0", b"hi\0"),  # ... but never gets a second one
        (S.REL_BYTES, b"hi", b"hi"),  # u8[]: bytes as given
        (S.REL_BYTES, b"", b""),
        (S.REL_BYTES, bytearray(b"\0\xff"), b"\0\xff"),
        (S.REL_BYTES, "hi", b"hi\0"),  # a str is written as a C string
    ],
)
def test_rel_loc_data_and_nul(ftype: S.FieldType, value: str | bytes, data: bytes) -> None:
    ev = event(f("cpu", S.U32), f("d", ftype, 64))
    payload = ev.pack(3, value)
    assert payload == ne(3, 4) + rel_loc(len(data), 0) + data
    decoded = ev.unpack(payload)["d"]
    if ftype.text:
        assert decoded == data.rstrip(b"\0").decode()
    else:
        assert decoded == data


def test_rel_str_utf8() -> None:
    ev = event(f("s", S.REL_STR, 64))
    payload = ev.pack("héllo")
    assert payload[4:] == "héllo".encode() + b"\0"
    assert ev.unpack(payload) == {"s": "héllo"}


# --- payload limits --------------------------------------------------------------------


def big_event() -> S.EventSchema:
    return event(f("cpu", S.U32), f("blob", S.REL_BYTES, S.MAX_PAYLOAD - 8))


def test_payload_exactly_max_is_accepted() -> None:
    payload = big_event().pack(1, bytes(S.MAX_PAYLOAD - 8))
    assert len(payload) == S.MAX_PAYLOAD


def test_payload_over_max_raises() -> None:
    with pytest.raises(ValueError, match=rf"{S.MAX_PAYLOAD}"):
        big_event().pack(1, bytes(S.MAX_PAYLOAD - 7))


def test_payload_over_max_raises_even_within_65535() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        big_event().pack(1, bytes(5000))


def test_dynamic_data_over_65535_raises() -> None:
    with pytest.raises(ValueError, match="65535"):
        big_event().pack(1, bytes(0x10000))


def test_unpack_short_payload() -> None:
    with pytest.raises(ValueError, match="payload of 3 bytes"):
        S.CPU_USAGE.unpack(b"abc")


def test_unpack_rel_loc_past_end() -> None:
    ev = event(f("s", S.REL_STR, 64))
    with pytest.raises(ValueError, match="runs past"):
        ev.unpack(rel_loc(10, 0) + b"abc")


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["rezolus-x", "foo", "rezolus_a.b", "rezolus_a:b", "rezolus_", "rezolus_A", "Rezolus_x",
     "rezolus_a b", "", "user_events:rezolus_x"],
)
def test_bad_event_names(name: str) -> None:
    with pytest.raises(ValueError, match="event name"):
        event(f("a", S.U32), name=name)


@pytest.mark.parametrize("name", ["rezolus_x\n"])
def test_event_name_with_trailing_newline_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="event name"):
        event(f("a", S.U32), name=name)


@pytest.mark.parametrize("field", ["common_pid", "Cpu", "1a", "a-b", "a.b", "", "_a"])
def test_bad_field_names(field: str) -> None:
    with pytest.raises(ValueError, match="bad field name"):
        event(f(field, S.U32))


def test_duplicate_field() -> None:
    with pytest.raises(ValueError, match="duplicate field 'a'"):
        event(f("a", S.U32), f("b", S.U32), f("a", S.U64))


@pytest.mark.parametrize("ftype", [S.REL_STR, S.REL_BYTES])
def test_dynamic_field_needs_max_len(ftype: S.FieldType) -> None:
    with pytest.raises(ValueError, match="max_len"):
        event(f("d", ftype))


def wide_fields(extra: int) -> list[S.Field]:
    """Return few fields (a short registration string) of MAX_PAYLOAD + extra bytes."""
    n, rest = divmod(S.MAX_PAYLOAD, 256)  # 15 x char[256] + char[192]
    return [*(f(f"c{i}", S.char_array(256)) for i in range(n)),
            f("rest", S.char_array(rest)), *(f(f"x{i}", S.U8) for i in range(extra))]


def test_fixed_fields_over_max_payload() -> None:
    with pytest.raises(ValueError, match="split it"):
        event(*wide_fields(1))


def test_fixed_fields_at_max_payload_accepted() -> None:
    ev = event(*wide_fields(0))
    assert ev.max_payload == ev.fixed_size == S.MAX_PAYLOAD


# --- registration string limit ---------------------------------------------------------


def test_max_name_args_is_the_kernels() -> None:
    # MAX_EVENT_DESC in kernel/trace/trace_events_user.c is 512, NUL included.
    assert encoding.MAX_NAME_ARGS == 511


def test_name_args_at_the_limit_accepted() -> None:
    ev = event(f("a" * (511 - len("rezolus_test u8 ")), S.U8))
    assert len(ev.name_args.encode()) == encoding.MAX_NAME_ARGS


def test_name_args_over_the_limit_rejected() -> None:
    with pytest.raises(ValueError, match="registration string of 512 bytes exceeds the"
                       " kernel's 511"):
        event(f("a" * (512 - len("rezolus_test u8 ")), S.U8))


def test_many_small_fields_hit_the_name_limit_before_the_payload_limit() -> None:
    # 60 u64 fields are only 480 bytes of payload, but their declarations are too long.
    with pytest.raises(ValueError, match="registration string"):
        event(*(f(f"value_{i:02d}", S.U64) for i in range(60)))


def test_dynamic_max_len_over_max_payload() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        event(f("cpu", S.U32), f("blob", S.REL_BYTES, S.MAX_PAYLOAD - 7))


def test_max_payload_counts_dynamic_max_len() -> None:
    ev = event(f("cpu", S.U32), f("s", S.REL_STR, 100), f("b", S.REL_BYTES, 50))
    assert ev.fixed_size == 12
    assert ev.max_payload == 162


def test_max_payload_leaves_room_in_a_ring_buffer_page() -> None:
    # 4096-byte page minus the page header (16), event header (8) and common fields (8).
    assert S.MAX_PAYLOAD <= 4096 - 16 - 8 - 8


# --- the declared events ---------------------------------------------------------------


@pytest.mark.parametrize("ev", S.EVENTS, ids=lambda e: e.name)
def test_declared_event(ev: S.EventSchema) -> None:
    assert S.NAME_RE.fullmatch(ev.name)
    assert "\n" not in ev.name
    assert ev.max_payload <= S.MAX_PAYLOAD
    assert len(ev.name_args.encode()) <= encoding.MAX_NAME_ARGS
    assert ev.description and ev.cadence
    assert all(fd.description for fd in ev.fields)
    assert ev.field_names == tuple(fd.name for fd in ev.fields)
    assert ev.name_args.startswith(ev.name + " ")


@pytest.mark.parametrize("ev", S.EVENTS, ids=lambda e: e.name)
def test_declared_event_is_published_by_its_sampler(ev: S.EventSchema) -> None:
    assert ev.sampler in REGISTRY, f"{ev.name}: sampler {ev.sampler!r} is not registered"
    assert ev in REGISTRY[ev.sampler].events()


@pytest.mark.parametrize("family", catalog.FAMILIES, ids=lambda f: f.event)
def test_declared_family_belongs_to_its_sampler(family: catalog.Family) -> None:
    cls = REGISTRY.get(family.sampler)
    assert cls is not None, f"{family.event}: sampler {family.sampler!r} is not registered"
    assert family in cls.families


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_registered_sampler_publishes_only_declared_events(name: str) -> None:
    cls = REGISTRY[name]
    assert cls.name == name
    assert cls.families, f"{name} declares no families"
    for family in cls.families:
        assert family in catalog.FAMILIES, f"{name}: {family.event} is not in the catalog"
        assert family.sampler == name
    assert set(cls.events()) <= set(S.EVENTS)


def test_declared_event_names_unique() -> None:
    names = [e.name for e in S.EVENTS]
    assert len(names) == len(set(names))
    assert list(S.by_name()) == names


@pytest.mark.parametrize("ev", S.EVENTS, ids=lambda e: e.name)
def test_declared_event_round_trip(ev: S.EventSchema) -> None:
    values = {}
    for i, fd in enumerate(ev.fields):
        if fd.type.dynamic:
            values[fd.name] = "x" * (fd.max_len - 1) if fd.type.text else bytes(fd.max_len)
        elif fd.type.text:
            values[fd.name] = "t" * fd.type.size
        else:
            values[fd.name] = -(2 ** (8 * fd.type.size - 1)) if fd.type.signed else (
                2 ** (8 * fd.type.size) - 1 - i)
    payload = ev.pack(*values.values())
    assert len(payload) == ev.max_payload
    assert ev.unpack(payload) == values


# --- cost classes ----------------------------------------------------------------------


def test_cost_class_is_costly_exactly_for_the_bpf_samplers_events() -> None:
    """Each family declares its cost once; a BPF sampler's events are the costly ones
    (a new BPF sampler that forgets the declaration fails here), its _dist too."""
    from rezolus_ue.metrics.family import Cost
    from rezolus_ue.samplers.bpf_sampler import BpfSampler

    assert set(S.COST) == {e.name for e in S.EVENTS}
    for f in catalog.FAMILIES:
        bpf = issubclass(REGISTRY[f.sampler], BpfSampler)
        assert f.cost is (Cost.COSTLY if bpf else Cost.CHEAP), f.event
        assert {S.COST[s.name] for s in f.schemas} == {f.cost}
    costly = [e for e, c in S.COST.items() if c is Cost.COSTLY]
    assert "rezolus_syscall_latency" in costly and "rezolus_scheduler_runqueue_latency" in costly
    assert S.cheap(["rezolus_syscall", "rezolus_cpu_usage", "rezolus_cpu_usage_dist"]) == [
        "rezolus_cpu_usage", "rezolus_cpu_usage_dist"]


def test_consumers_resolve_to_cheap_events_unless_asked() -> None:
    from rezolus_ue.consume import otlp
    from rezolus_ue.consume.records import APP_EVENTS
    from rezolus_ue.consume.subscription import resolve_events

    every = [e.name for e in S.EVENTS]
    # Applications' events come after ours, when their decoder is installed.
    apps = list(APP_EVENTS) if otlp.available() else []
    assert resolve_events(None) == S.cheap(every) + apps and len(S.cheap(every)) < len(every)
    assert resolve_events(None, costly=True) == every + apps
    # A pattern is the user asking: what it names comes, costly or not.
    assert resolve_events(["rezolus_syscall*"]) == ["rezolus_syscall",
                                                   "rezolus_syscall_latency"]
