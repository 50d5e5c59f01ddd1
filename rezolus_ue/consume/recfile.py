"""Recording files: the native ``.rzr`` format (always available) and Parquet (pyarrow).

Native format (docs/recording.md has the full specification): a sequence of blocks, each
``sync "RZRB", kind, flags, reserved, length, CRC-32`` (16 bytes, little-endian) then the
payload. A ``M`` block holds JSON metadata; a ``D`` block holds one flush of records as
columnar tables, one per event, zlib-compressed. Every block stands alone, so:

* concatenating recordings (``cat a.rzr b.rzr``) gives a recording: that is how ring
  segments become one dump;
* a reader stops cleanly at a block cut short by a crash or ``kill -9`` and skips (with a
  warning) a damaged block in the middle, resynchronising on the next valid block.

Parquet: a directory with one ``<event>.parquet`` per event (a Parquet file has one
schema, and a file per event keeps u64 columns free of nulls, which pandas would turn into
float64). Written from native records, so it is only ever produced whole.

Columns, in both formats: ``time_ns`` (CLOCK_MONOTONIC of the recording host),
``common_cpu`` (the CPU the record was written on), ``common_pid`` (the writer), then the
event's fields in declaration order. ``common_`` follows ftrace: event fields named ``cpu``
(per-CPU families) or ``pid`` (the agent) would otherwise collide, and the schema forbids
field names starting with ``common_``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RezolusError
from ..metrics import h2
from .records import Record

log = logging.getLogger("rezolus_ue")

SYNC = b"RZRB"
#: sync, kind, flags, reserved, payload length, CRC-32 of header bytes 0..11 + payload.
HEADER = struct.Struct("<4sBBHII")
KIND_META = ord("M")
KIND_DATA = ord("D")
FLAG_ZLIB = 0x01
#: A length above this is damage, not a block (a flush is far smaller).
MAX_BLOCK = 1 << 28
ZLIB_LEVEL = 6
FORMAT_VERSION = 1
#: The columns every table starts with.
COMMON = (("time_ns", "<i8"), ("common_cpu", "<u4"), ("common_pid", "<i4"))
COMMON_NAMES = frozenset(n for n, _t in COMMON)
#: Column types besides numpy little-endian integer dtypes (``<u8``, ``<i4``, ...).
STR, BYTES = "str", "bytes"
_INT_TYPES = frozenset(f"<{k}{n}" for k in "ui" for n in (1, 2, 4, 8))
PARQUET_SUFFIX = ".parquet"
NATIVE_SUFFIX = ".rzr"
PART_SUFFIX = ".part"
_U32 = struct.Struct("<I")


class RecordingError(RezolusError):
    """A recording cannot be read or written; the message names the file."""


# --- blocks -------------------------------------------------------------------------------


def encode_block(kind: int, payload: bytes, *, compress: bool = True) -> bytes:
    """Return one block (header + payload), the payload zlib-compressed if ``compress``."""
    flags = 0
    if compress:
        payload = zlib.compress(payload, ZLIB_LEVEL)
        flags |= FLAG_ZLIB
    if len(payload) > MAX_BLOCK:
        raise RecordingError(f"block of {len(payload)} bytes exceeds {MAX_BLOCK}")
    head = HEADER.pack(SYNC, kind, flags, 0, len(payload), 0)[:12]
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + _U32.pack(crc) + payload


def meta_block(meta: dict[str, Any]) -> bytes:
    """Return a metadata block (JSON, uncompressed so ``strings`` and ``head`` show it)."""
    return encode_block(KIND_META, json.dumps(meta, separators=(",", ":")).encode(),
                        compress=False)


@dataclass(frozen=True, slots=True)
class BlockRef:
    """A verified block: its kind and flags, and where it lies in the buffer."""

    kind: int
    flags: int
    start: int
    end: int

    def payload(self, buf: Any) -> bytes:
        """Return the block's payload, decompressed."""
        data = bytes(buf[self.start + HEADER.size : self.end])
        return zlib.decompress(data) if self.flags & FLAG_ZLIB else data


@dataclass
class ScanStats:
    """What a scan found besides valid blocks."""

    blocks: int = 0
    #: Bytes skipped between valid blocks (damage in the middle of a file).
    skipped_bytes: int = 0
    #: Bytes after the last valid block (a block cut short by a crash, or damage).
    tail_bytes: int = 0


