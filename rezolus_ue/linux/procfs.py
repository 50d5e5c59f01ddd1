"""procfs/sysfs readers: kept-open files read with ``os.pread`` (no open/close per
sample), and the kernel's cpulist format (``/sys/devices/system/cpu/online``).

procfs regenerates a file's text on every read from offset 0, so one fd serves forever.

Two samplers that read the same file on every tick (cpu_usage and scheduler both parse
``/proc/stat``) get it from the agent's ``samplers.base.SharedFiles`` and read it with
``read_at(t_ns)``: the first read of an agent tick (every sampler of a tick gets the same
``t_ns``) goes to the kernel, the others reuse its bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path

from ..errors import PermissionDenied, RezolusError

_CHUNK = 65536


class KeptOpen:
    """One procfs/sysfs file held open for repeated whole-file reads."""

    __slots__ = ("_at", "_buf", "_data", "_fd", "_size", "path")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path} does not exist") from None
        except PermissionError:
            raise PermissionDenied(f"cannot read {self.path}: permission denied") from None
        except OSError as e:
            raise RezolusError(f"cannot open {self.path}: {e.strerror}") from None
        self._size = _CHUNK
        #: The time stamp of the read_at whose bytes ``_data`` holds.
        self._at: int | None = None
        self._data = b""
        #: The buffer ``read_view`` reads into, kept between reads.
        self._buf = bytearray()

    def read(self) -> bytes:
        """Return the file's current contents."""
        while True:
            data = os.pread(self._fd, self._size, 0)
            if len(data) < self._size:
                return data
            # The buffer was filled: the file may be longer; grow and read again.
            self._size *= 2

    def read_view(self) -> memoryview:
        """Return the file's current contents as a view of a buffer this object keeps,
        valid until the next ``read_view``: for files of megabytes (/proc/interrupts at
        128 CPUs: 2 MB), whose fresh ``bytes`` at each read cost a page fault per 4 KiB
        (a read of 2 MB from tmpfs: 930 us, into the kept buffer 230)."""
        while True:
            if len(self._buf) < self._size:
                self._buf = bytearray(self._size)
            n = os.preadv(self._fd, [self._buf], 0)
            if n < self._size:
                return memoryview(self._buf)[:n]
            self._size *= 2

    def read_at(self, t_ns: int | None) -> bytes:
        """Return the contents as read at time stamp ``t_ns``: read now unless a read_at
        with that stamp already did (``None``: always read)."""
        if t_ns is not None and t_ns == self._at:
            return self._data
        data = self.read()
        self._at, self._data = t_ns, data
        return data

    def read_text(self) -> str:
        """Return the contents decoded as ASCII text."""
        return self.read().decode("ascii", "replace")

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._data = b""
            self._buf = bytearray()

    def __enter__(self) -> KeptOpen:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def picker(positions: Sequence[int]) -> Callable[[Sequence[bytes]], tuple[bytes, ...]]:
    """Return a function taking the items at ``positions`` of a list of tokens, as a tuple
    (``itemgetter``, which returns a bare item for one position, made uniform): parsers of
    fixed-layout procfs text pick their fields with it in one C call."""
    if len(positions) == 1:
        p = positions[0]
        return lambda items: (items[p],)
    return itemgetter(*positions)


def parse_cpu_list(text: str) -> list[int]:
    """Return the CPUs in a kernel cpulist such as ``"0-3,5,7-8"`` (sorted, unique)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ValueError(f"bad cpulist element {part!r} in {text!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"bad cpulist range {part!r} in {text!r}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def online_cpus(sysfs_root: str = "/sys") -> list[int]:
    """Return the online CPU numbers from ``<sysfs_root>/devices/system/cpu/online``."""
    path = f"{sysfs_root}/devices/system/cpu/online"
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise RezolusError(f"cannot read online CPUs from {path}: {e.strerror}") from None
    try:
        return parse_cpu_list(text)
    except ValueError as e:
        raise RezolusError(f"{path}: {e}") from None
