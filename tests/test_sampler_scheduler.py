"""The scheduler sampler: /proc/stat and /proc/schedstat parsing, end to end, and the host.

Golden files: ``tests/fixtures/procfs/<case>.expected.json`` hold the parsed ``stat`` and
``schedstat`` of ``tests/fixtures/procfs/<case>/``; regenerate after a deliberate change
with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest tests/test_sampler_scheduler.py`` and review the
diff.

Fixtures: ``sched_modern/stat`` is this host's /proc/stat (Linux 6.18, 2 CPUs; this host
has no /proc/schedstat), ``sched_modern/schedstat`` hand-written in the version 17 format
(domain lines carry the domain name); ``sched_v15`` hand-written in the version 15 format
(Linux 3.x to 6.x; CPU 2 offline, so absent); ``sched_v14`` a version 14 schedstat
(2.6.20 era, 12 numbers per cpu line: not read); ``sched_old/stat`` the Linux 2.4 format
(no ``procs_running``/``procs_blocked``) and no schedstat.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    FakeHandle,
    check_golden,
    decoded,
    replace_in_place,
    sample_twice,
    start_sampler,
)

from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.samplers.base import SharedFiles
from rezolus_ue.samplers.scheduler import SCHEDULER, SCHEDULER_CPU
from rezolus_ue.samplers.scheduler.sampler import (
    Scheduler,
    parse_schedstat,
    parse_schedstat_version,
    parse_stat_scheduler,
)

FIXTURES = Path(__file__).parent / "fixtures" / "procfs"
CASES = ["sched_modern", "sched_v15", "sched_v14", "sched_old"]
SCHED_FIELDS = SCHEDULER.schema.field_names
CPU_FIELDS = SCHEDULER_CPU.schema.field_names


def parse_case(case: str) -> dict[str, object]:
    root = FIXTURES / case
    got: dict[str, object] = {
        "stat": dict(zip(SCHED_FIELDS, parse_stat_scheduler((root / "stat").read_bytes()),
                         strict=True))}
    if (root / "schedstat").exists():
        data = (root / "schedstat").read_bytes()
        got["schedstat_version"] = parse_schedstat_version(data)
        got["schedstat"] = [dict(zip(CPU_FIELDS, r, strict=True)) for r in parse_schedstat(data)]
    return got


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    check_golden(FIXTURES / f"{case}.expected.json", parse_case(case))


def test_modern_stat_matches_the_file() -> None:
    lines = dict(line.split(" ", 1) for line in
                 (FIXTURES / "sched_modern" / "stat").read_text().splitlines())
    got = parse_case("sched_modern")["stat"]
    assert got == {"context_switches": int(lines["ctxt"]), "forks": int(lines["processes"]),
                   "procs_running": int(lines["procs_running"]),
                   "procs_blocked": int(lines["procs_blocked"])}


def test_schedstat_fields_7_8_9() -> None:
    rows = parse_schedstat((FIXTURES / "sched_v15" / "schedstat").read_bytes())
    assert rows == [(0, 9876543210987, 123456789, 1234567),
                    (1, 8876543210987, 113456789, 1134567),
                    (3, 7876543210987, 103456789, 934567)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", (0, 0, 0, 0)),
        (b"ctxt 5\nprocesses 6\nprocs_running 7\nprocs_blocked 8\n", (5, 6, 7, 8)),
        (b"cpu0 1 2 3\nintr 1 2 3\nctxt 5\nbtime 9\nprocesses 6", (5, 6, 0, 0)),  # 2.4
        (b"processes 6\nctxt x\n", (0, 6, 0, 0)),  # garbled value: 0, not fatal
        # Keys are whole words: 'ctxt_extra' is not 'ctxt'.
        (b"intr 1\nctxt_extra 9\nctxt 4\n", (4, 0, 0, 0)),
    ],
)
def test_parse_stat(text: bytes, expected: tuple[int, int, int, int]) -> None:
    assert parse_stat_scheduler(text) == expected


@pytest.mark.parametrize(
    ("text", "version", "rows"),
    [
        (b"", 0, []),
        (b"version 16\ntimestamp 1\ncpu0 1 0 3 4 5 6 7 8 9\n", 16, [(0, 7, 8, 9)]),
        # Numbers after the 9th (out-of-tree patches) are ignored; short lines skipped.
        (b"version 17\ncpu1 1 0 3 4 5 6 7 8 9 10 11\ncpu2 1 2 3\n", 17, [(1, 7, 8, 9)]),
        (b"version 15\ncpu0 1 0 3 4 5 6 x 8 9\ndomain0 3 1 2 3 4 5 6 7 8 9 10\n", 15, []),
        # No version line, or version 14 (12 numbers): not read.
        (b"timestamp 1\ncpu0 1 0 3 4 5 6 7 8 9\n", 0, []),
        (b"version 14\ncpu0 0 0 0 1 0 3 4 5 6 7 8 9\n", 14, []),
    ],
)
def test_parse_schedstat(text: bytes, version: int, rows: list[tuple[int, ...]]) -> None:
    assert parse_schedstat_version(text) == version
    assert parse_schedstat(text) == rows


# --- the sampler against a fixture procfs root -----------------------------------------


def make_sampler(procfs: Path, enabled: bool = True, shared: SharedFiles | None = None,
                 ) -> tuple[Scheduler, dict[str, FakeHandle]]:
    return start_sampler(Scheduler, procfs, procfs / "no-sysfs", enabled=enabled,
                         shared=shared)


def decode(h: dict[str, FakeHandle]) -> dict[str, list[dict]]:
    return {schema.name: decoded(schema, h) for schema in Scheduler.events()}


@pytest.mark.parametrize("case", CASES)
def test_sampler_end_to_end(case: str) -> None:
    s, h = make_sampler(FIXTURES / case)
    try:
        sample_twice(s)
        detail = s.detail
    finally:
        s.close()
    got = decode(h)
    expected = json.loads((FIXTURES / f"{case}.expected.json").read_text())
    assert got["rezolus_scheduler"] == [expected["stat"]]
    assert [d["metric"] for d in got["rezolus_scheduler_dist"]] == list(SCHED_FIELDS)
    if expected.get("schedstat_version", 0) >= 15:
        assert detail == ""
        assert got["rezolus_scheduler_cpu"] == expected["schedstat"]
        assert len(got["rezolus_scheduler_cpu_dist"]) == 3 * len(expected["schedstat"])
    else:
        assert "rezolus_scheduler_cpu unavailable" in detail
        assert got["rezolus_scheduler_cpu"] == got["rezolus_scheduler_cpu_dist"] == []


def test_sampler_details() -> None:
    s, _h = make_sampler(FIXTURES / "sched_old")
    assert "CONFIG_SCHEDSTATS" in s.detail
    s.close()
    s, _h = make_sampler(FIXTURES / "sched_v14")
    assert "version 14 is not supported" in s.detail
    s.close()


def test_newer_schedstat_version_is_read_with_a_note(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "sched_modern" / "stat", tmp_path / "stat")
    (tmp_path / "schedstat").write_bytes(
        (FIXTURES / "sched_modern" / "schedstat").read_bytes().replace(
            b"version 17", b"version 18"))
    s, _h = make_sampler(tmp_path)
    try:
        assert "version 18 is newer" in s.detail
        assert list(s.read()[SCHEDULER_CPU]) == [(0,), (1,)]
    finally:
        s.close()


def test_sampler_reads_only_wanted_families() -> None:
    s, h = make_sampler(FIXTURES / "sched_modern", enabled=False)
    try:
        assert s.read() == {}
        h["rezolus_scheduler_cpu_dist"].word.value = 1
        assert list(s.read()) == [SCHEDULER_CPU]
    finally:
        s.close()


def test_sampler_without_proc_stat_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SamplerUnavailable, match="stat does not exist"):
        make_sampler(tmp_path)


def test_sampler_rates(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "sched_v15" / "stat", tmp_path / "stat")
    shutil.copy(FIXTURES / "sched_v15" / "schedstat", tmp_path / "schedstat")
    s, h = make_sampler(tmp_path)
    try:
        s.sample(1_000_000_000)
        for path, old, new in ((tmp_path / "stat", b"ctxt 669688", b"ctxt 669788"),
                               (tmp_path / "schedstat", b" 123456789 ", b" 123556789 ")):
            replace_in_place(path, old, new)
        s.sample(1_500_000_000)
        s.publish()
    finally:
        s.close()
    got = decode(h)
    ctxt = next(d for d in got["rezolus_scheduler_dist"] if d["metric"] == "context_switches")
    assert (ctxt["value"], ctxt["max"]) == (669788, 200)  # +100 in 0.5 s
    wait0 = next(d for d in got["rezolus_scheduler_cpu_dist"]
                 if d["cpu"] == 0 and d["metric"] == "waiting_ns")
    assert (wait0["value"], wait0["max"]) == (123556789, 200_000)


def test_sampler_shares_each_ticks_proc_stat_with_cpu_usage(tmp_path: Path) -> None:
    """cpu_usage and scheduler both parse /proc/stat: in one agent tick (one t_ns) the
    kernel is asked once, and the second sampler parses what the first read."""
    from rezolus_ue.samplers.cpu_usage.sampler import CpuUsage

    shutil.copy(FIXTURES / "sched_modern" / "stat", tmp_path / "stat")
    cpu_dir = tmp_path / "sys" / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text("0-1\n")
    shared = SharedFiles()  # the agent's, handed to both
    cpu, _hc = start_sampler(CpuUsage, tmp_path, tmp_path / "sys", shared=shared)
    s, h = make_sampler(tmp_path, shared=shared)
    try:
        cpu.sample(1_000_000_000)
        replace_in_place(tmp_path / "stat", b"ctxt 9860713", b"ctxt 9860813")
        s.sample(1_000_000_000)  # the same tick: cpu_usage's read
        s.sample(1_500_000_000)  # a new tick: read again
        s.publish()
        assert s.read()[SCHEDULER][()][0] == 9860813  # outside sample(): always read
    finally:
        s.close()
        cpu.close()
    ctxt = next(d for d in decode(h)["rezolus_scheduler_dist"]
                if d["metric"] == "context_switches")
    assert (ctxt["value"], ctxt["p50"], ctxt["max"]) == (9860813, 200, 200)


# --- the host --------------------------------------------------------------------------


@pytest.mark.host
def test_host_counts_our_own_switches_and_forks() -> None:
    s, _h = make_sampler(Path("/proc"))
    try:
        before = s.read()[SCHEDULER][()]
        for _ in range(50):
            time.sleep(0.001)  # each sleep is a voluntary context switch
        subprocess.run([sys.executable, "-c", "pass"], check=True)  # at least one fork
        after = s.read()[SCHEDULER][()]
    finally:
        s.close()
    assert after[0] - before[0] >= 50
    assert after[1] - before[1] >= 1
    assert after[2] >= 1  # we are running
    assert after[3] >= 0


@pytest.mark.host
def test_host_schedstat_or_detail() -> None:
    s, _h = make_sampler(Path("/proc"))
    try:
        if not Path("/proc/schedstat").exists():
            assert "CONFIG_SCHEDSTATS" in s.detail
            assert SCHEDULER_CPU not in s.read()
            return
        t0 = time.monotonic_ns()
        before = s.read()[SCHEDULER_CPU]
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:
            pass  # run on some CPU for 200 ms
        after = s.read()[SCHEDULER_CPU]
        elapsed = time.monotonic_ns() - t0
    finally:
        s.close()
    ran = sum(after[k][0] - before[k][0] for k in after if k in before)
    assert 150_000_000 <= ran <= elapsed * len(after) + 10_000_000


def big_schedstat(cpus: int, step: int) -> bytes:
    """Return /proc/schedstat of ``cpus`` CPUs with three domain lines each (45 numbers:
    the version 17 layout), over the size from which the cpu lines are found with NumPy."""
    lines = ["version 17", f"timestamp {4295012345 + step}"]
    mask = ",".join(["ffffffff"] * (cpus // 32 or 1))
    for c in range(cpus):
        lines.append(f"cpu{c} 0 0 " + " ".join(str(c * 7919 + i * 104729 + step * (i + 1))
                                              for i in range(7)))
        for d, name in enumerate(("SMT", "MC", "NUMA")):
            lines.append(f"domain{d} {name} {mask} " + " ".join(str(c + d + i) for i in range(45)))
    return ("\n".join(lines) + "\n").encode()


def test_parse_schedstat_finds_the_cpu_lines_as_the_split_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From _NUMPY_BYTES the cpu lines are found by a regular expression: the same lines,
    and rows, as splitting every line, whatever the text's ends and oddities."""
    from rezolus_ue.samplers.scheduler import sampler

    base = big_schedstat(128, 1)
    assert len(base) >= sampler._NUMPY_BYTES
    texts = [
        base,
        big_schedstat(128, 2)[:-1],  # no final newline
        base + b"cpu128 1 2 3 4 5 6 7 8 9",  # a cpu line last, without a newline
        base + b"cpu",  # "cpu" alone, last
        base + b"cp",  # shorter than "cpu", last
        base + b"\n\ncpu129 1 2 3 4 5 6 7 8 9 10 11\n\n",  # empty lines, more numbers
        base.replace(b"\ncpu5 ", b"\ncpu5x ", 1).replace(b"\ncpu7 0", b"\ncpu7", 1),  # garbled
        base.replace(b"\ndomain0", b"\n cpu", 1),  # not at the line's start
        big_schedstat(200, 3),
    ]
    for text in texts:
        split = [line for line in text.split(b"\n")[1:] if line[:3] == b"cpu"]
        assert sampler.cpu_lines(text) == split
        got = parse_schedstat(text)
        with monkeypatch.context() as m:
            m.setattr(sampler, "_NUMPY_BYTES", 1 << 62)
            assert got == parse_schedstat(text)
    assert len(parse_schedstat(texts[2])) == 129 and len(parse_schedstat(texts[6])) == 126


