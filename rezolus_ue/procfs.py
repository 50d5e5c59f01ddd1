"""Kept-open procfs/sysfs files read with ``os.pread``: no open/close per sample.

procfs regenerates a file's text on every read from offset 0, so one fd serves forever.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import PermissionDenied, RezolusError

_CHUNK = 65536


class KeptOpen:
    """One procfs/sysfs file held open for repeated whole-file reads."""

    __slots__ = ("_fd", "_size", "path")

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

    def read(self) -> bytes:
        """Return the file's current contents."""
        while True:
            data = os.pread(self._fd, self._size, 0)
            if len(data) < self._size:
                return data
            # The buffer was filled: the file may be longer; grow and read again.
            self._size *= 2

    def read_text(self) -> str:
        """Return the contents decoded as ASCII text."""
        return self.read().decode("ascii", "replace")

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> KeptOpen:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
