"""``rezolus-ue record`` and ``rezolus-ue dump``: keep records on disk, or a rolling window.

``record FILE`` writes every record of the selected events to a recording (the native
``.rzr`` format, or Parquet with pyarrow; see ``recfile`` and docs/recording.md) until
``--duration`` or Ctrl-C. ``record --ring DIR`` is a flight recorder: records go to segment
files of bounded size; the oldest are deleted beyond ``--max-size`` / ``--max-age``;
``SIGUSR1`` or ``rezolus-ue dump`` writes the window held to one file.

Ring directory::

    recorder.pid          pid of the running recorder, which holds an flock on it
    seg-00000042.rzr      complete segments, oldest first
    seg-00000043.rzr.part the segment being written (readable: blocks are self-contained)
    dumps/                where a bare SIGUSR1 writes dump-YYYYmmdd-HHMMSS.rzr
    .dump-<token>.req/.done   a `rezolus-ue dump` request and the recorder's answer

Crash safety: every block is written with one ``write`` and carries a CRC, so a ``kill -9``
leaves at most one incomplete block at the end of the ``.part``; the reader stops before
it, and the next recorder on the same directory truncates it and renames the segment.

The record source is injectable (the hidden ``--source-file``: a recording, or JSON lines
on a file or stdin), so tests run real recorder processes without a kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

from ..config import DURATION_HELP, format_duration, parse_duration, path_arg
from ..errors import ConfigError, RezolusError, os_error_text
from . import recfile
from .recfile import (
    KIND_DATA,
    KIND_META,
    NATIVE_SUFFIX,
    PART_SUFFIX,
    MappedFile,
    NativeWriter,
    RecordingError,
    read_meta,
    read_records,
    recording_meta,
    scan_blocks,
)
from .records import Record
from .source import Source, open_source, open_test_source

log = logging.getLogger("rezolus_ue")

#: Where ``rezolus-ue dump`` looks for a ring when no --ring is given.
DEFAULT_RING = Path("/var/lib/rezolus-ue/ring")
PID_FILE = "recorder.pid"
DUMPS_DIR = "dumps"
SEGMENT_RE = re.compile(r"seg-(\d{8,})\.rzr(\.part)?")
#: Flush early when this many records are buffered, to bound memory and block size.
MAX_BUFFER = 50_000
#: Longest wait in one poll, so signals and the flush clock are served promptly.
POLL_MS = 200
MIN_RING_SIZE = 1 << 20
DEFAULT_RING_SIZE = 100 << 20
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
SIZE_HELP = "a number of bytes with an optional K, M, G or T (powers of 1024), e.g. 100M, 1G"
__all__ = ["add_parser", "parse_size", "read_meta", "read_records"]


def parse_size(text: str) -> int:
    """Return a size such as ``"100M"`` in bytes; raise ValueError if malformed."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"invalid size {text!r}: use {SIZE_HELP}")
    try:
        value = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError(f"invalid size {text!r}: use {SIZE_HELP}") from None
    n = int(value * 1024 ** " kmgt".index(m.group(2).lower() or " "))
    if n >= 1 << 63:
        raise ValueError(f"size {text!r} is too large")
    return n


