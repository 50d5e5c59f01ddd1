"""Recording files, the block layer: framing, CRC, resynchronisation, mapped files.

A native recording is a sequence of self-contained blocks (docs/recording.md):
``sync "RZRB", kind, flags, size hint, length, CRC-32`` then the payload, a JSON
``M``etadata block or a ``D``ata block (``tables``). A reader finds every intact
block in linear time whatever the damage around it; ``files`` reads and writes
whole recordings on top of this.
"""

from __future__ import annotations

import ctypes
import json
import logging
import mmap
import os
import stat
import struct
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ...errors import RezolusError, os_error_text

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


def warn_damage(name: object, st: ScanStats) -> None:
    """Warn once about what reading ``name`` skipped, if anything."""
    if damage := st.damage():
        log.warning("%s: skipped %s; read the rest", name, damage)


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


def recording_meta(**extra: Any) -> dict[str, Any]:
    """Return the metadata a recording starts with (clock offset, host, version)."""
    import socket
    import time

    from ... import __version__

    return {"format": "rezolus-ue recording", "version": FORMAT_VERSION,
            "writer": f"rezolus-ue {__version__}", "hostname": socket.gethostname(),
            "wall_offset_ns": time.time_ns() - time.monotonic_ns(),
            "started_unix_ns": time.time_ns(), **extra}
