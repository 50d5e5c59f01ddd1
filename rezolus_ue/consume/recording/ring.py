"""The flight recorder's ring: segment files in a directory, bounded by size and age.

Ring directory::

    recorder.pid          pid of the running recorder, which holds an flock on it
    seg-00000042.rzr      complete segments, oldest first
    seg-00000043.rzr.part the segment being written (readable: blocks are self-contained)
    dumps/                where a bare SIGUSR1 writes dump-YYYYmmdd-HHMMSS.rzr
    .dump-<token>.req/.done   a `rezolus-ue dump` request and the recorder's answer

Crash safety: every block is written with one ``write`` and carries a CRC, so a ``kill -9``
leaves at most one incomplete block at the end of the ``.part``; the reader stops before
it, and the next recorder on the same directory truncates it and renames the segment.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import os_error_text
from ..records import Record
from . import blocks
from .blocks import (
    KIND_DATA,
    NATIVE_SUFFIX,
    PART_SUFFIX,
    MappedFile,
    RecordingError,
    recording_meta,
    scan_blocks,
)
from .files import NativeWriter

log = logging.getLogger("rezolus_ue")


#: Where ``rezolus-ue dump`` looks for a ring when no --ring is given.
DEFAULT_RING = Path("/var/lib/rezolus-ue/ring")
PID_FILE = "recorder.pid"
DUMPS_DIR = "dumps"
SEGMENT_RE = re.compile(r"seg-(\d{8,})\.rzr(\.part)?")


@dataclass
class Segment:
    """One ring segment file."""

    seq: int
    path: Path
    size: int
    mtime: float

    @property
    def complete(self) -> bool:
        """Return whether the segment was closed (renamed from ``.part``)."""
        return not self.path.name.endswith(PART_SUFFIX)


def list_segments(root: Path) -> list[Segment]:
    """Return the ring's segments, oldest first."""
    out = []
    try:
        entries = list(os.scandir(root))
    except OSError as e:
        raise RecordingError(os_error_text(e, root, "read")) from None
    for e in entries:
        m = SEGMENT_RE.fullmatch(e.name)
        if m is None:
            continue
        try:
            st = e.stat()
        except FileNotFoundError:
            continue  # deleted by the recorder meanwhile
        out.append(Segment(int(m.group(1)), Path(e.path), st.st_size, st.st_mtime))
    out.sort(key=lambda s: (s.seq, s.complete))
    return out


def repair_segment(path: Path) -> Path | None:
    """Make a ``.part`` left by a killed recorder a complete segment; return its new path.

    Cut off an incomplete last block; delete the file if it holds no data block.
    """
    mf = MappedFile.open(path)
    try:
        stats = blocks.ScanStats()
        refs = list(scan_blocks(mf.buf, stats))
    finally:
        mf.close()
    if not any(r.kind == KIND_DATA for r in refs):
        path.unlink(missing_ok=True)
        return None
    if stats.tail_bytes:
        os.truncate(path, refs[-1].end)
        log.info("%s: cut %d bytes of an incomplete block", path.name, stats.tail_bytes)
    final = path.with_name(path.name.removesuffix(PART_SUFFIX))
    os.replace(path, final)
    return final


