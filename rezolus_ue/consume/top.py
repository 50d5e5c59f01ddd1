"""``rezolus-ue top``: a full-screen, top-style view of the agent's tracepoints.

Three parts, only the last does I/O:

* ``top_model.Model`` ingests records and commits one ``View`` per display interval of
  *data* time (a frame is drawn when an agent tick's records have arrived, never on a
  timer of its own);
* ``render(model, width, height, ui)`` and ``handle_key(ui, key)`` are pure: a rich
  ``Text`` of exactly the screen's lines from the latest view, and the next UI state;
* ``run`` polls the subscription, reads keys from stdin in cbreak mode (restoring the
  terminal on any exit) and redraws a ``Live(screen=True, auto_refresh=False)``.

Every panel degrades to what fits: at 80x24 per-CPU bars become a one-character-per-CPU
heat strip, tables drop their least important columns and show as many rows as fit.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import select
import signal
import sys
import termios
import textwrap
import time
import tty
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from rich.text import Span, Text

from ..config import path_arg
from ..errors import RezolusError
from .records import Record
from .top_model import (
    TOP_EVENTS,
    CgroupRow,
    CpuRow,
    DiskRow,
    HistRow,
    Model,
    NetRow,
    PressureRow,
    SamplerRow,
    View,
)

# --- UI state and keys (pure) ------------------------------------------------------------

#: Display intervals that ``+`` and ``-`` step through (seconds).
INTERVALS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

#: Sort modes that ``s`` cycles through: one column per table in each mode.
SORTS: tuple[dict[str, str], ...] = (
    {"cgroup": "cpu", "disk": "util", "net": "bytes"},
    {"cgroup": "mem", "disk": "bytes", "net": "packets"},
    {"cgroup": "io", "disk": "ops", "net": "errors"},
    {"cgroup": "name", "disk": "name", "net": "name"},
)

ESC, ENTER, BACKSPACE = "\x1b", "\n", "\x7f"


@dataclass(frozen=True)
class UiState:
    """What the user chose: everything ``render`` needs besides the model."""

    interval_s: float = 1.0
    paused: bool = False
    sort: int = 0
    filter: str = ""
    editing: bool = False  # typing a filter after '/'
    help: bool = False
    #: The samplers screen: every sampler's state, errors and why (key e).
    samplers: bool = False
    quit: bool = False
    #: False for ``--once``: no key footer, no padding to the screen height.
    interactive: bool = True
    #: Seconds since the last record (set by the loop; shown when the agent goes quiet).
    silent_s: float = 0.0


def step_interval(current: float, up: bool) -> float:
    """Return the next display interval above (or below) ``current`` in ``INTERVALS``."""
    if up:
        return next((v for v in INTERVALS if v > current + 1e-9), INTERVALS[-1])
    return next((v for v in reversed(INTERVALS) if v < current - 1e-9), INTERVALS[0])


def handle_key(ui: UiState, key: str) -> UiState:
    """Return the UI state after one key."""
    if ui.editing:
        if key in (ENTER, "\r"):
            return replace(ui, editing=False)
        if key == ESC:
            return replace(ui, editing=False, filter="")
        if key in (BACKSPACE, "\b"):
            return replace(ui, filter=ui.filter[:-1])
        if key == "\x15":  # Ctrl-U, as in a shell
            return replace(ui, filter="")
        if len(key) == 1 and key.isprintable():
            return replace(ui, filter=ui.filter + key)
        return ui
    if ui.help and key in ("h", "?", ESC, "q"):
        return replace(ui, help=False)  # q closes help first, like less
    if ui.samplers and key in ("e", ESC, "q"):
        return replace(ui, samplers=False)
    match key:
        case "q" | "Q":
            return replace(ui, quit=True)
        case "p" | " ":
            return replace(ui, paused=not ui.paused)
        case "s":
            return replace(ui, sort=(ui.sort + 1) % len(SORTS))
        case "S":
            return replace(ui, sort=(ui.sort - 1) % len(SORTS))
        case "/":
            return replace(ui, editing=True, help=False)
        case "+" | "=":
            return replace(ui, interval_s=step_interval(ui.interval_s, up=True))
        case "-" | "_":
            return replace(ui, interval_s=step_interval(ui.interval_s, up=False))
        case "h" | "?":
            return replace(ui, help=not ui.help, samplers=False)
        case "e":
            return replace(ui, samplers=True, help=False)
        case _ if key == ESC and ui.filter:
            return replace(ui, filter="")
    return ui


def split_keys(data: str) -> list[str]:
    """Return the keys in a chunk read from the terminal; escape sequences are one key each.

    Arrow and function keys (``ESC [ ... final``) come back whole, so they are ignored
    rather than read as ``[`` and a letter; a lone ESC is the Escape key.
    """
    keys: list[str] = []
    i = 0
    while i < len(data):
        c = data[i]
        if c == ESC and i + 1 < len(data) and data[i + 1] in "[O":
            j = i + 2
            while j < len(data) and not (data[j].isalpha() or data[j] == "~"):
                j += 1
            keys.append(data[i : j + 1])
            i = j + 1
        else:
            keys.append(ENTER if c == "\r" else c)
            i += 1
    return keys


# --- formatting ------------------------------------------------------------------------


def fmt_num(x: float | None) -> str:
    """Return a count or rate in at most 5 characters: 0, 3.5, 123, 12.3k, 1.2M."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if x < 10:
        return f"{x:.1f}"
    for div, suffix in ((1, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        v = x / div
        if v < 9.95 and suffix:
            return f"{v:.1f}{suffix}"
        if v < 999.5:
            return f"{v:.0f}{suffix}"
    return f"{x / 1e15:.0f}P"


def fmt_int(n: int) -> str:
    """Return a count: exact below 1000, else as ``fmt_num``."""
    return str(n) if n < 1000 else fmt_num(n)


def fmt_bytes(x: float | None) -> str:
    """Return bytes in binary units in at most 5 characters: 512, 1.5K, 12.3M, 15.5G."""
    if x is None:
        return "-"
    if x < 1000:
        return f"{x:.0f}"
    v = float(x)
    for suffix in "KMGTPE":
        v /= 1024
        if v < 9.95:
            return f"{v:.1f}{suffix}"
        if v < 999.5:
            return f"{v:.0f}{suffix}"
    return f"{v:.0f}E"


def fmt_pct(share: float | None) -> str:
    """Return a share (1.0 = 100%) as 42.1% (100% and above without a decimal)."""
    if share is None:
        return "-"
    p = share * 100
    return f"{p:.0f}%" if p >= 99.95 else f"{p:.1f}%"


def fmt_uptime(s: float) -> str:
    """Return a duration as 42s, 12m03s, 3h12m or 5d03h."""
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def fmt_value(v: int, unit: str) -> str:
    """Return a histogram value with its unit: 120us, 1.5ms, 2.0s; else a number and unit."""
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}.get(unit)
    if scale is None:
        return fmt_num(v) + unit
    ns = v * scale
    for div, u in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if ns >= div:
            x = ns / div
            return f"{x:.1f}{u}" if x < 9.95 else f"{x:.0f}{u}"
    return f"{ns:.0f}ns"


def _interval(s: float) -> str:
    return f"{s:g}s" if s >= 1 else f"{s * 1000:g}ms"


# --- small rendering helpers -----------------------------------------------------------

_LEVELS = " ▁▂▃▄▅▆▇█"


def _level_style(share: float) -> str:
    return "red" if share >= 0.9 else "yellow" if share >= 0.6 else "green"


def _items(parts: Sequence[tuple[int, Text]], width: int, sep: str = "  ") -> Text:
    """Return the parts joined in order, dropping the highest ``prio`` first to fit."""
    keep = list(parts)
    while len(keep) > 1:
        total = sum(t.cell_len for _p, t in keep) + len(sep) * (len(keep) - 1)
        if total <= width:
            break
        keep.remove(max(keep, key=lambda pt: pt[0]))
    out = Text(sep).join(t for _p, t in keep)
    out.truncate(width, overflow="ellipsis")
    return out


def _kv(label: str, value: str, style: str = "") -> Text:
    return Text.assemble((label + " ", "dim"), (value, style or "bold"))


class _Line:
    """A line built from (text, style) pieces and made into one ``Text`` at the end.

    ``Text.append`` sanitises every piece; on a screen of a few thousand pieces that is
    most of the cost of a frame, so the hot paths build spans directly. Pieces must be
    free of control characters (labels go through ``_clean``).
    """

    __slots__ = ("_n", "_parts", "_spans")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._spans: list[Span] = []
        self._n = 0

    def append(self, s: str, style: str = "") -> None:
        if s:
            if style:
                self._spans.append(Span(self._n, self._n + len(s), style))
            self._parts.append(s)
            self._n += len(s)

    @property
    def cell_len(self) -> int:
        return self._n  # every piece is single-width: ASCII, box and block characters

    def text(self) -> Text:
        return Text("".join(self._parts), spans=self._spans)


def _clean(s: str) -> str:
    """Return a label with control characters replaced (it came from the kernel)."""
    return s if s.isprintable() else "".join(c if c.isprintable() else "?" for c in s)


def _bar(out: _Line, width: int, segments: Sequence[tuple[float, str]],
         peak: float | None = None, empty: str = " ") -> None:
    """Append a bar of ``width`` cells filled by ``(share, style)`` segments in order.

    ``peak`` (a share) marks the interval's maximum with ``|`` when it lies past the fill.
    """
    done = 0
    acc = 0.0
    for share, style in segments:
        acc += max(share, 0.0)
        end = min(width, round(acc * width))
        if end > done:
            out.append("█" * (end - done), style)
            done = end
    if peak is not None and width > 0:
        at = min(width - 1, max(0, round(peak * width) - 1))
        if at >= done:
            out.append(empty * (at - done), "dim")
            out.append("|", "bold yellow")
            done = at + 1
    out.append(empty * (width - done), "dim")


def _spark(counts: np.ndarray, width: int) -> Text:
    """Return the non-zero range of a bucket array as a bar chart ``width`` cells wide."""
    nz = np.flatnonzero(counts)
    if width <= 0 or not len(nz):
        return Text(" " * max(width, 0))
    seg = counts[nz[0] : nz[-1] + 1].astype(np.float64)
    cells = np.array([c.sum() for c in np.array_split(seg, min(width, len(seg)))])
    top = cells.max() or 1.0
    chars = "".join(_LEVELS[max(1, round(c / top * 8))] if c else " " for c in cells)
    return Text(chars.ljust(width), "cyan")


def _fit(t: Text, width: int) -> Text:
    t.truncate(width, overflow="ellipsis")
    return t


def _ltrunc(s: str, width: int) -> str:
    """Return ``s`` cut from the left to ``width`` (a cgroup path's tail says the most)."""
    return s if len(s) <= width else "…" + s[len(s) - width + 1 :]


# --- tables ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Col:
    header: str
    width: int  # minimum width for the flexible (first) column
    cell: Callable[[Any], str]
    drop: int = 0  # 0: never dropped; when narrow, the highest number goes first (together)
    style: Callable[[Any], str] | None = None
    key: str = ""  # the sort mode this column shows (marked with a triangle)
    #: For the first column: the cell cut to a width (default: cut from the left).
    fit: Callable[[Any, int], str] | None = None


def _table(title: str, cols: Sequence[_Col], rows: Sequence[object], width: int,
           lines: int, sort_col: str) -> list[Text]:
    """Return a header line and up to ``lines - 1`` rows; the first column flexes.

    The first header names the table (and how many rows did not fit); the sorted column's
    header carries a triangle.
    """
    cols = list(cols)
    while sum(c.width + 1 for c in cols) - 1 > width:
        worst = max(c.drop for c in cols)
        if not worst:
            break
        cols = [c for c in cols if c.drop != worst]
    flex = max(cols[0].width, width - sum(c.width + 1 for c in cols[1:]))
    shown = rows[: max(lines - 1, 0)]
    more = len(rows) - len(shown)
    head = _Line()
    label = title + ("▼" if sort_col == "name" else "") + (f" +{more}" if more else "")
    head.append(label[:flex].ljust(flex), "bold")
    for c in cols[1:]:
        sorted_here = bool(c.key) and c.key == sort_col
        head.append(" ")
        head.append((c.header + ("▼" if sorted_here else "")).rjust(c.width),
                    "bold reverse" if sorted_here else "bold")
    out = [_fit(head.text(), width)]
    first = cols[0]
    for r in shown:
        line = _Line()
        name = first.fit(r, flex) if first.fit else _ltrunc(_clean(first.cell(r)), flex)
        line.append(name.ljust(flex))
        for c in cols[1:]:
            line.append(" ")
            line.append(c.cell(r).rjust(c.width), c.style(r) if c.style else "")
        out.append(_fit(line.text(), width))
    return out


def _matches(label: str, ui: UiState) -> bool:
    return not ui.filter or ui.filter.lower() in label.lower()


def _desc(v: float | None) -> float:
    return -(v if v is not None else -1.0)


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None else a + (b or 0.0)


_CGROUP_KEYS: dict[str, Callable[[CgroupRow], object]] = {
    "cpu": lambda r: _desc(r.cpu),
    "mem": lambda r: -r.memory_bytes,
    "io": lambda r: _desc(_sum(r.io_read_bps, r.io_write_bps)),
    "name": lambda r: r.path,
}
_DISK_KEYS: dict[str, Callable[[DiskRow], object]] = {
    "util": lambda r: _desc(r.util),
    "bytes": lambda r: _desc(_sum(r.read_bps, r.write_bps)),
    "ops": lambda r: _desc(_sum(r.reads_s, r.writes_s)),
    "name": lambda r: r.device,
}
_NET_KEYS: dict[str, Callable[[NetRow], object]] = {
    "bytes": lambda r: _desc(_sum(r.rx_bps, r.tx_bps)),
    "packets": lambda r: _desc(_sum(r.rx_pps, r.tx_pps)),
    "errors": lambda r: _desc(_sum(r.errors_s, r.drops_s)),
    "name": lambda r: r.interface,
}


def _cpu_share(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%" if x * 100 >= 99.5 else f"{x * 100:.1f}%"


_CGROUP_COLS = (
    _Col("CGROUP", 20, lambda r: r.path),
    _Col("cpu%", 6, lambda r: _cpu_share(r.cpu), key="cpu"),
    _Col("usr%", 6, lambda r: _cpu_share(r.user), drop=5),
    _Col("sys%", 6, lambda r: _cpu_share(r.system), drop=5),
    _Col("thr%", 5, lambda r: _cpu_share(r.throttled), drop=3,
         style=lambda r: "red" if r.throttled else ""),
    _Col("mem", 5, lambda r: fmt_bytes(r.memory_bytes), key="mem"),
    _Col("io/s", 6, lambda r: fmt_bytes(_sum(r.io_read_bps, r.io_write_bps)), key="io"),
    _Col("rd/s", 6, lambda r: fmt_bytes(r.io_read_bps), drop=6),
    _Col("wr/s", 6, lambda r: fmt_bytes(r.io_write_bps), drop=6),
)
_DISK_COLS = (
    _Col("DISK", 8, lambda r: r.device),
    _Col("ops", 5, lambda r: fmt_num(_sum(r.reads_s, r.writes_s)), drop=5, key="ops"),
    _Col("r/s", 5, lambda r: fmt_num(r.reads_s), drop=2),
    _Col("w/s", 5, lambda r: fmt_num(r.writes_s), drop=2),
    _Col("bytes", 6, lambda r: fmt_bytes(_sum(r.read_bps, r.write_bps)), drop=5,
         key="bytes"),
    _Col("rd/s", 6, lambda r: fmt_bytes(r.read_bps)),
    _Col("wr/s", 6, lambda r: fmt_bytes(r.write_bps)),
    _Col("r_ms", 5, lambda r: fmt_num(r.r_await_ms), drop=3),
    _Col("w_ms", 5, lambda r: fmt_num(r.w_await_ms), drop=3),
    _Col("qd", 4, lambda r: str(r.in_flight), drop=4),
    _Col("util", 6, lambda r: fmt_pct(r.util), key="util",
         style=lambda r: _level_style(r.util or 0)),
)
_NET_COLS = (
    _Col("NET", 8, lambda r: r.interface),
    _Col("bytes", 6, lambda r: fmt_bytes(_sum(r.rx_bps, r.tx_bps)), drop=5, key="bytes"),
    _Col("rx/s", 6, lambda r: fmt_bytes(r.rx_bps)),
    _Col("tx/s", 6, lambda r: fmt_bytes(r.tx_bps)),
    _Col("packets", 8, lambda r: fmt_num(_sum(r.rx_pps, r.tx_pps)), drop=5, key="packets"),
    _Col("rxpk/s", 6, lambda r: fmt_num(r.rx_pps), drop=2),
    _Col("txpk/s", 6, lambda r: fmt_num(r.tx_pps), drop=2),
    _Col("errors", 7, lambda r: fmt_num(_sum(r.errors_s, r.drops_s)), drop=1, key="errors",
         style=lambda r: "red" if (r.errors_s or r.drops_s) else ""),
)


def _sorted(rows: Sequence, keys: dict[str, Callable], sort: str, label: Callable,
            ui: UiState) -> list:
    return sorted((r for r in rows if _matches(label(r), ui)), key=keys[sort])


# --- panels: each a block with its useful heights and a draw function -------------------


@dataclass
class _Block:
    sizes: tuple[int, ...]  # useful heights, ascending; sizes[0] is the minimum
    draw: Callable[[int], list[Text]]
    prio: int  # higher numbers are dropped first when even the minimums do not fit


def _cpu_block(v: View, width: int) -> _Block | None:
    cpus = v.cpus
    if not cpus:
        return None
    n = len(cpus)
    strip = -(-n // max(1, width - 9))  # heat strip lines (9 columns of prefix)
    layouts = []  # (lines, columns) of bar layouts that fit the width, fewest lines first
    for cols in range(max(1, width // _CELL_MIN), 0, -1):
        layouts.append((1 + -(-n // cols), cols))
    sizes = tuple(sorted({1 + strip, *(h for h, _c in layouts if h > 1 + strip)}))

    def draw(lines: int) -> list[Text]:
        out = [_cpu_summary(v, width)]
        fit = [lc for lc in layouts if lc[0] <= lines]
        if fit:
            # The most lines that fit, in the fewest columns: the widest bars.
            _h, cols = max(fit, key=lambda lc: (lc[0], -lc[1]))
            out += _cpu_bars(cpus, width, cols)
        elif lines > 1:
            out += _cpu_strip(cpus, width)[: lines - 1]
        return out

    return _Block(sizes, draw, prio=0)


_CELL_MIN = 20  # narrowest per-CPU bar cell: "  0[██████    ] 42.1%"


def _cpu_summary(v: View, width: int) -> Text:
    t = v.cpu_total
    assert t is not None
    parts: list[tuple[int, Text]] = [
        (0, Text.assemble(("CPU ", "bold"), (fmt_pct(t.busy), "bold " + _level_style(
            t.busy or 0)))),
    ]
    for prio, name, val in ((2, "usr", t.user), (3, "sys", t.system), (5, "irq", t.irq),
                            (4, "iowait", t.iowait), (6, "steal", t.steal)):
        if val is not None:
            parts.append((prio, _kv(name, fmt_pct(val))))
    if t.peak is not None:
        hot = max(v.cpus, key=lambda c: c.peak or 0)
        parts.append((1, _kv("max", f"{fmt_pct(t.peak)} cpu{hot.cpu}", "bold yellow")))
    parts.append((7, Text(f"{len(v.cpus)} cpus", "dim")))
    return _items(parts, width)


def _cpu_bars(cpus: Sequence[CpuRow], width: int, cols: int) -> list[Text]:
    cell = width // cols
    rows = -(-len(cpus) // cols)
    show_peak = cell >= 28
    label_w = max(3, len(str(cpus[-1].cpu)))
    tail = 6 + (6 if show_peak else 0)
    bar_w = max(1, cell - label_w - 2 - tail - 1)  # label, brackets, tail, gap
    out = []
    for r in range(rows):
        line = _Line()
        for c in range(cols):
            i = c * rows + r  # column-major: CPUs read down, like htop
            if i >= len(cpus):
                break
            cpu = cpus[i]
            if cpu.user is not None:
                segs = [(cpu.user or 0, "green"), (cpu.system or 0, "red"),
                        (cpu.irq or 0, "magenta"), (cpu.steal or 0, "cyan")]
            else:
                segs = [(cpu.busy or 0, "green")]
            line.append(f"{cpu.cpu:>{label_w}}", "dim")
            line.append("[")
            _bar(line, bar_w, segs, cpu.peak)
            line.append("]")
            line.append(fmt_pct(cpu.busy).rjust(6), "bold" if (cpu.busy or 0) >= 0.9 else "")
            if show_peak:
                peak = f"↑{cpu.peak * 100:.0f}%" if cpu.peak is not None else ""
                line.append(peak.rjust(6), "yellow")
            if c < cols - 1:
                line.append(" " * (cell * (c + 1) - line.cell_len))
        out.append(_fit(line.text(), width))
    return out


def _cpu_strip(cpus: Sequence[CpuRow], width: int) -> list[Text]:
    per = max(1, width - 9)
    out = []
    for start in range(0, len(cpus), per):
        chunk = cpus[start : start + per]
        line = _Line()
        line.append(f"{chunk[0].cpu:>3}-{chunk[-1].cpu:<3} ▕", "dim")
        for c in chunk:
            b = c.busy or 0.0
            line.append(_LEVELS[min(8, round(b * 8))] if b > 0 else "·",
                        _level_style(b) if b > 0 else "dim")
        out.append(_fit(line.text(), width))
    return out


def _memory_block(v: View, width: int) -> _Block | None:
    m = v.memory
    if not m:
        return None
    total = m.get("total_bytes", 0)
    avail = m.get("available_bytes", 0)
    used = max(total - avail, 0)
    share = used / total if total else 0.0
    swap_used = m.get("swap_total_bytes", 0) - m.get("swap_free_bytes", 0)
    swap = _kv("swap", f"{fmt_bytes(swap_used)}/{fmt_bytes(m.get('swap_total_bytes', 0))}")

    def draw(lines: int) -> list[Text]:
        head = Text.assemble(("Mem ", "bold"))
        used_t = Text.assemble((f"{fmt_bytes(used)}/{fmt_bytes(total)} ", "bold"),
                               (fmt_pct(share), _level_style(share)))
        extra = [_kv("avail", fmt_bytes(avail)), _kv("cache", fmt_bytes(m.get(
            "cached_bytes", 0))), _kv("buf", fmt_bytes(m.get("buffers_bytes", 0))),
            _kv("dirty", fmt_bytes(m.get("dirty_bytes", 0))),
            _kv("wback", fmt_bytes(m.get("writeback_bytes", 0))),
            _kv("slab", fmt_bytes(m.get("slab_bytes", 0))), swap]
        if lines == 1:
            return [_items([(0, head + used_t), (1, extra[0]), (2, extra[1]), (3, swap),
                            (4, extra[3]), (5, extra[5])], width)]
        bar_w = max(0, min(40, width - 40))
        l1 = Text.assemble(head)
        if bar_w >= 8:
            bar = _Line()
            bar.append("[")
            _bar(bar, bar_w, [(share, _level_style(share))])
            bar.append("] ")
            l1.append_text(bar.text())
        l1 = _items([(0, l1 + used_t), (1, extra[0]), (2, extra[1])], width)
        l2 = _items([(1, Text("   ")), (1, swap), (2, extra[3]), (3, extra[2]),
                     (4, extra[5]), (5, extra[4])], width)
        return [l1, _fit(l2, width)]

    return _Block((1, 2), draw, prio=1)


@functools.lru_cache(maxsize=256)
def hist_subject(event: str, metric: str, unit: str) -> str:
    """Return what a histogram row measures: its event's words, then its metric's where the
    event does not say them, without the unit ("syscall latency", "agent sampler refresh")."""
    words = event.removeprefix("rezolus_").split("_")
    more = [w for w in metric.removesuffix(f"_{unit}").split("_") if w not in words]
    return " ".join(words + more)


def _hist_name(h: HistRow) -> str:
    """Return a histogram row's full name: what it measures and its label (filters match
    it: "syscall" finds every syscall family)."""
    return f"{hist_subject(h.event, h.metric, h.unit)} {_clean(h.label)}".rstrip()


#: Words a histogram row's name is shortened by, in this order, until it fits.
_ABBREVIATIONS = (("sampler ", ""), ("scheduler", "sched"), ("runqueue", "runq"),
                  ("latency", "lat"), ("duration", "dur"), ("connect", "conn"),
                  ("packet", "pkt"), ("blockio", "blk"), ("cgroup", "cg"),
                  ("refresh", "refr"))


@functools.lru_cache(maxsize=1024)
def fit_hist_name(subject: str, label: str, width: int, longest: int = 0) -> str:
    """Return a histogram row's name in ``width`` cells: the subject's words abbreviated
    first, then the label cut (a path from the left: its tail says the most), so the
    reader always sees which subsystem and metric a row is. ``longest``: the longest
    label of the rows of this event shown, so that they share one subject."""
    need = max(len(label), longest)
    for long, short in _ABBREVIATIONS:
        if len(subject) + (need and need + 1) <= width:
            break
        subject = subject.replace(long, short)
    name = f"{subject} {label}".rstrip()
    if len(name) <= width:
        return name
    room = width - len(subject) - 1
    if label and room > 1:
        cut = _ltrunc(label, room) if "/" in label else label[: room - 1] + "…"
        return f"{subject} {cut}"
    return name[: max(width - 1, 0)] + "…" if width > 0 else ""


def _fit_hists(hists: Sequence[HistRow]) -> Callable[[HistRow, int], str]:
    """Return the name fitter of a histogram table's rows: one subject per event."""
    longest: dict[str, int] = {}
    for h in hists:
        longest[h.event] = max(longest.get(h.event, 0), len(h.label))
    return lambda h, width: fit_hist_name(hist_subject(h.event, h.metric, h.unit),
                                          _clean(h.label), width, longest[h.event])


def _sched_block(v: View, width: int, ui: UiState) -> _Block | None:
    hists = [h for h in v.hists if _matches(_hist_name(h), ui)]
    if v.sched is None and not hists:
        return None
    # The model's order (scheduler latencies first), but the agent's own refresh costs
    # costliest first: with a dozen samplers only the top few fit.
    hists.sort(key=lambda h: (h.event.startswith("rezolus_agent"),
                              -h.p99 if h.event.startswith("rezolus_agent") else 0))
    s = v.sched

    def draw(lines: int) -> list[Text]:
        out = []
        if s is not None:
            out.append(_items([
                (0, Text("Sched", "bold")), (0, _kv("ctxsw/s", fmt_num(s.ctxsw_s))),
                (1, _kv("runnable", str(s.running))), (2, _kv("blocked", str(s.blocked))),
                (3, _kv("forks/s", fmt_num(s.forks_s)))], width))
        room = lines - len(out)
        if room >= 2 and hists:
            out += _hist_table(hists, width, room)
        return out

    base = 1 if s is not None else 0
    sizes = (base, *(base + 1 + k for k in range(1, len(hists) + 1)))
    return _Block(tuple(x for x in sizes if x > 0) or (1,), draw, prio=2)


def _hist_table(hists: Sequence[HistRow], width: int, lines: int) -> list[Text]:
    spark_w = max(0, min(24, width - 58))
    cols = [
        _Col("HISTOGRAM", 10, _hist_name, fit=_fit_hists(hists[: max(lines - 1, 0)])),
        _Col("n", 5, lambda h: fmt_int(h.count), drop=2),
        _Col("p50", 6, lambda h: fmt_value(h.p50, h.unit), drop=3),
        _Col("p90", 6, lambda h: fmt_value(h.p90, h.unit), drop=4),
        _Col("p99", 6, lambda h: fmt_value(h.p99, h.unit)),
        _Col("max", 6, lambda h: fmt_value(h.max, h.unit)),
    ]
    table = _table("HISTOGRAM", cols, hists, width - (spark_w + 1 if spark_w >= 6 else 0),
                   lines, "")
    if spark_w >= 6:
        table[0].append(" " + "buckets".ljust(spark_w), "bold")
        for line, h in zip(table[1:], hists, strict=False):
            line.append(" ")
            line.append_text(_spark(h.counts, spark_w))
    return table


def _table_block(title: str, cols: Sequence[_Col], rows: list, width: int,
                 sort_col: str, prio: int) -> _Block | None:
    if not rows:
        return None

    def draw(lines: int) -> list[Text]:
        return _table(title, cols, rows, width, lines, sort_col)

    return _Block(tuple(range(2, len(rows) + 2)), draw, prio)


#: Samplers the panel lists, by state, worst first; any other with errors comes after.
_TROUBLE = {"failed": 0, "unavailable": 1}
_STATE_STYLE = {"failed": "bold red", "unavailable": "yellow"}


def troubled(samplers: Sequence[SamplerRow]) -> list[SamplerRow]:
    """Return the samplers to tell the user about, worst first: failed, unavailable, then
    any that recovered from errors (disabled ones were the user's choice)."""
    rows = [r for r in samplers if r.state in _TROUBLE or r.errors]
    return sorted(rows, key=lambda r: (_TROUBLE.get(r.state, 2), -r.errors, r.sampler))


def _sampler_why(r: SamplerRow) -> str:
    """Return why a sampler is listed: its reason or error; for one that recovered, its
    latest error too."""
    why = _clean(r.why)
    if r.state not in _TROUBLE and r.last_error:
        why = (why or "recovered") + f"; latest error: {_clean(r.last_error)}"
    return why or "-"


def _sampler_head(r: SamplerRow, name_w: int) -> _Line:
    """Return a sampler line's columns before the why: name, state, errors."""
    line = _Line()
    line.append(_clean(r.sampler)[:name_w].ljust(name_w), "bold")
    line.append(" ")
    line.append(r.state.ljust(11), _STATE_STYLE.get(r.state, "dim"))
    line.append(fmt_int(r.errors).rjust(5), "red" if r.errors else "dim")
    line.append("  ")
    return line


def _sampler_line(r: SamplerRow, width: int, name_w: int) -> Text:
    line = _sampler_head(r, name_w)
    line.append(_sampler_why(r))
    return _fit(line.text(), width)


def _samplers_block(v: View, width: int, prio: int) -> _Block | None:
    rows = troubled(v.samplers)
    if not rows:
        return None
    name_w = max(7, min(18, max(len(r.sampler) for r in rows)))

    def draw(lines: int) -> list[Text]:
        shown = rows[: max(lines - 1, 0)]
        more = len(rows) - len(shown)
        title = f"{'SAMPLER'.ljust(name_w)} {'state'.ljust(11)}{'err'.rjust(5)}  why" + (
            f"  +{more} (e)" if more else "  (e: every sampler)")
        return [_fit(Text(title, "bold"), width),
                *(_sampler_line(r, width, name_w) for r in shown)]

    return _Block(tuple(range(2, len(rows) + 2)), draw, prio)


def _samplers_screen(v: View, width: int, height: int) -> list[Text]:
    """Return the samplers screen (key e): every sampler, its state, errors and why, the
    why wrapped rather than cut."""
    rows = sorted(v.samplers, key=lambda r: (_TROUBLE.get(r.state, 2), r.sampler))
    out = [Text("Samplers of the running agent, as it publishes them"
                " (rezolus_agent_status); e or Esc returns", "bold")]
    if not rows:
        out.append(Text("no rezolus_agent_status record yet: the agent publishes one per"
                        " sampler every interval while a consumer has it enabled", "dim"))
    name_w = max((len(r.sampler) for r in rows), default=7)
    indent = name_w + 1 + 11 + 5 + 2
    for r in rows:
        chunks = textwrap.wrap(_sampler_why(r), max(width - indent, 10)) or [""]
        line = _sampler_head(r, name_w)
        line.append(chunks[0])
        out.append(_fit(line.text(), width))
        out += [_fit(Text(" " * indent + c), width) for c in chunks[1:]]
    return out[:height]


def _allocate(blocks: Sequence[_Block], height: int) -> list[int]:
    """Return each block's height (0: dropped): minimums first, then one step per round."""
    alive = list(range(len(blocks)))
    while alive and sum(blocks[i].sizes[0] for i in alive) > height:
        alive.remove(max(alive, key=lambda i: blocks[i].prio))
    alloc = [blocks[i].sizes[0] if i in alive else 0 for i in range(len(blocks))]
    free = height - sum(alloc)
    grew = True
    while grew and free > 0:
        grew = False
        for i in sorted(alive, key=lambda i: blocks[i].prio):
            nxt = next((s for s in blocks[i].sizes if s > alloc[i]), None)
            if nxt is not None and nxt - alloc[i] <= free:
                free -= nxt - alloc[i]
                alloc[i] = nxt
                grew = True
    return alloc


def _stack(blocks: Sequence[_Block | None], width: int, height: int) -> list[Text]:
    present = [b for b in blocks if b is not None]
    alloc = _allocate(present, height)
    out: list[Text] = []
    for b, n in zip(present, alloc, strict=True):
        if n:
            out += b.draw(n)[:n]
    return [_fit(t, width) for t in out[:height]]


# --- header, footer, help --------------------------------------------------------------


def _header(model: Model, ui: UiState, width: int) -> list[Text]:
    v = model.view
    title = Text("rezolus-ue top", "bold reverse")
    l1: list[tuple[int, Text]] = [(0, title)]
    if model.host:
        l1.append((1, Text(model.host, "bold")))
    if model.kernel:
        l1.append((4, Text(model.kernel, "dim")))
    a = v.agent
    if a is None and not v.frame:
        waiting = ("subscribing..." if model.subscribed is None else
                   "waiting for the agent (sudo rezolus-ue run)" if not model.subscribed
                   else "waiting for its first records")
        l1.append((0, Text(waiting, "bold yellow")))
    elif a is None:  # data, but the agent sampler is disabled or its event unsubscribed
        l1.append((0, Text("agent: no rezolus_agent records", "yellow")))
    if a is not None:
        l1 += [(0, _kv("agent", str(a.pid))), (2, _kv("up", fmt_uptime(a.uptime_s))),
               (3, _kv("cpu", _cpu_share(a.cpu))), (5, _kv("rss", fmt_bytes(a.rss_bytes)))]
        # Always shown: "errors 0" is the answer an operator looks for, not a blank.
        errs = a.sampler_errors + a.write_errors
        l1.append((1, _kv("errors", str(errs), "bold red" if errs else "bold")))
    bad = Text()
    for state in _TROUBLE:
        n = sum(r.state == state for r in v.samplers)
        if n:
            bad.append(f"{n} {state} ", _STATE_STYLE[state])
    if bad:
        l1.append((1, Text.assemble(("samplers ", "dim"), bad, ("(e)", "dim"))))
    l2: list[tuple[int, Text]] = []
    if model.loadavg is not None:
        l2.append((1, _kv("load", " ".join(f"{x:.2f}" for x in model.loadavg))))
    if v.pressure:
        l2.append((2, _psi(v.pressure)))
    l2 += [(0, _kv("ev/s", fmt_num(v.events_per_s))),
           (0, _kv("lost", str(model.lost), "bold red" if model.lost else "bold"))]
    if a is not None:
        l2.append((4, _kv("written", fmt_int(a.events_written))))
    l2 += [(3, _kv("every", _interval(ui.interval_s))),
           (5, _kv("sort", "/".join(SORTS[ui.sort].values())))]
    if ui.filter or ui.editing:
        l2.append((0, _kv("filter", repr(ui.filter), "bold cyan")))
    if ui.paused:
        l2.append((0, Text("PAUSED", "bold reverse yellow")))
    if ui.silent_s >= max(3 * ui.interval_s, 3.0) and v.frame:
        l2.append((0, Text(f"no data for {ui.silent_s:.0f}s", "bold red")))
    return [_items(l1, width), _items(l2, width)]


def _pct(share: float | None) -> str:
    """Return a share as a percentage without the sign, in at most 4 cells: 0, 1.2, 34."""
    if share is None:
        return "-"
    p = share * 100
    return "0" if p < 0.05 else f"{p:.1f}" if p < 9.95 else f"{p:.0f}"


def _psi(rows: Sequence[PressureRow]) -> Text:
    """Return PSI as ``psi cpu 1.2/0% mem 0/0% io 3.4/1.0%`` (some/full stall shares)."""
    t = Text("psi", "dim")
    for r in rows:
        worst = max(r.some or 0.0, r.full or 0.0)
        style = "bold red" if worst >= 0.1 else "bold yellow" if worst >= 0.01 else "bold"
        t.append(f" {r.resource[:3]} ", "dim")
        t.append(f"{_pct(r.some)}/{_pct(r.full)}%", style)
    return t


_KEYS = (("q", "quit"), ("p", "pause"), ("s", "sort"), ("/", "filter"), ("+/-", "interval"),
         ("e", "samplers"), ("h", "help"))


def _footer(ui: UiState, width: int) -> Text:
    if ui.editing:
        t = Text.assemble(("filter: ", "bold"), (ui.filter, "bold cyan"), ("▏", "blink"),
                          ("  Enter keep  Esc clear", "dim"))
        return _fit(t, width)
    t = Text()
    for k, what in _KEYS:
        if t.cell_len + len(k) + len(what) + 3 > width:
            break
        t.append(f" {k}", "bold reverse")
        t.append(f" {what} ")
    return t


_HELP = (
    ("q", "quit (closes this help first)"),
    ("p, space", "pause the display (data keeps being counted)"),
    ("s / S", "cycle sort: " + ", ".join("/".join(m.values()) for m in SORTS)),
    ("/", "filter rows by label text (Enter keeps, Esc clears)"),
    ("+ / -", "slower / faster refresh (" + ", ".join(_interval(i) for i in INTERVALS) + ")"),
    ("e", "every sampler: state, errors and why (as the agent publishes them)"),
    ("h, ?", "toggle this help"),
    ("", ""),
    ("header", "load averages 1/5/15 min; psi: stalled share of time, some/full tasks"),
    ("SAMPLER", "failed and unavailable samplers, errors and why (rezolus_agent_status)"),
    ("CPU", "busy = not idle/iowait; bar: usr sys irq steal; | = interval max"),
    ("Mem", "used = total - available"),
    ("Sched", "context switches, runnable and blocked tasks; histograms named"
     " subsystem, metric, label"),
    ("DISK", "ops and bytes per second, await ms, queue depth, util"),
    ("NET", "bytes and packets per second, errors + drops per second"),
    ("CGROUP", "CPU (100% = one CPU), throttled, memory, IO per second"),
)


def _help(width: int, height: int) -> list[Text]:
    key_w = max(len(k) for k, _ in _HELP) + 2
    out = [Text("Keys and panels", "bold underline"), Text()]
    for k, what in _HELP:
        out.append(_fit(Text.assemble((k.ljust(key_w), "bold cyan"), what), width))
    return out[:height]


# --- render ----------------------------------------------------------------------------

#: Width from which panels sit in two columns.
WIDE = 120


def render(model: Model, width: int, height: int, ui: UiState) -> Text:
    """Return the screen for ``model``'s latest frame: ``height`` lines of ``width`` cells.

    Non-interactive (``--once``) output has no key footer and is not padded.
    """
    width = max(width, 20)
    head = _header(model, ui, width)
    foot = [_footer(ui, width)] if ui.interactive else []
    room = max(height - len(head) - len(foot), 0)
    v = model.view
    if ui.help:
        body = _help(width, room)
    elif ui.samplers:
        body = _samplers_screen(v, width, room)
    elif not v.frame:
        body = _waiting(model, width)
    else:
        body = _body(v, ui, width, room) or [
            Text("no panel data: the samplers top reads are idle, disabled or unavailable"
                 " (see `rezolus-ue events`)", "dim")]
    if ui.interactive:
        body += [Text()] * (room - len(body))
    lines = [*head, *body[:room], *foot]
    return Text("\n", no_wrap=True, overflow="crop").join(lines)


def _waiting(model: Model, width: int) -> list[Text]:
    """Return the body before the first frame: what top waits for and subscribed to."""
    subscribed = model.subscribed
    if subscribed is None:
        head = f"subscribing to {len(TOP_EVENTS)} events..."
    elif not subscribed:
        head = ("waiting for the agent: none of top's events is registered (start it:"
                " sudo rezolus-ue run); top subscribes as soon as they are")
    else:
        head = "waiting for the first records from the agent..."
    out = [Text(head, "bold")]
    if subscribed:
        missing = [e for e in TOP_EVENTS if e not in subscribed]
        lines = [f"subscribed to {len(subscribed)} of {len(TOP_EVENTS)} events: "
                 + ", ".join(subscribed)]
        if missing:
            lines.append("not registered (yet): " + ", ".join(missing)
                         + " (their samplers may be disabled or unavailable: key e, or"
                         " rezolus-ue events)")
        for text in lines:
            out += [Text(ln, "dim") for ln in textwrap.wrap(text, max(width, 20),
                                                            subsequent_indent="  ")]
    return out


def _body(v: View, ui: UiState, width: int, height: int) -> list[Text]:
    sort = SORTS[ui.sort]

    def right(w: int) -> list[_Block | None]:
        disks = _sorted(v.disks, _DISK_KEYS, sort["disk"], lambda r: r.device, ui)
        nets = _sorted(v.nets, _NET_KEYS, sort["net"], lambda r: r.interface, ui)
        cgroups = _sorted(v.cgroups, _CGROUP_KEYS, sort["cgroup"], lambda r: r.path, ui)
        return [_table_block("DISK", _DISK_COLS, disks, w, sort["disk"], 3),
                _table_block("NET", _NET_COLS, nets, w, sort["net"], 4),
                _table_block("CGROUP", _CGROUP_COLS, cgroups, w, sort["cgroup"], 5)]

    def left(w: int) -> list[_Block | None]:
        return [_cpu_block(v, w), _memory_block(v, w), _sched_block(v, w, ui)]

    if width >= WIDE:
        lw = (width - 3) // 2
        rw = width - 3 - lw
        rblocks = [_samplers_block(v, rw, 1), *right(rw)]
        if any(rblocks):
            lcol = _stack(left(lw), lw, height)
            rcol = _stack(rblocks, rw, height)
            out = []
            for i in range(max(len(lcol), len(rcol))):
                line = lcol[i].copy() if i < len(lcol) else Text()
                line.align("left", lw)
                line.append(" │ ", "dim")
                if i < len(rcol):
                    line.append_text(rcol[i])
                out.append(line)
            return out
    cpu, mem, sched = left(width)
    return _stack([cpu, mem, _samplers_block(v, width, 1), sched, *right(width)], width,
                  height)


# --- I/O: terminal, subscription, loop --------------------------------------------------

#: How long the data must be quiet before the agent's tick counts as complete.
SETTLE_MS = 100
#: Longest wait for records before looking at the keyboard again.
KEY_POLL_MS = 100


@contextlib.contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Put the terminal in cbreak mode (keys unbuffered, no echo; Ctrl-C still works);
    restore it on exit, whatever the exit."""
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def read_keys(fd: int, timeout_s: float = 0.0) -> list[str]:
    """Return the keys waiting on ``fd`` (waiting up to ``timeout_s`` for the first)."""
    ready, _, _ = select.select([fd], [], [], timeout_s)
    if not ready:
        return []
    try:
        data = os.read(fd, 256)
    except (BlockingIOError, InterruptedError):
        return []
    return split_keys(data.decode(errors="replace"))


class Paced:
    """A recording replayed at the pace it was recorded: data time follows wall time from
    the first record on, so ``top --from`` plays frames as the live top drew them."""

    live = False
    lost = 0

    def __init__(self, src: Any, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.src = src
        self.events = src.events
        self._buf: collections.deque = collections.deque()
        self._start: tuple[int, int] | None = None  # (wall, data) time of the first record
        self._clock = clock

    @property
    def exhausted(self) -> bool:
        """Return whether every record was replayed."""
        return self.src.exhausted and not self._buf

    def poll(self, timeout_ms: int, settle_ms: int = 0) -> list[Record]:
        """Return the records whose time has come, waiting up to ``timeout_ms``."""
        if not self._buf and not self.src.exhausted:
            self._buf.extend(self.src.poll(0))
        now = self._clock()
        if self._buf and self._start is None:
            self._start = (now, self._buf[0].time_ns)
        due = -1 if self._start is None else self._start[1] + now - self._start[0]
        out = []
        while self._buf and self._buf[0].time_ns <= due:
            out.append(self._buf.popleft())
        if not out:
            wait_ns = timeout_ms * 10**6
            if self._buf:
                wait_ns = min(wait_ns, self._buf[0].time_ns - due)
            time.sleep(max(0, wait_ns) / 1e9)
        return out

    def close(self) -> None:
        """Close the recording."""
        self.src.close()


def _subscribe(wait: bool) -> Any:
    """Return a Subscription to ``TOP_EVENTS``, or None while no agent has registered them."""
    from ..api import open_source

    try:
        return open_source(None, TOP_EVENTS, wait=False)
    except RezolusError as e:
        # Only "nothing registered yet" is worth waiting for; missing kernel features and
        # permissions are not going to fix themselves.
        if wait and type(e) is RezolusError:
            return None
        raise


def _complete(v: View) -> bool:
    """Return whether every row of the frame has rates (none first seen in it)."""
    return v.dt_s is not None and all(c.user is not None for c in v.cpus) and all(
        r.reads_s is not None for r in v.disks) and all(r.rx_bps is not None for r in v.nets)


def read_loadavg(path: str = "/proc/loadavg") -> tuple[float, float, float] | None:
    """Return the 1, 5 and 15 minute load averages, or None where they cannot be read.

    The one figure top reads itself: no event carries it, and top runs on the host it
    shows (a subscription reads this host's tracepoints only).
    """
    try:
        with open(path, "rb") as f:
            one, five, fifteen = f.read(64).split()[:3]
        return float(one), float(five), float(fifteen)
    except (OSError, ValueError):
        return None


def _run_once(model: Model, wait: bool, source: str | None = None) -> int:
    from rich.console import Console

    from ..api import open_source

    with open_source(source, TOP_EVENTS, wait=wait) as sub:
        model.subscribed = tuple(sub.events)
        # The second frame is the first with a full interval; a third if we started
        # mid-tick and some rows had no earlier record to take a rate from.
        while model.frames < 2 or (model.frames < 3 and not _complete(model.view)):
            if sub.exhausted:  # a recording too short for a full interval: what it has
                model.flush()
                break
            recs = sub.poll(SETTLE_MS)
            if recs:
                model.ingest(recs)
            else:
                model.flush()
            model.lost = sub.lost
    model.loadavg = read_loadavg() if source is None else None
    console = Console(highlight=False)
    width, height = console.size
    if not console.is_terminal:
        height = 10_000  # for scripts: every row, not a screenful
    console.print(render(model, width, height, UiState(interval_s=model.interval_ns / 1e9,
                                                       interactive=False)))
    return 0


def _run_live(model: Model, ui: UiState, wait: bool, source: str | None = None) -> int:
    from rich.console import Console
    from rich.live import Live

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise RezolusError("top needs a terminal; for a snapshot in scripts use --once")
    # With --no-wait, subscribe before the screen: its error prints as one plain line.
    # Else the loop subscribes after the first screen is drawn: opening a perf event per
    # event and CPU takes seconds on a slow machine, and the screen says what top awaits.
    if source is not None:
        from ..api import open_source

        sub = Paced(open_source(source, TOP_EVENTS))
    else:
        sub = None if wait else _subscribe(wait)
    console = Console(highlight=False)
    fd = sys.stdin.fileno()

    def on_term(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwind through the finally blocks: restore the terminal

    old_term = signal.signal(signal.SIGTERM, on_term)
    subs = [sub]  # the loop replaces it once the agent appears; closed here either way
    try:
        with cbreak(fd), Live(console=console, screen=True, auto_refresh=False) as live:
            _loop(subs, model, ui, live, console, fd, replay=source is not None)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if subs[0] is not None:
            subs[0].close()
    return 0


def _loop(subs: list, model: Model, ui: UiState, live: Any, console: Any, fd: int, *,
          replay: bool = False) -> None:
    """Poll records and keys; redraw when a frame is committed, a key changed the UI,
    the terminal was resized, or (only while no data comes) once a second to say so.
    ``replay``: a recording, whose host's load average is not this one's."""
    sub = subs[0]
    drawn: tuple = ()
    last_data = time.monotonic()
    retry = 0.0
    if sub is None:  # the first screen, before subscribing
        size = console.size
        live.update(render(model, size.width, size.height, ui), refresh=True)
    while True:
        now = time.monotonic()
        keys: list[str] = []
        if sub is None:
            if now >= retry:
                sub = subs[0] = _subscribe(True)
                retry = now + 1.0
                model.subscribed = ()
            keys = read_keys(fd, 0.0 if sub else KEY_POLL_MS / 1000)
        else:
            recs = sub.poll(SETTLE_MS if model.batch_open else KEY_POLL_MS)
            now = time.monotonic()
            if recs:
                model.ingest(recs)
                last_data = now
            elif model.batch_open and (now - last_data >= SETTLE_MS / 1000 or sub.exhausted):
                model.flush()
            if sub.exhausted:
                last_data = now  # the end of a recording: nothing is late
            model.lost = sub.lost
            model.subscribed = tuple(sub.events)
            keys = read_keys(fd)
        for k in keys:
            ui = handle_key(ui, k)
        if ui.quit:
            return
        model.interval_ns = int(ui.interval_s * 1e9)
        model.hold = ui.paused
        silent = now - last_data if sub is not None else 0.0
        stale = int(silent) if silent >= max(3 * ui.interval_s, 3.0) else 0
        size = console.size
        state = (model.frames, size, stale, ui, model.subscribed)
        if state != drawn:
            drawn = state
            model.loadavg = None if replay else read_loadavg()
            live.update(render(model, size.width, size.height, replace(ui, silent_s=silent)),
                        refresh=True)


def run(args: argparse.Namespace) -> int:
    """Run ``rezolus-ue top``; return the exit status."""
    if args.source is None:
        uname = os.uname()
        model = Model(args.interval, host=uname.nodename, kernel=uname.release)
    else:  # the recording's host, as far as it says
        from .recfile import read_meta

        model = Model(args.interval, host=str(read_meta(args.source).get("hostname", "")))
    if args.once:
        return _run_once(model, wait=not args.no_wait, source=args.source)
    return _run_live(model, UiState(interval_s=args.interval), wait=not args.no_wait,
                     source=args.source)


def _seconds(text: str) -> float:
    from ..config import parse_duration

    try:
        s = float(text)  # a bare number is seconds, as in top -d
    except ValueError:
        try:
            s = parse_duration(text) / 1e9
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    if not 0.1 <= s <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: expected 100ms to 1h")
    return s


_EPILOG = """\
keys: q quit, p pause, s cycle sort, / filter rows, +/- refresh interval,
      e every sampler's state and why, h help

examples:
  sudo rezolus-ue top                     watch (waits for the agent if it is not running)
  sudo rezolus-ue top --interval 2s       redraw every 2 s of data
  sudo rezolus-ue top --once > top.txt    one full frame, every row, for scripts
  rezolus-ue top --from run.rzr           replay a recording at the pace it was recorded

top subscribes only to the events its panels show, so the agent samples nothing else
for it:
""" + textwrap.fill(", ".join(TOP_EVENTS), 88, initial_indent="  ", subsequent_indent="  ")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``top`` subcommand."""
    p = sub.add_parser(
        "top", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="full-screen live view: CPU, memory, scheduler, disks, network, cgroups",
        description="A top-style view of the running agent's tracepoints: load and pressure\n"
        "stalls, per-CPU busy bars with the interval's peak, memory, scheduler activity\n"
        "and histograms, disk and network rates, the busiest cgroups, and the samplers\n"
        "that failed or cannot run, with why (key e lists every sampler). Redraws when\n"
        "an interval's records have arrived, not on a timer of its own.",
        epilog=_EPILOG,
    )
    p.add_argument("-i", "--interval", type=_seconds, default=1.0, metavar="DURATION",
                   help="display refresh: redraw once this much data time has passed"
                   " (default 1s; 2, 500ms, 5s; frames never come faster than the agent"
                   " publishes)")
    p.add_argument("--no-wait", action="store_true",
                   help="exit with a message if the agent is not running, instead of waiting")
    p.add_argument("--once", action="store_true",
                   help="print one frame to stdout after the first full interval and exit")
    p.add_argument("--from", dest="source", type=path_arg, metavar="FILE",
                   help="replay a recording (rezolus-ue record / dump output, a ring"
                   " directory or Parquet) instead of the live tracepoints")
    p.set_defaults(func=run)