def _valid_at(buf: Any, pos: int, n: int) -> BlockRef | None:
    if n - pos < HEADER.size:
        return None
    sync, kind, flags, _res, length, crc = HEADER.unpack_from(buf, pos)
    end = pos + HEADER.size + length
    if sync != SYNC or length > MAX_BLOCK or end > n:
        return None
    if zlib.crc32(buf[pos + HEADER.size : end], zlib.crc32(buf[pos : pos + 12])) != crc:
        return None
    return BlockRef(kind, flags, pos, end)


def scan_blocks(buf: Any, stats: ScanStats | None = None) -> Iterator[BlockRef]:
    """Yield every valid block of ``buf`` (bytes, memoryview or mmap) in order.

    A block that is incomplete or fails its CRC is skipped: the scan resumes at the next
    position where a valid block starts; what follows the last valid block is the tail.
    """
    st = stats if stats is not None else ScanStats()
    n = len(buf)
    pos = 0
    find = buf.find
    while pos < n:
        ref = _valid_at(buf, pos, n)
        if ref is None:
            nxt = find(SYNC, pos + 1)
            while nxt != -1 and _valid_at(buf, nxt, n) is None:
                nxt = find(SYNC, nxt + 1)
            if nxt == -1:
                st.tail_bytes = n - pos
                return
            st.skipped_bytes += nxt - pos
            pos = nxt
            continue
        st.blocks += 1
        yield ref
        pos = ref.end


@dataclass
class MappedFile:
    """A file's bytes (mmap'd; empty files as b"") up to ``limit``, closed with ``close()``."""

    path: Path
    buf: Any
    _mm: mmap.mmap | None = None

    @classmethod
    def open(cls, path: Path, limit: int | None = None) -> MappedFile:
        """Return the file mapped read-only (the first ``limit`` bytes, if given)."""
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if limit is not None:
                    size = min(size, limit)
                if size == 0:
                    return cls(path, b"")
                mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        except OSError as e:
            raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
        return cls(path, mm, mm)

    def close(self) -> None:
        """Unmap the file."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self.buf = b""


# --- tables -------------------------------------------------------------------------------


@dataclass
class Table:
    """One event's records of one block, as columns (numpy arrays, or lists for str/bytes)."""

    event: str
    types: dict[str, str]
    columns: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Return the number of records."""
        return len(self.columns["time_ns"])

    @property
    def fields(self) -> list[str]:
        """Return the event's field names (the columns after the common ones)."""
        return [c for c in self.types if c not in COMMON_NAMES]

    def records(self) -> list[Record]:
        """Return the table's records."""
        names = self.fields
        cols = [_as_list(self.columns[c]) for c in names]
        times, cpus, pids = (_as_list(self.columns[c]) for c, _t in COMMON)
        event = self.event
        return [Record(event, t, c, p, dict(zip(names, vals, strict=True)))
                for t, c, p, *vals in zip(times, cpus, pids, *cols, strict=True)]


def _as_list(col: Any) -> list[Any]:
    return col.tolist() if isinstance(col, np.ndarray) else list(col)


@cache
def _schema_types(event: str) -> dict[str, str]:
    """Return the column types the schema declares for ``event`` (empty if unknown)."""
    from ..schema import by_name

    schema = by_name().get(event)
    if schema is None:
        return {}
    out = {}
    for f in schema.fields:
        t = f.type
        if t.text:
            out[f.name] = STR
        elif t.dynamic:
            out[f.name] = BYTES
        else:
            out[f.name] = f"<{'i' if t.signed else 'u'}{t.size}"
    return out


def _infer_type(values: Sequence[object]) -> str:
    if all(isinstance(v, int) for v in values):
        ints = [int(v) for v in values]  # type: ignore[call-overload]
        lo, hi = min(ints, default=0), max(ints, default=0)
        if lo >= 0:
            return "<u8" if hi < 1 << 64 else STR
        return "<i8" if lo >= -(1 << 63) and hi < 1 << 63 else STR
    if all(isinstance(v, bytes | bytearray) for v in values):
        return BYTES
    return STR


def _column(values: Sequence[object], typ: str) -> Any:
    """Return a column of ``typ``; raise TypeError/OverflowError if the values do not fit."""
    if typ in _INT_TYPES:
        if not all(isinstance(v, int) for v in values):
            raise TypeError("not integers")
        return np.array(values, dtype=typ)
    if typ == STR:
        return [v if isinstance(v, str) else str(v) for v in values]
    if typ == BYTES:
        if not all(isinstance(v, bytes | bytearray) for v in values):
            raise TypeError("not bytes")
        return [bytes(v) for v in values]  # type: ignore[arg-type]
    raise TypeError(f"unknown column type {typ!r}")


