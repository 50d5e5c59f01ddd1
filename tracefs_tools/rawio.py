"""One write(2), returned or raised as it came, EINTR included.

Python retries a write that fails with EINTR (PEP 475), expecting a signal to have
interrupted it. tracefs also answers EINTR for good: enabling in ftrace a uprobe event
that perf already has enabled (or the reverse) fails with EINTR every time, so
``os.write`` would spin forever. tracefs writes go through libc's write instead.
"""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_write = _libc.write
_write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
_write.restype = ctypes.c_ssize_t


def write_once(fd: int, data: bytes) -> int:
    """Write ``data`` to ``fd`` in one write(2); raise OSError (EINTR too) on failure."""
    n = _write(fd, data, len(data))
    if n < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(n)
