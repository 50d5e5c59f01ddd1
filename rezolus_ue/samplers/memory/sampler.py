"""The memory sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import RezolusError, SamplerUnavailable
from ...linux.procfs import KeptOpen, picker
from ...metrics.family import Family
from ..base import FamilySampler, Unchanged
from . import FAMILIES, MEMORY, MEMORY_PRESSURE, MEMORY_VMSTAT

#: /proc/meminfo key of each MEMORY scalar.
_MEMINFO_FIELDS = {b"MemTotal": "total_bytes", b"MemFree": "free_bytes",
                   b"MemAvailable": "available_bytes", b"Buffers": "buffers_bytes",
                   b"Cached": "cached_bytes", b"Dirty": "dirty_bytes",
                   b"Writeback": "writeback_bytes", b"Slab": "slab_bytes",
                   b"SwapTotal": "swap_total_bytes", b"SwapFree": "swap_free_bytes"}
_MEMINFO_SLOT = {k: MEMORY.slot(f) for k, f in _MEMINFO_FIELDS.items()}
_FREE, _AVAILABLE, _BUFFERS, _CACHED = (MEMORY.slot(f) for f in (
    "free_bytes", "available_bytes", "buffers_bytes", "cached_bytes"))

#: /proc/vmstat keys read as they are, and the MEMORY_VMSTAT scalar each gives.
_VMSTAT_SLOT = {k: MEMORY_VMSTAT.slot(f) for k, f in {
    b"pgfault": "page_faults", b"pgmajfault": "major_page_faults", b"numa_hit": "numa_hit",
    b"numa_miss": "numa_miss", b"numa_foreign": "numa_foreign", b"numa_local": "numa_local",
    b"numa_other": "numa_other", b"numa_interleave": "numa_interleave"}.items()}
#: The slots of the pgscan_* and pgsteal_* sums.
_SCANNED, _STOLEN = MEMORY_VMSTAT.slot("pages_scanned"), MEMORY_VMSTAT.slot("pages_stolen")
#: pgscan_*/pgsteal_* lines that are not a by-reclaimer (or by-zone) page count.
_VMSTAT_NOT_SUMMED = frozenset({b"pgscan_anon", b"pgscan_file", b"pgsteal_anon",
                                b"pgsteal_file", b"pgscan_direct_throttle"})

#: PSI resources, in the order they are published.
PSI_RESOURCES = ("cpu", "memory", "io", "irq")


def _meminfo_slot(name: bytes) -> int | None:
    return _MEMINFO_SLOT.get(name)


def _vmstat_slot(name: bytes) -> int | None:
    slot = _VMSTAT_SLOT.get(name)
    if slot is not None or name in _VMSTAT_NOT_SUMMED:
        return slot
    if name.startswith(b"pgscan_"):
        return _SCANNED
    if name.startswith(b"pgsteal_"):
        return _STOLEN
    return None


def _value(text: bytes) -> int:
    """Return the integer of a value field: int() skips the padding; meminfo's ends in kB."""
    return int(text[:-2] if text.endswith(b"kB") else text)


