"""The cpu_softirq sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family, Table
from ..base import FamilySampler
from . import CPU_SOFTIRQ, FAMILIES, SOFTIRQ_KINDS

#: /proc/softirqs row name -> column of SOFTIRQ_KINDS.
_KIND_INDEX = {k.upper(): i for i, k in enumerate(SOFTIRQ_KINDS)}
_KIND_INDEX["BLOCK_IOPOLL"] = _KIND_INDEX["IRQ_POLL"]  # renamed in Linux 4.5
_KINDS = len(SOFTIRQ_KINDS)
_KIND_INDEX_BYTES = {k.encode(): i for k, i in _KIND_INDEX.items()}


def parse_softirqs(text: str | bytes) -> dict[int, tuple[int, ...]]:
    """Return {cpu: (hi, timer, ..., rcu)} for each CPU column of /proc/softirqs text."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = [int(w[3:]) for w in lines[0].split() if w[:3] == "CPU" and w[3:].isdigit()]
    n = len(cpus)
    if not n:
        return {}
    zero = (0,) * n
    # One tuple per kind, in catalog order; kinds the kernel does not list stay 0.
    kinds = [zero] * _KINDS
    get = _KIND_INDEX.get
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        j = get(name.strip())
        if j is None:
            continue
        try:
            counts = tuple(map(int, rest.split()))
        except ValueError:
            continue  # a garbled line is skipped, not fatal
        if len(counts) != n:
            counts = (counts + zero)[:n]
        kinds[j] = counts
    return dict(zip(cpus, zip(*kinds, strict=True), strict=True))