def _shuffle(arr: np.ndarray) -> bytes:
    """Return ``arr``'s bytes transposed (all byte 0s, then all byte 1s...): zlib likes it."""
    return np.ascontiguousarray(arr).view(np.uint8).reshape(-1, arr.itemsize).T.tobytes()


def _unshuffle(data: Any, typ: str, rows: int) -> np.ndarray:
    dt = np.dtype(typ)
    raw = np.frombuffer(data, dtype=np.uint8, count=rows * dt.itemsize)
    return raw.reshape(dt.itemsize, rows).T.copy().view(dt).reshape(rows)


def to_tables(records: Iterable[Record]) -> list[Table]:
    """Return ``records`` as columnar tables, one per event (and field layout).

    Tables are in order of their event's first record; rows keep their order. Field types
    come from the schema when it knows the event and the values fit, else from the values
    (ints as ``<u8``, or ``<i8`` if any is negative).
    """
    groups: dict[tuple[str, tuple[str, ...]], list[Record]] = {}
    for r in records:
        groups.setdefault((r.event, tuple(r.fields)), []).append(r)
    out = []
    for (event, names), recs in groups.items():
        declared = _schema_types(event)
        t = Table(event, dict(COMMON))
        t.columns["time_ns"] = np.array([r.time_ns for r in recs], dtype="<i8")
        t.columns["common_cpu"] = np.array([r.cpu for r in recs], dtype="<u4")
        t.columns["common_pid"] = np.array([r.pid for r in recs], dtype="<i4")
        for name in names:
            values = [r.fields[name] for r in recs]
            typ = declared.get(name) or _infer_type(values)
            try:
                col = _column(values, typ)
            except (TypeError, ValueError, OverflowError):
                # The agent registered another layout than this version's schema.
                typ = _infer_type(values)
                col = _column(values, typ)
            t.types[name] = typ
            t.columns[name] = col
        out.append(t)
    return out


def encode_tables(tables: Sequence[Table]) -> bytes:
    """Return the payload of a data block holding ``tables`` (see docs/recording.md)."""
    heads: list[dict[str, Any]] = []
    parts: list[bytes] = []
    for t in tables:
        heads.append({"event": t.event, "rows": t.rows,
                      "columns": [[c, typ] for c, typ in t.types.items()]})
        for c, typ in t.types.items():
            col = t.columns[c]
            if typ in _INT_TYPES:
                parts.append(_shuffle(np.asarray(col, dtype=typ)))
                continue
            data = [s.encode("utf-8", "surrogatepass") for s in col] if typ == STR else col
            ends = np.cumsum([len(d) for d in data], dtype=np.int64)
            if len(ends) and int(ends[-1]) >= 1 << 32:
                raise RecordingError(f"{t.event}.{c}: more than 4 GiB in one block")
            parts.append(np.concatenate(([0], ends)).astype("<u4").tobytes())
            parts.append(b"".join(data))
    head = json.dumps({"tables": heads}, separators=(",", ":")).encode()
    return _U32.pack(len(head)) + head + b"".join(parts)


def decode_tables(payload: bytes, events: Callable[[str], bool] | None = None) -> list[Table]:
    """Return the tables of a data block's payload (only those ``events`` accepts)."""
    try:
        (hlen,) = _U32.unpack_from(payload, 0)
        head = json.loads(payload[4 : 4 + hlen])
        pos = 4 + hlen
        view = memoryview(payload)
        out = []
        for t in head["tables"]:
            rows = int(t["rows"])
            table = Table(t["event"], {n: typ for n, typ in t["columns"]})
            keep = events is None or events(table.event)
            for name, typ in t["columns"]:
                if typ in _INT_TYPES:
                    size = rows * np.dtype(typ).itemsize
                    if keep:
                        table.columns[name] = _unshuffle(view[pos : pos + size], typ, rows)
                    pos += size
                elif typ in (STR, BYTES):
                    offs = np.frombuffer(view[pos : pos + 4 * (rows + 1)], dtype="<u4")
                    pos += 4 * (rows + 1)
                    end = pos + int(offs[-1])
                    if keep:
                        blob = bytes(view[pos:end])
                        o = offs.tolist()
                        items = [blob[a:b] for a, b in itertools.pairwise(o)]
                        table.columns[name] = ([b.decode("utf-8", "surrogatepass")
                                                for b in items] if typ == STR else items)
                    pos = end
                else:
                    raise ValueError(f"unknown column type {typ!r}")
            if pos > len(payload):
                raise ValueError("columns run past the block")
            if keep:
                out.append(table)
        return out
    except (ValueError, KeyError, TypeError, struct.error) as e:
        # A block that passed its CRC but does not parse: written by a newer version?
        raise RecordingError(f"undecodable data block: {e}") from None


