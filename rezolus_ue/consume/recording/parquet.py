"""Parquet recordings: one file that Rezolus's viewer opens, and that we read back whole.

The file follows Rezolus's own recordings (its recorder and its viewer's reader,
``metriken-query``): one row per publish interval; ``timestamp`` (UInt64, Unix ns: the
interval's tick); one column per series of each metric, typed by kind (counter UInt64,
gauge Int64, histogram ``<metric>:buckets`` List<UInt64>: the 496 H2 buckets, dense and
cumulative, with ``grouping_power`` and ``max_value_power`` in the field metadata, without
which the viewer drops the column); the field metadata ``metric`` names it, ``metric_type``
and ``unit`` describe it and every other key is a label. The footer carries ``source``
(``rezolus``: the viewer then shows its built-in dashboards), ``version``,
``sampling_interval_ms`` (an integer: the viewer panics on anything else) and
``descriptions``. ``rezolus_names`` says which of our metrics carry Rezolus's names.

Rows cannot hold what the viewer has no use for but our readers need (every record's own
time, CPU and pid, the ``_dist`` summaries, processes, applications' OTLP records, the
tick records), so each row also holds its interval's records as one native data block in
a Binary column (``RECORDS``), which the viewer ignores (it reads only the three types
above); the footer key ``rezolus_ue.records`` names it. Our readers read that column:
lossless. A file Rezolus wrote is read from its metric columns instead (``read_rezolus``).

Also read, not written: the previous form, a directory of ``<event>.parquet`` files.
Needs pyarrow (optional: ``rezolus-ue[parquet]``).
"""

from __future__ import annotations

import functools
import heapq
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...metrics import h2
from ...metrics.family import HIST_QUANTILES, Family, Kind, Metric
from ..intervals import EVENT as TICK
from ..intervals import Intervals
from ..records import Record
from . import rezolus_names as names
from .blocks import (
    KIND_DATA,
    PART_SUFFIX,
    RecordingError,
    ScanStats,
    encode_block,
    recording_meta,
    warn_damage,
)
from .native import read_file, read_native, write_native
from .tables import COMMON, COMMON_NAMES, _event_filter, encode_tables, to_tables

log = logging.getLogger("rezolus_ue")

#: The Binary column holding each row's records, and the footer key that names it.
RECORDS = "rezolus_ue_records"
RECORDS_KEY = b"rezolus_ue.records"
META_KEY = b"rezolus_ue.meta"
#: Rows per row group, as Rezolus writes them (30 minutes at 1 s: the viewer decodes
#: only the row groups a zoomed window overlaps), fewer when many histograms would
#: make a row group's columns too large to hold in memory.
ROW_GROUP = 1800
ROW_GROUP_BYTES = 64 << 20
#: Rezolus's metadata keys that are not labels (``metriken-query``'s schema parser).
NOT_LABELS = frozenset({"metric", "metric_type", "unit", "grouping_power",
                        "max_value_power"})
#: The event a Rezolus file's metric is read as when no event of ours has it.
GENERIC = "parquet_metric"
_I64_MAX = (1 << 63) - 1


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


# --- writing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One series of one metric: where its values come from and how it is written."""

    event: str
    labels: tuple[object, ...]
    metric: Metric
    name: str
    meta: dict[str, str]


def _view_families() -> dict[str, Family]:
    return {e: f for e, f in names.families().items() if e not in names.NOT_IN_VIEW}


def _label_values(family: Family, r: Record) -> tuple[object, ...] | None:
    try:
        return tuple(r.fields[lb.name] for lb in family.labels)
    except KeyError:
        return None


def _column(family: Family, labels: tuple[object, ...], m: Metric) -> Column:
    n = names.rezolus_name(family, m)
    lab = dict(n.labels)
    lab.update((names.label_name(lb.name), str(v)) for lb, v in zip(family.labels, labels,
                                                                     strict=True))
    hist = m.kind is Kind.HISTOGRAM
    col = n.metric + "".join(f"/{k}={v}" for k, v in sorted(lab.items()))
    meta = {"metric": n.metric, "metric_type": m.kind.value, "unit": m.unit, **lab}
    if hist:
        col += ":buckets"
        meta["grouping_power"] = str(h2.GROUPING_POWER)
        meta["max_value_power"] = str(h2.MAX_VALUE_POWER)
    return Column(family.event, labels, m, col, meta)