class FieldFinder:
    """Reads named integers out of a ``name<sep> value`` procfs file (meminfo, vmstat).

    The first read splits the whole text and remembers which lines matter, in file order;
    later reads only ``bytes.find`` those names, each from where the previous one ended
    (the lines of these files are fixed for the life of a kernel). If a remembered name is
    not found, the plan is rebuilt from the new text. Values of lines sharing a slot add up.

    Faster still, when every line read has the usual shape (``name<sep> digits [kB]``):
    the text's whitespace-separated tokens, checked to hold the same names at the same
    positions, give the values by position (one ``split`` and two ``itemgetter`` calls in
    C; ~10 us for vmstat instead of ~30 on the reference VM, warm).
    """

    __slots__ = ("_fast", "_n", "_plan", "_sep", "_slot_of", "present")

    def __init__(self, slot_of: Callable[[bytes], int | None], n: int, sep: bytes) -> None:
        self._slot_of = slot_of
        self._n = n
        self._sep = sep
        self._plan: tuple[tuple[bytes, int], ...] | None = None
        #: (token count, names getter, the names, values getter, (slot, lines) in the
        #: values' order) of the token fast path, or None.
        self._fast: tuple[int, Callable, tuple, Callable, tuple[tuple[int, int], ...]] | \
            None = None
        #: Slots that had at least one line in the text last planned.
        self.present: frozenset[int] = frozenset()

    def values(self, data: bytes) -> list[int]:
        """Return the ``n`` slot values of ``data`` (0 for slots with no line)."""
        fast = self._fast
        if fast is not None:
            tokens = data.split()
            ntok, get_names, names, get_values, groups = fast
            if len(tokens) == ntok and get_names(tokens) == names:
                values = get_values(tokens)
                if b"".join(values).isdigit():  # else garbled: the general path decides
                    ints = list(map(int, values))
                    out = [0] * self._n
                    k = 0
                    for slot, lines in groups:
                        out[slot] = ints[k] if lines == 1 else sum(ints[k : k + lines])
                        k += lines
                    return out
        if self._plan is not None:
            out = self._extract(data, self._plan)
            if out is not None:
                if fast is not None:  # the lines moved but are all still there
                    self._fast = self._make_fast(data)
                return out
        self._plan = self._make_plan(data)
        self.present = frozenset(slot for _needle, slot in self._plan)
        self._fast = self._make_fast(data)
        out = self._extract(data, self._plan)
        assert out is not None  # the plan holds only lines of this text that parse
        return out

    def _make_fast(self, data: bytes) -> tuple | None:
        """Return the token fast path for texts laid out as ``data``, or None if a line
        read is not of the usual shape (then ``find`` does it all)."""
        wanted: list[tuple[int, int]] = []  # (slot, position of the name token)
        names = []
        pos = 0
        for line, name, sep, slot in self._lines(data):
            tokens = line.split()
            if slot is not None:
                label = (name + sep).strip()
                if not (len(tokens) in (2, 3) and tokens[0] == label
                        and tokens[1].isdigit() and tokens[2:] in ([], [b"kB"])):
                    return None
                wanted.append((slot, pos))
                names.append(label)
            pos += len(tokens)
        if not wanted:
            return None
        order = sorted(range(len(wanted)), key=lambda i: wanted[i][0])  # stable: file order
        groups: list[list[int]] = []
        for i in order:
            slot = wanted[i][0]
            if groups and groups[-1][0] == slot:
                groups[-1][1] += 1
            else:
                groups.append([slot, 1])
        get_names = picker([p for _s, p in wanted])
        return (pos, get_names, tuple(names), picker([wanted[i][1] + 1 for i in order]),
                tuple((slot, lines) for slot, lines in groups))

    def _lines(self, data: bytes) -> Iterator[tuple[bytes, bytes, bytes, int | None]]:
        """Yield (line, name, separator, slot) for every line of ``data``; the slot is
        None for a line not read: another name, or a garbled value (skipped, not fatal).
        Both plans take their lines from here, so they read the same ones."""
        for line in data.split(b"\n"):
            name, sep, rest = line.partition(self._sep)
            slot = self._slot_of(name.strip()) if sep else None
            if slot is not None:
                try:
                    _value(rest)
                except ValueError:
                    slot = None
            yield line, name, sep, slot

    def _make_plan(self, data: bytes) -> tuple[tuple[bytes, int], ...]:
        return tuple((b"\n" + name + sep, slot) for _line, name, sep, slot
                     in self._lines(data) if slot is not None)

    def _extract(self, data: bytes, plan: tuple[tuple[bytes, int], ...]) -> list[int] | None:
        out = [0] * self._n
        buf = b"\n" + data + b"\n"
        find, endswith = buf.find, buf.endswith
        pos = 0
        try:
            for needle, slot in plan:
                i = find(needle, pos)
                if i < 0:
                    return None
                i += len(needle)
                pos = find(b"\n", i)
                # _value(buf[i:pos]), inlined: this loop is the sampler's hot path.
                out[slot] += int(buf[i : pos - 2] if endswith(b"kB", i, pos) else buf[i:pos])
        except ValueError:
            return None
        return out


