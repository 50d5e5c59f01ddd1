"""The cpu_interrupts sampler: /proc/interrupts parsing against fixtures, end to end, and
the host.

Golden files: ``tests/fixtures/procfs/<case>.expected.json`` hold the parsed rows of
``tests/fixtures/procfs/<case>/interrupts``; regenerate after a deliberate change with
``REZOLUS_UE_UPDATE_GOLDEN=1 pytest tests/test_sampler_cpu_interrupts.py`` and review the
diff.

Fixtures: ``interrupts_x86`` is this host's file (Linux 6.18, x86, 2 CPUs, a VM);
``interrupts_arm64`` is hand-written in the arm64 format (GICv3, ``IPIn:`` lines, ``Err:``;
4 CPUs); ``interrupts_offline`` is hand-written with CPU 1 offline (``CPU0 CPU2``) and a
short row.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import (
    FakeHandle,
    assert_silent_without_consumer,
    check_golden,
    decoded,
    new_sampler,
    replace_in_place,
    start_sampler,
)

from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.linux.procfs import parse_cpu_list
from rezolus_ue.samplers.cpu_interrupts import CPU_INTERRUPTS
from rezolus_ue.samplers.cpu_interrupts.sampler import (
    CpuInterrupts,
    InterruptsReader,
    parse_interrupts,
)

FIXTURES = Path(__file__).parent / "fixtures" / "procfs"
CASES = ["interrupts_x86", "interrupts_arm64", "interrupts_offline"]
FIELDS = ("cpu", *(m.name for m in CPU_INTERRUPTS.scalars))


def as_dicts(rows: dict[int, tuple[int, ...]]) -> list[dict[str, int]]:
    return [dict(zip(FIELDS, (cpu, *r), strict=True)) for cpu, r in rows.items()]


def parsed(case: str) -> list[dict[str, int]]:
    return as_dicts(parse_interrupts((FIXTURES / case / "interrupts").read_bytes()))


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    check_golden(FIXTURES / f"{case}.expected.json", parsed(case))


def test_x86_named_lines_by_description_and_numbered_lines_as_device() -> None:
    lines = (FIXTURES / "interrupts_x86" / "interrupts").read_text().splitlines()
    ncpu = len(lines[0].split())
    device = [0] * ncpu
    loc = None
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        values = rest.split()[:ncpu]
        if name.strip().isdigit():
            device = [d + int(v) for d, v in zip(device, values, strict=True)]
        elif name.strip() == "LOC":
            loc = [int(v) for v in values]
    rows = parsed("interrupts_x86")
    assert [r["device"] for r in rows] == device
    assert [r["local_timer"] for r in rows] == loc


@pytest.mark.parametrize("case", CASES)
def test_reader_gives_what_the_line_parse_gives(case: str) -> None:
    data = (FIXTURES / case / "interrupts").read_bytes()
    reader = InterruptsReader(min_counts=0)
    assert reader.read(data) == parse_interrupts(data)
    # Counts moved (same widths), then one grown past its field, then garbled: each read
    # is the line parse's, whichever path gives it.
    moved = data.replace(b"        ", b"       1", 3)
    wider = data.replace(b"         0", b"12345678901", 1)
    garbled = data.replace(b"         0", b"    1    0", 1)
    for text in (moved, data, wider, moved, garbled, data):
        assert reader.read(text) == parse_interrupts(text)


def test_reader_reads_the_fixed_width_layout_by_plan() -> None:
    data = (FIXTURES / "interrupts_x86" / "interrupts").read_bytes()
    reader = InterruptsReader(min_counts=0)
    reader.read(data)
    assert reader._plan is not None  # the kernel's " %10u" layout: the fast path is taken


def test_arm64_ipis_by_description() -> None:
    rows = parsed("interrupts_arm64")
    assert [r["cpu"] for r in rows] == [0, 1, 2, 3]
    assert [r["device"] for r in rows] == [412335 + 1021 + 31877, 398210 + 20015,
                                           402118, 395003]
    assert [r["rescheduling"] for r in rows] == [12045, 13310, 11802, 12996]
    assert [r["function_call"] for r in rows] == [503, 611, 598, 477]
    assert [r["other"] for r in rows] == [91, 104, 88, 97]  # IRQ work; Err is not per CPU
    assert [r["local_timer"] for r in rows] == [0] * 4  # arch_timer is a device line


def test_offline_cpu_columns_come_from_the_header_and_short_rows_read_zero() -> None:
    rows = parsed("interrupts_offline")
    assert [r["cpu"] for r in rows] == [0, 2]
    assert [r["device"] for r in rows] == [44 + 150, 7]
    assert [r["other"] for r in rows] == [3, 1]  # NMI; ERR and MIS left out
    assert [r["tlb_shootdowns"] for r in rows] == [10, 20]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", []),
        (b"   CPU0\n", [(0, 0, 0, 0, 0, 0, 0)]),
        (b"   CPU0   CPU1\n  5:  x  1  IO-APIC\n", [(0, *[0] * 6), (1, *[0] * 6)]),
        (b"   CPU0\nNEW:  9  A future kernel's interrupts\n", [(0, 0, 0, 0, 0, 0, 9)]),
    ],
)
def test_parse_edge_cases(text: bytes, expected: list[tuple[int, ...]]) -> None:
    assert [(cpu, *r) for cpu, r in parse_interrupts(text).items()] == expected


# --- the sampler against a fixture procfs root -----------------------------------------


def make_sampler(procfs: Path, enabled: bool = True
                 ) -> tuple[CpuInterrupts, dict[str, FakeHandle]]:
    return start_sampler(CpuInterrupts, procfs, procfs / "no-sysfs", enabled=enabled)


@pytest.mark.parametrize("case", CASES)
def test_sampler_publishes_one_record_per_cpu(case: str) -> None:
    s, h = make_sampler(FIXTURES / case)
    try:
        assert s.wanted and not s.dist_wanted  # read once per publish interval
        s.sample(1_000_000_000)
        s.publish()
    finally:
        s.close()
    assert decoded(CPU_INTERRUPTS.schema, h) == parsed(case)
    assert CPU_INTERRUPTS.dist_schema is None


def test_sampler_reads_nothing_without_consumer() -> None:
    s, h = make_sampler(FIXTURES / "interrupts_arm64", enabled=False)
    assert not s.wanted
    assert_silent_without_consumer(s, h)


def test_sampler_rereads_the_kept_open_file(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "interrupts_offline" / "interrupts", tmp_path / "interrupts")
    s, h = make_sampler(tmp_path)
    try:
        s.sample(1_000_000_000)
        s.publish()
        replace_in_place(tmp_path / "interrupts", b"90001", b"90101")  # cpu0 LOC +100
        s.sample(2_000_000_000)
        s.publish()
    finally:
        s.close()
    first, second = (r for r in decoded(CPU_INTERRUPTS.schema, h) if r["cpu"] == 0)
    assert second["local_timer"] - first["local_timer"] == 100


def test_sampler_without_proc_interrupts_is_unavailable(tmp_path: Path) -> None:
    s = new_sampler(CpuInterrupts, tmp_path, tmp_path)
    with pytest.raises(SamplerUnavailable, match="interrupts"):
        s.start()


# --- the host --------------------------------------------------------------------------


@pytest.mark.host
def test_host_has_a_row_per_online_cpu_and_counts_grow() -> None:
    online = parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text())
    before = parse_interrupts(Path("/proc/interrupts").read_bytes())
    assert sorted(before) == sorted(online)
    os.sched_yield()
    after = parse_interrupts(Path("/proc/interrupts").read_bytes())
    for cpu in before:
        assert all(a >= b for a, b in zip(after[cpu], before[cpu], strict=True)), cpu
    assert sum(sum(r) for r in after.values()) > 0


def test_reader_sums_many_lines_of_nines_exactly() -> None:
    # One CPU, 8,000 device lines of the largest count: more lines than one 16-bit sum of
    # digit columns can hold (the reader sums at most 7,281 at once).
    lines = ["           CPU0"]
    lines += [f"{i:5d}: {4294967295:10d}  IO-APIC   {i}-edge      dev{i}" for i in range(8000)]
    lines += [f"{'LOC':>5s}: {4294967295:10d}   Local timer interrupts"]
    data = ("\n".join(lines) + "\n").encode()
    reader = InterruptsReader(min_counts=0)
    for _ in range(2):
        assert reader.read(data) == parse_interrupts(data)
    assert reader._plan is not None


def test_captures_parsed_later_keep_their_own_bytes(tmp_path: Path) -> None:
    """A capture is a view of the file's kept buffer: one not yet parsed when the next
    read comes is copied first, so each capture parses to what was read then."""
    shutil.copy(FIXTURES / "interrupts_offline" / "interrupts", tmp_path / "interrupts")
    s, _h = make_sampler(tmp_path)
    try:
        first = s.capture()
        replace_in_place(tmp_path / "interrupts", b"90001", b"90101")  # cpu0 LOC +100
        second = s.capture()
        a, b = (s.parse(c)[CPU_INTERRUPTS][(0,)] for c in (first, second))
        third = s.capture()
        assert s.parse(third)[CPU_INTERRUPTS][(0,)] == b
    finally:
        s.close()
    slot = CPU_INTERRUPTS.slot("local_timer")
    assert b[slot] - a[slot] == 100 and isinstance(first.data, bytes)
