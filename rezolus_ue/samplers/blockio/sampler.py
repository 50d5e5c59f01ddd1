"""The blockio sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from fnmatch import fnmatchcase

from ...errors import RezolusError, SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family
from ..base import FamilySampler, Unchanged
from . import BLOCKIO, FAMILIES, OPTIONS

SECTOR_BYTES = 512
MS_NS = 1_000_000
#: The ms fields wrap at 2**32 ms.
WRAP_NS = (1 << 32) * MS_NS
#: Longest device label: the ``device`` field is char[32], NUL included.
NAME_MAX = 31
#: Where unwrap_times keeps a device's state: (raw times, their offsets, reads + writes).
WrapState = tuple[tuple[int, int, int], tuple[int, int, int], int]
#: Decisions remembered per (major, minor, name) before the cache is cleared (device churn).
_CACHE_MAX = 4096


def diskstats_values(stats: Sequence[bytes]) -> tuple[int, ...] | None:
    """Return BLOCKIO's values (scalar order) from the fields after ``major minor name``,
    or None if there are too few of them."""
    n = len(stats)
    if n >= 11:
        reads, _, rsec, rms, writes, _, wsec, wms, inflight, io_ms = (int(v) for v in stats[:10])
        discards = dsec = flushes = 0
        if n >= 15:  # Linux >= 4.18
            discards, dsec = int(stats[11]), int(stats[13])
            if n >= 17:  # Linux >= 5.5
                flushes = int(stats[15])
        return (reads, writes, discards, flushes, rsec * SECTOR_BYTES, wsec * SECTOR_BYTES,
                dsec * SECTOR_BYTES, rms * MS_NS, wms * MS_NS, io_ms * MS_NS,
                inflight if inflight > 0 else 0)
    if n == 4:  # Linux 2.6.0-2.6.24 partition line: reads, sectors read, writes, written
        reads, rsec, writes, wsec = (int(v) for v in stats)
        return (reads, writes, 0, 0, rsec * SECTOR_BYTES, wsec * SECTOR_BYTES, 0, 0, 0, 0, 0)
    return None


def parse_diskstats(data: bytes) -> list[tuple[int, int, str, tuple[int, ...]]]:
    """Return (major, minor, name, values in BLOCKIO's scalar order) per /proc/diskstats
    line; garbled lines are skipped."""
    rows = []
    for line in data.split(b"\n"):
        parts = line.split()
        if len(parts) < 7:
            continue
        try:
            values = diskstats_values(parts[3:])
            if values is None:
                continue
            rows.append((int(parts[0]), int(parts[1]), parts[2].decode(errors="replace"),
                         values))
        except ValueError:
            continue
    return rows


def unwrap_times(values: tuple[int, ...], prev: WrapState | None
                 ) -> tuple[tuple[int, ...], WrapState]:
    """Return ``values`` with the 32-bit ms fields (read, write and busy time) unwrapped,
    and the state for the next call; ``prev`` is that state from the device's last read.

    A time that went back while reads + writes did not has wrapped; when reads + writes
    went back too, the device was re-created and its counts start afresh.
    """
    raw = (values[7], values[8], values[9])
    ops = values[0] + values[1]
    if prev is None or ops < prev[2]:
        return values, (raw, (0, 0, 0), ops)
    (p0, p1, p2), (o0, o1, o2) = prev[0], prev[1]
    if raw[0] < p0:
        o0 += WRAP_NS
    if raw[1] < p1:
        o1 += WRAP_NS
    if raw[2] < p2:
        o2 += WRAP_NS
    state = (raw, (o0, o1, o2), ops)
    if not (o0 or o1 or o2):
        return values, state
    return (*values[:7], raw[0] + o0, raw[1] + o1, raw[2] + o2, values[10]), state


def looks_like_partition(name: str, names: Set[str]) -> bool:
    """Return True if ``name`` is another device in ``names`` plus a partition number
    (``sda`` + ``1``; ``nvme0n1``/``mmcblk0``/``loop0`` + ``p2``): the fallback when sysfs
    cannot say."""
    base = name.rstrip("0123456789")
    if not base or base == name:
        return False
    if base in names:
        return True
    return base.endswith("p") and base[-2:-1].isdigit() and base[:-1] in names


def device_label(name: bytes) -> str:
    """Return the ``device`` label of a kernel device name (at most NAME_MAX bytes)."""
    return name[:NAME_MAX].decode(errors="replace")


class BlockIO(FamilySampler):
    """Per block device reads, writes, discards, flushes, bytes, time, busy time, in flight."""

    name = "blockio"
    families = FAMILIES
    options = OPTIONS

    def start(self) -> None:
        try:
            self._diskstats = KeptOpen(self.ctx.roots.procfs / "diskstats")
        except (OSError, RezolusError) as e:
            raise SamplerUnavailable(self.name, f"{e} (needs a kernel with CONFIG_BLOCK and"
                                     " procfs)") from None
        self._globs = self.strings_option("devices")
        self._partitions = self.bool_option("include_partitions")
        self._idle = self.bool_option("include_idle")
        #: (major, minor, name) -> label to publish, or None to skip the device.
        self._keep: dict[tuple[bytes, bytes, bytes], str | None] = {}
        #: label -> unwrap_times state at the last read.
        self._wrap: dict[str, WrapState] = {}
        self._unchanged = Unchanged()

    def _decide(self, key: tuple[bytes, bytes, bytes], data: bytes) -> str | None:
        """Return the label of a device seen for the first time, or None to skip it."""
        name = key[2].decode(errors="replace")
        if self._globs and not any(fnmatchcase(name, g) for g in self._globs):
            return None
        if not self._partitions and self._is_partition(name, data):
            return None
        return device_label(key[2])

    def _is_partition(self, name: str, data: bytes) -> bool:
        d = self.ctx.roots.sysfs / "class" / "block" / name.replace("/", "!")
        try:
            if d.is_dir():
                return (d / "partition").exists()
        except OSError:
            pass
        names = {p[2].decode(errors="replace") for p in
                 (line.split() for line in data.split(b"\n")) if len(p) >= 3}
        return looks_like_partition(name, names)

    def capture(self) -> bytes | None:
        return self._diskstats.read() if self.family_wanted(BLOCKIO) else None

    def parse(self, data: bytes | None) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if data is None:
            return {}
        # The same bytes give the same rows and leave the wrap state as it was.
        return self._unchanged.parse(data, self._parse)

    def _parse(self, data: bytes) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        keep, idle = self._keep, self._idle
        if len(keep) > _CACHE_MAX:
            keep.clear()
        prev_wrap: dict[str, WrapState] = self._wrap
        wrap: dict[str, WrapState] = {}
        rows: dict[tuple, Sequence[int]] = {}
        for line in data.split(b"\n"):
            parts = line.split()
            if len(parts) < 7:
                continue
            key = (parts[0], parts[1], parts[2])
            try:
                label = keep[key]
            except KeyError:
                label = keep[key] = self._decide(key, data)
            if label is None:
                continue
            stats = parts[3:]
            if not idle and stats.count(b"0") == len(stats):
                continue
            try:
                values = diskstats_values(stats)
            except ValueError:
                continue
            if values is None:
                continue
            rows[(label,)], wrap[label] = unwrap_times(values, prev_wrap.get(label))
        self._wrap = wrap
        return {BLOCKIO: rows}

    def close(self) -> None:
        self._diskstats.close()