def merge_by_time(tables: Iterable[Table]) -> Iterator[Record]:
    """Yield the tables' records merged by time (each table is already in time order)."""
    lists = [t.records() for t in tables]
    if len(lists) == 1:
        yield from lists[0]
    else:
        yield from heapq.merge(*lists, key=lambda r: r.time_ns)


# --- writing --------------------------------------------------------------------------------


def recording_meta(**extra: Any) -> dict[str, Any]:
    """Return the metadata a recording starts with (clock offset, host, version)."""
    import socket
    import time

    from .. import __version__

    return {"format": "rezolus-ue recording", "version": FORMAT_VERSION,
            "writer": f"rezolus-ue {__version__}", "hostname": socket.gethostname(),
            "wall_offset_ns": time.time_ns() - time.monotonic_ns(),
            "started_unix_ns": time.time_ns(), **extra}


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
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        flags |= os.O_TRUNC if overwrite else os.O_EXCL
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            raise RecordingError(f"{path} exists: use --force to overwrite it") from None
        except OSError as e:
            raise RecordingError(f"cannot create {path}: {e.strerror or e}") from None
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
            raise RecordingError(f"cannot write {self.path}: {e.strerror or e}") from None
        self.size += len(block)

    def write_records(self, records: Sequence[Record]) -> int:
        """Write ``records`` as one data block (none: nothing); return the bytes written."""
        if not records:
            return 0
        # Sorted, each table is in time order and a reader merges them back exactly.
        records = sorted(records, key=lambda r: r.time_ns)
        block = encode_block(KIND_DATA, encode_tables(to_tables(records)))
        self.write_block(block)
        return len(block)

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


