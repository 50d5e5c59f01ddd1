"""The cpu_frequency sampler: cpufreq and /proc/cpuinfo sources, end to end, and the host.

Golden files: ``tests/fixtures/procfs/<case>.expected.json`` hold the parsed rows of
``tests/fixtures/procfs/<case>/cpuinfo``, and ``tests/fixtures/sysfs/<case>.expected.json``
the sampler's rows read from the sysfs tree ``tests/fixtures/sysfs/<case>/``. Regenerate
after a deliberate change with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest
tests/test_sampler_cpu_frequency.py`` and review the diff.

Fixtures: ``procfs/freq_cpuinfo_x86`` is this host's /proc/cpuinfo (Linux 6.18, a 2-CPU
x86 VM, no cpufreq); ``procfs/freq_cpuinfo_offline`` is that file hand-edited to CPUs 0, 2
and 3 (1 offline) at different frequencies; ``procfs/freq_cpuinfo_arm64`` is hand-written
in the arm64 format (no ``cpu MHz``). ``sysfs/freq_cpufreq`` is a hand-written cpufreq tree
(this host has none): CPUs 0, 1, 3 with ``scaling_cur_freq``, CPU 2 offline without
``cpufreq``; ``sysfs/freq_none`` has CPUs without cpufreq, as on this host.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import (
    FakeHandle,
    assert_silent_without_consumer,
    check_golden,
    decoded,
    sample_twice,
    start_sampler,
)

from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.samplers.cpu_frequency import CPU_FREQUENCY
from rezolus_ue.samplers.cpu_frequency import sampler as frequency
from rezolus_ue.samplers.cpu_frequency.sampler import (
    CpuFrequency,
    cpu_numbers,
    parse_cpufreq_khz,
    parse_cpuinfo_mhz,
)

FIXTURES = Path(__file__).parent / "fixtures"
PROCFS = FIXTURES / "procfs"
SYSFS = FIXTURES / "sysfs"
CPUINFO_CASES = ["freq_cpuinfo_x86", "freq_cpuinfo_offline", "freq_cpuinfo_arm64"]
EMPTY = PROCFS / "no-such-root"


@pytest.mark.parametrize("case", CPUINFO_CASES)
def test_golden_cpuinfo(case: str) -> None:
    rows = parse_cpuinfo_mhz((PROCFS / case / "cpuinfo").read_bytes())
    check_golden(PROCFS / f"{case}.expected.json",
                 [{"cpu": c, "frequency_hz": hz} for c, hz in rows])


def test_golden_cpufreq_tree() -> None:
    s, _h = make_sampler(EMPTY, SYSFS / "freq_cpufreq")
    try:
        rows = s.read()[CPU_FREQUENCY]
    finally:
        s.close()
    check_golden(SYSFS / "freq_cpufreq.expected.json",
                 [{"cpu": k[0], "frequency_hz": v[0]} for k, v in rows.items()])


def test_cpuinfo_offline_cpu_is_absent_and_mhz_is_exact() -> None:
    rows = parse_cpuinfo_mhz((PROCFS / "freq_cpuinfo_offline" / "cpuinfo").read_bytes())
    assert rows == [(0, 3_400_123_000), (2, 799_998_000), (3, 2_000_000_000)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", []),
        (b"processor\t: 0\ncpu MHz\t\t: 1234.5\n", [(0, 1_234_500_000)]),
        (b"cpu MHz\t\t: 1234.5\n", []),  # no processor line: cannot attribute it
        (b"processor : 3\nmodel name : x\ncpu MHz : 0.001\n", [(3, 1000)]),
        # s390: 'cpu MHz dynamic' and 'processor 0: ...' are other lines.
        (b"cpu MHz dynamic : 5200\nprocessor 0: version = FF\n", []),
        (b"processor\t: 0\ncpu MHz\t\t: 1.2.3\nprocessor\t: 1\ncpu MHz\t\t: 10\n",
         [(1, 10_000_000)]),
        (b"processor\t: 0\nprocessor\t: 1\ncpu MHz\t\t: 2000.000", [(1, 2_000_000_000)]),
    ],
)
def test_parse_cpuinfo(text: bytes, expected: list[tuple[int, int]]) -> None:
    assert parse_cpuinfo_mhz(text) == expected


def test_parse_cpufreq_khz() -> None:
    assert parse_cpufreq_khz(b"2400000\n") == 2_400_000_000
    assert parse_cpufreq_khz("800000") == 800_000_000
    with pytest.raises(ValueError):
        parse_cpufreq_khz(b"<unknown>\n")


def test_cpu_numbers_ignores_other_entries() -> None:
    assert cpu_numbers(SYSFS / "freq_cpufreq") == [0, 1, 2, 3]
    assert cpu_numbers(EMPTY) == []


# --- the sampler against fixture roots -------------------------------------------------


def make_sampler(procfs: Path, sysfs: Path,
                 enabled: bool = True) -> tuple[CpuFrequency, dict[str, FakeHandle]]:
    return start_sampler(CpuFrequency, procfs, sysfs, enabled=enabled)


def run(s: CpuFrequency, h: dict[str, FakeHandle]) -> list[dict]:
    try:
        sample_twice(s)
    finally:
        s.close()
    return decoded(CPU_FREQUENCY.schema, h)


def test_frequency_is_not_oversampled() -> None:
    # Governors change frequency on their own clock; cpuinfo is costly to generate.
    assert CPU_FREQUENCY.dist_schema is None
    assert [e.name for e in CpuFrequency.events()] == [CPU_FREQUENCY.schema.name]


def test_sampler_cpufreq_end_to_end() -> None:
    # procfs has a cpuinfo too: cpufreq wins when any CPU has it.
    s, h = make_sampler(PROCFS / "freq_cpuinfo_x86", SYSFS / "freq_cpufreq")
    assert s.detail == ""
    records = run(s, h)
    expected = json.loads((SYSFS / "freq_cpufreq.expected.json").read_text())
    assert records == expected


@pytest.mark.parametrize("case", ["freq_cpuinfo_x86", "freq_cpuinfo_offline"])
def test_sampler_falls_back_to_cpuinfo(case: str) -> None:
    s, h = make_sampler(PROCFS / case, SYSFS / "freq_none")
    assert "cpuinfo" in s.detail
    records = run(s, h)
    assert records == json.loads((PROCFS / f"{case}.expected.json").read_text())


def test_sampler_without_any_source_is_unavailable() -> None:
    with pytest.raises(SamplerUnavailable, match="no 'cpu MHz'"):
        make_sampler(PROCFS / "freq_cpuinfo_arm64", SYSFS / "freq_none")
    with pytest.raises(SamplerUnavailable, match="cpuinfo does not exist"):
        make_sampler(EMPTY, EMPTY)


def test_sampler_reads_nothing_without_consumer() -> None:
    s, h = make_sampler(EMPTY, SYSFS / "freq_cpufreq", enabled=False)
    assert_silent_without_consumer(s, h)


def test_offline_cpu_is_skipped_then_comes_back(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(SYSFS / "freq_cpufreq", tmp_path, dirs_exist_ok=True)
    cpu = tmp_path / "devices/system/cpu"
    s, _h = make_sampler(EMPTY, tmp_path)
    now = [0]
    monkeypatch.setattr(frequency.time, "monotonic_ns", lambda: now[0])
    try:
        assert list(s.read()[CPU_FREQUENCY]) == [(0,), (1,), (3,)]
        # CPU 1 goes offline: its file reads garbage here (sysfs would fail the read).
        (cpu / "cpu1/cpufreq/scaling_cur_freq").write_text("")
        assert list(s.read()[CPU_FREQUENCY]) == [(0,), (3,)]
        # CPUs 1 and 2 come online; they are looked for again once a second.
        (cpu / "cpu1/cpufreq/scaling_cur_freq").write_text("1000000\n")
        (cpu / "cpu2/cpufreq").mkdir()
        (cpu / "cpu2/cpufreq/scaling_cur_freq").write_text("1200000\n")
        assert list(s.read()[CPU_FREQUENCY]) == [(0,), (3,)]
        now[0] += frequency.RESCAN_NS + frequency.RESCAN_NS
        rows = s.read()[CPU_FREQUENCY]
    finally:
        s.close()
    assert rows == {(0,): (2_400_000_000,), (1,): (1_000_000_000,), (2,): (1_200_000_000,),
                    (3,): (800_000_000,)}


def test_read_error_skips_the_cpu(tmp_path: Path) -> None:
    """An fd whose read fails (EISDIR here, ENODEV/EBUSY on sysfs) skips that CPU."""
    shutil.copytree(SYSFS / "freq_cpufreq", tmp_path, dirs_exist_ok=True)
    s, _h = make_sampler(EMPTY, tmp_path)
    try:
        s._files.pop(3).close()
        s._files[3] = frequency.KeptOpen(tmp_path / "devices/system/cpu")  # a directory
        assert list(s.read()[CPU_FREQUENCY]) == [(0,), (1,)]
    finally:
        s.close()


# --- the host --------------------------------------------------------------------------


@pytest.mark.host
def test_host_frequencies_match_the_kernel() -> None:
    """Every online CPU has a frequency, from cpufreq or else the same /proc/cpuinfo says."""
    s, _h = make_sampler(Path("/proc"), Path("/sys"))
    try:
        rows = s.read()[CPU_FREQUENCY]
        cpuinfo = s._cpuinfo is not None
    finally:
        s.close()
    online = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    assert set(online) <= {k[0] for k in rows}
    assert all(10_000_000 <= v[0] <= 10_000_000_000 for v in rows.values())  # 10 MHz-10 GHz
    if cpuinfo:
        truth = dict(parse_cpuinfo_mhz(Path("/proc/cpuinfo").read_bytes()))
        for (cpu,), (hz,) in rows.items():
            assert abs(hz - truth[cpu]) <= 0.2 * truth[cpu]  # frequencies move between reads
