"""The blockio sampler: /proc/diskstats parsing against fixture trees, device selection
(partitions from sysfs or by name, idle devices, globs), 32-bit ms unwrapping, the sampler
end to end, and a write to this host's root device.

Golden files: ``tests/fixtures/procfs/blockio/<case>.expected.json`` hold the parsed rows of
``tests/fixtures/procfs/blockio/<case>/diskstats``. After a deliberate change, regenerate
them with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest tests/test_sampler_blockio.py`` and review
the diff.
"""

from __future__ import annotations

import os
import shutil
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
from rezolus_ue.samplers.blockio import BLOCKIO
from rezolus_ue.samplers.blockio.sampler import (
    WRAP_NS,
    BlockIO,
    diskstats_values,
    looks_like_partition,
    parse_diskstats,
    unwrap_times,
)

PROCFS = Path(__file__).parent / "fixtures" / "procfs" / "blockio"
SYSFS = Path(__file__).parent / "fixtures" / "sysfs" / "blockio"
CASES = ["modern", "partitions", "old", "v4_19"]
FIELDS = [m.name for m in BLOCKIO.scalars]


def parse_case(case: str) -> list[dict[str, object]]:
    rows = parse_diskstats((PROCFS / case / "diskstats").read_bytes())
    return [{"major": ma, "minor": mi, "device": name, **dict(zip(FIELDS, v, strict=True))}
            for ma, mi, name, v in rows]


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    check_golden(PROCFS / f"{case}.expected.json", parse_case(case))


def test_modern_host_copy_columns() -> None:
    """Every column of the host's vda line lands where the catalog says, in its unit."""
    line = next(ln for ln in (PROCFS / "modern" / "diskstats").read_text().splitlines()
                if ln.split()[2] == "vda")
    f = [int(v) for v in line.split()[3:]]
    assert len(f) == 17
    (vda,) = [r for r in parse_case("modern") if r["device"] == "vda"]
    assert vda == {
        "major": 254, "minor": 0, "device": "vda",
        "reads": f[0], "writes": f[4], "discards": f[11], "flushes": f[15],
        "read_bytes": f[2] * 512, "write_bytes": f[6] * 512, "discard_bytes": f[13] * 512,
        "read_time_ns": f[3] * 1_000_000, "write_time_ns": f[7] * 1_000_000,
        "busy_ns": f[9] * 1_000_000, "in_flight": f[8],
    }


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        # 5.5+: flushes; merged, weighted and discard/flush times are not published
        ("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17",
         (1, 5, 12, 16, 3 * 512, 7 * 512, 14 * 512, 4_000_000, 8_000_000, 10_000_000, 9)),
        # 4.18-5.4: discards, no flushes
        ("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15",
         (1, 5, 12, 0, 3 * 512, 7 * 512, 14 * 512, 4_000_000, 8_000_000, 10_000_000, 9)),
        # before 4.18
        ("1 2 3 4 5 6 7 8 9 10 11",
         (1, 5, 0, 0, 3 * 512, 7 * 512, 0, 4_000_000, 8_000_000, 10_000_000, 9)),
        # 2.6.0-2.6.24 partition line: reads, sectors read, writes, sectors written
        ("1 2 3 4", (1, 3, 0, 0, 2 * 512, 4 * 512, 0, 0, 0, 0, 0)),
        ("1 2 3 4 5", None),
        ("1 2 3 4 5 6 7 8 9 10", None),
        # an in-flight count that went negative (old kernel accounting bugs) reads 0
        ("1 2 3 4 5 6 7 8 -1 10 11", (1, 5, 0, 0, 3 * 512, 7 * 512, 0, 4_000_000, 8_000_000,
                                      10_000_000, 0)),
    ],
)
def test_diskstats_values(stats: str, expected: tuple[int, ...] | None) -> None:
    assert diskstats_values(stats.encode().split()) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", []),
        (b"   8 0 sda 1 2 3 4 5 6 7 8 9 10 11", [(8, 0, "sda")]),  # no final newline
        (b"8 0 sda 1 2 x 4 5 6 7 8 9 10 11\n8 1 sdb 1 2 3 4 5 6 7 8 9 10 11\n", [(8, 1, "sdb")]),
        (b"8 0 sda 1 2\n", []),
        (b"x 0 sda 1 2 3 4 5 6 7 8 9 10 11\n", []),
    ],
)
def test_parse_diskstats_lines(text: bytes, expected: list[tuple[int, int, str]]) -> None:
    assert [r[:3] for r in parse_diskstats(text)] == expected