def meminfo_finder() -> FieldFinder:
    """Return a FieldFinder for /proc/meminfo (slots in MEMORY's scalar order, kB)."""
    return FieldFinder(_meminfo_slot, len(MEMORY.scalars), b":")


def vmstat_finder() -> FieldFinder:
    """Return a FieldFinder for /proc/vmstat (slots in MEMORY_VMSTAT's scalar order)."""
    return FieldFinder(_vmstat_slot, len(MEMORY_VMSTAT.scalars), b" ")


def meminfo_row(finder: FieldFinder, data: bytes) -> tuple[int, ...]:
    """Return MEMORY's values (bytes) from /proc/meminfo text, using ``finder``."""
    kb = finder.values(data)
    if _AVAILABLE not in finder.present:  # before Linux 3.14: estimate (an overstatement)
        kb[_AVAILABLE] = kb[_FREE] + kb[_BUFFERS] + kb[_CACHED]
    return tuple(v * 1024 if v > 0 else 0 for v in kb)


def parse_meminfo(data: bytes) -> tuple[int, ...]:
    """Return MEMORY's values (bytes, scalar order) from /proc/meminfo text."""
    return meminfo_row(meminfo_finder(), data)


def vmstat_row(finder: FieldFinder, data: bytes) -> tuple[int, ...]:
    """Return MEMORY_VMSTAT's values from /proc/vmstat text, using ``finder``."""
    return tuple(v if v > 0 else 0 for v in finder.values(data))


def parse_vmstat(data: bytes) -> tuple[int, ...]:
    """Return MEMORY_VMSTAT's values (scalar order) from /proc/vmstat text."""
    return vmstat_row(vmstat_finder(), data)


#: A /proc/pressure line as the kernel prints it ("%lu.%02lu" averages).
_PSI_LINE = re.compile(rb"^(some|full) avg10=(\d+)\.(\d\d) avg60=\d+\.\d\d"
                       rb" avg300=\d+\.\d\d total=(\d+)$", re.MULTILINE)


def parse_pressure(data: bytes) -> tuple[int, int, int, int]:
    """Return (some_avg10_ppm, full_avg10_ppm, some_stall_us, full_stall_us) of one
    /proc/pressure file; a missing line (cpu before 5.13: no ``full``; irq: no ``some``)
    reads as 0."""
    avg = [0, 0]
    total = [0, 0]
    found = _PSI_LINE.findall(data)
    if found and len(found) == data.count(b"\n") + (not data.endswith(b"\n")):
        # Every line as the kernel prints it (the usual case): one regex call in C.
        for kind, units, hundredths, stall in found:
            j = kind == b"full"
            avg[j] = min(1_000_000, int(units) * 10_000 + int(hundredths) * 100)
            total[j] = int(stall)
        return avg[0], avg[1], total[0], total[1]
    for line in data.split(b"\n"):
        parts = line.split()
        if not parts:
            continue
        kind = parts[0]
        if kind == b"some":
            j = 0
        elif kind == b"full":
            j = 1
        else:
            continue
        for tok in parts[1:]:
            key, _, val = tok.partition(b"=")
            try:
                if key == b"avg10":
                    # "%lu.%02lu" percent -> ppm; float rounding is exact at 2 decimals.
                    avg[j] = min(1_000_000, max(0, round(float(val) * 10_000)))
                elif key == b"total":
                    total[j] = int(val)
            except ValueError:
                continue
    return avg[0], avg[1], total[0], total[1]