def _rows(records: Iterable[Record]) -> Iterator[tuple[int, list[Record]]]:
    """Yield (end time, records) per publish interval, the tick record included."""
    iv = Intervals()
    buf: list[Record] = []
    for r in records:
        buf.append(r)
        for closed in iv.feed((r,)):
            if r.event == TICK:
                yield closed.end_ns, buf
                buf = []
            else:  # inferred: ``r`` opens the next interval
                yield closed.end_ns, buf[:-1]
                buf = [r]
    if buf:
        yield buf[-1].time_ns, buf


class _Scan:
    """The first pass: every series, and the publish interval."""

    def __init__(self) -> None:
        self.fams = _view_families()
        self.columns: dict[tuple[str, tuple[object, ...], str], Column] = {}
        self.rows = 0
        self.first = self.last = 0

    def add(self, end_ns: int, recs: list[Record]) -> None:
        if not self.rows:
            self.first = end_ns
        self.rows += 1
        self.last = end_ns
        for r in recs:
            fam = self.fams.get(r.event)
            if fam is None or (labels := _label_values(fam, r)) is None:
                continue
            for m in fam.metrics:
                key = (r.event, labels, m.name)
                if key not in self.columns and (m.name in r.fields
                                                or m.kind is Kind.HISTOGRAM):
                    self.columns[key] = _column(fam, labels, m)

    def interval_ms(self) -> int:
        if self.rows < 2:
            return 1000
        return max(1, round((self.last - self.first) / (self.rows - 1) / 1e6))


def _schema(pa: Any, columns: Sequence[Column], kv: dict[bytes, bytes]) -> Any:
    fields = [pa.field("timestamp", pa.uint64(), nullable=False,
                       metadata={"metric_type": "timestamp", "unit": "nanoseconds"})]
    for c in columns:
        typ = {Kind.COUNTER: pa.uint64(), Kind.GAUGE: pa.int64(),
               Kind.HISTOGRAM: pa.list_(pa.uint64())}[c.metric.kind]
        fields.append(pa.field(c.name, typ, metadata=c.meta))
    fields.append(pa.field(RECORDS, pa.binary()))
    return pa.schema(fields, metadata=kv)


def _footer(scan: _Scan, meta: dict[str, Any]) -> dict[bytes, bytes]:
    from ... import __version__

    # A Rezolus metric may gather several of ours (bytes read, written...): say each.
    said: dict[str, dict[str, None]] = {}
    for c in scan.columns.values():
        said.setdefault(c.meta["metric"], {})[c.metric.description] = None
    descriptions = {name: "; ".join(texts) for name, texts in said.items()}
    kv = {"source": "rezolus", "version": f"rezolus-ue {__version__}",
          "sampling_interval_ms": str(scan.interval_ms()),
          "descriptions": json.dumps(descriptions, sort_keys=True)}
    out = {k.encode(): v.encode() for k, v in kv.items()}
    out[META_KEY] = json.dumps(meta).encode()
    out[RECORDS_KEY] = RECORDS.encode()
    return out


class _Rows:
    """The second pass: row groups of values, histograms accumulated."""

    def __init__(self, columns: Sequence[Column], wall_ns: int) -> None:
        self.columns = columns
        self.index = {(c.event, c.labels, c.metric.name): i for i, c in enumerate(columns)}
        self.fams = _view_families()
        self.wall_ns = wall_ns
        self.cum: dict[int, np.ndarray] = {}
        self.clear()

    def clear(self) -> None:
        self.ts: list[int] = []
        self.blocks: list[bytes | None] = []
        self.values: list[list[Any]] = [[] for _ in self.columns]

    def add(self, end_ns: int, recs: list[Record]) -> None:
        row: dict[int, Any] = {}
        for r in recs:
            fam = self.fams.get(r.event)
            if fam is None or (labels := _label_values(fam, r)) is None:
                continue
            for m in fam.metrics:
                i = self.index.get((r.event, labels, m.name))
                if i is None:
                    continue
                if m.kind is Kind.HISTOGRAM:
                    data = r.fields.get("buckets")
                    if not isinstance(data, bytes | bytearray):
                        continue
                    try:
                        delta = h2.decode_sparse(bytes(data))
                    except ValueError:
                        continue
                    cum = self.cum.setdefault(i, h2.new_counts())
                    cum += delta
                    row[i] = cum
                elif isinstance(v := r.fields.get(m.name), int):
                    row[i] = min(v, _I64_MAX) if m.kind is Kind.GAUGE else v
        self.ts.append(max(0, end_ns + self.wall_ns))
        # Stored plain: Parquet's zstd then compresses a row group's blocks together,
        # which halves the file beside zlib per block (bench/parquet_size.py).
        self.blocks.append(encode_block(KIND_DATA, encode_tables(to_tables(recs)),
                                        compress=False) if recs else None)
        for i, col in enumerate(self.values):
            v = row.get(i)
            col.append(v.tolist() if isinstance(v, np.ndarray) else v)

    def table(self, pa: Any, schema: Any) -> Any:
        arrays = [pa.array(self.ts, pa.uint64())]
        arrays += [pa.array(v, schema.field(i + 1).type) for i, v in enumerate(self.values)]
        arrays.append(pa.array(self.blocks, pa.binary()))
        return pa.Table.from_arrays(arrays, schema=schema)


