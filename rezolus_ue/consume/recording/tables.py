"""Recording files, the table layer: one flush of records as columnar tables, one per
event (and field layout), byte-shuffled and compressed into a data block.

Columns: ``time_ns`` (CLOCK_MONOTONIC of the recording host), ``common_cpu`` (the CPU
the record was written on), ``common_pid`` (the writer), then the event's fields in
declaration order. ``common_`` follows ftrace: event fields named ``cpu`` (per-CPU
families) or ``pid`` (the agent) would otherwise collide, and the schema forbids field
names starting with ``common_``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from ..records import APP_EVENTS, Record, event_schema
from .blocks import _U32, BlockError, BlockRef, RecordingError

log = logging.getLogger("rezolus_ue")

#: The columns every table starts with.
COMMON = (("time_ns", "<i8"), ("common_cpu", "<u4"), ("common_pid", "<i4"))
COMMON_NAMES = frozenset(n for n, _t in COMMON)
#: Column types besides numpy little-endian integer dtypes (``<u8``, ``<i4``, ...).
STR, BYTES = "str", "bytes"
_INT_TYPES = frozenset(f"<{k}{n}" for k in "ui" for n in (1, 2, 4, 8))


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
    schema = event_schema(event)
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
    if event in APP_EVENTS:  # the publisher a subscription adds, typed as common_pid
        out.update(pid="<i4", comm=STR)
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


def _chunks(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    it = iter(records)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _event_filter(events: Iterable[str] | None) -> Callable[[str], bool] | None:
    if events is None:
        return None
    wanted = frozenset(events)
    return wanted.__contains__
