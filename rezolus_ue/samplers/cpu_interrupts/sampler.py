"""The cpu_interrupts sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family
from ..base import FamilySampler
from . import CPU_INTERRUPTS, FAMILIES, KINDS

#: Field of each description, as a slot of a CPU_INTERRUPTS row.
_SLOT = {d.encode(): CPU_INTERRUPTS.slot(f) for d, f in KINDS.items()}
_DEVICE, _OTHER = CPU_INTERRUPTS.slot("device"), CPU_INTERRUPTS.slot("other")
_FIELDS = len(CPU_INTERRUPTS.scalars)
#: Machine-wide lines: one count, not one per CPU.
_NOT_PER_CPU = (b"ERR", b"MIS", b"Err")


def parse_interrupts(data: bytes) -> dict[int, tuple[int, ...]]:
    """Return {cpu: (device, local_timer, ..., other)} for each CPU column of
    /proc/interrupts text."""
    lines = data.split(b"\n")
    cpus = [int(w[3:]) for w in lines[0].split() if w[:3] == b"CPU" and w[3:].isdigit()]
    n = len(cpus)
    totals = [[0] * n for _ in range(_FIELDS)]
    for line in lines[1:]:
        name, sep, rest = line.partition(b":")
        name = name.strip()
        if not sep or not name or name in _NOT_PER_CPU:
            continue
        words = rest.split(None, n)
        counts = []
        for w in words[:n]:
            if not w.isdigit():
                break
            counts.append(int(w))
        if name.isdigit():
            slot = _DEVICE
        else:
            description = words[n].strip() if len(words) > n and len(counts) == n else b""
            slot = _SLOT.get(description, _OTHER)
        row = totals[slot]
        for i, c in enumerate(counts):
            row[i] += c
    return {cpu: tuple(t[i] for t in totals) for i, cpu in enumerate(cpus)}


#: Width of a count as the kernel prints it (" %10u"): the separator and ten columns.
_COUNT = 11
_SPACE, _ZERO = ord(" "), ord("0")


class InterruptsReader:
    """Reads /proc/interrupts fast once its layout is known.

    The file holds a line per interrupt and a column per CPU: at 128 CPUs with a queue per
    CPU for each NVMe disk and NIC, a thousand lines and megabytes, whose line-by-line
    parse (``parse_interrupts``: an ``int`` per count) took 23 ms (bench/scale.py). The
    kernel prints every count as `` %10u``, so the layout (each line's name, where its
    counts start, its description) is fixed while no interrupt or CPU comes or goes. The
    first read plans it from the line-by-line parse: the bytes that must not change (the
    header, names, descriptions) and where each counted line's counts are; later reads
    check those bytes and that every count field is spaces then digits, and convert all
    counts at once with NumPy. Any difference, and the line-by-line parse it is (planned
    again); a plan whose fast read would not give what the line-by-line parse gives is
    dropped.
    """

    __slots__ = ("_min_counts", "_plan")

    def __init__(self, min_counts: int = 1024) -> None:
        #: Fewer counts are read line by line: NumPy's fixed cost would exceed the gain.
        self._min_counts = min_counts
        #: (length, fixed byte positions, their bytes, count starts, CPU count, slot
        #: blocks, CPUs) or None.
        self._plan: tuple | None = None

    def read(self, data: bytes | memoryview) -> dict[int, tuple[int, ...]]:
        """Return what ``parse_interrupts(data)`` returns."""
        if self._plan is not None:
            rows = self._fast(data)
            if rows is not None:
                return rows
        data = bytes(data)
        rows = parse_interrupts(data)
        self._plan = self._make_plan(data) if len(rows) * data.count(b"\n") >= \
            self._min_counts else None
        if self._plan is not None and self._fast(data) != rows:
            self._plan = None
        return rows

    @staticmethod
    def _make_plan(data: bytes) -> tuple | None:
        lines = data.split(b"\n")
        cpus = [int(w[3:]) for w in lines[0].split() if w[:3] == b"CPU" and w[3:].isdigit()]
        n = len(cpus)
        if not n:
            return None
        fixed = np.ones(len(data), dtype=bool)  # bytes that must read the same
        counted: list[tuple[int, int]] = []  # (slot, where the line's counts start)
        pos = len(lines[0]) + 1
        for line in lines[1:]:
            name, sep, rest = line.partition(b":")
            stripped = name.strip()
            at = pos + len(name) + 1
            pos += len(line) + 1
            if not sep or not stripped:
                continue
            if stripped in _NOT_PER_CPU:  # machine-wide: its count may change, unread
                fixed[at:pos - 1] = False
                continue
            words = rest.split(None, n)
            k = 0
            while k < min(n, len(words)) and words[k].isdigit():
                k += 1
            if k == 0:
                continue  # nothing counted: the whole line must stay as it is
            counts = rest[:n * _COUNT]
            if k != n or counts.split() != words[:n] or len(counts) != n * _COUNT or any(
                    counts[i * _COUNT] != _SPACE for i in range(n)):
                return None  # not n counts of the fixed width
            if stripped.isdigit():
                slot = _DEVICE
            else:
                description = words[n].strip() if len(words) > n else b""
                slot = _SLOT.get(description, _OTHER)
            counted.append((slot, at))
            fixed[at:at + n * _COUNT] = False
        if not counted:
            return None
        counted.sort()  # by slot: each slot's lines are one block of the joined counts
        slots = [slot for slot, _at in counted]
        blocks = tuple((slot, slots.index(slot), len(slots) - slots[::-1].index(slot))
                       for slot in sorted(set(slots)))
        positions = np.flatnonzero(fixed).astype(np.int32)  # a file under 2 GiB: half the bytes
        expected = np.frombuffer(data, dtype=np.uint8)[positions].copy()
        return len(data), positions, expected, [at for _s, at in counted], n, blocks, cpus

    def _fast(self, data: bytes | memoryview) -> dict[int, tuple[int, ...]] | None:
        assert self._plan is not None
        length, positions, expected, starts, n, blocks, cpus = self._plan
        if len(data) != length or not np.array_equal(
                np.frombuffer(data, dtype=np.uint8)[positions], expected):
            return None
        width = n * _COUNT
        fields = np.frombuffer(b"".join([data[s:s + width] for s in starts]),
                               dtype=np.uint8).reshape(len(starts), n, _COUNT)
        # In chunks of lines whose work arrays stay in cache, allocated once: megabytes of
        # temporaries would cost a page fault per 4 KiB on every read.
        rows = max(1, min(_CHUNK_BYTES // width, _MAX_ROWS))
        space = np.empty((rows, n, _COUNT), dtype=bool)
        work = np.empty((rows, n, _COUNT), dtype=np.uint8)
        step = np.empty(rows * width - 1, dtype=bool)
        totals = [[0] * n for _ in range(_FIELDS)]
        for slot, a, b in blocks:
            sums = np.zeros((n, _COUNT), dtype=np.int64)
            for c in range(a, b, rows):
                f = fields[c : min(b, c + rows)]
                k = len(f)
                sp, w, st = space[:k], work[:k], step[: k * width - 1]
                np.equal(f, _SPACE, out=sp)
                np.subtract(f, _ZERO, out=w)  # digits 0-9; a space wraps to 240
                flat = sp.reshape(-1)
                np.greater(flat[1:], flat[:-1], out=st)  # a space after a digit
                # Every field: the separator, then spaces, then digits to its end (so a
                # space follows a digit only where the next field starts).
                if not (sp[:, :, 0].all() and not sp[:, :, -1].any()
                        and np.count_nonzero(st) == k * n - 1
                        and np.count_nonzero(w < 10) + np.count_nonzero(sp) == w.size):
                    return None
                # Spaces (240) to 0, digits kept: a mask, not an assignment through the
                # boolean index (970 of a read's 2,010 us at 128 CPUs, this 20).
                np.bitwise_and(w, 0x0F, out=w)
                # Sums of each digit column over the slot's lines (9 * lines fits 16 bits),
                # weighed by place value below: exact in integers.
                sums += w.sum(axis=0, dtype=np.uint16)
            totals[slot] = (sums[:, 1:] @ _PLACES).tolist()
        return dict(zip(cpus, zip(*totals, strict=True), strict=True))


#: Bytes of counts handled at once (see _fast).
_CHUNK_BYTES = 1 << 18
#: Most lines summed at once: 9 (a digit) times as many fits the 16-bit sums.
_MAX_ROWS = 0xFFFF // 9
_PLACES = 10 ** np.arange(_COUNT - 2, -1, -1, dtype=np.int64)


class _Capture:
    """One read of /proc/interrupts: a view of the kept buffer (``KeptOpen.read_view``:
    no fresh megabytes at each read), made a copy if another read comes before it is
    parsed (captures are parsed at the publish tick, where this sampler only reads)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data


class CpuInterrupts(FamilySampler):
    """Interrupts per CPU: device, local timer, rescheduling, function call, TLB, other."""

    name = "cpu_interrupts"
    families = FAMILIES
    oversample = False

    def start(self) -> None:
        try:
            self._file = KeptOpen(self.ctx.roots.procfs / "interrupts")
        except FileNotFoundError as e:
            raise SamplerUnavailable(self.name, f"{e} (needs procfs)") from None
        self._reader = InterruptsReader()
        #: The last capture, while it is not parsed (its bytes are a view of the file's
        #: buffer, valid until the next read).
        self._unparsed: _Capture | None = None

    def capture(self) -> _Capture | None:
        if not self.family_wanted(CPU_INTERRUPTS):
            return None
        if self._unparsed is not None:  # its view is about to be overwritten: keep a copy
            self._unparsed.data = bytes(self._unparsed.data)
        self._unparsed = _Capture(self._file.read_view())
        return self._unparsed

    def parse(self, raw: _Capture | None) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        if raw is self._unparsed:
            self._unparsed = None
        return {CPU_INTERRUPTS: {(cpu,): row for cpu, row in
                                 self._reader.read(raw.data).items()}}

    def close(self) -> None:
        self._file.close()