def write_parquet(records: Iterable[Record], out: Path, meta: dict[str, Any] | None = None,
                  *, row_group: int = ROW_GROUP) -> int:
    """Write ``records`` to the Parquet file ``out``; return how many.

    Two passes (every column must be known before the first row is written): the
    records are spooled to a native file beside ``out`` first.
    """
    _pyarrow()
    meta = meta or recording_meta()
    spool = out.with_name(f".{out.name}.spool.rzr{PART_SUFFIX}")
    n = write_native(records, spool, meta, overwrite=True)
    try:
        write_parquet_from(spool, out, meta, row_group=row_group)
    finally:
        spool.unlink(missing_ok=True)
    return n


def write_parquet_from(native: Path, out: Path, meta: dict[str, Any], *,
                       row_group: int = ROW_GROUP) -> None:
    """Write the native recording file ``native`` as the Parquet file ``out``."""
    pa, pq = _pyarrow()

    def read_records(f: Path) -> Iterator[Record]:
        return read_file(f, None, ScanStats(), alone=True)

    scan = _Scan()
    for end, recs in _rows(read_records(native)):
        scan.add(end, recs)
    columns = sorted(scan.columns.values(), key=lambda c: c.name)
    schema = _schema(pa, columns, _footer(scan, meta))
    hists = sum(c.metric.kind is Kind.HISTOGRAM for c in columns)
    group = max(1, min(row_group, ROW_GROUP_BYTES // max(1, hists * h2.BUCKETS * 8)))
    rows = _Rows(columns, int(meta.get("wall_offset_ns") or 0))
    with pq.ParquetWriter(out, schema, compression="zstd") as w:
        for end, recs in _rows(read_records(native)):
            rows.add(end, recs)
            if len(rows.ts) >= group:
                w.write_table(rows.table(pa, schema), row_group_size=group)
                rows.clear()
        if rows.ts or not scan.rows:
            w.write_table(rows.table(pa, schema), row_group_size=group)


# --- reading --------------------------------------------------------------------------------

def _errors(pa: Any) -> tuple[type[BaseException], ...]:
    """Return what pyarrow raises on damage besides its own errors (thrift, decoding)."""
    return (OSError, ValueError, TypeError, KeyError, IndexError, OverflowError,
            MemoryError, pa.ArrowException)


#: A row group whose metadata claims more (uncompressed) is damage.
MAX_ROW_GROUP_BYTES = 1 << 30
MAX_ROW_GROUP_ROWS = 1 << 22


def _check_group(pf: Any, i: int) -> None:
    md = pf.metadata.row_group(i)
    if md.num_rows > MAX_ROW_GROUP_ROWS or md.total_byte_size > MAX_ROW_GROUP_BYTES:
        raise ValueError(f"claims {md.num_rows} rows in {md.total_byte_size} bytes")


def footer(pf: Any) -> dict[str, str]:
    """Return a Parquet file's footer metadata as text."""
    kv = pf.schema_arrow.metadata or {}
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in kv.items()}


def is_ours(pf: Any) -> bool:
    """Return whether a Parquet file is one of ours (it holds the records column)."""
    kv = pf.schema_arrow.metadata or {}
    return kv.get(RECORDS_KEY) == RECORDS.encode() and RECORDS in pf.schema_arrow.names


def read_parquet_file(path: Path, events: Iterable[str] | None = None,
                      stats: ScanStats | None = None) -> Iterator[Record]:
    """Yield the records of one Parquet file: ours (exactly as recorded), Rezolus's (from
    its metric columns, ``read_rezolus``), or one event file of the previous form.

    Each row group is read alone: one that cannot be is skipped (counted in ``stats`` as a
    bad block; one warning per file), and so is a file whose footer is unreadable."""
    pa, pq = _pyarrow()
    st = stats if stats is not None else ScanStats()
    mine = ScanStats()
    try:
        pf = pq.ParquetFile(path)
        groups = pf.metadata.num_row_groups
    except _errors(pa) as e:
        log.warning("%s: skipped: not a readable Parquet file (%s)", path, e)
        st.bad_blocks += 1
        return
    each = group_reader(pf, path.stem, events, mine)
    for i in range(groups):
        try:
            recs = each(i)
        except _errors(pa) as e:
            mine.bad_blocks += 1
            mine.first_error = mine.first_error or f"row group {i}: {e}"
            continue
        mine.blocks += 1
        yield from recs
    st.add(mine)
    warn_damage(path, mine)


def group_reader(pf: Any, name: str, events: Iterable[str] | None = None,
                 stats: ScanStats | None = None) -> Callable[[int], list[Record]]:
    """Return a function that reads the records of one row group of ``pf`` (ours, Rezolus's
    or an event file ``name`` of the previous form); it raises on damage."""
    pa, _pq = _pyarrow()
    st = stats if stats is not None else ScanStats()
    each: Callable[[int], Iterable[Record]]
    if is_ours(pf):
        each = functools.partial(_our_group, pf, events=events, st=st)
    elif "timestamp" in pf.schema_arrow.names:
        each = _RezolusReader(pf, events, pa).group
    else:
        each = functools.partial(_row_group_records, pf, name=name,
                                 keep=_event_filter(events), pa=pa)

    def read(i: int) -> list[Record]:
        _check_group(pf, i)
        return list(each(i))

    return read


def _our_group(pf: Any, i: int, events: Iterable[str] | None,
               st: ScanStats) -> Iterator[Record]:
    col = pf.read_row_group(i, columns=[RECORDS]).column(0)
    for chunk in col.chunks:
        for block in chunk.to_pylist():
            if block:
                one = ScanStats()
                yield from read_native(block, events, one)
                st.bad_blocks += one.bad_blocks
                st.first_error = st.first_error or one.first_error


def read_parquet(files: Sequence[Path], events: Iterable[str] | None = None,
                 stats: ScanStats | None = None) -> Iterator[Record]:
    """Yield the records of Parquet files merged by time (a directory of the previous
    form: one file per event)."""
    its = [read_parquet_file(f, events, stats) for f in files]
    yield from (its[0] if len(its) == 1 else heapq.merge(*its, key=lambda r: r.time_ns))


def parquet_meta(path: Path) -> dict[str, Any]:
    """Return a Parquet file's recording metadata: ours, or what Rezolus's footer says."""
    pa, pq = _pyarrow()
    try:
        kv = footer(pq.ParquetFile(path))
    except _errors(pa):
        return {}  # read_records says what is wrong with the file
    try:
        ours = json.loads(kv.get(META_KEY.decode(), "null"))
    except ValueError:
        ours = None
    if isinstance(ours, dict):
        return ours
    return {"format": "parquet", "source": kv.get("source", ""),
            "writer": kv.get("version", ""), "wall_offset_ns": 0,
            **({"sampling_interval_ms": kv["sampling_interval_ms"]}
               if "sampling_interval_ms" in kv else {})}


# --- Rezolus's files ------------------------------------------------------------------------


@dataclass
class _Source:
    """One metric column of a Rezolus file and what it is read as."""

    index: int
    kind: Kind
    event: str
    #: Our metric (a field of ``event``), or the Rezolus metric name for GENERIC.
    field: str
    labels: tuple[tuple[str, object], ...]


def _read_as(metric: str, labels: dict[str, str]
             ) -> tuple[str, str, tuple[tuple[str, object], ...]]:
    """Return (event, field, labels) a Rezolus metric column is read as."""
    fams = names.families()
    for (rmetric, const), (event, ours) in _reverse().items():
        if rmetric != metric or not const <= labels.items():
            continue
        fam = fams[event]
        rest = {k: v for k, v in labels.items() if (k, v) not in const}
        want = {names.label_name(lb.name): lb for lb in fam.labels}
        if not set(want) <= set(rest):  # labels beyond ours (``sampler``) are dropped
            continue
        try:
            vals = tuple((lb.name, int(rest[k]) if not lb.type.text else rest[k])
                         for k, lb in want.items())
        except ValueError:
            continue
        return event, ours, vals
    return GENERIC, metric, (("metric", metric), *sorted(labels.items()))


@functools.cache
def _reverse() -> dict[tuple[str, frozenset[tuple[str, str]]], tuple[str, str]]:
    return names.reverse()


class _RezolusReader:
    """Read a Rezolus file's rows as records: a row's series of one of our events (and
    labels) become one record of it; the rest records of ``GENERIC``, one per series."""

    def __init__(self, pf: Any, events: Iterable[str] | None, pa: Any) -> None:
        self.pf = pf
        keep = _event_filter(events)
        self.sources: list[_Source] = []
        for i, f in enumerate(pf.schema_arrow):
            meta = {k.decode(errors="replace"): v.decode(errors="replace")
                    for k, v in (f.metadata or {}).items()}
            if f.name == "timestamp" or f.name.endswith((":window_begin", ":window_width")) \
                    or f.name == ":wall_offset" or meta.get("metric_type") == "duration":
                continue
            if pa.types.is_uint64(f.type):
                kind = Kind.COUNTER
            elif pa.types.is_int64(f.type):
                kind = Kind.GAUGE
            elif (pa.types.is_list(f.type) and pa.types.is_uint64(f.type.value_type)
                  and meta.get("grouping_power") == str(h2.GROUPING_POWER)
                  and meta.get("max_value_power") == str(h2.MAX_VALUE_POWER)):
                kind = Kind.HISTOGRAM
            else:
                continue  # what Rezolus's reader drops too (another histogram layout)
            metric = meta.get("metric") or f.name.removesuffix(":buckets")
            labels = {k: v for k, v in meta.items() if k not in NOT_LABELS}
            event, field, lab = _read_as(metric, labels)
            if keep is None or keep(event):
                self.sources.append(_Source(i, kind, event, field, lab))
        self.prev: dict[int, np.ndarray] = {}

    def group(self, i: int) -> Iterator[Record]:
        t = self.pf.read_row_group(i)
        ts = t.column("timestamp").to_pylist()
        data = {s.index: t.column(s.index).to_pylist() for s in self.sources}
        for row, time_ns in enumerate(ts):
            if time_ns is None:
                continue
            out: dict[tuple, dict[str, object]] = {}
            for s in self.sources:
                v = data[s.index][row]
                if v is None:
                    continue
                key = (s.event, s.labels) if s.event != GENERIC else (s.event, s.labels,
                                                                         s.field)
                fields = out.setdefault(key, dict(s.labels))
                if s.kind is Kind.HISTOGRAM:
                    fields.update(self._histogram(s.index, v))
                else:
                    fields["value" if s.event == GENERIC else s.field] = int(v)
            for (event, *_k), fields in out.items():
                yield Record(event, int(time_ns), 0, 0, fields)

    def _histogram(self, index: int, cum: list[int]) -> dict[str, object]:
        now = np.zeros(h2.BUCKETS, np.uint64)
        now[:min(len(cum), h2.BUCKETS)] = cum[:h2.BUCKETS]
        delta, _reset = h2.delta(now, self.prev.get(index))
        self.prev[index] = now
        qs = h2.percentiles(delta, [q for _s, q in HIST_QUANTILES])
        return {"count": int(delta.sum()), **{s: v for (s, _q), v in zip(HIST_QUANTILES, qs,
                                                                           strict=True)},
                "grouping_power": h2.GROUPING_POWER, "max_value_power": h2.MAX_VALUE_POWER,
                "part": 0, "parts": 1, "buckets": h2.encode_sparse(delta)}


# --- the previous form: a directory of event files ------------------------------------------


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