@pytest.mark.parametrize(
    ("name", "partition"),
    [
        ("sda1", True), ("sda", False), ("sdb1", False),  # sdb is not listed
        ("nvme0n1p2", True), ("nvme0n1", False), ("mmcblk0p1", True),
        ("mmcblk0boot0", False), ("loop0", False), ("loop0p1", True), ("md127", False),
        ("dm-0", False), ("sr0", False), ("hda12", True), ("vda", False), ("1", False),
    ],
)
def test_looks_like_partition(name: str, partition: bool) -> None:
    names = {"sda", "sda1", "nvme0n1", "nvme0n1p2", "mmcblk0", "mmcblk0p1", "mmcblk0boot0",
             "loop0", "loop0p1", "md127", "dm-0", "sr0", "hda", "hda12", "vda", "1"}
    assert looks_like_partition(name, names) is partition


def test_unwrap_times() -> None:
    def row(ops: int, rt: int, wt: int, busy: int) -> tuple[int, ...]:
        return (ops, 0, 0, 0, 0, 0, 0, rt, wt, busy, 1)

    ms = 1_000_000
    top = (1 << 32) - 1
    v, st = unwrap_times(row(10, top * ms, 5 * ms, top * ms), None)
    assert v == row(10, top * ms, 5 * ms, top * ms)
    # read time and busy time wrapped, write time did not
    v, st = unwrap_times(row(11, 3 * ms, 6 * ms, 1 * ms), st)
    assert v == row(11, 3 * ms + WRAP_NS, 6 * ms, 1 * ms + WRAP_NS)
    # the offsets stay while the times keep growing
    v, st = unwrap_times(row(12, 4 * ms, 7 * ms, 2 * ms), st)
    assert v == row(12, 4 * ms + WRAP_NS, 7 * ms, 2 * ms + WRAP_NS)
    # the ops count went back: the device was re-created, counts start afresh
    v, st = unwrap_times(row(1, 1 * ms, 1 * ms, 1 * ms), st)
    assert v == row(1, 1 * ms, 1 * ms, 1 * ms)
    assert st[1] == (0, 0, 0)


# --- the sampler against fixture roots ---------------------------------------------------


def make_sampler(procfs: Path, sysfs: Path, enabled: bool = True,
                 **opts: object) -> tuple[BlockIO, dict[str, FakeHandle]]:
    return start_sampler(BlockIO, procfs, sysfs, enabled=enabled, **opts)


def records(case: str, **opts: object) -> list[dict[str, object]]:
    s, h = make_sampler(PROCFS / case, SYSFS / case, **opts)
    try:
        sample_twice(s)
    finally:
        s.close()
    return decoded(BLOCKIO.schema, h)


def devices(case: str, **opts: object) -> list[object]:
    return [r["device"] for r in records(case, **opts)]


LONG = "this-device-name-is-forty-bytes"  # the fixture's 39-byte name, cut to 31 bytes


@pytest.mark.parametrize(
    ("case", "opts", "expected"),
    [
        ("modern", {}, ["vda"]),
        ("modern", {"include_idle": True},
         ["loop0", "loop1", "loop2", "loop3", "loop4", "loop5", "loop6", "loop7", "vda",
          "zram0"]),
        # sysfs says which are partitions; sdb1 is missing from the sysfs tree, so its name
        # decides (sdb plus a number)
        ("partitions", {},
         ["nvme0n1", "sda", "sdb", "mmcblk0", "mmcblk0boot0", "dm-0", "md127", "loop1", LONG]),
        ("partitions", {"include_partitions": True},
         ["nvme0n1", "nvme0n1p1", "nvme0n1p2", "sda", "sda1", "sdb", "sdb1", "mmcblk0",
          "mmcblk0p1", "mmcblk0boot0", "dm-0", "md127", "loop1", LONG]),
        ("partitions", {"devices": ["nvme*", "sd?"]}, ["nvme0n1", "sda", "sdb"]),
        ("partitions", {"devices": ["nvme*"], "include_partitions": True},
         ["nvme0n1", "nvme0n1p1", "nvme0n1p2"]),
        ("partitions", {"devices": ["loop*"], "include_idle": True}, ["loop0", "loop1"]),
        ("partitions", {"devices": ["sdz"]}, []),
        # no sysfs at all: partitions by name, including 4-field 2.6.0-2.6.24 lines
        ("old", {}, ["hda", "sda", "dm-0"]),
        ("old", {"include_partitions": True, "include_idle": True},
         ["ram0", "ram1", "hda", "hda1", "sda", "sda1", "sda2", "md0", "dm-0"]),
        ("v4_19", {}, ["sda", "sdb"]),
    ],
)
def test_sampler_selects_devices(case: str, opts: dict[str, object],
                                 expected: list[str]) -> None:
    assert devices(case, **opts) == expected


@pytest.mark.parametrize("case", CASES)
def test_sampler_end_to_end(case: str) -> None:
    """Each record is the parser's row for that device; _dist covers every device."""
    got = records(case, include_partitions=True, include_idle=True)
    want = parse_case(case)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g["device"] == str(w["device"])[:31]
        assert [g[f] for f in FIELDS] == [w[f] for f in FIELDS]