def test_schedstat_reader_reads_what_the_loop_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """From _NUMPY_BYTES SchedstatReader converts the cpu lines at once into a Table: the
    loop's rows, and the loop itself for any text it would read otherwise."""
    from rezolus_ue.metrics.family import Table
    from rezolus_ue.samplers.scheduler import sampler

    base = big_schedstat(128, 1)
    texts = {
        "base": base,
        "next": big_schedstat(128, 2),
        "every line longer": base.replace(b"\ndomain0", b" 10 11\ndomain0"),
        "two lines longer": base.replace(b"\ncpu0 0 0 ", b"\ncpu0 0 0 1 1 ", 1)
        .replace(b"\ncpu1 0 0 ", b"\ncpu1 0 0 1 1 ", 1),
        "cpu, no number": base + b"cpu 1 2 3 4 5 6 7 8 9\n",
        "a line longer": base + b"cpu128 1 2 3 4 5 6 7 8 9 10\n",
        "a line shorter": base + b"cpu128 1 2 3 4 5 6 7 8\n",
        "too big": base + b"cpu128 1 2 3 4 5 6 %d 8 9\n" % (1 << 62),
        "a CPU twice": base + b"cpu5 1 2 3 4 5 6 7 8 9\n",
        "a tab": base.replace(b"\ncpu3 0 0", b"\ncpu3 0\t0", 1),
        "a minus": base.replace(b"\ncpu3 0 0", b"\ncpu3 0 -0", 1),
        "cpu inside": base.replace(b"\ncpu3 0 0", b"\ncpu3 0 cpu0", 1),
        "letters": base.replace(b"\ncpu3 0 0", b"\ncpu3 0 0u", 1),
        "other CPUs": big_schedstat(130, 3),
    }
    reader = sampler.SchedstatReader()
    for name, text in texts.items():
        got = reader.read(text)
        with monkeypatch.context() as m:
            m.setattr(sampler, "_NUMPY_BYTES", 1 << 62)
            expected = sampler.SchedstatReader().read(text)
        assert type(expected) is dict
        assert got == expected, name
        assert isinstance(got, Table) == (name in ("base", "next", "every line longer",
                                                   "other CPUs")), name
