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

import contextlib
import ctypes
import heapq
import itertools
import json
import logging
import mmap
import os
import secrets
import stat
import struct
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RezolusError, os_error_text
from ..metrics import h2
from .records import Record

log = logging.getLogger("rezolus_ue")

SYNC = b"RZRB"
#: sync, kind, flags, size hint, payload length, CRC-32 of header bytes 0..11 + payload.
HEADER = struct.Struct("<4sBBHII")
KIND_META = ord("M")
KIND_DATA = ord("D")
FLAG_ZLIB = 0x01
#: A length above this is damage, not a block (a flush is far smaller).
MAX_BLOCK = 1 << 28
#: The header's size hint counts the payload's bytes after decompression in these units.
SIZE_UNIT = 4096
#: Writers split a flush into blocks whose payload (decompressed) stays under this...
BLOCK_PAYLOAD = 1 << 24
#: ...and readers inflate no payload beyond this (older writers did not split): a block
#: that would is damage or a decompression bomb, skipped like any undecodable block.
MAX_PAYLOAD = 1 << 25
#: Deflate cannot expand data more than 1032 times (one 258-byte match per 2 bits at best).
MAX_RATIO = 1032
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


class BlockError(RecordingError):
    """One block passed its CRC but cannot be decoded: readers skip it and go on."""


# --- blocks -------------------------------------------------------------------------------


