"""The cgroup sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import errno
import fnmatch
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tracefs_tools import parse_mounts

from ...errors import SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family
from ..base import FamilySampler
from ..ranked import Kept, growth, rank
from . import CGROUP_FAMILY, FAMILIES, OPTIONS

#: Longest published label, in bytes (the event field holds 256 with the NUL).
LABEL_MAX = 255
#: Shortest time between two walks of the hierarchy.
RESCAN_NS = 10_000_000_000
#: Preferred cgroup2 mount points, best first (then any other cgroup2 mount).
_PREFERRED = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
#: A kept-open file of a removed group reads these.
_GONE = (errno.ENODEV, errno.ENOENT)
_NO_IO = (0, 0, 0, 0)


def parse_cpu_stat(data: bytes) -> tuple[int, int, int, int, int]:
    """Return (usage_ns, user_ns, system_ns, throttled_periods, throttled_ns) of cpu.stat."""
    f = data.split()
    usage = user = system = periods = throttled = 0
    # A plain loop over the pairs: cheaper than building a dict of ten keys.
    for i in range(0, len(f) - 1, 2):
        key = f[i]
        if key == b"usage_usec":
            usage = int(f[i + 1])
        elif key == b"user_usec":
            user = int(f[i + 1])
        elif key == b"system_usec":
            system = int(f[i + 1])
        elif key == b"nr_throttled":
            periods = int(f[i + 1])
        elif key == b"throttled_usec":
            throttled = int(f[i + 1])
    return usage * 1000, user * 1000, system * 1000, periods, throttled * 1000


def parse_io_stat(data: bytes) -> tuple[int, int, int, int]:
    """Return (read_bytes, write_bytes, reads, writes) of io.stat, summed over devices."""
    rb = wb = rio = wio = 0
    for tok in data.split():
        key, sep, val = tok.partition(b"=")
        if not sep:
            continue  # the MAJ:MIN device
        if key == b"rbytes":
            rb += int(val)
        elif key == b"wbytes":
            wb += int(val)
        elif key == b"rios":
            rio += int(val)
        elif key == b"wios":
            wio += int(val)
    return rb, wb, rio, wio


def parse_memory_current(data: bytes) -> int:
    """Return the bytes in memory.current."""
    return int(data)


def cgroup2_mounts(mounts_text: str) -> list[str]:
    """Return the cgroup2 mount points of a /proc/mounts text, best first."""
    found = [e.target for e in parse_mounts(mounts_text) if e.fstype == "cgroup2"]
    rank = {p: i for i, p in enumerate(_PREFERRED)}
    return sorted(dict.fromkeys(found), key=lambda p: rank.get(p, len(rank)))


def truncate_label(path: str) -> str:
    """Return ``path`` as valid UTF-8 (undecodable bytes become ``?``) cut to at most
    LABEL_MAX bytes, at a character boundary."""
    data = path.encode("utf-8", "replace")
    return data[:LABEL_MAX].decode("utf-8", "ignore")


def matches(path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Return True when ``path`` matches an include glob and no exclude glob."""
    return (any(fnmatch.fnmatchcase(path, g) for g in include)
            and not any(fnmatch.fnmatchcase(path, g) for g in exclude))


def select_top(usage: Mapping[str, int], baseline: Mapping[str, int],
               limit: int) -> list[str]:
    """Return at most ``limit`` paths of ``usage``: those with the most CPU time since
    ``baseline`` (all of it for a path not in the baseline, or below it: a new group of
    that name), ties by path, in path order."""
    used = growth(usage, baseline)
    return sorted(rank(used.keys(), used.values(), limit))


def walk(root: Path) -> list[str]:
    """Return the paths of every group below ``root`` (``/`` first), depth first."""
    out = []
    stack = [("", str(root))]
    while stack:
        rel, abspath = stack.pop()
        out.append(rel or "/")
        try:
            with os.scandir(abspath) as it:
                dirs = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:  # removed while walking
            continue
        stack.extend((f"{rel}/{name}", f"{abspath}/{name}")
                     for name in sorted(dirs, reverse=True))
    return out


