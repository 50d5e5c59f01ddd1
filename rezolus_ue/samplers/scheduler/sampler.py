"""The scheduler sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import RezolusError, SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family, Table
from ..base import FamilySampler
from . import FAMILIES, SCHEDULER, SCHEDULER_CPU

#: /proc/stat lines, in SCHEDULER's scalar order.
_STAT_NEEDLES = (b"\nctxt ", b"\nprocesses ", b"\nprocs_running ", b"\nprocs_blocked ")
#: schedstat versions whose cpu lines we know, and the newest of them.
KNOWN_VERSIONS = (15, 16, 17)
#: Positions of running_ns, waiting_ns, timeslices among the split words of a cpu line
#: (word 0 is ``cpuN``): the 7th, 8th and 9th numbers.
_RUN, _WAIT, _SLICES = 7, 8, 9


def parse_stat_scheduler(data: bytes) -> tuple[int, int, int, int]:
    """Return (context_switches, forks, procs_running, procs_blocked) of /proc/stat."""
    out = [0, 0, 0, 0]
    # These lines follow the cpuN lines and the long intr line: look after intr.
    at = data.find(b"\nintr ")
    buf = b"\n" + (data[data.find(b"\n", at + 1) + 1:] if at >= 0 else data)
    for j, needle in enumerate(_STAT_NEEDLES):
        i = buf.find(needle)
        if i < 0:
            continue
        i += len(needle)
        e = buf.find(b"\n", i)
        try:
            out[j] = int(buf[i:e] if e >= 0 else buf[i:])
        except ValueError:
            continue
    return out[0], out[1], out[2], out[3]


def parse_schedstat_version(data: bytes) -> int:
    """Return the format version on the first line of /proc/schedstat (0 if none)."""
    key, _, value = data.partition(b"\n")[0].partition(b" ")
    return int(value) if key == b"version" and value.strip().isdigit() else 0


def parse_schedstat(data: bytes) -> list[tuple[int, int, int, int]]:
    """Return (cpu, running_ns, waiting_ns, timeslices) per ``cpuN`` line of /proc/schedstat;
    nothing for a version before 15 (or no version line), whose cpu lines differ."""
    if parse_schedstat_version(data) < KNOWN_VERSIONS[0]:
        return []
    rows = []
    for line in cpu_lines(data) if len(data) >= _NUMPY_BYTES else data.split(b"\n"):
        if line[:3] != b"cpu":
            continue  # version, timestamp and domainN lines
        parts = line.split()
        if len(parts) <= _SLICES:
            continue
        try:
            rows.append((int(parts[0][3:]), int(parts[_RUN]), int(parts[_WAIT]),
                         int(parts[_SLICES])))
        except ValueError:
            continue
    return rows


#: From this size (about 16 CPUs with their domain lines) the cpu lines are found with a
#: regular expression (``cpu_lines``), and the loop sees 128 lines, not 514, at 128 CPUs
#: (160 KB): 136 -> 113 us a parse (2-vCPU reference VM; with NumPy then, the expression
#: is faster still); SchedstatReader converts them at once.
_NUMPY_BYTES = 1 << 14
#: A line after the first that starts with ``cpu``, with the newline before it: the
#: search for its literal start skips the domain lines (three quarters of the bytes)
#: without splitting them (51 us at 128 CPUs, NumPy's newline search 78).
_CPU_LINE = re.compile(rb"\ncpu[^\n]*")


def cpu_lines(data: bytes) -> list[bytes]:
    """Return the lines of ``data`` after its first that start with ``cpu``, in order and
    as ``data.split(b"\\n")`` gives them, found without splitting the other lines."""
    return [line[1:] for line in _CPU_LINE.findall(data)]


class SchedstatReader:
    """The SCHEDULER_CPU rows of /proc/schedstat texts: ``parse_schedstat``'s, as a
    ``Table`` from _NUMPY_BYTES.

    At 128 CPUs the loop over the cpu lines (a split and four ``int`` each) and the dict
    of tuples made a read cost 130 us, ten times a second. From _NUMPY_BYTES the cpu
    lines (``_CPU_LINE``) are joined, each ``cpu`` turned into a -1 (a line's start, which
    no number can be) and every number converted at once: 100 us (2-vCPU reference VM,
    warm), and no tuple per CPU for the Oversampler. Any text that would not read as the
    loop reads it (a character other than digits and spaces, a line of another length, a
    number of 2**62 or more, a CPU twice): the loop.
    """

    __slots__ = ("_cpus", "_labels")

    def __init__(self) -> None:
        #: The CPU numbers of the last Table and its labels, one list while they hold.
        self._cpus: list[int] = []
        self._labels: list[tuple[int]] = []

    def read(self, data: bytes) -> Mapping[tuple, Sequence[int]]:
        """Return {(cpu,): (running_ns, waiting_ns, timeslices)} of /proc/schedstat."""
        if len(data) >= _NUMPY_BYTES and parse_schedstat_version(data) >= KNOWN_VERSIONS[0]:
            table = self._table(_CPU_LINE.findall(data))
            if table is not None:
                return table
        return {(cpu,): tuple(values) for cpu, *values in parse_schedstat(data)}

    def _table(self, found: list[bytes]) -> Table | None:
        """Return the Table of the cpu lines ``found`` (each with its newline before)."""
        joined, lines = b"".join(found), len(found)
        # Only digits and spaces after each line's "cpu", and a number right after it
        # (the loop skips a line whose "cpu" has none).
        if not lines or joined.translate(None, _CPU_LINE_BYTES) or b"\ncpu " in joined \
                or b"\ncpu\n" in joined or joined.endswith(b"\ncpu"):
            return None
        text = joined.replace(b"\ncpu", b" -1 ")
        if text.translate(None, b"0123456789 -"):  # c, p or u outside a line's "cpu"
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # text that is not numbers
            values = np.fromstring(text, dtype=np.int64, sep=" ")  # type: ignore[call-overload]
        width = len(values) // lines
        if width <= _SLICES + 1 or len(values) != lines * width:
            return None
        table = values.reshape(lines, width)
        rest = table[:, 1:]
        if (table[:, 0] != -1).any() or int(rest.min()) < 0 or int(rest.max()) >= 1 << 62:
            return None
        cpus = table[:, 1].tolist()
        if cpus != self._cpus:
            if len(set(cpus)) != len(cpus):
                return None
            self._cpus, self._labels = cpus, [(c,) for c in cpus]
        # Word k of a line (word 0: cpuN) is column k + 1 (column 0: the -1).
        return Table(self._labels, table[:, [_RUN + 1, _WAIT + 1, _SLICES + 1]])


#: The bytes of the cpu lines the Table read takes; any other byte and the loop reads.
_CPU_LINE_BYTES = b"0123456789 \ncpu"


class Scheduler(FamilySampler):
    """Context switches, forks, runnable/blocked tasks; per-CPU run and wait time."""

    name = "scheduler"
    families = FAMILIES

    def start(self) -> None:
        procfs = self.ctx.roots.procfs
        try:
            # Shared with the cpu_usage sampler: one read of /proc/stat per agent tick.
            self._stat = self.ctx.shared.open(procfs / "stat")
        except (OSError, RezolusError) as e:
            raise SamplerUnavailable(self.name, str(e)) from None
        self._schedstat: KeptOpen | None = None
        self._reader = SchedstatReader()
        try:
            f = KeptOpen(procfs / "schedstat")
        except FileNotFoundError:
            self.detail = ("rezolus_scheduler_cpu unavailable: no /proc/schedstat (kernel"
                           " built without CONFIG_SCHEDSTATS)")
            return
        except RezolusError as e:
            self.detail = f"rezolus_scheduler_cpu unavailable: {e}"
            return
        version = parse_schedstat_version(f.read())
        if version < KNOWN_VERSIONS[0]:
            f.close()
            self.detail = (f"rezolus_scheduler_cpu unavailable: /proc/schedstat version"
                           f" {version} is not supported (need {KNOWN_VERSIONS[0]} or later)")
            return
        if version > KNOWN_VERSIONS[-1]:
            self.detail = (f"/proc/schedstat version {version} is newer than"
                           f" {KNOWN_VERSIONS[-1]}: cpu lines read as in version"
                           f" {KNOWN_VERSIONS[-1]}")
        self._schedstat = f

    def capture(self) -> dict[Family, bytes]:
        raw = {}
        if self.family_wanted(SCHEDULER):
            raw[SCHEDULER] = self._stat.read_at(self._sample_ns)
        if self._schedstat is not None and self.family_wanted(SCHEDULER_CPU):
            raw[SCHEDULER_CPU] = self._schedstat.read()
        return raw

    def parse(self, raw: dict[Family, bytes]) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        out: dict[Family, Mapping[tuple, Sequence[int]]] = {}
        if (data := raw.get(SCHEDULER)) is not None:
            out[SCHEDULER] = {(): parse_stat_scheduler(data)}
        if (data := raw.get(SCHEDULER_CPU)) is not None:
            out[SCHEDULER_CPU] = self._reader.read(data)
        return out

    def close(self) -> None:
        self._stat.close()
        if self._schedstat is not None:
            self._schedstat.close()
