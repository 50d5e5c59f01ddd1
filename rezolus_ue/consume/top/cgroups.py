"""The CGROUP table: CPU (100% = one CPU), user and system, throttled time, memory and IO
bytes per second, one row per cgroup the agent publishes (its busiest). Reads
``rezolus_cgroup``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...samplers.cgroup import CGROUP_FAMILY
from .frame import Frame, Model, Read, Series, View
from .keys import UiState
from .layout import Block, Panel, table_block
from .widgets import Col, desc, fmt_bytes, fmt_share, plus, sort_rows


@dataclass(frozen=True, slots=True)
class CgroupRow:
    """One cgroup; ``cpu``/``user``/``system``/``throttled`` in CPUs (1.0 = one CPU)."""

    path: str
    cpu: float | None
    user: float | None
    system: float | None
    throttled: float | None
    memory_bytes: int
    io_read_bps: float | None
    io_write_bps: float | None


def _row(labels: tuple, s: Series) -> CgroupRow:
    # The hottest builder (a Kubernetes node has hundreds of cgroups): one look-up each.
    path = str(labels[0]) or "/"
    memory = s.int("memory_bytes")
    rates = s.rates
    if rates is None:
        return CgroupRow(path, None, None, None, None, memory, None, None)
    g = rates.get
    return CgroupRow(path, g("cpu_usage_ns", 0.0) / 1e9, g("cpu_user_ns", 0.0) / 1e9,
                     g("cpu_system_ns", 0.0) / 1e9, g("throttled_ns", 0.0) / 1e9, memory,
                     g("io_read_bytes", 0.0), g("io_write_bytes", 0.0))


def derive(f: Frame) -> tuple[CgroupRow, ...]:
    """Return each cgroup's rates over the frame."""
    return tuple(_row(lb, s) for lb, s in f.of(CGROUP_FAMILY.event))


def rows(v: View) -> tuple[CgroupRow, ...]:
    """Return the cgroup rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, tuple) else ()


#: Sort keys by column, in ``keys.SORT_MODES`` order.
SORTS: dict[str, Callable[[CgroupRow], object]] = {
    "cpu": lambda r: desc(r.cpu),
    "mem": lambda r: -r.memory_bytes,
    "io": lambda r: desc(plus(r.io_read_bps, r.io_write_bps)),
    "name": lambda r: r.path,
}
COLS = (
    Col("CGROUP", 20, lambda r: r.path),
    Col("cpu%", 6, lambda r: fmt_share(r.cpu), key="cpu"),
    Col("usr%", 6, lambda r: fmt_share(r.user), drop=5),
    Col("sys%", 6, lambda r: fmt_share(r.system), drop=5),
    Col("thr%", 5, lambda r: fmt_share(r.throttled), drop=3,
        style=lambda r: "red" if r.throttled else ""),
    Col("mem", 5, lambda r: fmt_bytes(r.memory_bytes), key="mem"),
    Col("io/s", 6, lambda r: fmt_bytes(plus(r.io_read_bps, r.io_write_bps)), key="io"),
    Col("rd/s", 6, lambda r: fmt_bytes(r.io_read_bps), drop=6),
    Col("wr/s", 6, lambda r: fmt_bytes(r.io_write_bps), drop=6),
)


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the table's block."""
    col = PANEL.sort(ui)
    shown = sort_rows(rows(model.view), SORTS[col], lambda r: r.path, ui.filter)
    return table_block("CGROUP", COLS, shown, width, col, 5)


NAME = "cgroups"
PANEL = Panel(NAME, (Read(CGROUP_FAMILY),), derive, block, "right",
              help=(("CGROUP", "CPU (100% = one CPU), throttled, memory, IO per second"),),
              sorts=tuple(SORTS))