def _chunks(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    it = iter(records)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


# --- reading --------------------------------------------------------------------------------


def _event_filter(events: Iterable[str] | None) -> Callable[[str], bool] | None:
    if events is None:
        return None
    wanted = frozenset(events)
    return wanted.__contains__


def read_native(buf: Any, events: Iterable[str] | None = None,
                stats: ScanStats | None = None, name: str = "recording") -> Iterator[Record]:
    """Yield the records of a native recording's bytes, block by block, in time order
    within each block."""
    keep = _event_filter(events)
    for ref in scan_blocks(buf, stats):
        if ref.kind != KIND_DATA:
            continue
        try:
            payload = ref.payload(buf)
        except zlib.error as e:
            log.warning("%s: skipping an undecodable block at byte %d: %s", name, ref.start, e)
            continue
        yield from merge_by_time(decode_tables(payload, keep))


def recording_files(path: Path) -> list[Path]:
    """Return the native files of ``path``: itself, or a directory's ``*.rzr`` and
    ``*.rzr.part`` (a ring, or a Parquet recording's journal) in name order."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir()
                  if p.is_file() and (p.name.endswith(NATIVE_SUFFIX)
                                      or p.name.endswith(NATIVE_SUFFIX + PART_SUFFIX)))


def _parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix == PARQUET_SUFFIX)
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


def read_records(path: str | os.PathLike[str], events: Iterable[str] | None = None,
                 stats: ScanStats | None = None) -> Iterator[Record]:
    """Yield the records of a recording, oldest first.

    ``path`` is a native file, a directory of native files (a ring: its segments in
    order), a Parquet recording directory, or one of its ``.parquet`` files. ``events``
    keeps only those event names. A native file's damaged or truncated blocks are skipped
    (see ``stats``); what is left is read. Raise RecordingError if ``path`` is unreadable.
    """
    p = Path(path)
    if not p.exists():
        raise RecordingError(f"{p}: no such file or directory")
    if _parquet_recording(p):
        yield from read_parquet(p, events)
        return
    if p.is_file() and not _is_native(p):
        raise RecordingError(f"{p} is not a rezolus-ue recording (no RZRB block at the start)")
    st = stats if stats is not None else ScanStats()
    for f in recording_files(p):
        mf = MappedFile.open(f)
        try:
            one = ScanStats()
            yield from read_native(mf.buf, events, one, str(f))
            if one.skipped_bytes:
                log.warning("%s: skipped %d damaged bytes", f, one.skipped_bytes)
            st.blocks += one.blocks
            st.skipped_bytes += one.skipped_bytes
            st.tail_bytes += one.tail_bytes
        finally:
            mf.close()


def _is_native(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
    return head in (SYNC, b"")


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the recording's metadata (its first metadata block; {} if none)."""
    p = Path(path)
    for pq_file in _parquet_recording(p)[:1]:
        pq = _pyarrow()[1]
        kv = pq.ParquetFile(pq_file).schema_arrow.metadata or {}
        return dict(json.loads(kv.get(b"rezolus_ue.meta", b"{}")))
    for f in recording_files(p):
        mf = MappedFile.open(f)
        try:
            for ref in scan_blocks(mf.buf):
                if ref.kind == KIND_META:
                    return dict(json.loads(ref.payload(mf.buf)))
        finally:
            mf.close()
    return {}


def read_tables(path: str | os.PathLike[str],
                events: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Return a native recording as one table per event: {event: {column: values}}.

    Integer columns are numpy arrays, str and bytes columns lists: ready for
    ``pandas.DataFrame(columns)``. An event recorded with two field layouts (two agent
    versions) gets its second as ``<event>#2``.
    """
    keep = _event_filter(events)
    acc: dict[str, tuple[tuple[str, ...], dict[str, list[Any]]]] = {}
    for f in recording_files(Path(path)):
        mf = MappedFile.open(f)
        try:
            for ref in scan_blocks(mf.buf):
                if ref.kind != KIND_DATA:
                    continue
                for t in decode_tables(ref.payload(mf.buf), keep):
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
    p = Path(path)
    if files := _parquet_recording(p):
        keep = _event_filter(events)
        return {f.stem: pd.read_parquet(f) for f in files
                if keep is None or keep(f.stem.split("-", 1)[0])}
    return {e: pd.DataFrame(cols) for e, cols in read_tables(p, events).items()}


# --- Parquet --------------------------------------------------------------------------------


def _pyarrow() -> tuple[Any, Any]:
    """Return (pyarrow, pyarrow.parquet), or raise a one-line error saying how to get them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise RecordingError("Parquet needs pyarrow: pip install pyarrow (or"
                             " pip install 'rezolus-ue[parquet]'); the native format"
                             " (.rzr) needs nothing") from None
    return pa, pq


def have_pyarrow() -> bool:
    """Return whether pyarrow can be imported."""
    try:
        _pyarrow()
    except RecordingError:
        return False
    return True


_ARROW_INTS = {"<u1": "uint8", "<u2": "uint16", "<u4": "uint32", "<u8": "uint64",
               "<i1": "int8", "<i2": "int16", "<i4": "int32", "<i8": "int64"}


def _arrow_table(t: Table, pa: Any) -> Any:
    """Return an Arrow table for one native table (``buckets`` as a list of structs)."""
    arrays, names = [pa.array([t.event] * t.rows, pa.dictionary(pa.int32(), pa.string()))], \
        ["event"]
    for c, typ in t.types.items():
        col = t.columns[c]
        if typ in _INT_TYPES:
            arrays.append(pa.array(col, type=getattr(pa, _ARROW_INTS[typ])()))
        elif typ == STR:
            arrays.append(pa.array(col, pa.string()))
        elif c == "buckets":
            arrays.append(_buckets_to_arrow(col, pa))
        else:
            arrays.append(pa.array(col, pa.binary()))
        names.append(c)
    return pa.Table.from_arrays(arrays, names=names)


def _buckets_to_arrow(col: list[bytes], pa: Any) -> Any:
    entries = [np.frombuffer(b, dtype=h2.SPARSE_DTYPE) for b in col]
    offsets = np.zeros(len(entries) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in entries], out=offsets[1:])
    flat = np.concatenate(entries) if entries else np.empty(0, h2.SPARSE_DTYPE)
    values = pa.StructArray.from_arrays(
        [pa.array(flat["index"].astype(np.uint16)), pa.array(flat["count"].astype(np.uint64))],
        names=["index", "count"])
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def write_parquet(records: Iterable[Record], outdir: Path, meta: dict[str, Any] | None = None,
                  *, row_group: int = 65_536) -> int:
    """Write ``records`` as ``outdir/<event>.parquet`` files; return how many records.

    Each file is written as ``.part`` and renamed when complete. An event seen with a
    second field layout goes to ``<event>-2.parquet``.
    """
    pa, pq = _pyarrow()
    outdir.mkdir(parents=True, exist_ok=True)
    kv = {b"rezolus_ue.meta": json.dumps(meta or recording_meta()).encode()}
    writers: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, Path]] = {}
    pending: dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]] = {}
    names: dict[str, int] = {}
    n = 0

    def flush(key: tuple[str, tuple[tuple[str, str], ...]]) -> None:
        tables = pending.pop(key, [])
        if not tables:
            return
        table = pa.concat_tables(tables)
        if key not in writers:
            k = names[key[0]] = names.get(key[0], 0) + 1
            final = outdir / f"{key[0]}{'' if k == 1 else f'-{k}'}{PARQUET_SUFFIX}"
            part = final.with_name(final.name + PART_SUFFIX)
            writers[key] = (pq.ParquetWriter(part, table.schema.with_metadata(kv)), final)
        writers[key][0].write_table(table, row_group_size=row_group)

    try:
        for chunk in _chunks(records, row_group):
            for t in to_tables(chunk):
                key = (t.event, tuple(t.types.items()))
                pending.setdefault(key, []).append(_arrow_table(t, pa))
                n += t.rows
                if sum(x.num_rows for x in pending[key]) >= row_group:
                    flush(key)
        for key in list(pending):
            flush(key)
    except Exception:
        for w, final in writers.values():
            w.close()
            final.with_name(final.name + PART_SUFFIX).unlink(missing_ok=True)
        raise
    for w, final in writers.values():
        w.close()
        os.replace(final.with_name(final.name + PART_SUFFIX), final)
    return n


