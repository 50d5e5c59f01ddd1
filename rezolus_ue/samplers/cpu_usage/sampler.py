"""The cpu_usage sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from operator import sub

import numpy as np

from ...linux.procfs import KeptOpen, parse_cpu_list
from ...metrics.family import Family, Table
from ..base import FamilySampler
from . import CPU_CORES, CPU_USAGE, FAMILIES

#: Columns of a cpuN line we publish, in catalog order.
_COLUMNS = 8
_IDLE, _IOWAIT = CPU_USAGE.slot("idle_ns"), CPU_USAGE.slot("iowait_ns")


def parse_proc_stat_cpus(text: bytes | str, tick_ns: int) -> list[tuple[int, ...]]:
    """Return (cpu, user_ns, ..., steal_ns) per ``cpuN`` line of /proc/stat."""
    data = text.encode() if isinstance(text, str) else text
    # The cpuN lines come first; stop before the long "intr" line rather than split it.
    end = data.find(b"\nintr")
    scale = tick_ns.__mul__
    rows = []
    for line in (data if end < 0 else data[:end]).split(b"\n"):
        if line[:3] != b"cpu" or line[3:4] == b" ":  # not a cpu line, or the aggregate
            continue
        parts = line.split(None, _COLUMNS + 1)[: _COLUMNS + 1]
        try:
            cpu = int(parts[0][3:])
            ticks = tuple(map(scale, map(int, parts[1:])))  # C-level loops, no frames
        except ValueError:
            continue
        if len(ticks) < _COLUMNS:
            ticks += (0,) * (_COLUMNS - len(ticks))
        rows.append((cpu, *ticks))
    return rows


def busy_ppm(now: Sequence[int], before: Sequence[int] | None) -> int:
    """Return the busy share (ppm) between two rows of state times (catalog order)."""
    if before is None:
        d = list(now)
    else:
        if len(now) != len(before):
            raise ValueError("rows of different lengths")
        d = list(map(sub, now, before))
        if min(d) < 0:  # counters went back (CPU hotplug reset): no period to judge
            return 0
    total = sum(d)
    if total <= 0:
        return 0
    return round(1_000_000 * (total - d[_IDLE] - d[_IOWAIT]) / total)


#: Columns of every cpu line of Linux >= 2.6.33 (user ... guest_nice): the fast path's.
_LINE_COLUMNS = 10
#: Largest total of a CPU's times over one step that ``busy_ppm``'s arithmetic keeps exact
#: in float64 (1e6 * busy < 2**53): 9 s; a 100 ms step holds at most 0.1 s a CPU.
_EXACT_NS = (1 << 53) // 1_000_000
#: Fewer CPUs are parsed line by line: NumPy's fixed cost would exceed the gain.
FAST_CPUS = 8
#: The bytes of the cpu lines the fast path reads; any other byte and it does not.
_CPU_LINE_BYTES = b"0123456789 \ncpu"


class CpuTimes:
    """The CPU_USAGE rows of /proc/stat texts in turn: per CPU its times and its busy share
    since the previous text (``busy_ppm``).

    At 128 CPUs the line-by-line parse and a ``busy_ppm`` call per CPU cost 360 us a text,
    read every 100 ms (bench/scale.py). The cpu lines keep their layout for the life of a
    kernel (ten columns since 2.6.33), so once a text has been parsed line by line (and
    read the same the fast way) the next ones are read with one NumPy conversion of the
    numbers (each line's start marked by a -1, which no column can be), and every CPU's
    busy share is computed at once in exact arithmetic (integers, then the one float
    division Python's makes). A text of another shape, steps too long for that arithmetic,
    or fewer than FAST_CPUS CPUs: the line-by-line way.
    """

    __slots__ = ("_cpus", "_keys", "_last", "_prev", "_tick_ns")

    def __init__(self, tick_ns: int) -> None:
        self._tick_ns = tick_ns
        #: cpu -> its times at the previous text.
        self._prev: dict[int, tuple[int, ...]] = {}
        #: The CPU numbers of the layout planned (the fast path's), or None.
        self._cpus: list[int] | None = None
        #: The (cpu,) labels of those CPUs, the fast path's rows' (one list while it holds).
        self._keys: list[tuple[int]] = []
        #: The times of the previous text as an array, if it was read the fast way (then
        #: ``_prev`` lacks them: ``_previous``).
        self._last: np.ndarray | None = None

    def rows(self, data: bytes) -> Mapping[tuple, Sequence[int]]:
        """Return {(cpu,): (user_ns, ..., steal_ns, busy_ppm)} of a /proc/stat text (a
        ``Table`` from the fast path)."""
        if self._cpus is not None:
            rows = self._fast(data)
            if rows is not None:
                return rows
        prev = self._previous()
        self._last = self._cpus = None
        rows = {}
        parsed = parse_proc_stat_cpus(data, self._tick_ns)
        for row in parsed:
            cpu, times = row[0], row[1:]
            rows[(cpu,)] = (*times, busy_ppm(times, prev.get(cpu)))
            prev[cpu] = times
        if len(parsed) >= FAST_CPUS:
            numbers = self._numbers(data)
            if numbers is not None and numbers[0].tolist() == [r[0] for r in parsed] and \
                    (numbers[1] * self._tick_ns).tolist() == [list(r[1:]) for r in parsed]:
                self._cpus = [r[0] for r in parsed]
                self._keys = [(c,) for c in self._cpus]
        return rows

    def _previous(self) -> dict[int, tuple[int, ...]]:
        """Return {cpu: its times at the previous text}: the fast path keeps them as an
        array only (``_last``), turned into tuples here when a slower path needs them."""
        if self._last is not None and self._cpus is not None:
            self._prev.update(zip(self._cpus, map(tuple, self._last.tolist()), strict=True))
            self._last = None
        return self._prev

    def _numbers(self, data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """Return the CPU numbers and the eight published columns of each cpu line (in
        ticks), or None if the cpu lines are not all ``cpuN`` and ten decimal columns of
        a size the arithmetic keeps exact (below 2**59 ns: a sum of eight differences
        fits 64 bits)."""
        end = data.find(b"\nintr")
        region = data if end < 0 else data[:end]
        if region[:4] != b"cpu " or region.translate(None, _CPU_LINE_BYTES):
            return None
        text = region[3:].replace(b"\ncpu", b" -1 ")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # text that is not numbers
            values = np.fromstring(text, dtype=np.int64, sep=" ")  # type: ignore[call-overload]
        width = _LINE_COLUMNS + 2  # the -1, the CPU number, the columns
        lines = (len(values) - _LINE_COLUMNS) // width
        if lines <= 0 or len(values) != _LINE_COLUMNS + lines * width:
            return None
        table = values[_LINE_COLUMNS:].reshape(lines, width)
        if (table[:, 0] != -1).any() or int(table[:, 1:].max()) > (1 << 59) // self._tick_ns \
                or int(table[:, 1:].min()) < 0:
            return None
        return table[:, 1], table[:, 2 : 2 + _COLUMNS]

    def _fast(self, data: bytes) -> Table | None:
        cpus = self._cpus
        numbers = self._numbers(data)
        if numbers is None or len(numbers[0]) != len(cpus) or numbers[0].tolist() != cpus:
            return None
        now = numbers[1] * self._tick_ns
        ppm = self._busy(now)
        if ppm is None:
            prev = self._previous()
            ppm = np.array([busy_ppm(t, prev.get(c)) for c, t in
                            zip(cpus, map(tuple, now.tolist()), strict=True)], dtype=np.int64)
        self._last = now
        return Table(self._keys, np.concatenate((now, ppm[:, None]), axis=1))

    def _busy(self, now: np.ndarray) -> np.ndarray | None:
        """Return every CPU's ``busy_ppm`` against the previous text, or None when that
        was not read the fast way or a step is too long for exact arithmetic."""
        if self._last is None:
            return None
        d = now - self._last
        total = d.sum(axis=1)
        if int(total.max(initial=0)) > _EXACT_NS:
            return None
        busy = total - d[:, _IDLE] - d[:, _IOWAIT]
        ok = (d.min(axis=1) >= 0) & (total > 0)
        ppm = np.rint((busy * 1_000_000).astype(np.float64) / np.where(ok, total, 1))
        return np.where(ok, ppm, 0).astype(np.int64)


class CpuUsage(FamilySampler):
    """Per-CPU user/nice/system/idle/iowait/irq/softirq/steal time, busy %, online CPUs."""

    name = "cpu_usage"
    families = FAMILIES

    def start(self) -> None:
        # Shared with the scheduler sampler: one read of /proc/stat per agent tick.
        self._stat = self.ctx.shared.open(self.ctx.roots.procfs / "stat")
        try:
            self._online = KeptOpen(self.ctx.roots.sysfs / "devices/system/cpu/online")
        except BaseException:
            # The agent does not close() a sampler that failed to start.
            self._stat.close()
            raise
        self._times = CpuTimes(1_000_000_000 // os.sysconf("SC_CLK_TCK"))

    def capture(self) -> dict[Family, bytes]:
        raw = {}
        if self.family_wanted(CPU_USAGE):
            raw[CPU_USAGE] = self._stat.read_at(self._sample_ns)
        if self.family_wanted(CPU_CORES):
            raw[CPU_CORES] = self._online.read()
        return raw

    def parse(self, raw: dict[Family, bytes]) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        out: dict[Family, Mapping[tuple, Sequence[int]]] = {}
        if (data := raw.get(CPU_USAGE)) is not None:
            out[CPU_USAGE] = self._times.rows(data)
        if (data := raw.get(CPU_CORES)) is not None:
            out[CPU_CORES] = {(): (len(parse_cpu_list(data.decode("ascii", "replace"))),)}
        return out

    def close(self) -> None:
        self._stat.close()
        self._online.close()