def encode_block(kind: int, payload: bytes, *, compress: bool = True) -> bytes:
    """Return one block (header + payload), the payload zlib-compressed if ``compress``.

    The header's reserved field carries the payload's size before compression in
    SIZE_UNITs (rounded up), so a reader knows how far it may inflate it."""
    flags = 0
    if len(payload) > MAX_PAYLOAD:
        raise RecordingError(f"a block payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    hint = -(-len(payload) // SIZE_UNIT)
    if compress:
        payload = zlib.compress(payload, ZLIB_LEVEL)
        flags |= FLAG_ZLIB
    if len(payload) > MAX_BLOCK:
        raise RecordingError(f"block of {len(payload)} bytes exceeds {MAX_BLOCK}")
    head = HEADER.pack(SYNC, kind, flags, hint, len(payload), 0)[:12]
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + _U32.pack(crc) + payload


def meta_block(meta: dict[str, Any]) -> bytes:
    """Return a metadata block (JSON, uncompressed so ``strings`` and ``head`` show it)."""
    return encode_block(KIND_META, json.dumps(meta, separators=(",", ":")).encode(),
                        compress=False)


@dataclass(frozen=True, slots=True)
class BlockRef:
    """A verified block: its kind, flags and size hint, and where it lies in the buffer."""

    kind: int
    flags: int
    start: int
    end: int
    hint: int = 0

    def payload(self, buf: Any) -> bytes:
        """Return the block's payload, decompressed; raise BlockError if it cannot be.

        Inflating stops at the size the header gives (or MAX_PAYLOAD, and never beyond
        what deflate can produce from the stored bytes): memory is bounded by the file's
        honest size, whatever the block claims."""
        stored = self.end - self.start - HEADER.size
        limit = MAX_PAYLOAD
        if self.hint:
            limit = min(limit, self.hint * SIZE_UNIT)
        if not self.flags & FLAG_ZLIB:
            if stored > limit:
                raise BlockError(f"a payload of {stored} bytes exceeds {limit}")
            return bytes(buf[self.start + HEADER.size : self.end])
        limit = min(limit, stored * MAX_RATIO)
        d = zlib.decompressobj()
        try:
            out = d.decompress(buf[self.start + HEADER.size : self.end], limit + 1)
        except zlib.error as e:
            raise BlockError(f"bad compressed data: {e}") from None
        if len(out) > limit or d.unconsumed_tail:
            raise BlockError(f"the payload inflates beyond {limit} bytes")
        if not d.eof:
            raise BlockError("the compressed data ends early")
        return out


@dataclass
class ScanStats:
    """What a scan found besides valid blocks."""

    blocks: int = 0
    #: Bytes skipped before or between valid blocks (damage).
    skipped_bytes: int = 0
    #: Bytes after the last valid block (a block cut short by a crash, or damage).
    tail_bytes: int = 0
    #: Valid blocks (CRC right) that could not be decoded, and the first one's reason.
    bad_blocks: int = 0
    first_error: str = ""

    def bad(self, ref: BlockRef, e: Exception) -> None:
        """Count an undecodable block."""
        self.bad_blocks += 1
        if not self.first_error:
            self.first_error = f"block at byte {ref.start}: {e}"

    def add(self, other: ScanStats) -> None:
        """Add another file's counts."""
        self.blocks += other.blocks
        self.skipped_bytes += other.skipped_bytes
        self.tail_bytes += other.tail_bytes
        self.bad_blocks += other.bad_blocks
        self.first_error = self.first_error or other.first_error

    def damage(self) -> str:
        """Return what was skipped, as words ("" if nothing but a crash's tail)."""
        parts = []
        if self.skipped_bytes:
            parts.append(f"{self.skipped_bytes} damaged bytes")
        if self.bad_blocks:
            parts.append(f"{self.bad_blocks} undecodable block"
                         f"{'s' if self.bad_blocks > 1 else ''} (first: {self.first_error})")
        return " and ".join(parts)


def _load_crc32_combine() -> Callable[[int, int, int], int]:
    """Return zlib's crc32_combine (CRC of A+B from CRC(A), CRC(B) and len(B)).

    From the zlib the interpreter uses; failing that, the same in Python, 30x slower."""
    try:
        lib = ctypes.CDLL("libz.so.1")
        f = lib.crc32_combine
    except (OSError, AttributeError):
        return _crc32_combine_py
    f.restype = ctypes.c_ulong
    f.argtypes = (ctypes.c_ulong, ctypes.c_ulong, ctypes.c_long)
    return f  # type: ignore[no-any-return]


def _gf2_apply(op: Sequence[int], v: int) -> int:
    """Return the 32x32 GF(2) matrix ``op`` (its columns) applied to ``v``."""
    out, i = 0, 0
    while v:
        if v & 1:
            out ^= op[i]
        v >>= 1
        i += 1
    return out


@cache
def _zeros_ops() -> list[list[int]]:
    """Return the operators appending 8 * 2**k zero bits to a CRC-32 register, k = 0..31."""
    one_bit = [0xEDB88320] + [1 << (i - 1) for i in range(1, 32)]  # reflected polynomial
    ops, op = [], one_bit
    for _ in range(3):  # 8 bits = one byte
        op = [_gf2_apply(op, c) for c in op]
    for _ in range(32):
        ops.append(op)
        op = [_gf2_apply(op, c) for c in op]
    return ops


def _crc32_combine_py(crc1: int, crc2: int, len2: int) -> int:
    ops, k = _zeros_ops(), 0
    while len2:
        if len2 & 1:
            crc1 = _gf2_apply(ops[k], crc1)
        len2 >>= 1
        k += 1
    return crc1 ^ crc2


_crc32_combine = _load_crc32_combine()


class _RangeCrc:
    """CRC-32 of any range of a buffer in time independent of the range's length.

    A damaged region can hold a candidate block header every dozen bytes, each claiming a
    payload up to 256 MiB long: checking each candidate directly makes the scan quadratic.
    The CRC of every STEP-byte prefix is computed once (lazily, in order) and a range's
    CRC combined from two prefixes, so a scan costs O(file size + candidates).
    """

    STEP = 1024

    def __init__(self, buf: Any) -> None:
        self.buf = buf
        self.prefix = array("L", [0])  # CRC of buf[: i * STEP]

    def _upto(self, x: int) -> int:
        """Return the CRC of ``buf[:x]``."""
        step, prefix, buf = self.STEP, self.prefix, self.buf
        k = x // step
        while len(prefix) <= k:
            i = len(prefix) - 1
            prefix.append(zlib.crc32(buf[i * step : (i + 1) * step], prefix[i]))
        return zlib.crc32(buf[k * step : x], prefix[k])

    def crc(self, head: bytes, a: int, b: int) -> int:
        """Return the CRC of ``head`` followed by ``buf[a:b]``."""
        body = self._upto(b) ^ _crc32_combine(self._upto(a), 0, b - a)
        return int(_crc32_combine(zlib.crc32(head), body, b - a))


def _valid_at(buf: Any, pos: int, n: int, ranges: _RangeCrc | None = None) -> BlockRef | None:
    if n - pos < HEADER.size:
        return None
    sync, kind, flags, hint, length, crc = HEADER.unpack_from(buf, pos)
    end = pos + HEADER.size + length
    if sync != SYNC or length > MAX_BLOCK or end > n:
        return None
    head = bytes(buf[pos : pos + 12])
    if ranges is not None:
        got = ranges.crc(head, pos + HEADER.size, end)
    else:
        got = zlib.crc32(buf[pos + HEADER.size : end], zlib.crc32(head))
    return BlockRef(kind, flags, pos, end, hint) if got == crc else None


def scan_blocks(buf: Any, stats: ScanStats | None = None) -> Iterator[BlockRef]:
    """Yield every valid block of ``buf`` (bytes, memoryview or mmap) in order.

    The reading rule of docs/recording.md: where no valid block starts, resume at the next
    ``RZRB`` where one does (damage anywhere, the first bytes included, loses only the
    damaged bytes); what follows the last valid block is the tail. Linear in ``len(buf)``:
    after the first damage, candidates are checked through prefix CRCs (``_RangeCrc``).
    """
    st = stats if stats is not None else ScanStats()
    n = len(buf)
    pos = 0
    ranges: _RangeCrc | None = None
    while pos < n:
        ref = _valid_at(buf, pos, n, ranges)
        if ref is None:
            ranges = ranges or _RangeCrc(buf)
            nxt = buf.find(SYNC, pos + 1)
            while nxt != -1 and (ref := _valid_at(buf, nxt, n, ranges)) is None:
                nxt = buf.find(SYNC, nxt + 1)
            if ref is None:
                st.tail_bytes = n - pos
                return
            st.skipped_bytes += ref.start - pos
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
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise RecordingError(_not_a_file(path, st.st_mode))
                size = st.st_size if limit is None else min(st.st_size, limit)
                if size == 0:
                    return cls(path, b"")
                mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise RecordingError(os_error_text(e, path, "read")) from None
        return cls(path, mm, mm)

    def close(self) -> None:
        """Unmap the file."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self.buf = b""


def _not_a_file(path: Path, mode: int) -> str:
    what = ("a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a directory"
            if stat.S_ISDIR(mode) else "not a regular file")
    return (f"{path} is {what}: recordings are read from files (or directories of them);"
            " save the stream to a file first (e.g. `cat > rec.rzr`)")


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
        return list(self.iter_records())

    def iter_records(self, chunk: int = 4096) -> Iterator[Record]:
        """Yield the table's records, converting ``chunk`` rows at a time (memory stays
        that of the columns, whatever the row count)."""
        names = self.fields
        event = self.event
        for lo in range(0, self.rows, chunk):
            cols = [_as_list(self.columns[c][lo : lo + chunk]) for c in names]
            times, cpus, pids = (_as_list(self.columns[c][lo : lo + chunk]) for c, _t in COMMON)
            for t, c, p, *vals in zip(times, cpus, pids, *cols, strict=True):
                yield Record(event, t, c, p, dict(zip(names, vals, strict=True)))


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
        t.columns["common_cpu"] = np.array([r.common_cpu for r in recs], dtype="<u4")
        t.columns["common_pid"] = np.array([r.common_pid for r in recs], dtype="<i4")
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
    """Return the tables of a data block's payload (only those ``events`` accepts).

    Raise BlockError if the payload does not follow docs/recording.md: every count and
    offset is checked against the payload before it is used.
    """
    try:
        return _decode_tables(payload, events)
    except (ValueError, KeyError, TypeError, IndexError, OverflowError, RecursionError,
            struct.error) as e:
        # CRC right but contents wrong: a bug, a newer writer, or a forged block.
        raise BlockError(f"undecodable data block: {type(e).__name__}: {e}") from None


def _decode_head(payload: bytes) -> tuple[list[Any], int]:
    (hlen,) = _U32.unpack_from(payload, 0)
    if 4 + hlen > len(payload):
        raise ValueError("the table header runs past the block")
    head = json.loads(payload[4 : 4 + hlen])
    if not isinstance(head, dict) or not isinstance(head.get("tables"), list):
        raise ValueError("the header has no list of tables")
    return head["tables"], 4 + hlen


def _table_layout(t: Any) -> tuple[str, int, list[tuple[str, str]]]:
    """Return a table header's event, rows and columns, checked."""
    if not isinstance(t, dict):
        raise ValueError("a table header is not an object")
    event, rows, columns = t.get("event"), t.get("rows"), t.get("columns")
    if not isinstance(event, str) or type(rows) is not int or rows < 0:
        raise ValueError(f"bad event name or row count: {event!r}, {rows!r}")
    if not isinstance(columns, list) or not all(
            isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)
            for c in columns):
        raise ValueError(f"{event}: columns are not [name, type] pairs")
    cols = [(name, typ) for name, typ in columns]
    if tuple(cols[: len(COMMON)]) != COMMON or len({n for n, _t in cols}) != len(cols):
        raise ValueError(f"{event}: columns must start with {[list(c) for c in COMMON]}"
                         " and be unique")
    for _name, typ in cols:
        if typ not in _INT_TYPES and typ not in (STR, BYTES):
            raise ValueError(f"{event}: unknown column type {typ!r}")
    return event, rows, cols


