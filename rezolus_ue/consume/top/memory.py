"""The Mem panel: used (total minus available) with a bar, available, cache, buffers,
dirty, writeback, slab and swap, in one or two lines. Reads ``rezolus_memory``."""

from __future__ import annotations

from rich.text import Text

from ...samplers.memory import MEMORY
from .frame import Frame, Model, Read, View
from .keys import UiState
from .layout import Block, Panel
from .widgets import Line, bar, fit, fmt_bytes, fmt_pct, items, kv, level_style


def derive(f: Frame) -> dict[str, int] | None:
    """Return the latest record's byte counts by field."""
    series = f.of(MEMORY.event)
    if not series:
        return None
    return {k: v for k, v in series[0][1].values.items() if isinstance(v, int)}


def rows(v: View) -> dict[str, int] | None:
    """Return the memory figures of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, dict) else None


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the panel's block: one line, or two with a bar."""
    m = rows(model.view)
    if not m:
        return None
    total = m.get("total_bytes", 0)
    avail = m.get("available_bytes", 0)
    used = max(total - avail, 0)
    share = used / total if total else 0.0
    swap_used = m.get("swap_total_bytes", 0) - m.get("swap_free_bytes", 0)
    swap = kv("swap", f"{fmt_bytes(swap_used)}/{fmt_bytes(m.get('swap_total_bytes', 0))}")

    def draw(lines: int) -> list[Text]:
        head = Text.assemble(("Mem ", "bold"))
        used_t = Text.assemble((f"{fmt_bytes(used)}/{fmt_bytes(total)} ", "bold"),
                               (fmt_pct(share), level_style(share)))
        extra = [kv("avail", fmt_bytes(avail)), kv("cache", fmt_bytes(m.get(
            "cached_bytes", 0))), kv("buf", fmt_bytes(m.get("buffers_bytes", 0))),
            kv("dirty", fmt_bytes(m.get("dirty_bytes", 0))),
            kv("wback", fmt_bytes(m.get("writeback_bytes", 0))),
            kv("slab", fmt_bytes(m.get("slab_bytes", 0))), swap]
        if lines == 1:
            return [items([(0, head + used_t), (1, extra[0]), (2, extra[1]), (3, swap),
                           (4, extra[3]), (5, extra[5])], width)]
        bar_w = max(0, min(40, width - 40))
        l1 = Text.assemble(head)
        if bar_w >= 8:
            line = Line()
            pieces = [("[", "")]
            bar(pieces, bar_w, [(share, level_style(share))])
            line.extend(pieces)
            line.append("] ")
            l1.append_text(line.text())
        l1 = items([(0, l1 + used_t), (1, extra[0]), (2, extra[1])], width)
        l2 = items([(1, Text("   ")), (1, swap), (2, extra[3]), (3, extra[2]),
                    (4, extra[5]), (5, extra[4])], width)
        return [l1, fit(l2, width)]

    return Block((1, 2), draw, prio=1)


NAME = "memory"
PANEL = Panel(NAME, (Read(MEMORY),), derive, block, "left",
              help=(("Mem", "used = total - available"),))
