"""The uprobe transport's record layout, derived from each event's schema, and the stub
slot each event takes (pure logic; tests/uprobe/ runs both against the kernel)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rezolus_ue import publisher
from rezolus_ue.errors import RezolusError
from rezolus_ue.linux.uprobe_stub import SLOTS, hashed_slot
from rezolus_ue.metrics import h2
from rezolus_ue.metrics.family import Family, counter, histogram_records
from rezolus_ue.schema import EVENTS, by_name

ARG = re.compile(r"(\w+)=\+(\d+)\(%di\):(\w+)")
#: What the kernel puts before the fields (common header, __probe_ip), and a margin for the
#: ring buffer's own headers: a record must fit one 4 KiB page.
KERNEL_ROOM = 4096 - 8 - 8 - 64


@pytest.mark.parametrize("schema", EVENTS, ids=lambda s: s.name)
def test_fetch_args_name_every_field_in_order_at_its_offset(schema) -> None:
    args = ARG.findall(schema.uprobe.fetch_args("%di"))
    assert [a[0] for a in args] == [f.name for f in schema.fields]
    pos = 0
    for (name, off, typ), f in zip(args, schema.fields, strict=True):
        if f.type.dynamic:
            assert typ == "string" and int(off) >= schema.fixed_size, name
        else:
            assert int(off) == pos, name
            assert typ == ("string" if f.type.text else f.type.decl), name
        pos += f.type.size
    # The kernel's record: scalars, a 4-byte data_loc per string, then the strings.
    strings = sum(f.max_len if f.type.dynamic and f.type.text else
                  f.text_len if f.type.dynamic else f.type.size
                  for f in schema.fields if f.type.text or f.type.dynamic)
    scalars = sum(f.type.size for f in schema.fields if not (f.type.text or f.type.dynamic))
    n_strings = sum(1 for f in schema.fields if f.type.text or f.type.dynamic)
    assert scalars + 4 * n_strings + strings <= KERNEL_ROOM, schema.name


def test_a_scalar_event_is_handed_over_as_packed() -> None:
    s = by_name()["rezolus_cpu_usage"]
    payload = s.pack(1, *range(len(s.fields) - 1))
    assert s.uprobe.record(payload) is payload


def test_a_full_label_keeps_a_nul_for_the_string_fetch() -> None:
    s = by_name()["rezolus_network_interface_dist"]
    payload = s.pack("x" * 16, "m" * 24, 1, 2, 3, 4, 5)
    rec = s.uprobe.record(payload)
    assert len(rec) == len(payload) and rec[15] == 0 and rec[16 + 23] == 0
    assert rec[:15] == b"x" * 15


def test_histogram_buckets_become_text_at_their_region() -> None:
    s = by_name()["rezolus_scheduler_runqueue_latency"]
    counts = h2.new_counts()
    counts[[3, 70, 495]] = [5, 7, 2**62]
    (rec,) = histogram_records(s, (), (123,), counts)
    out = s.uprobe.record(s.pack(*rec))
    at = int(ARG.findall(s.uprobe.fetch_args("%di"))[-1][1])
    text = out[at:].split(b"\0", 1)[0]
    assert text == b"3:5 70:7 495:4611686018427387904"
    assert out[:s.fixed_size - 4] == s.pack(*rec)[:s.fixed_size - 4]


def test_status_text_is_copied_to_its_region() -> None:
    s = by_name()["rezolus_agent_status"]
    vals = ["tcp", "failed", "because", "x" * 600, 3]
    out = s.uprobe.record(s.pack(*vals))
    args = {a[0]: int(a[1]) for a in ARG.findall(s.uprobe.fetch_args("%di"))}
    assert out[args["reason"]:].split(b"\0", 1)[0] == b"because"
    last = out[args["last_error"]:].split(b"\0", 1)[0]
    assert last == b"x" * (s.fields[3].max_len - 1)  # cut to its region, NUL kept


@pytest.mark.parametrize("n", [0, 1, 20, h2.MAX_ENTRIES])
def test_sparse_text_round_trip(n: int) -> None:
    rng = np.random.default_rng(n)
    counts = h2.new_counts()
    idx = rng.choice(h2.BUCKETS, size=n, replace=False)
    counts[idx] = rng.integers(1, 2**63, size=n, dtype=np.uint64)
    data = h2.encode_sparse(counts)
    text = h2.sparse_to_text(data)
    assert len(text) < h2.MAX_TEXT
    assert h2.sparse_from_text(text.decode()) == data


@pytest.mark.parametrize("bad", ["1", "1:x", "a:1", "1:2:3 4"])
def test_malformed_bucket_text_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="malformed"):
        h2.sparse_from_text(bad)


# --- stub slots -------------------------------------------------------------------------


def test_no_two_catalog_events_share_a_slot() -> None:
    slots = publisher.catalog_slots()  # raises naming the pair if two share one
    assert len(set(slots.values())) == len(EVENTS) == len(slots)
    assert all(0 <= s < SLOTS for s in slots.values())


def test_an_override_is_a_slot_no_name_hashes_to() -> None:
    hashed = {hashed_slot(e.name): e.name for e in EVENTS}
    for name, slot in publisher.SLOT_OVERRIDES.items():
        assert name in by_name(), f"SLOT_OVERRIDES names {name}, no catalog event"
        assert slot not in hashed, f"{name}'s override {slot} is {hashed[slot]}'s slot"


def test_a_slot_is_the_names_alone() -> None:
    # What the stub's users may rely on across versions: these never move.
    assert hashed_slot("rezolus_cpu_usage") == 15893 == publisher.event_slot("rezolus_cpu_usage")
    assert hashed_slot("rezolus_agent") == hashed_slot("rezolus_agent")
    assert len({hashed_slot(f"rezolus_{i}") for i in range(1000)}) > 950  # spread


#: A sampler's family added to the catalog: its events and a _dist one.
ADDED = Family("rezolus_test_added", __name__, "A family a new sampler brings.", (),
               (counter("things", "things", "things counted"),))


@pytest.mark.parametrize("change", ["add", "remove"])
def test_adding_or_removing_a_sampler_moves_no_other_event(
        monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    before = publisher.catalog_slots()
    gone = {e.name for e in EVENTS if e.name.startswith("rezolus_cpu_")}
    after_events = ((*ADDED.schemas, *EVENTS) if change == "add" else
                    tuple(e for e in EVENTS if e.name not in gone))
    monkeypatch.setattr(publisher, "EVENTS", after_events)
    after = publisher.catalog_slots()
    kept = {n: s for n, s in before.items() if n in after}
    assert kept and {n: after[n] for n in kept} == kept
    if change == "add":
        assert {e.name for e in ADDED.schemas} <= after.keys()
        assert len(set(after.values())) == len(after)


def test_two_catalog_events_on_one_slot_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = EVENTS[0].name, EVENTS[1].name
    monkeypatch.setitem(publisher.SLOT_OVERRIDES, second, publisher.event_slot(first))
    with pytest.raises(RezolusError, match=f"events {first} and {second} share stub slot"):
        publisher.catalog_slots()


def test_a_name_outside_the_catalog_takes_a_slot_none_uses() -> None:
    taken = set(publisher.catalog_slots().values())
    slot = publisher.free_slot("rezolus_a_tests_own", taken)
    assert slot not in taken and slot == hashed_slot("rezolus_a_tests_own")
    # Its hashed slot in use: the next free one, round the end of the stub.
    assert publisher.free_slot("x", {hashed_slot("x")}) == (hashed_slot("x") + 1) % SLOTS
    last = set(range(hashed_slot("x"), SLOTS))
    assert publisher.free_slot("x", last) == 0
