"""The H2 histogram bucket layout (Rezolus's log-linear histogram): the one declaration.

Grouping power ``p = 3``, max value power ``n = 64``: ``(n - p + 1) * 2**p = 496`` buckets
covering every u64. Values ``0..15`` (below ``2**(p+1)``) have a bucket each; above that,
every power of two ``[2**k, 2**(k+1))`` is split into ``2**p = 8`` equal sub-buckets, so a
bucket's width is at most 1/8 of its lower bound (12.5% relative error, bounded).

    index(v) = v                                          if v < 16
             = (k - p) * 2**p + (v >> (k - p))            with k = floor(log2 v)

The BPF side (``bpf/include/h2.bpf.h``) computes the same function; a test checks they agree.
Histograms are cumulative and never reset; a percentile is the *upper* edge of the bucket
holding that rank (as Rezolus reports it). Deltas between snapshots detect resets.

Sparse wire form (the ``buckets`` field of histogram events): the interval's non-zero
buckets as packed records ``{u16 index; u64 count}`` in native byte order, ascending index,
at most ``MAX_ENTRIES`` per record (more are split across records). On the uprobe
transport the same entries travel as text, ``"index:count index:count ..."``: uprobe fetch
arguments have no variable-length binary type, and perf and trace-cmd print fixed arrays of
probe events as zeros (docs/kernels.md), while a string they print as it is.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

GROUPING_POWER = 3
MAX_VALUE_POWER = 64
BUCKETS = (MAX_VALUE_POWER - GROUPING_POWER + 1) << GROUPING_POWER
#: Values below this have a bucket of their own.
CUTOFF = 1 << (GROUPING_POWER + 1)
MAX_VALUE = (1 << MAX_VALUE_POWER) - 1

#: One entry of the sparse wire form.
SPARSE_DTYPE = np.dtype([("index", "=u2"), ("count", "=u8")])
SPARSE_ENTRY_SIZE = SPARSE_DTYPE.itemsize  # 10 bytes

#: Entries per record. The text form of this many (index <= 3 digits, count <= 20, two
#: separators each) plus a record's other fields stays below the uprobe transport's one-page
#: limit per record; a histogram rarely has this many non-zero buckets in one interval.
MAX_ENTRIES = 100
#: Longest text form of MAX_ENTRIES entries, NUL included.
MAX_TEXT = MAX_ENTRIES * (3 + 1 + 20 + 1) + 1

assert BUCKETS == 496 and SPARSE_ENTRY_SIZE == 10


def bucket_index(value: int) -> int:
    """Return the bucket index of a value in ``0 .. 2**64 - 1``."""
    if not 0 <= value <= MAX_VALUE:
        raise ValueError(f"{value} is outside 0..2**64-1")
    if value < CUTOFF:
        return value
    power = value.bit_length() - 1
    return ((power - GROUPING_POWER) << GROUPING_POWER) + (value >> (power - GROUPING_POWER))


def bucket_bounds(index: int) -> tuple[int, int]:
    """Return the inclusive (lower, upper) values of bucket ``index``."""
    if not 0 <= index < BUCKETS:
        raise ValueError(f"bucket index {index} is outside 0..{BUCKETS - 1}")
    if index < CUTOFF:
        return index, index
    shift = (index >> GROUPING_POWER) - 1  # = power - GROUPING_POWER
    lower = ((1 << GROUPING_POWER) + (index & ((1 << GROUPING_POWER) - 1))) << shift
    return lower, lower + (1 << shift) - 1


def _edges() -> tuple[np.ndarray, np.ndarray]:
    bounds = [bucket_bounds(i) for i in range(BUCKETS)]
    return (np.array([b[0] for b in bounds], dtype=np.uint64),
            np.array([b[1] for b in bounds], dtype=np.uint64))


#: Lower and upper edge of every bucket, for vectorised use.
LOWER, UPPER = _edges()


def bucket_indices(values: np.ndarray | Sequence[int]) -> np.ndarray:
    """Return the bucket index of every value (vectorised ``bucket_index``)."""
    v = np.asarray(values, dtype=np.uint64)
    # The buckets' lower edges are sorted: the index is where each value would insert.
    return np.searchsorted(LOWER, v, side="right").astype(np.intp) - 1


def new_counts() -> np.ndarray:
    """Return a zeroed bucket array."""
    return np.zeros(BUCKETS, dtype=np.uint64)


def record(counts: np.ndarray, values: np.ndarray | Sequence[int]) -> None:
    """Add every value to the cumulative ``counts`` in place."""
    np.add.at(counts, bucket_indices(values), np.uint64(1))


def percentiles(counts: np.ndarray, qs: Sequence[float]) -> list[int]:
    """Return the value at each quantile ``q`` in [0, 1]: the upper edge of its bucket.

    Nearest rank: the bucket holding the ``ceil(q * total)``-th value (at least the first).
    An empty histogram gives 0 for every quantile.
    """
    total = int(counts.sum())
    if total == 0:
        return [0] * len(qs)
    cum = np.cumsum(counts, dtype=np.uint64)
    out = []
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        rank = max(1, math.ceil(q * total))
        idx = int(np.searchsorted(cum, np.uint64(rank), side="left"))
        out.append(int(UPPER[idx]))
    return out


def delta(current: np.ndarray, previous: np.ndarray | None) -> tuple[np.ndarray, bool]:
    """Return (counts added since ``previous``, whether a reset was detected).

    Cumulative counts only grow; if any bucket went down, the source restarted (e.g. a
    BPF program was reloaded) and the whole of ``current`` is new.
    """
    if previous is None:
        return current.copy(), False
    if np.any(current < previous):
        return current.copy(), True
    return current - previous, False


def nonzero(counts: np.ndarray) -> tuple[list[int], list[int]]:
    """Return (indices, counts) of the non-zero buckets of ``counts``, ascending: the
    interval's histogram as a sampler's row gives it (``Sampler.publish_rows``)."""
    nz = np.flatnonzero(counts)
    return nz.tolist(), counts[nz].tolist()


def encode_sparse(counts: np.ndarray) -> bytes:
    """Return the sparse wire form of the non-zero buckets of ``counts``."""
    nz = np.flatnonzero(counts)
    out = np.empty(len(nz), dtype=SPARSE_DTYPE)
    out["index"] = nz
    out["count"] = counts[nz]
    return out.tobytes()


def decode_sparse(data: bytes) -> np.ndarray:
    """Return a full bucket array from the sparse wire form."""
    if len(data) % SPARSE_ENTRY_SIZE:
        raise ValueError(f"sparse buckets: {len(data)} bytes is not a multiple of "
                         f"{SPARSE_ENTRY_SIZE}")
    entries = np.frombuffer(data, dtype=SPARSE_DTYPE)
    if len(entries) and int(entries["index"].max()) >= BUCKETS:
        raise ValueError("sparse buckets: index out of range")
    counts = new_counts()
    np.add.at(counts, entries["index"].astype(np.intp), entries["count"])
    return counts


def sparse_to_text(data: bytes) -> bytes:
    """Return the text form (``b"index:count ..."``, no NUL) of sparse wire data.

    On the uprobe transport's hot path: one struct and one %-format per entry count
    (1.6 us for 20 entries on the reference VM, numpy's tolist and a join 4.5 us)."""
    unpack, fmt = _text_format(len(data) // SPARSE_ENTRY_SIZE)
    return (fmt % unpack(data)).encode() if data else b""


@lru_cache(maxsize=128)
def _text_format(n: int) -> tuple[Callable[[bytes], tuple[int, ...]], str]:
    return struct.Struct("=" + "HQ" * n).unpack, " ".join(["%d:%d"] * n)


def sparse_from_text(text: str) -> bytes:
    """Return the sparse wire form of the text form; raise ValueError if malformed."""
    try:
        pairs = [tuple(int(x) for x in e.split(":", 1)) for e in text.split()]
        out = np.array(pairs, dtype=SPARSE_DTYPE) if pairs else np.empty(0, SPARSE_DTYPE)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"buckets text is malformed: {text[:40]!r}") from None
    return out.tobytes()


def split_sparse(data: bytes, max_bytes: int) -> list[bytes]:
    """Return the sparse form cut into parts of at most ``max_bytes`` (whole entries)."""
    per = max(1, max_bytes // SPARSE_ENTRY_SIZE) * SPARSE_ENTRY_SIZE
    return [data[i : i + per] for i in range(0, len(data), per)] or [b""]
