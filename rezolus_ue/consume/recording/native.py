"""The native ``.rzr`` format: whole recordings written and read block by block.

Docs/recording.md has the specification: a sequence of blocks, each ``sync "RZRB", kind,
flags, reserved, length, CRC-32`` (16 bytes, little-endian) then the payload. A ``M`` block
holds JSON metadata; a ``D`` block holds one flush of records as columnar tables, one per
event, zlib-compressed. Every block stands alone, so:

* concatenating recordings (``cat a.rzr b.rzr``) gives a recording: that is how ring
  segments become one dump;
* a reader stops cleanly at a block cut short by a crash or ``kill -9`` and skips (with a
  warning) a damaged block in the middle, resynchronising on the next valid block.

The layers below are ``blocks`` (framing, CRC, resync) and ``tables`` (the columnar
tables a data block holds); ``files`` chooses between this format and Parquet.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
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
    PART_SUFFIX,
    BlockError,
    MappedFile,
    RecordingError,
    ScanStats,
    encode_block,
    meta_block,
    recording_meta,
    scan_blocks,
    warn_damage,
)
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


def read_file(f: Path, events: Iterable[str] | None, st: ScanStats,
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


#: Metadata keys whose type readers rely on: a recording with another type drops them.
_META_INTS = ("version", "wall_offset_ns", "started_unix_ns", "segment")


def _clean_meta(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return {k: v for k, v in value.items()
            if k not in _META_INTS or (type(v) is int and abs(v) < 1 << 63)}


def read_tables(path: str | os.PathLike[str],
                events: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Return a native recording as one table per event: {event: {column: values}}.

    Integer columns are numpy arrays, str and bytes columns lists: ready for
    ``pandas.DataFrame(columns)``. An event recorded with two field layouts (two agent
    versions) gets its second as ``<event>#2``. Damage is skipped as by ``read_records``.
    """
    keep = _event_filter(events)
    acc: dict[str, tuple[tuple[str, ...], dict[str, list[Any]]]] = {}
    for f in recording_files(Path(path)):
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




def read_native_meta(files: Sequence[Path]) -> dict[str, Any]:
    """Return the first readable metadata block of ``files`` ({} if none)."""
    for f in files:
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
