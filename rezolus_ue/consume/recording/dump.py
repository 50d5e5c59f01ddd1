"""Dumps: a ring's window (or a recording) written to one file, by the recorder or not.

``rezolus-ue dump`` asks the running recorder (SIGUSR1 and a request file in the ring
directory) so the dump holds what it has buffered, or reads the segments itself when no
recorder runs; ``--from`` converts or trims a recording instead. ``DumpServer`` is the
recorder's side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config import duration_arg, format_duration, path_arg
from ...errors import RezolusError, os_error_text
from ..records import Record
from . import blocks, native, parquet
from . import files as recfiles
from . import tables as rectables
from .blocks import (
    KIND_DATA,
    KIND_META,
    NATIVE_SUFFIX,
    MappedFile,
    RecordingError,
    scan_blocks,
    warn_damage,
)
from .files import read_meta, read_records
from .native import NativeWriter
from .ring import DEFAULT_RING, DUMPS_DIR, PID_FILE, Ring, list_segments, running_recorder

log = logging.getLogger("rezolus_ue")


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
    ref: blocks.BlockRef
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
        st = blocks.ScanStats()
        for ref in scan_blocks(mf.buf, st):
            try:
                if ref.kind == KIND_META:
                    yield _BlockInfo(mf, ref, meta=native._clean_meta(
                        json.loads(ref.payload(mf.buf))) or {})
                    continue
                if ref.kind != KIND_DATA:
                    continue
                tables = rectables.decode_block(mf.buf, ref)
            except (blocks.BlockError, ValueError, RecursionError) as e:
                st.bad(ref, e)
                continue
            times = [t.columns["time_ns"] for t in tables if t.rows]
            if times:
                yield _BlockInfo(mf, ref, sum(len(x) for x in times),
                                 min(int(x.min()) for x in times),
                                 max(int(x.max()) for x in times))
        warn_damage(mf.path, st)


def _window(infos: list[_BlockInfo], start: int | None, end: int | None,
            res: DumpResult) -> Iterator[bytes]:
    """Yield the blocks to dump: each file's metadata before its first kept data block,
    data blocks inside [``start``, ``end``] (None: open) whole, those straddling an end
    cut; count into ``res``."""
    def inside(t: int) -> bool:
        return (start is None or t >= start) and (end is None or t <= end)

    pending: _BlockInfo | None = None
    for b in infos:
        if b.ref.kind == KIND_META:
            pending = b
            continue
        if (start is not None and b.tmax < start) or (end is not None and b.tmin > end):
            continue
        if inside(b.tmin) and inside(b.tmax):
            kept = [b.raw()]
            rows, tmin, tmax = b.rows, b.tmin, b.tmax
        else:
            recs = [r for r in native.read_native(b.raw()) if inside(r.time_ns)]
            if not recs:
                continue
            kept = list(native.data_blocks(recs))
            rows, tmin, tmax = len(recs), recs[0].time_ns, max(r.time_ns for r in recs)
        if pending is not None:
            yield pending.raw()
            if res.wall_offset_ns is None:
                res.wall_offset_ns = pending.meta.get("wall_offset_ns")
            pending = None
        yield from kept
        res.records += rows
        res.first_ns = tmin if res.first_ns is None else min(res.first_ns, tmin)
        res.last_ns = tmax if res.last_ns is None else max(res.last_ns, tmax)


def assemble(files: list[MappedFile], out: Path, fmt: str = "native", *,
             last_ns: int | None = None, window: tuple[int, int] | None = None,
             overwrite: bool = False, into: int | None = None) -> DumpResult:
    """Write the blocks of ``files`` (oldest first) to one recording at ``out``.

    ``last_ns`` keeps only the records of that span before the newest one; ``window``
    only those from its start to its end (a trigger's window). Native output
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
    start, end = window if window is not None else (None, None)
    if last_ns is not None:
        start = max(b.tmax for b in data) - last_ns
    meta = next((b.meta for b in infos if b.ref.kind == KIND_META), None)
    res = DumpResult(out)
    if into is not None:  # the caller closes it
        w = NativeWriter(into, out)
        for blk in _window(infos, start, end, res):
            w.write_block(blk)
        with contextlib.suppress(OSError):
            os.fsync(into)
        res.bytes = w.size
        return res
    recfiles.check_output(out, fmt, overwrite)
    tmp = recfiles.new_temp(out)
    try:
        if fmt == "parquet":
            recs = (r for blk in _window(infos, start, end, res) for r in native.read_native(blk))
            parquet.write_parquet(recs, tmp, meta)
        else:
            w = NativeWriter(os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC), tmp)
            try:
                for blk in _window(infos, start, end, res):
                    w.write_block(blk)
            finally:
                w.close()
        recfiles.replace_output(tmp, out)
    except BaseException as e:
        recfiles.discard_temp(tmp)
        if isinstance(e, OSError):
            raise RecordingError(os_error_text(e, out, "write")) from None
        raise
    res.bytes = _disk_size(out)
    return res