class Ring:
    """Segment files in ``root``: rotated by size and age, oldest deleted beyond the bounds.

    ``max_size`` bounds every segment's bytes together (the one being written included);
    a complete segment whose last write is older than ``max_age_ns`` is deleted.
    """

    def __init__(self, root: Path, *, max_size: int, max_age_ns: int | None = None,
                 segment_size: int | None = None, segment_ns: int | None = None,
                 clock: Callable[[], int] = time.monotonic_ns,
                 wall: Callable[[], float] = time.time) -> None:
        self.root = root
        self.max_size = max_size
        self.max_age_ns = max_age_ns
        self.segment_size = segment_size or min(64 << 20, max(64 << 10, max_size // 8))
        default_ns = 600 * 10**9 if max_age_ns is None else max_age_ns // 8
        self.segment_ns = segment_ns or min(600 * 10**9, max(10**9, default_ns))
        self.clock = clock
        self.wall = wall
        self.writer: NativeWriter | None = None
        self.seq = 0
        self._has_data = False
        self._opened_ns = 0
        self._lock_fd = -1
        self._complete: list[Segment] = []
        self.deleted = 0

    def open(self) -> None:
        """Lock the directory, finish segments a killed recorder left, start a segment."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RecordingError(os_error_text(e, self.root, "create")) from None
        self._lock_fd = lock_ring(self.root)
        for s in list_segments(self.root):
            if not s.complete:
                repair_segment(s.path)
        self._complete = [s for s in list_segments(self.root) if s.complete]
        self.seq = self._complete[-1].seq if self._complete else 0
        self._start()
        self.enforce()

    def _start(self) -> None:
        self.seq += 1
        path = self.root / f"seg-{self.seq:08d}{NATIVE_SUFFIX}{PART_SUFFIX}"
        self.writer = NativeWriter.create(path, recording_meta(segment=self.seq), overwrite=True)
        self._has_data = False
        self._opened_ns = self.clock()

    def _finish(self) -> None:
        w = self.writer
        if w is None:
            return
        w.close()
        self.writer = None
        if self._has_data:
            final = w.path.with_name(w.path.name.removesuffix(PART_SUFFIX))
            os.replace(w.path, final)
            self._complete.append(Segment(self.seq, final, w.size, self.wall()))
        else:
            w.path.unlink(missing_ok=True)

    @property
    def current(self) -> Path | None:
        """Return the segment being written."""
        return None if self.writer is None else self.writer.path

    def write(self, records: list[Record]) -> None:
        """Append the records to the current segment, then rotate and trim as needed."""
        assert self.writer is not None
        if records:
            self.writer.write_records(records)
            self._has_data = True
        self.tick()

    def tick(self) -> None:
        """Rotate the segment if it is full or old enough, and apply the bounds."""
        assert self.writer is not None
        if self._has_data and (self.writer.size >= self.segment_size
                               or self.clock() - self._opened_ns >= self.segment_ns):
            self._finish()
            self._start()
        self.enforce()

    def enforce(self) -> None:
        """Delete the oldest complete segments while over ``max_size`` or ``max_age``."""
        total = sum(s.size for s in self._complete) + (self.writer.size if self.writer else 0)
        cutoff = None if self.max_age_ns is None else self.wall() - self.max_age_ns / 1e9
        while self._complete:
            s = self._complete[0]
            if total <= self.max_size and (cutoff is None or s.mtime >= cutoff):
                break
            with contextlib.suppress(FileNotFoundError):
                s.path.unlink()
                self.deleted += 1
            total -= s.size
            self._complete.pop(0)

    def snapshot(self) -> list[MappedFile]:
        """Return every segment mapped as it is now (the current one up to what is written).

        The maps stay valid while the recorder rotates and deletes: a dump reads them.
        """
        out = []
        for s in list_segments(self.root):
            limit = self.writer.size if self.writer and s.path == self.writer.path else None
            try:
                out.append(MappedFile.open(s.path, limit))
            except RecordingError:
                continue  # renamed or deleted meanwhile
        return out

    def close(self) -> None:
        """Close the current segment and release the directory."""
        self._finish()
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                (self.root / PID_FILE).unlink()
            os.close(self._lock_fd)
            self._lock_fd = -1


def lock_ring(root: Path) -> int:
    """Take the ring's recorder lock, write our pid; return the fd (held while we run)."""
    path = root / PID_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise RecordingError(os_error_text(e, path, "create")) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        pid = _read_pid(path)
        raise RecordingError(f"another recorder{f' (pid {pid})' if pid else ''} is writing"
                             f" {root}; stop it or use another --ring") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as e:  # a full file system
        os.close(fd)
        raise RecordingError(os_error_text(e, path, "write")) from None
    return fd


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def running_recorder(root: Path) -> int | None:
    """Return the pid of the recorder writing ``root``, or None if none runs."""
    path = root / PID_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise RecordingError(os_error_text(e, path, "read")) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(path)
    finally:
        os.close(fd)  # also releases our probe's lock
    return None
