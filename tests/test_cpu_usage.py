"""The cpu_usage sampler: /proc/stat parsing against fixture trees, and the sampler end to end.

Golden files: ``tests/fixtures/procfs/<case>.expected.json`` hold the parsed rows of
``tests/fixtures/procfs/<case>/stat``. After a deliberate change, regenerate them with
``REZOLUS_UE_UPDATE_GOLDEN=1 pytest tests/test_cpu_usage.py`` and review the diff.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from rezolus_ue import config
from rezolus_ue.samplers import Roots, SamplerContext, options
from rezolus_ue.samplers.cpu.usage import CpuUsage, parse_proc_stat_cpus
from rezolus_ue.schema import CPU_USAGE

FIXTURES = Path(__file__).parent / "fixtures" / "procfs"
CASES = ["modern", "old", "offline"]
UPDATE = os.environ.get("REZOLUS_UE_UPDATE_GOLDEN") == "1"
#: USER_HZ=100: a fixed tick so the golden files do not depend on the host.
TICK_NS = 10_000_000
COLUMNS = CPU_USAGE.field_names[1:]


def rows_as_dicts(rows: list[tuple[int, ...]]) -> list[dict[str, int]]:
    return [dict(zip(CPU_USAGE.field_names, row, strict=True)) for row in rows]


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    text = (FIXTURES / case / "stat").read_text()
    got = {"tick_ns": TICK_NS, "rows": rows_as_dicts(parse_proc_stat_cpus(text, TICK_NS))}
    golden = FIXTURES / f"{case}.expected.json"
    if UPDATE:
        golden.write_text(json.dumps(got, indent=1) + "\n")
    assert golden.exists(), f"{golden} missing: run with REZOLUS_UE_UPDATE_GOLDEN=1"
    assert got == json.loads(golden.read_text()), (
        f"{golden.name} differs; if intended, regenerate with REZOLUS_UE_UPDATE_GOLDEN=1")


def parse_fixture(case: str) -> list[dict[str, int]]:
    return rows_as_dicts(parse_proc_stat_cpus((FIXTURES / case / "stat").read_text(), TICK_NS))


def test_modern_ignores_aggregate_and_guest_columns() -> None:
    rows = parse_fixture("modern")
    assert [r["cpu"] for r in rows] == [0, 1]
    # The fixture's cpuN lines have guest=1234 and guest_nice=56, already counted in user
    # and nice: they must not appear in any column.
    for line in (FIXTURES / "modern" / "stat").read_text().splitlines()[1:3]:
        name, *ticks = line.split()
        row = rows[int(name[3:])]
        assert [row[c] for c in COLUMNS] == [int(t) * TICK_NS for t in ticks[:8]]
        assert ticks[8:] == ["1234", "56"]


def test_old_kernel_missing_columns_read_zero() -> None:
    rows = parse_fixture("old")
    assert [r["cpu"] for r in rows] == [0, 1]
    assert rows[0]["user_ns"] == 521 * TICK_NS
    assert rows[1]["idle_ns"] == 49008 * TICK_NS
    for r in rows:
        assert (r["iowait_ns"], r["irq_ns"], r["softirq_ns"], r["steal_ns"]) == (0, 0, 0, 0)


def test_offline_cpus_leave_gaps() -> None:
    rows = parse_fixture("offline")
    assert [r["cpu"] for r in rows] == [0, 2]
    assert rows[1]["user_ns"] == 100003 * TICK_NS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("cpu  1 2 3 4 5 6 7 8 9 10\n", []),  # the aggregate line only
        ("cpu0 1 2 3 4 5 6 7 8 9 10\n", [(0, 1, 2, 3, 4, 5, 6, 7, 8)]),
        ("cpu7 1 2 3\n", [(7, 1, 2, 3, 0, 0, 0, 0, 0)]),  # fewer columns than ever shipped
        ("cpu12 1 2 3 4 5 6 7 8", [(12, 1, 2, 3, 4, 5, 6, 7, 8)]),  # no final newline
        ("cpux 1 2 3 4\ncpu1 1 1 1 1\n", [(1, 1, 1, 1, 1, 0, 0, 0, 0)]),  # not a cpu number
        ("cpu0 1 2 x 4\n", []),  # a garbled line is skipped, not fatal
        ("intr 1 2 3\nctxt 5\nbtime 6\n", []),
        ("cpu0 18446744073709551615 0 0 0\n", [(0, 18446744073709551615, 0, 0, 0, 0, 0, 0, 0)]),
    ],
)
def test_parse_lines(text: str, expected: list[tuple[int, ...]]) -> None:
    assert parse_proc_stat_cpus(text, 1) == expected


def test_tick_scaling() -> None:
    assert parse_proc_stat_cpus("cpu3 1 2 3 4 5 6 7 8\n", 4_000_000) == [
        (3, *(n * 4_000_000 for n in range(1, 9)))]


# --- the sampler against a fixture procfs root -----------------------------------------


class FakeHandle:
    """Stands in for a user_events registration: an enable word and a record sink."""

    def __init__(self, enabled: bool = True) -> None:
        self.word = ctypes.c_uint32(1 if enabled else 0)
        self.payloads: list[bytes] = []

    @property
    def enabled(self) -> bool:
        return self.word.value != 0

    def write(self, payload: bytes) -> bool:
        self.payloads.append(payload)
        return True


def make_sampler(procfs: Path, handle: FakeHandle) -> CpuUsage:
    opts = config.defaults(options()).samplers["cpu_usage"]
    s = CpuUsage(SamplerContext(Roots(procfs=procfs, sysfs=FIXTURES / "no-sysfs"), opts))
    s.start()
    s.bind({CPU_USAGE.name: handle})
    return s


def host_tick_ns() -> int:
    return 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("case", CASES)
def test_sampler_publishes_one_record_per_cpu(case: str) -> None:
    h = FakeHandle()
    s = make_sampler(FIXTURES / case, h)
    try:
        assert s.wanted
        s.collect()
    finally:
        s.close()
    expected = rows_as_dicts(
        parse_proc_stat_cpus((FIXTURES / case / "stat").read_text(), host_tick_ns()))
    assert all(len(p) == CPU_USAGE.fixed_size for p in h.payloads)
    assert [CPU_USAGE.unpack(p) for p in h.payloads] == expected


def test_sampler_not_wanted_without_consumer() -> None:
    h = FakeHandle(enabled=False)
    s = make_sampler(FIXTURES / "modern", h)
    try:
        assert not s.wanted
        h.word.value = 1
        assert s.wanted
    finally:
        s.close()


def test_sampler_rereads_the_kept_open_file(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "old" / "stat", tmp_path / "stat")
    h = FakeHandle()
    s = make_sampler(tmp_path, h)
    try:
        s.collect()
        # Rewrite in place (same inode, as procfs regenerates its text on every read).
        with open(tmp_path / "stat", "r+") as f:
            f.truncate(0)
            f.write("cpu  1 1 1 1\ncpu5 9 0 0 0\n")
        s.collect()
    finally:
        s.close()
    decoded = [CPU_USAGE.unpack(p) for p in h.payloads]
    assert [d["cpu"] for d in decoded] == [0, 1, 5]
    assert decoded[2]["user_ns"] == 9 * host_tick_ns()


def test_sampler_without_proc_stat_cannot_start(tmp_path: Path) -> None:
    opts = config.defaults(options()).samplers["cpu_usage"]
    s = CpuUsage(SamplerContext(Roots(procfs=tmp_path, sysfs=tmp_path), opts))
    with pytest.raises(OSError, match="stat"):
        s.start()


# --- the host --------------------------------------------------------------------------


@pytest.mark.host
def test_host_proc_stat_accounts_for_all_time() -> None:
    """Over one second, the eight columns of every CPU add up to wall time x CPUs."""
    tick = host_tick_ns()
    stat = Path("/proc/stat")
    t0 = time.monotonic_ns()
    before = {r[0]: sum(r[1:]) for r in parse_proc_stat_cpus(stat.read_text(), tick)}
    time.sleep(1.0)
    after = {r[0]: sum(r[1:]) for r in parse_proc_stat_cpus(stat.read_text(), tick)}
    elapsed = time.monotonic_ns() - t0
    if set(before) != set(after):
        pytest.skip("a CPU went on- or offline during the measurement")
    ncpu = os.cpu_count() or 1
    assert len(after) == ncpu
    delta = sum(after[c] - before[c] for c in after)
    expected = elapsed * ncpu
    tolerance = 0.05 * expected + 2 * tick * ncpu
    assert abs(delta - expected) <= tolerance, (
        f"{delta / 1e9:.3f} CPU-s accounted over {elapsed / 1e9:.3f}s x {ncpu} CPUs")