def _decode_tables(payload: bytes, events: Callable[[str], bool] | None) -> list[Table]:
    heads, pos = _decode_head(payload)
    n = len(payload)
    view = memoryview(payload)
    out = []
    for t in heads:
        event, rows, cols = _table_layout(t)
        table = Table(event, dict(cols))
        keep = events is None or events(event)
        for name, typ in cols:
            if typ in _INT_TYPES:
                size = rows * np.dtype(typ).itemsize
                if pos + size > n:
                    raise ValueError(f"{event}.{name}: {rows} rows run past the block")
                if keep:
                    table.columns[name] = _unshuffle(view[pos : pos + size], typ, rows)
                pos += size
                continue
            if pos + 4 * (rows + 1) > n:
                raise ValueError(f"{event}.{name}: {rows} offsets run past the block")
            offs = np.frombuffer(view[pos : pos + 4 * (rows + 1)], dtype="<u4")
            pos += 4 * (rows + 1)
            if offs[0] != 0 or (rows and bool((offs[1:] < offs[:-1]).any())):
                raise ValueError(f"{event}.{name}: offsets do not start at 0 and grow")
            end = pos + int(offs[-1])
            if end > n:
                raise ValueError(f"{event}.{name}: data runs past the block")
            if keep:
                blob = bytes(view[pos:end])
                items = [blob[a:b] for a, b in itertools.pairwise(offs.tolist())]
                table.columns[name] = ([b.decode("utf-8", "surrogatepass") for b in items]
                                       if typ == STR else items)
            pos = end
        if keep:
            out.append(table)
    return out