def _arrow_column_values(col: Any, pa: Any) -> list[Any]:
    typ = col.type
    if pa.types.is_dictionary(typ):
        return col.to_pylist()
    if pa.types.is_list(typ) and pa.types.is_struct(typ.value_type):
        out = []
        for item in col.to_pylist():
            arr = np.empty(len(item), dtype=h2.SPARSE_DTYPE)
            arr["index"] = [e["index"] for e in item]
            arr["count"] = [e["count"] for e in item]
            out.append(arr.tobytes())
        return out
    if pa.types.is_integer(typ):
        return col.to_numpy(zero_copy_only=False).tolist()
    return col.to_pylist()


def read_parquet(path: Path, events: Iterable[str] | None = None) -> Iterator[Record]:
    """Yield a Parquet recording's records (every event file merged by time)."""
    pa, pq = _pyarrow()
    keep = _event_filter(events)

    def one(f: Path) -> Iterator[Record]:
        try:
            pf = pq.ParquetFile(f)
        except (OSError, pa.ArrowException) as e:
            raise RecordingError(f"cannot read {f}: {e}") from None
        for batch in pf.iter_batches():
            cols = {name: _arrow_column_values(batch.column(i), pa)
                    for i, name in enumerate(batch.schema.names)}
            fields = [c for c in cols if c not in COMMON_NAMES and c != "event"]
            ev = cols.get("event") or [f.stem] * batch.num_rows
            for i in range(batch.num_rows):
                if keep is None or keep(ev[i]):
                    yield Record(ev[i], cols["time_ns"][i], cols["common_cpu"][i],
                                 cols["common_pid"][i], {c: cols[c][i] for c in fields})

    yield from heapq.merge(*(one(f) for f in _parquet_recording(path)),
                           key=lambda r: r.time_ns)


def write_recording(records: Iterable[Record], out: Path, fmt: str,
                    meta: dict[str, Any] | None = None, *, overwrite: bool = False) -> int:
    """Write ``records`` to ``out`` as ``fmt`` ("native" or "parquet"); return how many.

    The output appears whole or not at all: it is written beside as ``.part`` first.
    """
    if out.exists() and not overwrite:
        raise RecordingError(f"{out} exists: use --force to overwrite it")
    if fmt == "parquet":
        _pyarrow()
        tmp = out.with_name(out.name + PART_SUFFIX)
        _remove(tmp)
        n = write_parquet(records, tmp, meta)
        _remove(out)
        os.replace(tmp, out)
        return n
    tmp = out.with_name(out.name + PART_SUFFIX)
    n = write_native(records, tmp, meta, overwrite=True)
    os.replace(tmp, out)
    return n


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