def format_size(n: int) -> str:
    """Return ``n`` bytes as a short human-readable text."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


# --- sinks ------------------------------------------------------------------------------------


class Sink(Protocol):
    """Where the recorder writes: one file, a Parquet journal, or a ring."""

    def write(self, records: list[Record]) -> None: ...

    def tick(self) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """A native recording at ``path``, written in place (a kill leaves it readable)."""

    def __init__(self, path: Path, *, overwrite: bool = False) -> None:
        recfile.check_output(path, "native", overwrite)
        self.path = path
        self.writer = NativeWriter.create(path, recording_meta(), overwrite=overwrite)

    def write(self, records: list[Record]) -> None:
        """Append the records as one block."""
        self.writer.write_records(records)

    def tick(self) -> None:
        """Nothing to maintain."""

    def close(self) -> None:
        """Flush and close the file."""
        self.writer.close()


class ParquetSink:
    """A Parquet recording directory: records go to a native journal first, converted
    to ``<event>.parquet`` files on close (a killed recorder leaves the journal, which
    ``read_records`` and ``dump --from`` read)."""

    JOURNAL = "journal.rzr"

    def __init__(self, path: Path, *, overwrite: bool = False) -> None:
        recfile._pyarrow()
        recfile.check_output(path, "parquet", overwrite)
        try:
            path.mkdir(parents=True, exist_ok=True)
            # --force: the previous recording's files (check_output saw nothing else).
            for f in recfile._parquet_dir_files(path) or ():
                f.unlink()
        except OSError as e:
            raise RecordingError(os_error_text(e, path, "create")) from None
        self.path = path
        self.journal = FileSink(path / self.JOURNAL)

    def write(self, records: list[Record]) -> None:
        """Append the records to the journal."""
        self.journal.write(records)

    def tick(self) -> None:
        """Nothing to maintain."""

    def close(self) -> None:
        """Convert the journal to Parquet files, then delete it."""
        self.journal.close()
        jp = self.journal.path
        try:
            recfile.write_parquet(read_records(jp), self.path, read_meta(jp))
            jp.unlink()
        except OSError as e:  # the journal stays: `dump --from DIR` converts it later
            raise RecordingError(os_error_text(e, self.path, "write")) from None


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
        stats = recfile.ScanStats()
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


# --- dumps --------------------------------------------------------------------------------


@dataclass
class DumpResult:
    """What a dump wrote."""

    path: Path
    records: int = 0
    bytes: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    wall_offset_ns: int | None = None

    def summary(self) -> str:
        """Return one line for the user."""
        span = ""
        if self.first_ns is not None and self.last_ns is not None:
            span = f", {format_duration(max(0, self.last_ns - self.first_ns) // 10**6 * 10**6)}"
            if self.wall_offset_ns is not None:
                t = (self.first_ns + self.wall_offset_ns) / 1e9
                span += " from " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        return f"wrote {self.path}: {self.records} records{span}"

    def to_json(self) -> dict[str, Any]:
        """Return the answer a recorder gives a dump request."""
        return {"ok": True, "path": str(self.path), "records": self.records,
                "bytes": self.bytes, "first_ns": self.first_ns, "last_ns": self.last_ns,
                "wall_offset_ns": self.wall_offset_ns}


@dataclass
class _BlockInfo:
    mf: MappedFile
    ref: recfile.BlockRef
    rows: int = 0
    tmin: int = 0
    tmax: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def raw(self) -> bytes:
        return bytes(self.mf.buf[self.ref.start : self.ref.end])


def _block_infos(files: list[MappedFile]) -> Iterator[_BlockInfo]:
    """Yield every valid block of ``files`` with its row count and time range (not its
    bytes: a ring can be larger than memory). Damage is skipped, and warned about once
    per file, exactly as ``read_records`` does: a dump holds what a reader would read."""
    for mf in files:
        st = recfile.ScanStats()
        for ref in scan_blocks(mf.buf, st):
            try:
                if ref.kind == KIND_META:
                    yield _BlockInfo(mf, ref, meta=recfile._clean_meta(
                        json.loads(ref.payload(mf.buf))) or {})
                    continue
                if ref.kind != KIND_DATA:
                    continue
                tables = recfile.decode_block(mf.buf, ref)
            except (recfile.BlockError, ValueError, RecursionError) as e:
                st.bad(ref, e)
                continue
            times = [t.columns["time_ns"] for t in tables if t.rows]
            if times:
                yield _BlockInfo(mf, ref, sum(len(x) for x in times),
                                 min(int(x.min()) for x in times),
                                 max(int(x.max()) for x in times))
        recfile._warn_damage(mf.path, st)


def _window(infos: list[_BlockInfo], cutoff: int | None, res: DumpResult) -> Iterator[bytes]:
    """Yield the blocks to dump: each file's metadata before its first kept data block,
    data blocks newer than ``cutoff`` whole, the one straddling it cut; count into ``res``."""
    pending: _BlockInfo | None = None
    for b in infos:
        if b.ref.kind == KIND_META:
            pending = b
            continue
        if cutoff is not None and b.tmax < cutoff:
            continue
        if pending is not None:
            yield pending.raw()
            if res.wall_offset_ns is None:
                res.wall_offset_ns = pending.meta.get("wall_offset_ns")
            pending = None
        if cutoff is None or b.tmin >= cutoff:
            yield b.raw()
            rows, tmin, tmax = b.rows, b.tmin, b.tmax
        else:
            recs = [r for r in recfile.read_native(b.raw()) if r.time_ns >= cutoff]
            yield recfile.encode_block(KIND_DATA, recfile.encode_tables(recfile.to_tables(recs)))
            rows, tmin, tmax = len(recs), recs[0].time_ns, max(r.time_ns for r in recs)
        res.records += rows
        res.first_ns = tmin if res.first_ns is None else min(res.first_ns, tmin)
        res.last_ns = tmax if res.last_ns is None else max(res.last_ns, tmax)


def assemble(files: list[MappedFile], out: Path, fmt: str = "native", *,
             last_ns: int | None = None, overwrite: bool = False,
             into: int | None = None) -> DumpResult:
    """Write the blocks of ``files`` (oldest first) to one recording at ``out``.

    ``last_ns`` keeps only the records of that span before the newest one. Native output
    copies whole blocks; Parquet output converts. ``out`` appears complete or not at all:
    it is written beside under a new name, then renamed over what ``check_output``
    allows. With ``into`` (an open, empty file of the user who asked: see
    ``request_dump``) the native blocks are written there instead, and the asker renames.
    """
    infos = list(_block_infos(files))
    data = [b for b in infos if b.ref.kind == KIND_DATA]
    if not data:
        raise RecordingError(f"no records in {', '.join(str(f.path) for f in files[:3])}"
                             f"{' ...' if len(files) > 3 else ''}" if files else
                             "nothing recorded yet: the ring holds no records")
    cutoff = None if last_ns is None else max(b.tmax for b in data) - last_ns
    meta = next((b.meta for b in infos if b.ref.kind == KIND_META), None)
    res = DumpResult(out)
    if into is not None:  # the caller closes it
        w = NativeWriter(into, out)
        for blk in _window(infos, cutoff, res):
            w.write_block(blk)
        with contextlib.suppress(OSError):
            os.fsync(into)
        res.bytes = w.size
        return res
    recfile.check_output(out, fmt, overwrite)
    tmp = recfile.new_temp(out, directory=fmt == "parquet")
    try:
        if fmt == "parquet":
            recs = (r for blk in _window(infos, cutoff, res) for r in recfile.read_native(blk))
            recfile.write_parquet(recs, tmp, meta)
        else:
            w = NativeWriter(os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC), tmp)
            try:
                for blk in _window(infos, cutoff, res):
                    w.write_block(blk)
            finally:
                w.close()
        recfile.replace_output(tmp, out)
    except BaseException as e:
        recfile.discard_temp(tmp)
        if isinstance(e, OSError):
            raise RecordingError(os_error_text(e, out, "write")) from None
        raise
    res.bytes = _disk_size(out)
    return res


def _disk_size(p: Path) -> int:
    if p.is_dir():
        return sum(f.stat().st_size for f in p.iterdir() if f.is_file())
    return p.stat().st_size


def dump_ring_directly(root: Path, out: Path, fmt: str, *, last_ns: int | None,
                       overwrite: bool) -> DumpResult:
    """Return the result of assembling the ring's segments into ``out`` (no recorder runs)."""
    files = [MappedFile.open(s.path) for s in list_segments(root)]
    try:
        return assemble(files, out, fmt, last_ns=last_ns, overwrite=overwrite)
    finally:
        for f in files:
            f.close()