def decode_block(buf: Any, ref: BlockRef,
                 events: Callable[[str], bool] | None = None) -> list[Table]:
    """Return the tables of the data block ``ref`` of ``buf``; raise BlockError if it
    cannot be decompressed or decoded (the caller skips it and reads on)."""
    return decode_tables(ref.payload(buf), events)


def merge_by_time(tables: Iterable[Table]) -> Iterator[Record]:
    """Yield the tables' records merged by time (each table is already in time order)."""
    its = [t.iter_records() for t in tables]
    if len(its) == 1:
        yield from its[0]
    else:
        yield from heapq.merge(*its, key=lambda r: r.time_ns)


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


def _warn_damage(name: object, st: ScanStats) -> None:
    if damage := st.damage():
        log.warning("%s: skipped %s; read the rest", name, damage)


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
    _warn_damage(f, one)


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
        yield from read_parquet(p, events, st)
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
        _warn_damage(f, st)
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


#: A row group whose metadata claims more (uncompressed) is damage: our writer's hold
#: 65,536 rows, a few MiB.
MAX_ROW_GROUP_BYTES = 1 << 28
MAX_ROW_GROUP_ROWS = 1 << 22


def _row_group_records(pf: Any, i: int, name: str, keep: Callable[[str], bool] | None,
                       pa: Any) -> list[Record]:
    """Return the records of row group ``i``; raise ValueError if it is not ours or the
    metadata claims more than a writer of ours produces."""
    md = pf.metadata.row_group(i)
    if md.num_rows > MAX_ROW_GROUP_ROWS or md.total_byte_size > MAX_ROW_GROUP_BYTES:
        raise ValueError(f"claims {md.num_rows} rows in {md.total_byte_size} bytes")
    table = pf.read_row_group(i)
    for c, _t in COMMON:
        if (c not in table.schema.names or not pa.types.is_integer(table.schema.field(c).type)
                or table.column(c).null_count):
            raise ValueError(f"no integer column {c} without nulls")
    out = []
    for batch in table.to_batches(4096):
        cols = {n: _arrow_column_values(batch.column(k), pa)
                for k, n in enumerate(batch.schema.names)}
        fields = [c for c in cols if c not in COMMON_NAMES and c != "event"]
        ev = cols.get("event") or [name] * batch.num_rows
        for k in range(batch.num_rows):
            if keep is None or keep(ev[k]):
                out.append(Record(str(ev[k]), cols["time_ns"][k], cols["common_cpu"][k],
                                  cols["common_pid"][k], {c: cols[c][k] for c in fields}))
    return out