class Memory(FamilySampler):
    """Memory use (meminfo), paging and NUMA counters (vmstat), pressure stalls (PSI)."""

    name = "memory"
    families = FAMILIES

    def start(self) -> None:
        procfs = self.ctx.roots.procfs
        problems: list[str] = []
        self._meminfo = self._open(procfs / "meminfo", problems)
        self._vmstat = self._open(procfs / "vmstat", problems)
        self._meminfo_finder = meminfo_finder()
        self._vmstat_finder = vmstat_finder()
        self._parsers = {MEMORY: self._parse_meminfo, MEMORY_VMSTAT: self._parse_vmstat,
                         MEMORY_PRESSURE: self._parse_psi}
        self._unchanged = {fam: Unchanged() for fam in self.families}
        self._psi: list[tuple[tuple[str], KeptOpen]] = []
        psi_problem = self._open_psi(problems)
        if self._meminfo is None and self._vmstat is None and not self._psi:
            self.close()
            raise SamplerUnavailable(self.name, "; ".join([*problems, psi_problem]))
        if psi_problem:
            problems.append(psi_problem)
        self.detail = "; ".join(problems)

    @staticmethod
    def _open(path: Path, problems: list[str]) -> KeptOpen | None:
        try:
            return KeptOpen(path)
        except (OSError, RezolusError) as e:
            problems.append(f"{path.name} unavailable: {e}")
            return None

    def _open_psi(self, problems: list[str]) -> str:
        """Open the PSI files; return why PSI (or a part of it) is unavailable, or ""."""
        d = self.ctx.roots.procfs / "pressure"
        if not d.is_dir():
            return ("PSI unavailable: no /proc/pressure (needs Linux >= 4.20 with"
                    " CONFIG_PSI=y; boot with psi=1 if CONFIG_PSI_DEFAULT_DISABLED)")
        missing = []
        for res in PSI_RESOURCES:
            try:
                f = KeptOpen(d / res)
            except FileNotFoundError:
                missing.append(res)
                continue
            except (OSError, RezolusError) as e:
                problems.append(f"PSI {res} unavailable: {e}")
                continue
            try:
                f.read()
            except OSError as e:
                f.close()
                if e.errno == errno.EOPNOTSUPP:
                    self._close_psi()
                    return ("PSI unavailable: disabled (psi=0 on the kernel command line or"
                            " CONFIG_PSI_DEFAULT_DISABLED; boot with psi=1)")
                problems.append(f"PSI {res} unavailable: {e.strerror}")
                continue
            self._psi.append(((res,), f))
        if not self._psi:
            return "PSI unavailable: /proc/pressure has no readable resource"
        if missing == ["irq"]:
            return "PSI irq unavailable (needs Linux >= 6.1 with CONFIG_IRQ_TIME_ACCOUNTING)"
        if missing:
            return f"PSI {', '.join(missing)} unavailable (no /proc/pressure/ file)"
        return ""

    def capture(self) -> dict[Family, object]:
        raw: dict[Family, object] = {}
        if self._meminfo is not None and self.family_wanted(MEMORY):
            raw[MEMORY] = self._meminfo.read()
        if self._vmstat is not None and self.family_wanted(MEMORY_VMSTAT):
            raw[MEMORY_VMSTAT] = self._vmstat.read()
        if self._psi and self.family_wanted(MEMORY_PRESSURE):
            raw[MEMORY_PRESSURE] = [(key, f.read()) for key, f in self._psi]
        return raw

    def parse(self, raw: dict[Family, Any]) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        return {fam: self._unchanged[fam].parse(data, self._parsers[fam])
                for fam, data in raw.items()}

    def _parse_meminfo(self, data: bytes) -> Mapping[tuple, Sequence[int]]:
        return {(): meminfo_row(self._meminfo_finder, data)}

    def _parse_vmstat(self, data: bytes) -> Mapping[tuple, Sequence[int]]:
        return {(): vmstat_row(self._vmstat_finder, data)}

    @staticmethod
    def _parse_psi(files: list[tuple[tuple[str], bytes]]) -> Mapping[tuple, Sequence[int]]:
        return {key: parse_pressure(data) for key, data in files}

    def _close_psi(self) -> None:
        for _key, f in self._psi:
            f.close()
        self._psi = []

    def close(self) -> None:
        for f in (self._meminfo, self._vmstat):
            if f is not None:
                f.close()
        self._close_psi()
