"""The DISK table: operations and bytes per second, read and write wait in milliseconds,
queue depth and utilisation, one row per block device. Reads ``rezolus_blockio_device``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...samplers.blockio import BLOCKIO
from .frame import Frame, Model, Read, Series, View
from .keys import UiState
from .layout import Block, Panel, table_block
from .widgets import Col, desc, fmt_bytes, fmt_num, fmt_pct, level_style, plus, sort_rows


@dataclass(frozen=True, slots=True)
class DiskRow:
    """One block device; rates per second, ``util`` 0..1, await in ms."""

    device: str
    reads_s: float | None
    writes_s: float | None
    read_bps: float | None
    write_bps: float | None
    util: float | None
    r_await_ms: float | None
    w_await_ms: float | None
    in_flight: int


def _ratio(num: float | None, den: float | None, scale: float) -> float | None:
    if num is None or not den:
        return None
    return num / den * scale


def _row(labels: tuple, s: Series) -> DiskRow:
    reads, writes = s.rate("reads"), s.rate("writes")
    busy = s.rate("busy_ns")
    return DiskRow(
        device=str(labels[0]), reads_s=reads, writes_s=writes,
        read_bps=s.rate("read_bytes"), write_bps=s.rate("write_bytes"),
        util=min(busy / 1e9, 1.0) if busy is not None else None,
        r_await_ms=_ratio(s.rate("read_time_ns"), reads, 1e-6),
        w_await_ms=_ratio(s.rate("write_time_ns"), writes, 1e-6),
        in_flight=s.int("in_flight"))


def derive(f: Frame) -> tuple[DiskRow, ...]:
    """Return each device's rates over the frame."""
    return tuple(_row(lb, s) for lb, s in f.of(BLOCKIO.event))


def rows(v: View) -> tuple[DiskRow, ...]:
    """Return the disk rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, tuple) else ()


def complete(v: View) -> bool:
    """Return whether every device has rates."""
    return all(r.reads_s is not None for r in rows(v))


#: Sort keys by column, in ``keys.SORT_MODES`` order.
SORTS: dict[str, Callable[[DiskRow], object]] = {
    "util": lambda r: desc(r.util),
    "bytes": lambda r: desc(plus(r.read_bps, r.write_bps)),
    "ops": lambda r: desc(plus(r.reads_s, r.writes_s)),
    "name": lambda r: r.device,
}
COLS = (
    Col("DISK", 8, lambda r: r.device),
    Col("ops", 5, lambda r: fmt_num(plus(r.reads_s, r.writes_s)), drop=5, key="ops"),
    Col("r/s", 5, lambda r: fmt_num(r.reads_s), drop=2),
    Col("w/s", 5, lambda r: fmt_num(r.writes_s), drop=2),
    Col("bytes", 6, lambda r: fmt_bytes(plus(r.read_bps, r.write_bps)), drop=5, key="bytes"),
    Col("rd/s", 6, lambda r: fmt_bytes(r.read_bps)),
    Col("wr/s", 6, lambda r: fmt_bytes(r.write_bps)),
    Col("r_ms", 5, lambda r: fmt_num(r.r_await_ms), drop=3),
    Col("w_ms", 5, lambda r: fmt_num(r.w_await_ms), drop=3),
    Col("qd", 4, lambda r: str(r.in_flight), drop=4),
    Col("util", 6, lambda r: fmt_pct(r.util), key="util",
        style=lambda r: level_style(r.util or 0)),
)


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the table's block."""
    col = PANEL.sort(ui)
    shown = sort_rows(rows(model.view), SORTS[col], lambda r: r.device, ui.filter)
    return table_block("DISK", COLS, shown, width, col, 3)


NAME = "disks"
PANEL = Panel(NAME, (Read(BLOCKIO),), derive, block, "right",
              help=(("DISK", "ops and bytes per second, await ms, queue depth, util"),),
              sorts=tuple(SORTS), complete=complete)
