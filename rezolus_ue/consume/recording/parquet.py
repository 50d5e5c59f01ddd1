"""Recording files, Parquet: a directory with one ``<event>.parquet`` per event (a
Parquet file has one schema, and a file per event keeps u64 columns free of nulls,
which pandas would turn into float64). Written from native records, so it is only
ever produced whole. Needs pyarrow (optional: ``rezolus-ue[parquet]``).
"""

from __future__ import annotations

import heapq
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...metrics import h2
from ..records import Record
from .blocks import (
    PARQUET_SUFFIX,
    PART_SUFFIX,
    RecordingError,
    ScanStats,
    recording_meta,
    warn_damage,
)
from .tables import (
    _INT_TYPES,
    COMMON,
    COMMON_NAMES,
    STR,
    Table,
    _chunks,
    _event_filter,
    to_tables,
)

log = logging.getLogger("rezolus_ue")

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


def read_parquet(files: Sequence[Path], events: Iterable[str] | None = None,
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
        warn_damage(f, mine)

    yield from heapq.merge(*(one(f) for f in files),
                           key=lambda r: r.time_ns)
