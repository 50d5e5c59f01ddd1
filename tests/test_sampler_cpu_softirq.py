"""The cpu_softirq sampler: /proc/softirqs parsing against fixtures, end to end, and the host.

Golden files: ``tests/fixtures/procfs/<case>.expected.json`` hold the parsed rows of
``tests/fixtures/procfs/<case>/softirqs``; regenerate after a deliberate change with
``REZOLUS_UE_UPDATE_GOLDEN=1 pytest tests/test_sampler_cpu_softirq.py`` and review the diff.

Fixtures: ``softirq_modern`` is this host's file (Linux 6.18, 2 CPUs); ``softirq_old`` is
hand-written in the Linux 4.4 format (``BLOCK_IOPOLL``, renamed ``IRQ_POLL`` in 4.5; 4
CPUs); ``softirq_2631`` is hand-written in the Linux 2.6.31 format (no ``BLOCK_IOPOLL``).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from helpers import (
    FakeHandle,
    assert_silent_without_consumer,
    check_golden,
    decoded,
    new_sampler,
    replace_in_place,
    rewrite_in_place,
    sample_twice,
    start_sampler,
)

from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.linux.procfs import parse_cpu_list
from rezolus_ue.metrics.family import Table
from rezolus_ue.samplers.cpu_softirq import CPU_SOFTIRQ, SOFTIRQ_KINDS
from rezolus_ue.samplers.cpu_softirq.sampler import CpuSoftirq, SoftirqReader, parse_softirqs

FIXTURES = Path(__file__).parent / "fixtures" / "procfs"
CASES = ["softirq_modern", "softirq_old", "softirq_2631"]
FIELDS = ("cpu", *SOFTIRQ_KINDS)


def as_dicts(rows: dict[int, tuple[int, ...]]) -> list[dict[str, int]]:
    return [dict(zip(FIELDS, (cpu, *r), strict=True)) for cpu, r in rows.items()]


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    got = as_dicts(parse_softirqs((FIXTURES / case / "softirqs").read_text()))
    check_golden(FIXTURES / f"{case}.expected.json", got)


def test_modern_matches_the_file_column_by_column() -> None:
    lines = (FIXTURES / "softirq_modern" / "softirqs").read_text().splitlines()
    rows = as_dicts(parse_softirqs("\n".join(lines)))
    assert [r["cpu"] for r in rows] == [0, 1]
    for line in lines[1:]:
        name, values = line.split(":")
        for r, v in zip(rows, values.split(), strict=True):
            assert r[name.strip().lower()] == int(v)


def test_block_iopoll_reads_as_irq_poll() -> None:
    rows = as_dicts(parse_softirqs((FIXTURES / "softirq_old" / "softirqs").read_text()))
    assert [r["cpu"] for r in rows] == [0, 1, 2, 3]
    assert [r["irq_poll"] for r in rows] == [7, 0, 0, 1]
    assert [r["rcu"] for r in rows] == [567890, 456789, 345678, 234567]


def test_kind_the_kernel_lacks_reads_zero() -> None:
    rows = as_dicts(parse_softirqs((FIXTURES / "softirq_2631" / "softirqs").read_text()))
    assert [r["irq_poll"] for r in rows] == [0, 0]
    assert [r["timer"] for r in rows] == [123456, 98765]


HEAD = "                    CPU0       CPU1       \n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        (HEAD, [(0, *[0] * 10), (1, *[0] * 10)]),  # header only: every kind 0
        ("       TIMER:   5   6\n", []),  # no header: no CPUs
        (HEAD + "       TIMER:   5   6\n", [(0, 0, 5, *[0] * 8), (1, 0, 6, *[0] * 8)]),
        # CPU numbers come from the header, not the column position.
        ("   CPU0   CPU2\n  HI:  1  2\n", [(0, 1, *[0] * 9), (2, 2, *[0] * 9)]),
        # A kind from a future kernel is ignored; a garbled line is skipped.
        (HEAD + "  NEW_KIND:  9  9\n   SCHED:  x  1\n     RCU:  3  4",
         [(0, *[0] * 9, 3), (1, *[0] * 9, 4)]),
        # A short row reads 0 for the CPUs it lacks; extra columns are ignored.
        (HEAD + "  HI:  7\n  RCU: 1 2 3\n", [(0, 7, *[0] * 8, 1), (1, *[0] * 9, 2)]),
        ("CPU0\n HI: 18446744073709551615\n", [(0, 18446744073709551615, *[0] * 9)]),
    ],
)
def test_parse(text: str, expected: list[tuple[int, ...]]) -> None:
    assert [(cpu, *r) for cpu, r in parse_softirqs(text).items()] == expected


def reader_rows(r: SoftirqReader, data: bytes) -> list[tuple[int, ...]]:
    return [(*key, *counts) for key, counts in r.read(data).items()]


@pytest.mark.parametrize("case", CASES)
def test_reader_fast_path_reads_what_the_parse_reads(case: str) -> None:
    data = (FIXTURES / case / "softirqs").read_bytes()
    expected = [(cpu, *r) for cpu, r in parse_softirqs(data).items()]
    r = SoftirqReader()
    assert reader_rows(r, data) == expected  # plans
    assert r._plan is not None
    assert reader_rows(r, data) == expected  # the fast path
    bumped = data.replace(b"RCU:", b"RCU: ").replace(b"TIMER:", b"TIMER:1")
    assert reader_rows(r, bumped) == [(cpu, *c) for cpu, c in parse_softirqs(bumped).items()]


@pytest.mark.parametrize(
    "text",
    [
        HEAD + "       TIMER:   5   6\n",
        HEAD + "  HI:  7\n  RCU: 1 2 3\n",  # a short row: the general parse, not a plan
        HEAD + "  NEW_KIND:  9  9\n     RCU:  3  4",  # an unknown kind: not planned
        "   CPU0   CPU2\n  HI:  1  2\n",
        "",
    ],
)
def test_reader_falls_back_to_the_parse(text: str) -> None:
    expected = [(cpu, *r) for cpu, r in parse_softirqs(text).items()]
    r = SoftirqReader()
    for _ in range(2):
        assert reader_rows(r, text.encode()) == expected


def test_reader_follows_a_changed_layout() -> None:
    r = SoftirqReader()
    two = (FIXTURES / "softirq_modern" / "softirqs").read_bytes()
    four = (FIXTURES / "softirq_old" / "softirqs").read_bytes()
    for data in (two, two, four, four, two, b"garbage\n", two):
        assert reader_rows(r, data) == [(c, *v) for c, v in parse_softirqs(data).items()]
    garbled = two.replace(b"SCHED:", b"SCHED: x", 1)
    assert reader_rows(r, garbled) == [(c, *v) for c, v in parse_softirqs(garbled).items()]


# --- the sampler against a fixture procfs root -----------------------------------------


def make_sampler(procfs: Path, enabled: bool = True) -> tuple[CpuSoftirq, dict[str, FakeHandle]]:
    return start_sampler(CpuSoftirq, procfs, procfs / "no-sysfs", enabled=enabled)


@pytest.mark.parametrize("case", CASES)
def test_sampler_publishes_one_record_per_cpu(case: str) -> None:
    s, h = make_sampler(FIXTURES / case)
    try:
        assert s.wanted and s.dist_wanted
        sample_twice(s)
    finally:
        s.close()
    expected = json.loads((FIXTURES / f"{case}.expected.json").read_text())
    records = decoded(CPU_SOFTIRQ.schema, h)
    assert records == expected
    assert CPU_SOFTIRQ.dist_schema is not None
    dist = decoded(CPU_SOFTIRQ.dist_schema, h)
    assert len(dist) == len(expected) * len(SOFTIRQ_KINDS)
    by_key = {(d["cpu"], d["metric"]): d for d in dist}
    for row in expected:
        for k in SOFTIRQ_KINDS:
            d = by_key[(row["cpu"], k)]
            # The file did not change between the two samples: total as read, rate 0.
            assert (d["value"], d["p50"], d["max"]) == (row[k], 0, 0)


def test_sampler_reads_nothing_without_consumer() -> None:
    s, h = make_sampler(FIXTURES / "softirq_modern", enabled=False)
    assert not s.wanted
    assert_silent_without_consumer(s, h)


def test_sampler_rereads_the_kept_open_file(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "softirq_2631" / "softirqs", tmp_path / "softirqs")
    s, h = make_sampler(tmp_path)
    try:
        s.sample(1_000_000_000)
        replace_in_place(tmp_path / "softirqs", b"123456", b"123556")  # cpu0 TIMER +100
        s.sample(2_000_000_000)
        s.publish()
    finally:
        s.close()
    assert CPU_SOFTIRQ.dist_schema is not None
    dist = decoded(CPU_SOFTIRQ.dist_schema, h)
    timer0 = next(d for d in dist if d["cpu"] == 0 and d["metric"] == "timer")
    assert (timer0["value"], timer0["max"]) == (123556, 100)


def test_sampler_without_proc_softirqs_is_unavailable(tmp_path: Path) -> None:
    s = new_sampler(CpuSoftirq, tmp_path, tmp_path)
    with pytest.raises(SamplerUnavailable, match="softirqs"):
        s.start()


# --- the host --------------------------------------------------------------------------


@pytest.mark.host
def test_host_columns_are_the_possible_cpus() -> None:
    possible = parse_cpu_list(Path("/sys/devices/system/cpu/possible").read_text())
    s, _h = make_sampler(Path("/proc"))
    try:
        rows = s.read()[CPU_SOFTIRQ]
    finally:
        s.close()
    assert [k[0] for k in rows] == possible
    assert all(len(v) == len(SOFTIRQ_KINDS) and min(v) >= 0 for v in rows.values())


@pytest.mark.host
def test_host_loopback_traffic_runs_net_rx() -> None:
    """Loopback packets are received through the NET_RX softirq of the sending CPU."""
    s, _h = make_sampler(Path("/proc"))
    rx = SOFTIRQ_KINDS.index("net_rx")
    try:
        before = sum(v[rx] for v in s.read()[CPU_SOFTIRQ].values())
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
            b.bind(("127.0.0.1", 0))
            for _ in range(100):
                a.sendto(b"x", b.getsockname())
            for _ in range(100):
                b.recv(16)
        after = sum(v[rx] for v in s.read()[CPU_SOFTIRQ].values())
    finally:
        s.close()
    assert after - before >= 1


class CountingReader(SoftirqReader):
    """A SoftirqReader that counts the reads its fixed-width path answered."""

    __slots__ = ("fixed_reads",)

    def __init__(self, min_fixed_cpus: int = 1) -> None:
        super().__init__(min_fixed_cpus)
        self.fixed_reads = 0

    def _fixed_read(self, data: bytes) -> dict[tuple, tuple[int, ...]] | None:
        rows = super()._fixed_read(data)
        self.fixed_reads += rows is not None
        return rows


def kernel_softirqs(cpus: int, step: int, names: tuple[str, ...] = ("HI", "TIMER", "NET_TX",
                    "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER",
                    "RCU")) -> bytes:
    """Return /proc/softirqs as the kernel prints it ("CPU%-8d", "%12s:", " %10u"), with
    counts up to an unsigned int's largest."""
    lines = [" " * 20 + "".join(f"CPU{c:<8d}" for c in range(cpus))]
    for i, name in enumerate(names):
        lines.append(f"{name:>12s}:" + "".join(
            f" {(c * 7919 + i * 104729 + step * (c + i + 1)) % 5_000_000_000 % 2**32:10d}"
            for c in range(cpus)))
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("case", CASES)
def test_reader_fixed_width_path_reads_what_the_parse_reads(case: str) -> None:
    data = (FIXTURES / case / "softirqs").read_bytes()
    r = CountingReader()
    for text in (data, data, data.replace(b"         0", b"4294967295")):
        assert reader_rows(r, text) == [(cpu, *c) for cpu, c in parse_softirqs(text).items()]
    assert r.fixed_reads == 3  # the plan's own check, then both later reads


