"""The memory sampler: meminfo, vmstat and PSI parsing against fixture trees, the sampler end
to end, and cross-checks against this host's kernel.

Golden files: ``tests/fixtures/procfs/memory/<case>.expected.json`` hold the parsed values of
``tests/fixtures/procfs/memory/<case>/{meminfo,vmstat,pressure/*}``. After a deliberate
change, regenerate them with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest tests/test_sampler_memory.py``
and review the diff.
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers import (
    FakeHandle,
    check_golden,
    decoded,
    new_sampler,
    replace_in_place,
    sample_twice,
    start_sampler,
)

from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.samplers.memory import MEMORY, MEMORY_PRESSURE, MEMORY_VMSTAT
from rezolus_ue.samplers.memory import sampler as memory_mod
from rezolus_ue.samplers.memory.sampler import (
    PSI_RESOURCES,
    FieldFinder,
    Memory,
    meminfo_finder,
    parse_meminfo,
    parse_pressure,
    parse_vmstat,
    vmstat_finder,
)

FIXTURES = Path(__file__).parent / "fixtures" / "procfs" / "memory"
CASES = ["modern", "old", "v5_10", "psi_irq"]
NO_SYSFS = Path(__file__).parent / "fixtures" / "sysfs" / "no-such-tree"

MEM_FIELDS = [m.name for m in MEMORY.scalars]
VM_FIELDS = [m.name for m in MEMORY_VMSTAT.scalars]
PSI_FIELDS = [m.name for m in MEMORY_PRESSURE.scalars]


def parse_case(case: str) -> dict[str, object]:
    d = FIXTURES / case
    return {
        "meminfo": dict(zip(MEM_FIELDS, parse_meminfo((d / "meminfo").read_bytes()),
                            strict=True)),
        "vmstat": dict(zip(VM_FIELDS, parse_vmstat((d / "vmstat").read_bytes()), strict=True)),
        "pressure": {r: dict(zip(PSI_FIELDS, parse_pressure((d / "pressure" / r).read_bytes()),
                                 strict=True))
                     for r in PSI_RESOURCES if (d / "pressure" / r).exists()},
    }


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    check_golden(FIXTURES / f"{case}.expected.json", parse_case(case))


# --- meminfo -----------------------------------------------------------------------------


def meminfo_kb(case: str) -> dict[str, int]:
    out = {}
    for line in (FIXTURES / case / "meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        out[name] = int(rest.split()[0])
    return out


@pytest.mark.parametrize("case", ["modern", "v5_10"])
def test_meminfo_is_kb_times_1024(case: str) -> None:
    kb = meminfo_kb(case)
    got = parse_case(case)["meminfo"]
    keys = ["MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "Dirty", "Writeback",
            "Slab", "SwapTotal", "SwapFree"]
    assert [got[f] for f in MEM_FIELDS] == [kb[k] * 1024 for k in keys]


def test_meminfo_before_3_14_estimates_available() -> None:
    kb = meminfo_kb("old")
    assert "MemAvailable" not in kb
    got = parse_case("old")["meminfo"]
    assert got["available_bytes"] == (kb["MemFree"] + kb["Buffers"] + kb["Cached"]) * 1024
    # "Cached" is not confused with "SwapCached" (1700 kB), which comes first in the file.
    assert got["cached_bytes"] == 5446308 * 1024


@pytest.mark.parametrize(
    ("text", "expected_kb"),
    [
        (b"", [0] * 10),
        (b"MemTotal: 10 kB\nMemFree: 4 kB\nBuffers: 1 kB\nCached: 2 kB\n",
         [10, 4, 7, 1, 2, 0, 0, 0, 0, 0]),  # no MemAvailable: 4 + 1 + 2
        (b"MemAvailable: 0 kB\nMemFree: 4 kB\n", [0, 4, 0, 0, 0, 0, 0, 0, 0, 0]),
        (b"MemTotal: x kB\nMemFree: 5 kB\nMemAvailable: 3 kB", [0, 5, 3, 0, 0, 0, 0, 0, 0, 0]),
        (b"SwapFree:   8 kB\nHugePages_Total:   4\nSlab: 9 kB\n", [0, 0, 0, 0, 0, 0, 0, 9, 0, 8]),
    ],
)
def test_parse_meminfo_lines(text: bytes, expected_kb: list[int]) -> None:
    assert list(parse_meminfo(text)) == [v * 1024 for v in expected_kb]


# --- vmstat ------------------------------------------------------------------------------


def test_vmstat_sums_reclaim_by_reclaimer_not_by_lru_type() -> None:
    """pgscan_anon/file and pgsteal_anon/file split the same pages again; throttle counts
    events: none of them is added."""
    got = parse_case("v5_10")["vmstat"]
    assert got["pages_scanned"] == 1_500_000 + 250_000  # = pgscan_anon + pgscan_file
    assert got["pages_stolen"] == 1_200_000 + 200_000  # = pgsteal_anon + pgsteal_file
    assert (got["page_faults"], got["major_page_faults"]) == (20134512344, 1203445)
    assert [got[f] for f in VM_FIELDS[4:]] == [9823451223, 1203344, 1203344, 9821003120,
                                               3651447, 52311]


def test_vmstat_per_zone_counters_of_old_kernels_add_up() -> None:
    got = parse_case("old")["vmstat"]
    assert got["pages_scanned"] == 130045 + 290031 + 1200 + 3400
    assert got["pages_stolen"] == 120034 + 310022  # not kswapd_steal: no pgsteal_ prefix
    # A kernel without CONFIG_NUMA has no numa_* lines.
    assert [got[f] for f in VM_FIELDS[4:]] == [0] * 6


def test_vmstat_modern_host_copy() -> None:
    text = (FIXTURES / "modern" / "vmstat").read_text()
    lines = dict(line.split() for line in text.splitlines())
    got = parse_case("modern")["vmstat"]
    assert got["page_faults"] == int(lines["pgfault"])
    assert got["pages_scanned"] == sum(int(lines[k]) for k in (
        "pgscan_kswapd", "pgscan_direct", "pgscan_khugepaged", "pgscan_proactive"))
    assert got["numa_interleave"] == int(lines["numa_interleave"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", (0,) * 10),
        (b"pgfault 5", (5,) + (0,) * 9),  # first line, no final newline
        (b"xpgfault 5\npgmajfault 2\n", (0, 2) + (0,) * 8),
        (b"pgscan_kswapd 3\npgscan_kswapd_normal 4\npgscan_direct_throttle 100\n",
         (0, 0, 7) + (0,) * 7),
        (b"pgfault x\npgmajfault 2\n", (0, 2) + (0,) * 8),  # garbled line skipped
        (b"numa_other -3\n", (0,) * 10),  # never negative
        (b"pgfault 18446744073709551615\n", (18446744073709551615,) + (0,) * 9),
    ],
)
def test_parse_vmstat_lines(text: bytes, expected: tuple[int, ...]) -> None:
    assert parse_vmstat(text) == expected


def test_finder_reuses_its_plan_and_replans_when_lines_change() -> None:
    f = vmstat_finder()
    assert f.values(b"pgfault 1\npgmajfault 2\n")[:2] == [1, 2]
    plan = f._plan
    assert f.values(b"pgfault 10\npgmajfault 20\n")[:2] == [10, 20]
    assert f._plan is plan  # same lines: the plan is kept
    # A line the plan expects is gone: rebuilt from the new text.
    assert f.values(b"pgmajfault 7\nnuma_hit 3\n")[:5] == [0, 7, 0, 0, 3]
    assert f._plan is not plan
    # A line turned garbled: rebuilt, and the garbled line is skipped.
    assert f.values(b"pgmajfault ?\nnuma_hit 4\n")[:5] == [0, 0, 0, 0, 4]


@pytest.mark.parametrize("case", CASES)
def test_finder_with_plan_matches_fresh_parse(case: str) -> None:
    """The fast paths (a reused plan; tokens by position) read what a fresh parse reads."""
    for name, finder in (("meminfo", meminfo_finder()), ("vmstat", vmstat_finder())):
        data = (FIXTURES / case / name).read_bytes()
        fresh = FieldFinder.values(finder, data)
        assert finder._fast is not None  # the fixtures are all of the usual shape
        assert finder.values(data) == fresh
        finder._fast = None
        assert finder.values(data) == fresh


def test_finder_token_path_checks_names_and_digits() -> None:
    f = meminfo_finder()
    text = b"MemTotal: 10 kB\nMemFree: 4 kB\nHugePages_Total: 0\n"
    assert f.values(text)[:2] == [10, 4]
    assert f._fast is not None
    # Same token count, other names at the positions: not taken by position.
    assert f.values(b"MemFree: 10 kB\nMemTotal: 4 kB\nHugePages_Total: 0\n")[:2] == [4, 10]
    # A value that is not digits: the general path skips the line.
    assert f.values(b"MemTotal: 1x kB\nMemFree: 4 kB\nHugePages_Total: 0\n")[:2] == [0, 4]
    # A line read of an unusual shape: no token path at all.
    f = meminfo_finder()
    assert f.values(b"MemTotal: 5kB\nMemFree: 4 kB\n")[:2] == [5, 4]
    assert f._fast is None
    assert f.values(b"MemTotal: 5kB\nMemFree: 4 kB\n")[:2] == [5, 4]


# --- PSI ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", (0, 0, 0, 0)),
        (b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
         b"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", (0, 0, 0, 0)),
        (b"some avg10=14.26 avg60=3.36 avg300=4.79 total=196230030\n", (142600, 0, 196230030, 0)),
        (b"full avg10=4.56 avg60=2.10 avg300=0.98 total=40233451\n", (0, 45600, 0, 40233451)),
        (b"some avg10=100.00 avg60=1 avg300=1 total=1\nfull avg10=0.01 avg60=0 avg300=0 total=2",
         (1_000_000, 100, 1, 2)),
        (b"some avg10=x avg60=0.00 avg300=0.00 total=5\n", (0, 0, 5, 0)),
        (b"some total=7 avg10=0.29\n", (2900, 0, 7, 0)),  # order does not matter
        (b"other avg10=1.00 total=9\n", (0, 0, 0, 0)),
    ],
)
def test_parse_pressure_lines(text: bytes, expected: tuple[int, int, int, int]) -> None:
    assert parse_pressure(text) == expected


def test_pressure_ppm_is_exact() -> None:
    """Every value the kernel can print ("%lu.%02lu", 0.00 to 100.00) converts exactly."""
    for hundredths in range(10001):
        text = f"some avg10={hundredths // 100}.{hundredths % 100:02d} total=0".encode()
        assert parse_pressure(text)[0] == hundredths * 100, text


# --- the sampler against a fixture procfs root -------------------------------------------


def make_sampler(procfs: Path, enabled: bool = True) -> tuple[Memory, dict[str, FakeHandle]]:
    return start_sampler(Memory, procfs, NO_SYSFS, enabled=enabled)


@pytest.mark.parametrize("case", CASES)
def test_sampler_end_to_end(case: str) -> None:
    s, h = make_sampler(FIXTURES / case)
    try:
        sample_twice(s)
    finally:
        s.close()
    want = parse_case(case)
    mem = decoded(MEMORY.schema, h)
    assert mem == [want["meminfo"]]
    vm = decoded(MEMORY_VMSTAT.schema, h)
    assert vm == [want["vmstat"]]
    psi = decoded(MEMORY_PRESSURE.schema, h)
    assert psi == [{"resource": r, **v} for r, v in want["pressure"].items()]  # type: ignore[union-attr]
    # _dist: one record per oversampled metric (and resource); the fixture did not change
    # between the two samples, so counter rates are 0 and gauges are their level.
    assert MEMORY.dist_schema is not None
    dist = decoded(MEMORY.dist_schema, h)
    assert [d["metric"] for d in dist] == [m.name for m in MEMORY.dist_metrics]
    for d in dist:
        level = want["meminfo"][d["metric"]]  # type: ignore[index]
        assert (d["value"], d["p50"], d["max"]) == (level, level, level)
    assert MEMORY_VMSTAT.dist_schema is not None
    vdist = decoded(MEMORY_VMSTAT.dist_schema, h)
    assert len(vdist) == len(MEMORY_VMSTAT.dist_metrics)
    assert all(d["max"] == 0 for d in vdist)
    assert MEMORY_PRESSURE.dist_schema is not None
    pdist = decoded(MEMORY_PRESSURE.dist_schema, h)
    assert len(pdist) == len(want["pressure"]) * len(MEMORY_PRESSURE.dist_metrics)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "detail"),
    [
        ("modern", "PSI irq unavailable (needs Linux >= 6.1 with CONFIG_IRQ_TIME_ACCOUNTING)"),
        ("v5_10", "PSI irq unavailable (needs Linux >= 6.1 with CONFIG_IRQ_TIME_ACCOUNTING)"),
        ("psi_irq", ""),
        ("old", "PSI unavailable: no /proc/pressure (needs Linux >= 4.20 with CONFIG_PSI=y;"
                " boot with psi=1 if CONFIG_PSI_DEFAULT_DISABLED)"),
    ],
)
def test_sampler_detail(case: str, detail: str) -> None:
    s, _h = make_sampler(FIXTURES / case)
    s.close()
    assert s.detail == detail


def test_sampler_without_psi_publishes_no_pressure() -> None:
    s, h = make_sampler(FIXTURES / "old")
    try:
        sample_twice(s)
    finally:
        s.close()
    assert len(h[MEMORY.event].payloads) == 1
    assert h[MEMORY_PRESSURE.event].payloads == []
    assert h[f"{MEMORY_PRESSURE.event}_dist"].payloads == []


def test_sampler_psi_disabled_at_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    """psi=0 on older kernels: /proc/pressure exists but reading fails with EOPNOTSUPP."""

    class NoPSI(memory_mod.KeptOpen):
        def read(self) -> bytes:
            if self.path.parent.name == "pressure":
                raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
            return super().read()

    monkeypatch.setattr(memory_mod, "KeptOpen", NoPSI)
    s, h = make_sampler(FIXTURES / "psi_irq")
    try:
        assert s.detail.startswith("PSI unavailable: disabled (psi=0")
        sample_twice(s)
    finally:
        s.close()
    assert len(h[MEMORY.event].payloads) == 1
    assert h[MEMORY_PRESSURE.event].payloads == []


def test_sampler_reads_only_wanted_families() -> None:
    s, h = make_sampler(FIXTURES / "psi_irq", enabled=False)
    try:
        assert s.read() == {}
        h[MEMORY_VMSTAT.event].word.value = 1
        assert list(s.read()) == [MEMORY_VMSTAT]
        h[MEMORY_VMSTAT.event].word.value = 0
        h[f"{MEMORY_PRESSURE.event}_dist"].word.value = 1
        got = s.read()
        assert list(got) == [MEMORY_PRESSURE]
        assert list(got[MEMORY_PRESSURE]) == [(r,) for r in PSI_RESOURCES]
    finally:
        s.close()


def test_sampler_without_any_source_cannot_start(tmp_path: Path) -> None:
    s = new_sampler(Memory, tmp_path, tmp_path)
    with pytest.raises(SamplerUnavailable, match=r"meminfo unavailable.*vmstat unavailable"
                                                 r".*PSI unavailable"):
        s.start()


def test_sampler_without_meminfo_still_runs(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "v5_10", tmp_path, dirs_exist_ok=True)
    (tmp_path / "meminfo").unlink()
    s, h = make_sampler(tmp_path)
    try:
        assert s.detail.startswith("meminfo unavailable: ")
        sample_twice(s)
    finally:
        s.close()
    assert h[MEMORY.event].payloads == []
    assert len(h[MEMORY_VMSTAT.event].payloads) == 1


def test_sampler_rereads_the_kept_open_files(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "v5_10", tmp_path, dirs_exist_ok=True)
    s, h = make_sampler(tmp_path)
    try:
        s.sample(1_000_000_000)
        # Rewrite in place (same inode, as procfs regenerates its text on every read).
        for name, old, new in (("vmstat", b"pgfault 20134512344", b"pgfault 20134513344"),
                               ("pressure/io", b"total=912034512", b"total=912134512")):
            replace_in_place(tmp_path / name, old, new)
        s.sample(1_500_000_000)
        s.publish()
    finally:
        s.close()
    vm = MEMORY_VMSTAT.schema.unpack(h[MEMORY_VMSTAT.event].payloads[0])
    assert vm["page_faults"] == 20134513344
    assert MEMORY_VMSTAT.dist_schema is not None
    rates = {d["metric"]: d["max"] for d in decoded(MEMORY_VMSTAT.dist_schema, h)}
    assert rates["page_faults"] == 2000  # 1000 faults in 0.5 s
    psi = {r["resource"]: r for r in decoded(MEMORY_PRESSURE.schema, h)}
    assert psi["io"]["some_stall_us"] == 912134512


# --- the host ----------------------------------------------------------------------------


@pytest.mark.host
def test_host_sampler_runs_with_what_this_kernel_has() -> None:
    s, h = make_sampler(Path("/proc"))
    try:
        sample_twice(s)
    finally:
        s.close()
    assert len(h[MEMORY.event].payloads) == 1
    assert len(h[MEMORY_VMSTAT.event].payloads) == 1
    have = [r for r in PSI_RESOURCES if Path("/proc/pressure", r).exists()]
    got = [r["resource"] for r in decoded(MEMORY_PRESSURE.schema, h)]
    assert got == have
    if "irq" not in have and have:
        assert "PSI irq unavailable" in s.detail
    for r in decoded(MEMORY_PRESSURE.schema, h):
        assert 0 <= r["some_avg10_ppm"] <= 1_000_000  # type: ignore[operator]
        assert 0 <= r["full_avg10_ppm"] <= 1_000_000  # type: ignore[operator]


@pytest.mark.host
def test_host_memtotal_is_physical_pages() -> None:
    """MemTotal and sysconf(_SC_PHYS_PAGES) both come from the kernel's totalram_pages."""
    got = dict(zip(MEM_FIELDS, parse_meminfo(Path("/proc/meminfo").read_bytes()), strict=True))
    assert got["total_bytes"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < got["free_bytes"] <= got["total_bytes"]
    assert 0 < got["available_bytes"] <= got["total_bytes"]


@pytest.mark.host
def test_host_page_faults_rise_by_at_least_the_pages_touched() -> None:
    page = mmap.PAGESIZE
    size = 64 << 20
    vmstat = Path("/proc/vmstat")
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per base page, not per huge page
        before = dict(zip(VM_FIELDS, parse_vmstat(vmstat.read_bytes()), strict=True))
        for off in range(0, size, page):
            m[off] = 1
        after = dict(zip(VM_FIELDS, parse_vmstat(vmstat.read_bytes()), strict=True))
    finally:
        m.close()
    assert after["page_faults"] - before["page_faults"] >= size // page


@pytest.mark.host
def test_host_cpu_pressure_counts_runnable_tasks_waiting() -> None:
    """More spinning processes than CPUs we may run on: one always waits, so the cpu
    ``some`` stall total grows by about the wall time (at least a third of it here)."""
    cpu = Path("/proc/pressure/cpu")
    if not cpu.exists():
        pytest.skip("no /proc/pressure/cpu: this kernel has no PSI")
    n = len(os.sched_getaffinity(0)) + 1
    duration = 0.6
    before = parse_pressure(cpu.read_bytes())[2]
    t0 = time.monotonic()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            end = time.monotonic() + duration
            while time.monotonic() < end:
                pass
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    elapsed_us = (time.monotonic() - t0) * 1e6
    delta = parse_pressure(cpu.read_bytes())[2] - before
    assert delta >= elapsed_us / 3, f"cpu some stall grew {delta} us over {elapsed_us:.0f} us"


@pytest.mark.parametrize(
    "line",
    [b"MemTotal: 5 MB", b"MemTotal: 5kB", b"MemTotal:", b"MemTotal: kB", b"MemTotal:\t7 kB",
     b"MemTotal: 1 2 kB", b"MemTotal: -4 kB", b"MemTotal:: 3 kB", b" MemTotal: 3 kB"],
)
def test_finder_never_plans_a_line_it_cannot_read(line: bytes) -> None:
    """Planning and reading judge a value alike, whatever the text (no assertion error)."""
    for data in (line, line + b"\n", b"MemFree: 1 kB\n" + line + b"\nSlab: 2 kB\n"):
        parse_meminfo(data)
        parse_vmstat(data.replace(b"MemTotal:", b"pgfault").replace(b"MemFree:", b"pgfault"))
