"""Recording files: the native ``.rzr`` format (always available) and Parquet (pyarrow).

Native format (docs/recording.md has the full specification): a sequence of blocks, each
``sync "RZRB", kind, flags, reserved, length, CRC-32`` (16 bytes, little-endian) then the
payload. A ``M`` block holds JSON metadata; a ``D`` block holds one flush of records as
columnar tables, one per event, zlib-compressed. Every block stands alone, so:

* concatenating recordings (``cat a.rzr b.rzr``) gives a recording: that is how ring
  segments become one dump;
* a reader stops cleanly at a block cut short by a crash or ``kill -9`` and skips (with a
  warning) a damaged block in the middle, resynchronising on the next valid block.

Parquet (``parquet``): a directory with one ``<event>.parquet`` per event, written
from native records. The layers below are ``blocks`` (framing, CRC, resync) and
``tables`` (the columnar tables a data block holds, and their columns); this module
writes and reads whole recordings in either format and guards the output files.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import os_error_text
from ..records import Record
from .blocks import (
    BLOCK_PAYLOAD,
    KIND_DATA,
    KIND_META,
    NATIVE_SUFFIX,
    PARQUET_SUFFIX,
    PART_SUFFIX,
    BlockError,
    MappedFile,
    RecordingError,
    ScanStats,
    _not_a_file,
    encode_block,
    meta_block,
    recording_meta,
    scan_blocks,
    warn_damage,
)
from .parquet import _pyarrow, read_parquet, write_parquet
from .tables import (
    _INT_TYPES,
    _chunks,
    _event_filter,
    decode_block,
    encode_tables,
    merge_by_time,
    to_tables,
)

log = logging.getLogger("rezolus_ue")

# --- writing --------------------------------------------------------------------------------


def data_blocks(records: Sequence[Record]) -> Iterator[bytes]:
    """Yield ``records`` (in time order) as data blocks, halving a flush whose payload
    would exceed BLOCK_PAYLOAD, so readers can refuse to inflate more than MAX_PAYLOAD."""
    payload = encode_tables(to_tables(records))
    if len(payload) > BLOCK_PAYLOAD and len(records) > 1:
        half = len(records) // 2
        yield from data_blocks(records[:half])
        yield from data_blocks(records[half:])
    else:
        yield encode_block(KIND_DATA, payload)


class NativeWriter:
    """Append blocks to an open file descriptor: one ``write`` per block, so a kill leaves
    at most one incomplete block, at the end."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self.size = os.fstat(fd).st_size

    @classmethod
    def create(cls, path: Path, meta: dict[str, Any], *, overwrite: bool = False) -> NativeWriter:
        """Return a writer for a new file at ``path`` that starts with ``meta``."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
        flags |= os.O_TRUNC if overwrite else os.O_EXCL
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            raise RecordingError(f"{path} exists: use --force to overwrite it") from None
        except (OSError, ValueError) as e:
            raise RecordingError(os_error_text(e, path, "create")) from None
        w = cls(fd, path)
        w.write_block(meta_block(meta))
        return w

    def write_block(self, block: bytes) -> None:
        """Write one block."""
        view = memoryview(block)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as e:
            raise RecordingError(os_error_text(e, self.path, "write")) from None
        self.size += len(block)

    def write_records(self, records: Sequence[Record]) -> int:
        """Write ``records`` as one data block (none: nothing), or several if their payload
        exceeds BLOCK_PAYLOAD; return the bytes written."""
        if not records:
            return 0
        # Sorted, each table is in time order and a reader merges them back exactly.
        n = 0
        for block in data_blocks(sorted(records, key=lambda r: r.time_ns)):
            self.write_block(block)
            n += len(block)
        return n

    def close(self, *, sync: bool = True) -> None:
        """Flush to disk (if ``sync``) and close."""
        if self.fd < 0:
            return
        try:
            if sync:
                os.fsync(self.fd)
        except OSError as e:
            log.warning("cannot fsync %s: %s", self.path, e.strerror)
        finally:
            os.close(self.fd)
            self.fd = -1


def write_native(records: Iterable[Record], path: Path, meta: dict[str, Any] | None = None,
                 *, overwrite: bool = False, block_records: int = 50_000) -> int:
    """Write ``records`` to a native recording at ``path``; return how many."""
    w = NativeWriter.create(path, meta or recording_meta(), overwrite=overwrite)
    n = 0
    try:
        for chunk in _chunks(records, block_records):
            w.write_records(chunk)
            n += len(chunk)
    finally:
        w.close()
    return n


# --- reading --------------------------------------------------------------------------------


def read_native(buf: Any, events: Iterable[str] | None = None,
                stats: ScanStats | None = None) -> Iterator[Record]:
    """Yield the records of a native recording's bytes, block by block, in time order
    within each block. Each block is decoded alone: one that cannot be is skipped and
    counted in ``stats``, and reading goes on with the next."""
    keep = _event_filter(events)
    st = stats if stats is not None else ScanStats()
    for ref in scan_blocks(buf, st):
        if ref.kind != KIND_DATA:
            continue
        try:
            tables = decode_block(buf, ref, keep)
        except BlockError as e:
            st.bad(ref, e)
            continue
        yield from merge_by_time(tables)


def check_input(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` as a Path if it is a file or directory to read a recording from;
    else raise RecordingError saying why (missing, unreadable, a pipe or device...)."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise RecordingError(f"{p}: no such file or directory") from None
    except (OSError, ValueError) as e:
        raise RecordingError(os_error_text(e, p, "read")) from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        # Sizes, mmap and the two passes some readers make need a file.
        raise RecordingError(_not_a_file(p, mode))
    return p


def recording_files(path: Path) -> list[Path]:
    """Return the native files of ``path``: itself, or a directory's ``*.rzr`` and
    ``*.rzr.part`` (a ring, or a Parquet recording's journal) in name order."""
    if not path.is_dir():
        return [path]
    try:
        entries = list(path.iterdir())
    except OSError as e:
        raise RecordingError(os_error_text(e, path, "read")) from None
    return sorted(p for p in entries
                  if p.is_file() and (p.name.endswith(NATIVE_SUFFIX)
                                      or p.name.endswith(NATIVE_SUFFIX + PART_SUFFIX)))


def _parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        try:
            entries = list(path.iterdir())
        except OSError as e:
            raise RecordingError(os_error_text(e, path, "read")) from None
        return sorted(p for p in entries if p.is_file() and p.suffix == PARQUET_SUFFIX)
    return [path] if _is_parquet(path) else []


def _parquet_recording(path: Path) -> list[Path]:
    """Return the Parquet files to read for ``path`` (none: read it as native).

    A Parquet directory's native journal, left by a recorder that was killed before
    converting, is the whole truth and wins.
    """
    if path.is_dir() and recording_files(path):
        return []
    return _parquet_files(path)


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def _read_file(f: Path, events: Iterable[str] | None, st: ScanStats,
               alone: bool) -> Iterator[Record]:
    """Yield one native file's records; warn once about what was skipped. A file with
    bytes but no valid block is not a recording: an error if read ``alone``."""
    mf = MappedFile.open(f)
    one = ScanStats()
    try:
        yield from read_native(mf.buf, events, one)
        size = len(mf.buf)
    finally:
        mf.close()
    st.add(one)
    if size and not one.blocks:
        msg = f"{f} is not a rezolus-ue recording (no valid block in its {size} bytes)"
        if alone:
            raise RecordingError(msg)
        log.warning("%s", msg)
        return
    warn_damage(f, one)


def read_records(path: str | os.PathLike[str], events: Iterable[str] | None = None,
                 stats: ScanStats | None = None) -> Iterator[Record]:
    """Yield the records of a recording, oldest first.

    ``path`` is a native file, a directory of native files (a ring: its segments in
    order), a Parquet recording directory, or one of its ``.parquet`` files. ``events``
    keeps only those event names. Damage loses only itself: bytes that are not valid
    blocks and blocks (or Parquet row groups) that cannot be decoded are skipped, counted
    in ``stats`` and reported in one warning per file. Raise RecordingError if ``path``
    cannot be read at all, or is a file with no valid block.
    """
    p = check_input(path)
    st = stats if stats is not None else ScanStats()
    if _parquet_recording(p):
        yield from read_parquet(_parquet_recording(p), events, st)
        return
    for f in recording_files(p):
        yield from _read_file(f, events, st, alone=f == p)


#: Metadata keys whose type readers rely on: a recording with another type drops them.
_META_INTS = ("version", "wall_offset_ns", "started_unix_ns", "segment")


def _clean_meta(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return {k: v for k, v in value.items()
            if k not in _META_INTS or (type(v) is int and abs(v) < 1 << 63)}


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the recording's metadata (its first readable metadata block; {} if none)."""
    p = check_input(path)
    for pq_file in _parquet_recording(p)[:1]:
        pa, pq = _pyarrow()
        try:
            kv = pq.ParquetFile(pq_file).schema_arrow.metadata or {}
            return _clean_meta(json.loads(kv.get(b"rezolus_ue.meta", b"{}"))) or {}
        except (OSError, ValueError, RecursionError, pa.ArrowException):
            return {}  # read_records says what is wrong with the file
    for f in recording_files(p):
        mf = MappedFile.open(f)
        try:
            for ref in scan_blocks(mf.buf):
                if ref.kind != KIND_META:
                    continue
                with contextlib.suppress(BlockError, ValueError, RecursionError):
                    if (meta := _clean_meta(json.loads(ref.payload(mf.buf)))) is not None:
                        return meta
        finally:
            mf.close()
    return {}


def read_tables(path: str | os.PathLike[str],
                events: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Return a native recording as one table per event: {event: {column: values}}.

    Integer columns are numpy arrays, str and bytes columns lists: ready for
    ``pandas.DataFrame(columns)``. An event recorded with two field layouts (two agent
    versions) gets its second as ``<event>#2``. Damage is skipped as by ``read_records``.
    """
    keep = _event_filter(events)
    acc: dict[str, tuple[tuple[str, ...], dict[str, list[Any]]]] = {}
    for f in recording_files(check_input(path)):
        mf = MappedFile.open(f)
        st = ScanStats()
        try:
            for ref in scan_blocks(mf.buf, st):
                if ref.kind != KIND_DATA:
                    continue
                try:
                    tables = decode_block(mf.buf, ref, keep)
                except BlockError as e:
                    st.bad(ref, e)
                    continue
                for t in tables:
                    key, k = t.event, 1
                    sig = tuple(t.types.items())
                    while key in acc and acc[key][0] != sig:
                        k += 1
                        key = f"{t.event}#{k}"
                    cols = acc.setdefault(key, (sig, {c: [] for c in t.types}))[1]
                    for c, v in t.columns.items():
                        cols[c].append(v)
        finally:
            mf.close()
        warn_damage(f, st)
    out: dict[str, dict[str, Any]] = {}
    for key, (sig, cols) in acc.items():
        types = dict(sig)
        out[key] = {c: (np.concatenate(parts) if types[c] in _INT_TYPES
                        else list(itertools.chain.from_iterable(parts)))
                    for c, parts in cols.items()}
    return out


def to_pandas(path: str | os.PathLike[str], events: Iterable[str] | None = None) -> dict:
    """Return {event: pandas.DataFrame} for a native or Parquet recording (needs pandas)."""
    try:
        import pandas as pd
    except ImportError:
        raise RecordingError("to_pandas needs pandas: pip install pandas") from None
    p = check_input(path)
    if files := _parquet_recording(p):
        pa, _pq = _pyarrow()
        keep = _event_filter(events)
        try:
            return {f.stem: pd.read_parquet(f) for f in files
                    if keep is None or keep(f.stem.split("-", 1)[0])}
        except (OSError, ValueError, pa.ArrowException) as e:
            raise RecordingError(f"cannot read {p}: {e}") from None
    return {e: pd.DataFrame(cols) for e, cols in read_tables(p, events).items()}


# --- output files -----------------------------------------------------------------------


def _kind_of(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode)
            else "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")


def _parquet_dir_files(path: Path) -> list[Path] | None:
    """Return the files of a directory that holds a Parquet recording and nothing else
    (its ``.parquet`` files, a journal, a ``.part`` of either); None if it holds more."""
    try:
        entries = list(os.scandir(path))
    except OSError as e:
        raise RecordingError(os_error_text(e, path, "read")) from None
    ours = (PARQUET_SUFFIX, PARQUET_SUFFIX + PART_SUFFIX, NATIVE_SUFFIX,
            NATIVE_SUFFIX + PART_SUFFIX)
    if not all(e.is_file(follow_symlinks=False) and e.name.endswith(ours) for e in entries):
        return None
    return [Path(e.path) for e in entries]


def check_output(out: Path, fmt: str, overwrite: bool) -> None:
    """Refuse to write ``out`` unless it is new, or (with ``overwrite``) a regular file,
    or for Parquet a directory holding only a Parquet recording (or nothing).

    Nothing else is ever replaced: not a directory of other files, a device, a pipe or a
    symbolic link (which would be replaced, not followed)."""
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:
        raise RecordingError(os_error_text(e, out, "write")) from None
    if fmt == "parquet" and stat.S_ISDIR(mode):
        files = _parquet_dir_files(out)
        if files is None:
            raise RecordingError(f"{out} is a directory holding other files than a Parquet"
                                 " recording: refusing to replace it; choose a new name")
        if not files:
            return
    elif not stat.S_ISREG(mode):
        hint = " (a Parquet recording is a directory: --format parquet)" \
            if stat.S_ISDIR(mode) and fmt != "parquet" else ""
        raise RecordingError(f"{out} is {_kind_of(mode)}: refusing to replace it; choose a"
                             f" new file name{hint}")
    if not overwrite:
        raise RecordingError(f"{out} exists: use --force to overwrite it")


def new_temp(out: Path, *, directory: bool = False) -> Path:
    """Create and return a new file (or directory) beside ``out`` to write it in, under a
    name no one else uses: nothing that exists is ever truncated or removed."""
    for _ in range(100):
        tmp = out.with_name(f".{out.name[:200]}.{secrets.token_hex(4)}{PART_SUFFIX}")
        try:
            if directory:
                os.mkdir(tmp, 0o755)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                                 0o644))
            return tmp
        except FileExistsError:
            continue
        except (OSError, ValueError) as e:
            raise RecordingError(os_error_text(e, out, "write")) from None
    raise RecordingError(f"cannot create a temporary file beside {out}")


def discard_temp(tmp: Path) -> None:
    """Remove a file or directory ``new_temp`` made (and what we wrote into it)."""
    with contextlib.suppress(OSError):
        if tmp.is_dir() and not tmp.is_symlink():
            for f in tmp.iterdir():
                f.unlink()
            tmp.rmdir()
        else:
            tmp.unlink()


def replace_output(tmp: Path, out: Path) -> None:
    """Move the complete ``tmp`` to ``out``, which ``check_output`` accepted: a file by
    rename; a Parquet directory by setting the old one aside first, removing only its
    recording files once the new one is in place."""
    try:
        if tmp.is_dir() and out.is_dir() and not out.is_symlink():
            old = _parquet_dir_files(out)
            if old is None:
                raise RecordingError(f"{out} now holds other files: refusing to replace it")
            aside = new_temp(out, directory=True)
            os.rmdir(aside)
            os.rename(out, aside)
            try:
                os.rename(tmp, out)
            except OSError:
                os.rename(aside, out)
                raise
            for f in old:
                (aside / f.name).unlink(missing_ok=True)
            os.rmdir(aside)
        else:
            os.replace(tmp, out)
    except OSError as e:
        raise RecordingError(os_error_text(e, out, "write")) from None


def write_recording(records: Iterable[Record], out: Path, fmt: str,
                    meta: dict[str, Any] | None = None, *, overwrite: bool = False) -> int:
    """Write ``records`` to ``out`` as ``fmt`` ("native" or "parquet"); return how many.

    The output appears whole or not at all: it is written beside under a new name first,
    then renamed (see ``check_output`` for what may be replaced).
    """
    check_output(out, fmt, overwrite)
    if fmt == "parquet":
        _pyarrow()
    tmp = new_temp(out, directory=fmt == "parquet")
    try:
        if fmt == "parquet":
            n = write_parquet(records, tmp, meta)
        else:
            n = write_native(records, tmp, meta, overwrite=True)
        replace_output(tmp, out)
    except OSError as e:  # from pyarrow's writer
        discard_temp(tmp)
        raise RecordingError(os_error_text(e, out, "write")) from None
    except BaseException:
        discard_temp(tmp)
        raise
    return n