def request_dump(root: Path, pid: int, out: Path, fmt: str, *, last_ns: int | None,
                 overwrite: bool, timeout_s: float) -> dict[str, Any]:
    """Ask the recorder ``pid`` writing ``root`` for a dump to ``out``; return its answer.

    The recorder (often root) writes its blocks into a new empty file that this process
    creates beside ``out``; this process then renames it over ``out`` (or converts it to
    Parquet). Every file is thus created and replaced with the asker's own rights, never
    the recorder's: asking a root recorder cannot overwrite a file the asker could not.
    """
    recfile.check_output(out, fmt, overwrite)
    into = recfile.new_temp(out)
    try:
        answer = _ask_recorder(root, pid, {"into": str(into.absolute()), "last_ns": last_ns},
                               timeout_s)
        if answer.get("ok"):
            if fmt == "parquet":
                recfile.write_recording(read_records(into), out, fmt, read_meta(into),
                                        overwrite=overwrite)
            else:
                recfile.replace_output(into, out)
        return answer
    finally:
        recfile.discard_temp(into)


def _ask_recorder(root: Path, pid: int, body: dict[str, Any],
                  timeout_s: float) -> dict[str, Any]:
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    req, done = root / f".dump-{token}.req", root / f".dump-{token}.done"
    try:
        tmp = req.with_name(req.name + ".tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, req)
    except OSError as e:
        raise RecordingError(f"cannot write a dump request in {root}: {e.strerror or e}"
                             " (run as the recorder's user)") from None
    try:
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            raise RecordingError(f"the recorder (pid {pid}) exited") from None
        except PermissionError:
            raise RecordingError(f"not allowed to signal the recorder (pid {pid}): run as"
                                 " its user") from None
        deadline = time.monotonic() + timeout_s
        while not done.exists():
            if time.monotonic() > deadline:
                raise RecordingError(f"the recorder (pid {pid}) did not answer within"
                                     f" {timeout_s:g}s")
            if running_recorder(root) != pid:
                raise RecordingError(f"the recorder (pid {pid}) exited before answering")
            time.sleep(0.02)
        try:
            return dict(json.loads(done.read_text()))
        except (OSError, ValueError) as e:
            raise RecordingError(f"unreadable answer from the recorder (pid {pid}): {e}")\
                from None
    finally:
        for p in (req, done):
            p.unlink(missing_ok=True)


def _open_into(path: Path, uid: int) -> int:
    """Open the file a dump request names: it must be an empty regular file of the user
    who asked (who created it: see ``request_dump``), never a link to another."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC)
    except (OSError, ValueError) as e:
        raise RecordingError(os_error_text(e, path, "open")) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_size or st.st_nlink != 1:
        os.close(fd)
        raise RecordingError(f"{path} is not an empty file of uid {uid}: refusing to dump"
                             " into it")
    return fd


@dataclass
class _DumpJob:
    out: Path
    last_ns: int | None = None
    #: (file to write into, the asker's uid), for a request from ``rezolus-ue dump``.
    into: tuple[Path, int] | None = None
    done: Path | None = None


class DumpServer:
    """The recorder's side of dumps: on SIGUSR1, write the window held, in a thread."""

    def __init__(self, ring: Ring) -> None:
        self.ring = ring
        self.threads: list[threading.Thread] = []

    def serve(self) -> None:
        """Start a dump for every pending request, or to ``dumps/`` if there is none."""
        root = self.ring.root
        jobs: list[_DumpJob] = []
        for req in sorted(root.glob(".dump-*.req")):
            try:
                body = json.loads(req.read_text())
                owner = req.stat().st_uid
                into = Path(body["into"])
                last = body.get("last_ns")
                if last is not None and type(last) is not int:
                    raise ValueError("last_ns")
            except (OSError, ValueError, TypeError, KeyError):
                continue
            jobs.append(_DumpJob(into, last, (into, owner), req.with_suffix(".done")))
            req.unlink(missing_ok=True)
        if not jobs:
            try:
                jobs.append(_DumpJob(self._default_path()))
            except OSError as e:
                log.warning("dump failed: %s", os_error_text(e, root / DUMPS_DIR, "write"))
                return
        for job in jobs:
            t = threading.Thread(target=self._run, name="rezolus-dump", daemon=False,
                                 args=(self.ring.snapshot(), job))
            t.start()
            self.threads.append(t)
        self.threads = [t for t in self.threads if t.is_alive()]

    def _default_path(self) -> Path:
        d = self.ring.root / DUMPS_DIR
        d.mkdir(exist_ok=True)
        stem = "dump-" + time.strftime("%Y%m%d-%H%M%S")
        path, k = d / f"{stem}{NATIVE_SUFFIX}", 1
        while path.exists():
            k += 1
            path = d / f"{stem}-{k}{NATIVE_SUFFIX}"
        return path

    def _run(self, files: list[MappedFile], job: _DumpJob) -> None:
        fd = -1
        try:
            if job.into is not None:
                fd = _open_into(*job.into)
            res = assemble(files, job.out, last_ns=job.last_ns,
                           into=None if fd < 0 else fd)
            answer = res.to_json()
            log.info("%s", res.summary())
        except RezolusError as e:
            answer = {"ok": False, "error": str(e)}
            log.warning("dump failed: %s", e)
        except Exception as e:  # a dump must never take the recorder down
            answer = {"ok": False, "error": f"internal error: {type(e).__name__}: {e}"}
            log.warning("dump failed: %s: %s", type(e).__name__, e)
        finally:
            if fd >= 0:
                os.close(fd)
            for f in files:
                f.close()
        if job.done is not None:
            tmp = job.done.with_name(job.done.name + ".tmp")
            with contextlib.suppress(OSError):
                tmp.write_text(json.dumps(answer))
                os.replace(tmp, job.done)

    def join(self) -> None:
        """Wait for dumps in progress."""
        for t in self.threads:
            t.join()


# --- the recording loop -----------------------------------------------------------------------


@dataclass
class Control:
    """Flags the signal handlers set and the loop reads."""

    stop: bool = False
    dump: bool = False
    #: Set once recording: before, a stop signal interrupts whatever we wait for.
    running: bool = False


@dataclass
class LoopStats:
    """What a recording session did."""

    records: int = 0
    events: set[str] = field(default_factory=set)
    lost: int = 0


def record_loop(source: Source, sink: Sink, ctl: Control, *, flush_ns: int,
                duration_ns: int | None = None, on_dump: Callable[[], None] | None = None,
                clock: Callable[[], int] = time.monotonic_ns) -> LoopStats:
    """Move records from ``source`` to ``sink`` until ``ctl.stop``, the duration, or the
    source's end; write them every ``flush_ns`` (and before a dump)."""
    stats = LoopStats()
    start = clock()
    deadline = None if duration_ns is None else start + duration_ns
    next_flush = start + flush_ns
    buf: list[Record] = []
    while True:
        now = clock()
        if ctl.stop or getattr(source, "exhausted", False) or (deadline and now >= deadline):
            break
        until = next_flush if deadline is None else min(next_flush, deadline)
        recs = source.poll(max(1, min(until - now, POLL_MS * 10**6) // 10**6))
        if recs:
            buf.extend(recs)
            stats.records += len(recs)
            stats.events.update(r.event for r in recs)
        now = clock()
        if now >= next_flush or len(buf) >= MAX_BUFFER or ctl.dump:
            sink.write(buf)
            buf = []
            next_flush = now + flush_ns
            if source.lost != stats.lost:
                log.warning("%d records lost (the kernel ring was full: the recorder was"
                            " too slow)", source.lost - stats.lost)
                stats.lost = source.lost
        else:
            sink.tick()
        if ctl.dump:
            ctl.dump = False
            if on_dump is not None:
                on_dump()
    # What reached the rings before the stop is recorded too (a live source's drain).
    rest = getattr(source, "drain", lambda: [])()
    buf.extend(rest)
    stats.records += len(rest)
    stats.events.update(r.event for r in rest)
    sink.write(buf)
    return stats


# --- commands ---------------------------------------------------------------------------------


def _install_signals(ctl: Control) -> None:
    def on_usr1(_sig: int, _frame: object) -> None:
        ctl.dump = True

    def on_stop(_sig: int, _frame: object) -> None:
        # Before recording (waiting for the agent), or asked twice: stop at once.
        if ctl.stop or not ctl.running:
            raise KeyboardInterrupt
        ctl.stop = True

    # SIGUSR1 must never kill us (its default action), even while we wait for the agent.
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)


def run_record(args: argparse.Namespace) -> int:
    """Record until --duration, Ctrl-C/SIGTERM, or the end of --source-file."""
    events = list(args.events)
    target: str | None = args.target
    if args.ring is not None:
        if target is not None:
            events.insert(0, target)
        if args.format == "parquet":
            raise ConfigError("--ring writes native segments; dump them as Parquet with"
                              " `rezolus-ue dump --format parquet`")
    else:
        if target is None:
            raise ConfigError("record needs a FILE, or --ring DIR for a flight recorder")
        for opt in ("max_size", "max_age"):
            if getattr(args, opt) is not None:
                raise ConfigError(f"--{opt.replace('_', '-')} needs --ring DIR")
    if args.source_file is None:
        # Validate event names before waiting for the agent.
        from .subscription import resolve_events

        resolve_events(events or None)
    ctl = Control()
    _install_signals(ctl)
    ring: Ring | None = None
    server: DumpServer | None = None
    # Refuse what will fail before waiting for the agent; create files only once it is here.
    if args.ring is not None:
        pid = running_recorder(args.ring) if args.ring.is_dir() else None
        if pid is not None:
            raise RecordingError(f"another recorder (pid {pid}) is writing {args.ring}; stop"
                                 " it or use another --ring")
        where = f"ring {args.ring} (max {format_size(args.max_size or DEFAULT_RING_SIZE)}" + (
            f", {format_duration(args.max_age)}" if args.max_age else "") + ")"
    else:
        path = Path(target)  # type: ignore[arg-type]
        fmt = args.format or ("parquet" if path.suffix == ".parquet" else "native")
        if fmt == "parquet":
            recfile._pyarrow()
        recfile.check_output(path, fmt, args.force)
        where = str(path)
    source = _open_source(args, events)
    try:
        if args.ring is not None:
            ring = Ring(args.ring, max_size=args.max_size or DEFAULT_RING_SIZE,
                        max_age_ns=args.max_age, segment_size=args.segment_size,
                        segment_ns=args.segment_age)
            ring.open()
            sink: Sink = ring
            server = DumpServer(ring)
        elif fmt == "parquet":
            sink = ParquetSink(path, overwrite=args.force)
        else:
            sink = FileSink(path, overwrite=args.force)
        try:
            ctl.running = True
            log.info("recording to %s%s (Ctrl-C to stop%s)", where,
                     f" for {format_duration(args.duration)}" if args.duration else "",
                     "; SIGUSR1 or `rezolus-ue dump` to dump" if ring else "")
            stats = record_loop(source, sink, ctl, flush_ns=args.flush,
                                duration_ns=args.duration,
                                on_dump=server.serve if server else None)
        finally:
            if server is not None:
                server.join()
            sink.close()
    finally:
        source.close()
    lost = f", {stats.lost} lost by the kernel" if stats.lost else ""
    log.info("recorded %d records of %d events to %s%s", stats.records, len(stats.events),
             where, lost)
    return 0


def _open_source(args: argparse.Namespace, events: list[str]) -> Source:
    if args.source_file is not None:
        return open_test_source(args.source_file, events or None)
    return open_source(None, events or None, wait=not args.no_wait)


def run_dump(args: argparse.Namespace) -> int:
    """Write a ring's window (or convert a recording) to OUTFILE."""
    out: Path = args.outfile
    fmt = args.format or ("parquet" if out.suffix == ".parquet" else "native")
    if fmt == "parquet":
        recfile._pyarrow()
    recfile.check_output(out, fmt, args.force)
    if args.source is not None:
        source = recfile.check_input(args.source)
        if recfile._parquet_recording(source):
            # Parquet input: convert record by record.
            n = recfile.write_recording(_last(source, args.last), out, fmt,
                                        read_meta(source), overwrite=args.force)
            print(f"rezolus-ue: wrote {out}: {n} records", file=sys.stderr)
            return 0
        files = [MappedFile.open(f) for f in recfile.recording_files(source)]
        try:
            res = assemble(files, out, fmt, last_ns=args.last, overwrite=args.force)
        finally:
            for f in files:
                f.close()
        print(f"rezolus-ue: {res.summary()}", file=sys.stderr)
        return 0
    root: Path = args.ring
    if not root.is_dir():
        raise RecordingError(f"no ring at {root}: start one with"
                             f" `rezolus-ue record --ring {root}`")
    pid = running_recorder(root)
    if pid is None:
        res = dump_ring_directly(root, out, fmt, last_ns=args.last, overwrite=args.force)
        print(f"rezolus-ue: {res.summary()} (from the segments: no recorder is running)",
              file=sys.stderr)
        return 0
    answer = request_dump(root, pid, out, fmt, last_ns=args.last, overwrite=args.force,
                          timeout_s=args.timeout / 1e9)
    if not answer.get("ok"):
        raise RecordingError(f"the recorder (pid {pid}) could not dump: {answer.get('error')}")
    res = DumpResult(out, answer["records"], answer["bytes"], answer["first_ns"],
                     answer["last_ns"], answer.get("wall_offset_ns"))
    print(f"rezolus-ue: {res.summary()} (by the recorder, pid {pid})", file=sys.stderr)
    return 0


def _last(source: Path, last_ns: int | None) -> Iterator[Record]:
    if last_ns is None:
        yield from read_records(source)
        return
    newest = max((r.time_ns for r in read_records(source)), default=0)
    yield from (r for r in read_records(source) if r.time_ns >= newest - last_ns)


# --- argument parsing -------------------------------------------------------------------------


def _arg_duration(text: str) -> int:
    try:
        ns = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if ns <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return ns


def _arg_size(text: str) -> int:
    try:
        n = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return n


def _arg_ring_size(text: str) -> int:
    n = _arg_size(text)
    if n < MIN_RING_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r} is too small: at least 1M")
    return n


_RECORD_EPILOG = """\
examples:
  sudo rezolus-ue record run.rzr --duration 10m            every event, 10 minutes
  sudo rezolus-ue record cpu.rzr 'rezolus_cpu*'            some events, until Ctrl-C
  sudo rezolus-ue record --format parquet run/             Parquet (needs pyarrow)
  sudo rezolus-ue record --ring /var/lib/rezolus-ue/ring --max-size 1G --max-age 1h
  sudo rezolus-ue dump incident.rzr                        write the ring's window
  rezolus-ue tail --from run.rzr                           read it back

Read recordings with pandas or DuckDB: see docs/recording.md."""

_DUMP_EPILOG = f"""\
examples:
  sudo rezolus-ue dump incident.rzr                 the window of {DEFAULT_RING}
  sudo rezolus-ue dump --ring DIR --last 5m last5m.rzr
  rezolus-ue dump --from run.rzr --format parquet run/   convert (needs pyarrow)
  sudo kill -USR1 $(cat DIR/{PID_FILE})               same, to DIR/{DUMPS_DIR}/"""


def add_record_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``record`` subcommand."""
    p = sub.add_parser(
        "record", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] FILE [EVENT ...]\n"
              "       %(prog)s --ring DIR [--max-size SIZE] [--max-age DURATION] [EVENT ...]",
        help="record events to a file, or keep a rolling window (flight recorder)",
        description="Subscribe to rezolus-ue tracepoints (like `tail`) and write every record"
        " to FILE, a columnar recording: native .rzr (crash-safe, needs nothing) or Parquet."
        " With --ring, keep the last --max-size/--max-age of records in segment files in DIR;"
        " SIGUSR1 or `rezolus-ue dump` writes that window to one file.",
        epilog=_RECORD_EPILOG,
    )
    p.add_argument("target", nargs="?", metavar="FILE",
                   help="recording to write (a directory for --format parquet)")
    p.add_argument("events", nargs="*", metavar="EVENT",
                   help="event names or shell globs (default: every rezolus-ue event)")
    p.add_argument("-d", "--duration", type=_arg_duration, metavar="DURATION",
                   help=f"stop after DURATION ({DURATION_HELP}); default: until Ctrl-C")
    p.add_argument("--format", choices=("native", "parquet"),
                   help="native .rzr (default) or parquet (default if FILE ends .parquet;"
                   " needs pyarrow)")
    p.add_argument("--force", action="store_true",
                   help="overwrite FILE if it is a regular file (or a Parquet recording"
                   " directory); nothing else is ever replaced")
    p.add_argument("--flush", type=_arg_duration, default=10**9, metavar="DURATION",
                   help="write buffered records this often: a crash loses at most this much"
                   " (default 1s)")
    p.add_argument("--no-wait", action="store_true",
                   help="exit at once if the agent is not running, instead of waiting")
    ring = p.add_argument_group("flight recorder")
    ring.add_argument("--ring", type=path_arg, metavar="DIR",
                      help="keep a rolling window in segment files in DIR")
    ring.add_argument("--max-size", type=_arg_ring_size, metavar="SIZE",
                      help=f"bound the segments' total size: {SIZE_HELP} (default 100M)")
    ring.add_argument("--max-age", type=_arg_duration, metavar="DURATION",
                      help="delete segments older than DURATION (default: size bound only)")
    ring.add_argument("--segment-size", type=_arg_size, help=argparse.SUPPRESS)
    ring.add_argument("--segment-age", type=_arg_duration, help=argparse.SUPPRESS)
    # Tests and replays: read records from a recording or JSON lines ("-": stdin).
    p.add_argument("--source-file", metavar="FILE", help=argparse.SUPPRESS)
    p.set_defaults(func=run_record)


def add_dump_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``dump`` subcommand."""
    p = sub.add_parser(
        "dump", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="write a flight recorder's window to one file",
        description="Write the records a `rezolus-ue record --ring DIR` holds to OUTFILE, a"
        " recording like `record` writes. If the recorder runs, it is asked (SIGUSR1, via"
        f" DIR/{PID_FILE}) so the dump includes what it has buffered; else the segments are"
        " read directly. With --from, convert or trim an existing recording instead.",
        epilog=_DUMP_EPILOG,
    )
    p.add_argument("outfile", type=path_arg, metavar="OUTFILE",
                   help="recording to write (a directory for --format parquet)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--ring", type=path_arg, default=DEFAULT_RING, metavar="DIR",
                     help=f"the flight recorder's directory (default {DEFAULT_RING})")
    src.add_argument("--from", dest="source", type=path_arg, metavar="FILE",
                     help="read this recording (file, Parquet directory, or ring directory)")
    p.add_argument("--last", type=_arg_duration, metavar="DURATION",
                   help="only the records of the last DURATION before the newest one")
    p.add_argument("--format", choices=("native", "parquet"),
                   help="native .rzr (default) or parquet (default if OUTFILE ends .parquet)")
    p.add_argument("--force", action="store_true",
                   help="overwrite OUTFILE if it is a regular file (or a Parquet recording"
                   " directory); nothing else is ever replaced")
    p.add_argument("--timeout", type=_arg_duration, default=60 * 10**9, metavar="DURATION",
                   help="how long to wait for the recorder's answer (default 60s)")
    p.set_defaults(func=run_dump)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``record`` and ``dump`` subcommands."""
    add_record_parser(sub)
    add_dump_parser(sub)


def main(argv: list[str] | None = None) -> int:
    """Run ``record`` or ``dump`` alone, as the CLI would (for tests and before wiring)."""
    from ..cli import PROG, _Parser

    parser = _Parser(prog=PROG)
    add_parser(parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                     required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(format=f"{PROG}: %(message)s", level=logging.INFO, stream=sys.stderr)
    try:
        return int(args.func(args))
    except RezolusError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        if e.errno == errno.EPIPE:
            return 0
        raise


if __name__ == "__main__":
    sys.exit(main())