def test_reader_fixed_width_path_at_128_cpus_and_its_fallbacks() -> None:
    """Counts that move (ten digits too), and texts the fixed width does not fit: each
    read gives what the line-by-line parse gives."""
    base = kernel_softirqs(128, 0)
    texts = [kernel_softirqs(128, k) for k in (1, 2, 3)]
    texts += [
        base.replace(b"         0", b"        0 ", 1),  # a count not aligned right
        base.replace(b" 1", b"x1", 1),  # a stray byte: neither parse reads it as a count
        base.replace(b"       RCU:", b"      RCU2:"),  # a name the kernel does not print
        base[:-1],  # no final newline
        kernel_softirqs(129, 4),  # a CPU more
        kernel_softirqs(128, 5, ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK_IOPOLL",
                                 "TASKLET", "SCHED", "HRTIMER", "RCU")),  # Linux 4.4
        kernel_softirqs(128, 6),
        base.replace(b" 4", b"14", 1),  # eleven digits: wider than any unsigned int
    ]
    r = CountingReader(min_fixed_cpus=32)
    assert reader_rows(r, base) == [(cpu, *c) for cpu, c in parse_softirqs(base).items()]
    fixed = r.fixed_reads
    for text in texts:
        expected = [(cpu, *c) for cpu, c in parse_softirqs(text).items()]
        assert reader_rows(r, text) == expected
    assert r.fixed_reads > fixed + 3
    small = CountingReader(min_fixed_cpus=32)
    for k in range(2):
        reader_rows(small, kernel_softirqs(16, k))
    assert small.fixed_reads == 0  # fewer CPUs: read by tokens


def test_sampler_at_128_cpus_writes_the_bytes_the_dicts_give(tmp_path: Path) -> None:
    """At 128 CPUs the fixed-width read hands Tables (arrays) to the Oversampler: the
    payloads of both events are byte for byte those of the token read's dicts, interval
    after interval, counters moving, going back (a reset) and holding still."""
    (tmp_path / "softirqs").write_bytes(kernel_softirqs(128, 0))
    tables, th = make_sampler(tmp_path)
    dicts, dh = make_sampler(tmp_path)
    dicts._reader = SoftirqReader(min_fixed_cpus=1 << 30)
    t = 1_000_000_000
    try:
        for step in range(1, 31):
            data = kernel_softirqs(128, step if step != 17 else 3)
            rewrite_in_place(tmp_path / "softirqs", data if step % 7 else
                             data.replace(b"         1", b"         0"))
            t += 100_000_000
            for s in (tables, dicts):
                s.sample(t, step % 10 == 0)
                if step % 10 == 0:
                    s.publish()
    finally:
        tables.close()
        dicts.close()
    assert isinstance(tables._reader.read(kernel_softirqs(128, 40)), Table)
    for name, handle in th.items():
        assert handle.payloads == dh[name].payloads and handle.payloads, name