class SoftirqReader:
    """Reads /proc/softirqs fast once its layout is known.

    The first read parses the text line by line (``parse_softirqs``) and plans: the CPU
    header, the kind names, one count per CPU on each line. The layout is fixed for the
    life of a kernel, so later reads split the whole text into tokens (one C call), check
    the header and the names are the planned ones and convert every count at once; if a
    check fails, or the fast read would not give what the line-by-line parse gives, the
    line-by-line parse it is.

    From ``min_fixed_cpus`` CPUs there is a faster read still: the kernel prints every
    count as `` %10u`` of an unsigned int (ten digits at most), so each line has a fixed
    width and the file a fixed length. That read checks the length, the header and the
    names byte for byte and that every count field is spaces then digits, and converts
    the digits with NumPy (``_fixed``): 54 instead of 98 us at 128 CPUs (2-vCPU
    reference VM). Either fast read failing, the next one down is tried.
    """

    __slots__ = ("_fixed", "_min_fixed_cpus", "_plan")

    def __init__(self, min_fixed_cpus: int = 32) -> None:
        #: (header tokens, kind names, CPU count, keys, per catalog kind its line or -1).
        self._plan: tuple[list[bytes], list[bytes], int, list[tuple[int]],
                          tuple[int, ...]] | None = None
        #: Fewer CPUs are read by tokens: NumPy's fixed cost exceeds the gain (16 CPUs:
        #: 16 us by tokens, 18 with NumPy; 32 CPUs: 29 and 24).
        self._min_fixed_cpus = min_fixed_cpus
        #: (header, line count, line width, the name bytes of every line, CPU count,
        #: keys, catalog kinds listed, their lines) or None.
        self._fixed: tuple | None = None

    def read(self, data: bytes) -> Mapping[tuple, Sequence[int]]:
        """Return {(cpu,): (hi, timer, ..., rcu)} of /proc/softirqs bytes (a ``Table``
        from the fixed-width read)."""
        if self._fixed is not None:
            rows = self._fixed_read(data)
            if rows is not None:
                return rows
        if self._plan is not None:
            rows = self._fast(data)
            if rows is not None:
                return rows
        rows = {(cpu,): counts for cpu, counts in parse_softirqs(data).items()}
        self._plan = self._make_plan(data)
        if self._plan is not None and self._fast(data) != rows:
            self._plan = None
        self._fixed = None
        if self._plan is not None and self._plan[2] >= self._min_fixed_cpus:
            self._fixed = self._make_fixed(data, self._plan)
            if self._fixed is not None and self._fixed_read(data) != rows:
                self._fixed = None
        return rows

    @staticmethod
    def _make_plan(data: bytes) -> tuple | None:
        header = data[:data.find(b"\n")].split()
        n = len(header)
        if not n or not all(w[:3] == b"CPU" and w[3:].isdigit() for w in header):
            return None
        names = data.split()[n :: n + 1]
        lines = {}
        for i, name in enumerate(names):
            j = _KIND_INDEX_BYTES.get(name[:-1])
            if name[-1:] != b":" or j is None or j in lines:
                return None
            lines[j] = i
        keys = [(int(w[3:]),) for w in header]
        return header, names, n, keys, tuple(lines.get(j, -1) for j in range(_KINDS))

    def _fast(self, data: bytes) -> dict[tuple, tuple[int, ...]] | None:
        assert self._plan is not None
        header, names, n, keys, lines = self._plan
        tokens = data.split()
        if tokens[:n] != header or tokens[n :: n + 1] != names:
            return None
        del tokens[: n + 1]  # the header and the first name
        del tokens[n :: n + 1]  # the other names
        try:
            counts = list(map(int, tokens))
        except ValueError:
            return None
        if len(counts) != n * len(names):
            return None
        # counts holds line after line (file order); a CPU's column is every n-th count.
        zero = [0] * n
        table = [counts[i * n : i * n + n] if i >= 0 else zero for i in lines]
        return dict(zip(keys, zip(*table, strict=True), strict=True))

    @staticmethod
    def _make_fixed(data: bytes, plan: tuple) -> tuple | None:
        """Return the fixed-width layout of ``data`` (planned by tokens as ``plan``), or
        None if its lines are not the name then n counts of `` %10u``."""
        _header, names, n, keys, lines = plan
        start = data.find(b"\n") + 1
        at = data.find(b":", start) + 1 - start  # "%12s:": where the first line's counts start
        width = at + n * _COUNT + 1
        if not start or at <= 0 or len(data) - start != len(names) * width:
            return None
        body = np.frombuffer(data, dtype=np.uint8, offset=start).reshape(len(names), width)
        if not ((body[:, at - 1] == _COLON).all() and (body[:, -1] == _NEWLINE).all()):
            return None
        listed = [j for j in range(_KINDS) if lines[j] >= 0]
        return (data[:start], len(names), width, body[:, :at].copy(), n, keys, listed,
                [lines[j] for j in listed])

    def _fixed_read(self, data: bytes) -> Table | None:
        assert self._fixed is not None
        header, count, width, names, n, keys, listed, lines = self._fixed
        start = len(header)
        if len(data) != start + count * width or not data.startswith(header):
            return None
        body = np.frombuffer(data, dtype=np.uint8, offset=start).reshape(count, width)
        at = names.shape[1]
        if not (np.array_equal(body[:, :at], names) and (body[:, -1] == _NEWLINE).all()):
            return None
        fields = body[:, at:-1].reshape(count, n, _COUNT)
        space = fields == _SPACE
        digits = fields - _ZERO  # 0-9; a space wraps to 240
        flat = space.reshape(-1)
        # Every field: the separator, then spaces, then digits to its end (so a space
        # follows a digit only where the next field starts).
        if not (space[:, :, 0].all() and not space[:, :, -1].any()
                and np.count_nonzero(flat[1:] > flat[:-1]) == count * n - 1
                and np.count_nonzero(digits < 10) + np.count_nonzero(space) == digits.size):
            return None
        digits &= 0x0F  # spaces (240) to 0, digits kept (as cpu_interrupts does)
        table = np.zeros((_KINDS, n), dtype=np.int64)
        table[listed] = (digits[:, :, 1:] @ _PLACES)[lines]
        return Table(keys, table.T)


#: Width of a count as the kernel prints it (" %10u"): the separator and ten digits.
_COUNT = 11
_SPACE, _ZERO, _NEWLINE, _COLON = ord(" "), ord("0"), ord("\n"), ord(":")
_PLACES = 10 ** np.arange(_COUNT - 2, -1, -1, dtype=np.int64)


class CpuSoftirq(FamilySampler):
    """Softirqs handled per CPU by kind (timer, net_rx, sched, rcu, ...)."""

    name = "cpu_softirq"
    families = FAMILIES

    def start(self) -> None:
        try:
            self._file = KeptOpen(self.ctx.roots.procfs / "softirqs")
        except FileNotFoundError as e:
            raise SamplerUnavailable(self.name, f"{e} (needs Linux >= 2.6.31)") from None
        self._reader = SoftirqReader()

    def capture(self) -> bytes | None:
        return self._file.read() if self.family_wanted(CPU_SOFTIRQ) else None

    def parse(self, raw: bytes | None) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        return {} if raw is None else {CPU_SOFTIRQ: self._reader.read(raw)}

    def close(self) -> None:
        self._file.close()
