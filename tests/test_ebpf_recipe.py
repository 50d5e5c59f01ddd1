"""The bpftrace program `rezolus-ue events --bpftrace` prints, and the stub symbols it
probes: offsets, types and probe points derived from the schema and the stub's source."""

from __future__ import annotations

import ctypes
import platform
from pathlib import Path

import pytest

import tracefs_tools
from rezolus_ue import ebpf_recipe as r
from rezolus_ue.cli import main
from rezolus_ue.errors import RezolusError
from rezolus_ue.linux.uprobe_stub import build
from rezolus_ue.publisher import catalog_slots, event_slot
from rezolus_ue.schema import CPU_USAGE, EVENTS, by_name

STUB = Path("/usr/local/lib/rezolus-ue/librezolus_ue_stub.so")

#: rezolus_cpu_usage's slot: its name's, in every version (publisher.event_slot).
CPU_USAGE_SLOT = 15893
CPU_USAGE_PROBE = (
    f"// rezolus_ue:rezolus_cpu_usage: the record the agent hands to stub slot {CPU_USAGE_SLOT}"
    " (arg0)\n"
    f"uprobe:/usr/local/lib/rezolus-ue/librezolus_ue_stub.so:rezolus_ue_tap_{CPU_USAGE_SLOT}\n"
    "{\n"
    '    printf("rezolus_cpu_usage: cpu=%u user_ns=%lu nice_ns=%lu system_ns=%lu'
    " idle_ns=%lu iowait_ns=%lu irq_ns=%lu softirq_ns=%lu steal_ns=%lu busy_ppm=%lu\\n\",\n"
    "           *(uint32 *)(arg0 + 0),\n"
    "           *(uint64 *)(arg0 + 4),\n"
    "           *(uint64 *)(arg0 + 12),\n"
    "           *(uint64 *)(arg0 + 20),\n"
    "           *(uint64 *)(arg0 + 28),\n"
    "           *(uint64 *)(arg0 + 36),\n"
    "           *(uint64 *)(arg0 + 44),\n"
    "           *(uint64 *)(arg0 + 52),\n"
    "           *(uint64 *)(arg0 + 60),\n"
    "           *(uint64 *)(arg0 + 68));\n"
    "}\n")


def test_cpu_usage_program() -> None:
    text = r.bpftrace_program([CPU_USAGE], STUB)
    head, _, probe = text.partition("\n\n")
    assert probe == CPU_USAGE_PROBE
    assert "rezolus-ue events --bpftrace rezolus_cpu_usage" in head
    # No probe of its own enables the event: the header names a consumer to run beside it.
    assert "rezolus-ue tail rezolus_cpu_usage > /dev/null" in head
    assert "perf stat -e rezolus_ue:rezolus_cpu_usage -a" in head
    assert "BPFTRACE_STRLEN" not in head  # no text field


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.name)
def test_every_scalar_is_read_at_its_packed_offset_and_text_as_a_string(event) -> None:
    """Scalars sit in the record where the payload packs them (no padding); text fields
    are read as strings, where the uprobe layout puts them."""
    text = r.bpftrace_program([event], STUB)
    assert f":rezolus_ue_tap_{event_slot(event.name)}\n" in text
    reads = {name: (off, kind) for name, off, kind in r.record_fields(event)}
    assert list(reads) == list(event.field_names)
    pos = 0
    for f in event.fields:
        off, kind = reads[f.name]
        if f.type.text or f.type.dynamic:  # a histogram's buckets travel as text
            assert kind == "string" and f"str(arg0 + {off})" in text
            assert "BPFTRACE_STRLEN" in text
        else:
            assert off == pos
            width = 8 * f.type.size
            cast = f"int{width}" if f.type.signed else f"uint{width}"
            assert f"*({cast} *)(arg0 + {off})" in text
        pos += f.type.size
    fmt = text.split('printf("', 1)[1].split('\\n"', 1)[0]
    assert fmt.split()[0] == f"{event.name}:"
    assert [w.split("=")[0] for w in fmt.split()[1:]] == list(event.field_names)


def test_several_events_one_probe_each() -> None:
    names = ["rezolus_cpu_usage", "rezolus_memory", "rezolus_agent_sampler"]
    text = r.bpftrace_program([by_name()[n] for n in names], STUB)
    assert [ln.rsplit(":", 1)[1] for ln in text.splitlines() if ln.startswith("uprobe:")] == [
        f"rezolus_ue_tap_{r.slot(by_name()[n])}" for n in names]
    assert f"perf stat -e {','.join('rezolus_ue:' + n for n in names)} -a" in text


#: The stub's `nop`, by machine.
NOP = {"x86_64": b"\x90", "aarch64": bytes.fromhex("1f2003d5")}


def test_the_stub_names_each_slots_second_nop(tmp_path: Path) -> None:
    """rezolus_ue_tap_<i> is the instruction after slot i's first, and the same `nop`:
    the kernel emulates it, where it would single-step a probed `ret`."""
    lib = ctypes.CDLL(str(build(tmp_path / "stub.so")))
    emit = ctypes.cast(lib.rezolus_ue_emit, ctypes.c_void_p).value or 0
    size = ctypes.c_uint.in_dll(lib, "rezolus_ue_slot_size").value
    slots = ctypes.c_uint.in_dll(lib, "rezolus_ue_slots").value
    nop = NOP.get(platform.machine())
    for i in range(slots):
        fn = emit + i * size
        tap = ctypes.cast(lib[r.TAP_SYMBOL.format(slot=i)], ctypes.c_void_p).value or 0
        width = tap - fn
        assert 0 < width < size, (i, width)
        assert ctypes.string_at(tap, width) == ctypes.string_at(fn, width), i
        if nop is not None:
            assert ctypes.string_at(fn, width) == nop, i


def test_slots_are_the_publishers() -> None:
    assert {e.name: r.slot(e) for e in EVENTS} == catalog_slots()


def test_refused_where_the_agent_publishes_through_user_events(monkeypatch) -> None:
    monkeypatch.setattr(tracefs_tools, "find_tracefs", lambda mount: Path("/sys/kernel/tracing"))
    monkeypatch.setattr(r, "_transport", lambda root: "user_events")
    with pytest.raises(RezolusError, match=r'transport = "uprobe".*#ebpf-consumers'):
        r.print_bpftrace(["rezolus_cpu_usage"])


def test_an_unknown_event_is_named(capsys) -> None:
    assert main(["events", "--bpftrace", "rezolus_cpu_usage", "rezolus_nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rezolus-ue: error: no such event: rezolus_nope ("), err