def _disk_size(p: Path) -> int:
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
    recfiles.check_output(out, fmt, overwrite)
    into = recfiles.new_temp(out)
    try:
        answer = _ask_recorder(root, pid, {"into": str(into.absolute()), "last_ns": last_ns},
                               timeout_s)
        if answer.get("ok"):
            if fmt == "parquet":
                recfiles.write_recording(read_records(into), out, fmt, read_meta(into),
                                        overwrite=overwrite)
            else:
                recfiles.replace_output(into, out)
        return answer
    finally:
        recfiles.discard_temp(into)


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


def run_dump(args: argparse.Namespace) -> int:
    """Write a ring's window (or convert a recording) to OUTFILE."""
    out: Path = args.outfile
    fmt = args.format or ("parquet" if out.suffix == ".parquet" else "native")
    if fmt == "parquet":
        parquet._pyarrow()
    recfiles.check_output(out, fmt, args.force)
    if args.source is not None:
        source = recfiles.check_input(args.source)
        if recfiles.parquet_files(source):
            # Parquet input: convert record by record.
            n = recfiles.write_recording(_last(source, args.last), out, fmt,
                                        read_meta(source), overwrite=args.force)
            print(f"rezolus-ue: wrote {out}: {n} records", file=sys.stderr)
            return 0
        files = [MappedFile.open(f) for f in native.recording_files(source)]
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


_DUMP_EPILOG = f"""\
examples:
  sudo rezolus-ue dump incident.rzr                 the window of {DEFAULT_RING}
  sudo rezolus-ue dump --ring DIR --last 5m last5m.rzr
  rezolus-ue dump --from run.rzr run.parquet             convert (needs pyarrow)
  sudo kill -USR1 $(cat DIR/{PID_FILE})               same, to DIR/{DUMPS_DIR}/"""


def add_parser(sub: argparse._SubParsersAction) -> None:
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
                   help="recording to write (one file in either format)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--ring", type=path_arg, default=DEFAULT_RING, metavar="DIR",
                     help=f"the flight recorder's directory (default {DEFAULT_RING})")
    src.add_argument("--from", dest="source", type=path_arg, metavar="FILE",
                     help="read this recording (native or Parquet file, or ring directory)")
    p.add_argument("--last", type=duration_arg, metavar="DURATION",
                   help="only the records of the last DURATION before the newest one")
    p.add_argument("--format", choices=("native", "parquet"),
                   help="native .rzr (default) or parquet (default if OUTFILE ends .parquet)")
    p.add_argument("--force", action="store_true",
                   help="overwrite OUTFILE if it is a regular file; nothing else is ever"
                   " replaced")
    p.add_argument("--timeout", type=duration_arg, default=60 * 10**9, metavar="DURATION",
                   help="how long to wait for the recorder's answer (default 60s)")
    p.set_defaults(func=run_dump)