def read_parquet(path: Path, events: Iterable[str] | None = None,
                 stats: ScanStats | None = None) -> Iterator[Record]:
    """Yield a Parquet recording's records (every event file merged by time).

    Each row group is read alone: one that cannot be is skipped (counted in ``stats`` as
    a bad block, one warning per file), and so is a file whose footer is unreadable."""
    pa, pq = _pyarrow()
    keep = _event_filter(events)
    st = stats if stats is not None else ScanStats()
    # What pyarrow raises on damage besides its own errors (thrift, decoding, claims).
    errors = (OSError, ValueError, TypeError, KeyError, IndexError, OverflowError,
              MemoryError, pa.ArrowException)

    def one(f: Path) -> Iterator[Record]:
        mine = ScanStats()
        try:
            pf = pq.ParquetFile(f)
            groups = pf.metadata.num_row_groups
        except errors as e:
            log.warning("%s: skipped: not a readable Parquet file (%s)", f, e)
            st.bad_blocks += 1
            return
        for i in range(groups):
            try:
                recs = _row_group_records(pf, i, f.stem, keep, pa)
            except errors as e:
                mine.bad_blocks += 1
                mine.first_error = mine.first_error or f"row group {i}: {e}"
                continue
            mine.blocks += 1
            yield from recs
        st.add(mine)
        _warn_damage(f, mine)

    yield from heapq.merge(*(one(f) for f in _parquet_recording(path)),
                           key=lambda r: r.time_ns)


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