def _read_once(path: Path | str) -> bytes | None:
    """Return a file's contents, or None if it does not exist (any more)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


class _Group:
    """The kept-open files of one published cgroup."""

    __slots__ = ("cpu", "dir", "io", "label", "memory")

    def __init__(self, label: str, directory: Path, cpu: KeptOpen) -> None:
        self.label = label
        self.dir = directory
        self.cpu = cpu
        self.memory: KeptOpen | None = None
        self.io: KeptOpen | None = None

    def open_optional(self) -> None:
        """Open memory.current and io.stat where they exist (controllers may come later)."""
        if self.memory is None:
            self.memory = _open_if_exists(self.dir / "memory.current")
        if self.io is None:
            self.io = _open_if_exists(self.dir / "io.stat")

    def close(self) -> None:
        for f in (self.cpu, self.memory, self.io):
            if f is not None:
                f.close()


def _open_if_exists(path: Path) -> KeptOpen | None:
    try:
        return KeptOpen(path)
    except FileNotFoundError:
        return None


class Cgroups(FamilySampler):
    """Per cgroup v2 CPU time, throttling, memory and IO, for at most max_cgroups groups."""

    name = "cgroup"
    families = FAMILIES
    oversample = False
    options = OPTIONS

    def start(self) -> None:
        self._max = self.int_option("max_cgroups")
        self._include = self.strings_option("include")
        self._exclude = self.strings_option("exclude")
        self.root = self._find_root(self.str_option("root"))
        self._groups: Kept[str, _Group] = Kept()
        self._baseline: dict[str, int] = {}
        self._next_scan = 0
        self._clock = time.monotonic_ns
        self._missing = self._missing_controllers()
        #: Of the last walk: matching groups, groups beyond max_cgroups, groups not opened.
        self.matched = self.over_limit = self.failed = 0
        self.rescan()

    def _find_root(self, option: str) -> Path:
        """Return the cgroup2 hierarchy root; raise SamplerUnavailable if there is none."""
        if option:
            root = Path(option)
            if not (root / "cgroup.controllers").is_file():
                raise SamplerUnavailable(
                    self.name, f"root = {option!r} is not a cgroup v2 hierarchy (no"
                    " cgroup.controllers there)")
            return root
        mounts = self.ctx.roots.procfs / "mounts"
        try:
            text = mounts.read_text()
        except OSError as e:
            raise SamplerUnavailable(self.name, f"cannot read {mounts}: {e.strerror}") from None
        points = cgroup2_mounts(text)
        if not points:
            v1 = sorted({Path(e.target).name for e in parse_mounts(text)
                         if e.fstype == "cgroup"})
            which = f"cgroup v1 only ({', '.join(v1)})" if v1 else "no cgroup mounted at all"
            raise SamplerUnavailable(
                self.name, f"no cgroup2 mount in {mounts}: {which}; boot with"
                " systemd.unified_cgroup_hierarchy=1, or mount one (mount -t cgroup2 none"
                " /sys/fs/cgroup/unified), or set root")
        # Mounts under /sys are read below the sysfs root, so fixture trees work.
        point = points[0]
        if point == "/sys" or point.startswith("/sys/"):
            return self.ctx.roots.sysfs / point[len("/sys/"):]
        return Path(point)

    def _missing_controllers(self) -> list[str]:
        """Return the controllers we read that the hierarchy's root does not offer."""
        data = _read_once(self.root / "cgroup.controllers")
        have = set((data or b"").split())
        missing = [c for c in ("cpu", "memory", "io") if c.encode() not in have]
        return missing

    def rescan(self) -> None:
        """Walk the hierarchy and choose the groups to publish (see the module docstring)."""
        self._next_scan = self._clock() + RESCAN_NS
        usage: dict[str, int] = {}
        # Paths as strings: a Path per group cost more than reading its cpu.stat (at
        # 5,000 groups a walk took 100 ms, bench/scale.py).
        root = str(self.root).rstrip("/")
        for path in walk(self.root):
            if not matches(path, self._include, self._exclude):
                continue
            g = self._groups.get(truncate_label(path))
            try:
                data = g.cpu.read() if g is not None else _read_once(
                    f"{root}{'' if path == '/' else path}/cpu.stat")
            except OSError:
                data = None
            if data is not None:
                usage[path] = parse_cpu_stat(data)[0]
        keep = select_top(usage, self._baseline, self._max)
        self._baseline = usage
        self.matched, self.over_limit = len(usage), len(usage) - len(keep)
        labels = [truncate_label(p) for p in keep]
        # Two long paths that agree in their first 255 bytes: the first is kept, the
        # second counted as failed (a repeated key).
        paths: dict[str, str] = {}
        for label, path in zip(labels, keep, strict=True):
            paths.setdefault(label, path)
        self.failed = self._groups.keep(
            labels, lambda label: self._open_group(label, paths[label]), _Group.open_optional)
        self._set_detail()

    def _open_group(self, label: str, path: str) -> _Group:
        """Return the group at ``path`` with its files open (FileNotFoundError: removed
        meanwhile)."""
        d = self._dir(path)
        g = _Group(label, d, KeptOpen(d / "cpu.stat"))
        try:
            g.open_optional()
        except BaseException:
            g.close()
            raise
        return g

    def _dir(self, path: str) -> Path:
        return self.root if path == "/" else self.root / path[1:]

    def _set_detail(self) -> None:
        parts = []
        if self.over_limit:
            parts.append(f"{len(self._groups)} of {self.matched} matching cgroups published:"
                         f" {self.over_limit} beyond max_cgroups={self._max} (least CPU"
                         " since the previous walk)")
        if self.failed:
            parts.append(f"{self.failed} cgroups could not be opened (fd limit or"
                         " truncated paths that collide)")
        if self._missing:
            parts.append(f"no {', '.join(self._missing)} controller in {self.root} (bound"
                         " to cgroup v1?): "
                         + ", ".join({"cpu": "throttling", "memory": "memory",
                                      "io": "io"}[c] for c in self._missing) + " read 0")
        self.detail = "; ".join(parts)

    def capture(self) -> list[tuple[str, bytes, bytes | None, bytes | None]] | None:
        if not self.family_wanted(CGROUP_FAMILY):
            return None
        if self._clock() >= self._next_scan:
            self.rescan()
        out = []
        for label, g in self._groups.items():
            try:
                mem = g.memory.read() if g.memory is not None else None
                out.append((label, g.cpu.read(), mem, g.io.read() if g.io is not None else None))
            except OSError as e:
                if e.errno not in _GONE:
                    raise
                self._groups.drop(label)
        return out

    def parse(self, raw: list[tuple[str, bytes, bytes | None, bytes | None]] | None,
              ) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        return {CGROUP_FAMILY: {
            (label,): (*parse_cpu_stat(cpu),
                       parse_memory_current(mem) if mem is not None else 0,
                       *(parse_io_stat(io) if io is not None else _NO_IO))
            for label, cpu, mem, io in raw}}

    def close(self) -> None:
        groups = getattr(self, "_groups", None)
        if groups is not None:
            groups.close()
