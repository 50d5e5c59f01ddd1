"""The NET table: bytes and packets per second, errors plus drops per second, one row per
interface. Reads ``rezolus_network_interface``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...samplers.network import NETWORK
from .frame import Frame, Model, Read, Series, View
from .keys import UiState
from .layout import Block, Panel, table_block
from .widgets import Col, desc, fmt_bytes, fmt_num, plus, sort_rows


@dataclass(frozen=True, slots=True)
class NetRow:
    """One network interface; rates per second."""

    interface: str
    rx_bps: float | None
    tx_bps: float | None
    rx_pps: float | None
    tx_pps: float | None
    errors_s: float | None
    drops_s: float | None


def _row(labels: tuple, s: Series) -> NetRow:
    return NetRow(
        interface=str(labels[0]), rx_bps=s.rate("rx_bytes"), tx_bps=s.rate("tx_bytes"),
        rx_pps=s.rate("rx_packets"), tx_pps=s.rate("tx_packets"),
        errors_s=s.rate("rx_errors", "tx_errors"), drops_s=s.rate("rx_dropped", "tx_dropped"))


def derive(f: Frame) -> tuple[NetRow, ...]:
    """Return each interface's rates over the frame."""
    return tuple(_row(lb, s) for lb, s in f.of(NETWORK.event))


def rows(v: View) -> tuple[NetRow, ...]:
    """Return the interface rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, tuple) else ()


def complete(v: View) -> bool:
    """Return whether every interface has rates."""
    return all(r.rx_bps is not None for r in rows(v))


#: Sort keys by column, in ``keys.SORT_MODES`` order.
SORTS: dict[str, Callable[[NetRow], object]] = {
    "bytes": lambda r: desc(plus(r.rx_bps, r.tx_bps)),
    "packets": lambda r: desc(plus(r.rx_pps, r.tx_pps)),
    "errors": lambda r: desc(plus(r.errors_s, r.drops_s)),
    "name": lambda r: r.interface,
}
COLS = (
    Col("NET", 8, lambda r: r.interface),
    Col("bytes", 6, lambda r: fmt_bytes(plus(r.rx_bps, r.tx_bps)), drop=5, key="bytes"),
    Col("rx/s", 6, lambda r: fmt_bytes(r.rx_bps)),
    Col("tx/s", 6, lambda r: fmt_bytes(r.tx_bps)),
    Col("packets", 8, lambda r: fmt_num(plus(r.rx_pps, r.tx_pps)), drop=5, key="packets"),
    Col("rxpk/s", 6, lambda r: fmt_num(r.rx_pps), drop=2),
    Col("txpk/s", 6, lambda r: fmt_num(r.tx_pps), drop=2),
    Col("errors", 7, lambda r: fmt_num(plus(r.errors_s, r.drops_s)), drop=1, key="errors",
        style=lambda r: "red" if (r.errors_s or r.drops_s) else ""),
)


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the table's block."""
    col = PANEL.sort(ui)
    shown = sort_rows(rows(model.view), SORTS[col], lambda r: r.interface, ui.filter)
    return table_block("NET", COLS, shown, width, col, 4)


NAME = "network"
PANEL = Panel(NAME, (Read(NETWORK),), derive, block, "right",
              help=(("NET", "bytes and packets per second, errors + drops per second"),),
              sorts=tuple(SORTS), complete=complete)