def test_sampler_dist_records() -> None:
    s, h = make_sampler(PROCFS / "v4_19", SYSFS / "v4_19")
    try:
        sample_twice(s)
    finally:
        s.close()
    assert BLOCKIO.dist_schema is not None
    dist = decoded(BLOCKIO.dist_schema, h)
    metrics = [m.name for m in BLOCKIO.dist_metrics]
    assert [(d["device"], d["metric"]) for d in dist] == [
        (dev, m) for dev in ("sda", "sdb") for m in metrics]
    inflight = [d for d in dist if d["device"] == "sda" and d["metric"] == "in_flight"]
    assert [(d["value"], d["p50"], d["max"]) for d in inflight] == [(12, 12, 12)]


def test_sampler_unwraps_ms_and_follows_rewrites(tmp_path: Path) -> None:
    """v4_19's sda read time is 1296 ms short of the 32-bit wrap: after 2000 ms more it
    reads as 704 ms, and the sampler publishes 4294968000 ms."""
    shutil.copy(PROCFS / "v4_19" / "diskstats", tmp_path / "diskstats")
    s, h = make_sampler(tmp_path, SYSFS / "v4_19")
    try:
        s.sample(1_000_000_000)
        replace_in_place(tmp_path / "diskstats", b"sda 9823451 40234 1203445120 4294966000",
                         b"sda 9823452 40234 1203445128 704")
        s.sample(2_000_000_000)
        s.publish()
    finally:
        s.close()
    sda = [r for r in decoded(BLOCKIO.schema, h) if r["device"] == "sda"]
    assert [r["read_time_ns"] for r in sda] == [4_294_968_000 * 1_000_000]
    assert [r["reads"] for r in sda] == [9823452]
    assert BLOCKIO.dist_schema is not None
    rate = [d["max"] for d in decoded(BLOCKIO.dist_schema, h)
            if d["device"] == "sda" and d["metric"] == "read_bytes"]
    assert rate == [8 * 512]  # 8 sectors in 1 s


def test_sampler_not_wanted_reads_nothing() -> None:
    s, h = make_sampler(PROCFS / "modern", SYSFS / "modern", enabled=False)
    try:
        assert s.read() == {}
        h[f"{BLOCKIO.event}_dist"].word.value = 1
        assert list(s.read()[BLOCKIO]) == [("vda",)]
    finally:
        s.close()


def test_sampler_without_diskstats_cannot_start(tmp_path: Path) -> None:
    with pytest.raises(SamplerUnavailable, match="diskstats"):
        make_sampler(tmp_path, tmp_path)


# --- the host ----------------------------------------------------------------------------


def _dir_on(dev: int, candidates: list[Path]) -> Path | None:
    for d in candidates:
        try:
            if d.is_dir() and os.stat(d).st_dev == dev:
                return d
        except OSError:
            continue
    return None


@pytest.mark.host
def test_host_fsynced_write_shows_in_write_bytes(tmp_path: Path) -> None:
    """Write and fsync 8 MiB on the root filesystem: its device's write_bytes rises by at
    least that much."""
    root_dev = os.stat("/").st_dev
    major, minor = os.major(root_dev), os.minor(root_dev)
    lines = {(ma, mi): name for ma, mi, name, _v in
             parse_diskstats(Path("/proc/diskstats").read_bytes())}
    name = lines.get((major, minor))
    if name is None:
        pytest.skip(f"the root filesystem's device {major}:{minor} is not in /proc/diskstats"
                    " (overlay, tmpfs, btrfs or another virtual filesystem)")
    where = _dir_on(root_dev, [tmp_path, Path("/var/tmp"), Path("/tmp"), Path("/root")])
    if where is None:
        pytest.skip("no writable directory on the root filesystem")
    size = 8 << 20
    s, h = make_sampler(Path("/proc"), Path("/sys"), include_partitions=True,
                        devices=[name])
    path = where / f"rezolus-ue-blockio-test-{os.getpid()}"
    try:
        before = dict(zip(FIELDS, s.read()[BLOCKIO][(name[:31],)], strict=True))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, os.urandom(size))
            os.fsync(fd)
        finally:
            os.close(fd)
        s.sample(1_000_000_000)
        s.publish()
    finally:
        s.close()
        path.unlink(missing_ok=True)
    rows = decoded(BLOCKIO.schema, h)
    assert [r["device"] for r in rows] == [name[:31]]
    (after,) = rows
    grew = after["write_bytes"] - before["write_bytes"]  # type: ignore[operator]
    assert grew >= size, f"write_bytes rose by {grew} < {size}"
    assert after["writes"] > before["writes"]  # type: ignore[operator]
