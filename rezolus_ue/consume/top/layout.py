"""``rezolus-ue top``: what a panel is (``Panel``) and how the panels share the screen's
lines (``Block``, ``stack``, ``body``). Pure.

A panel draws itself as a ``Block``: the heights at which it is useful and a function that
draws it at one of them. The layout gives every block its minimum, then grows them one
step at a time in priority order, dropping the least important when even the minimums do
not fit. From ``WIDE`` columns the left and right panels sit side by side, and the wide
ones (the process table) span the screen below them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.text import Text

from .frame import Feed, Frame, Model, Read, View
from .keys import SORT_MODES, UiState
from .widgets import Col, beside, fit, table

#: Width from which panels sit in two columns.
WIDE = 120

#: Where a panel goes: the header's lines, the left or right column (one column when
#: narrow, in the registry's order), or across the screen below both.
Place = Literal["header", "left", "right", "wide"]


@dataclass
class Block:
    """A panel as the layout sees it."""

    sizes: tuple[int, ...]  # useful heights, ascending; sizes[0] is the minimum
    draw: Callable[[int], list[Text]]
    prio: int  # higher numbers are dropped first when even the minimums do not fit


@dataclass(frozen=True)
class Panel:
    """One panel: the events it reads, its rows, and how it draws them."""

    name: str
    reads: tuple[Read, ...]
    #: Its rows from a committed frame (``View.rows[name]``).
    derive: Callable[[Frame], object]
    #: Its block on a screen ``width`` cells wide, or None when it has nothing to show.
    block: Callable[[Model, UiState, int], Block | None]
    place: Place
    #: The help screen's lines: (what the screen calls it, what it shows).
    help: tuple[tuple[str, str], ...] = ()
    #: A table's sort column for each of ``keys.SORT_MODES``.
    sorts: tuple[str, ...] = ()
    #: Whether its rows of ``view`` have every rate (``--once`` waits for a frame that has).
    complete: Callable[[View], bool] | None = None
    #: Applications' events it reads (``frame.Feed``), beside ``reads``.
    feeds: tuple[Feed, ...] = ()

    def __post_init__(self) -> None:
        if self.sorts and len(self.sorts) != len(SORT_MODES):
            raise ValueError(f"panel {self.name}: one sort column per sort mode")

    def sort(self, ui: UiState) -> str:
        """Return the column its table is sorted by."""
        return self.sorts[ui.sort]


def table_block(title: str, cols: Sequence[Col], rows: list, width: int, sort_col: str,
                prio: int, total: int | None = None) -> Block | None:
    """Return a table's block: a header and as many rows as fit (None without rows)."""
    if not rows:
        return None

    def draw(lines: int) -> list[Text]:
        return table(title, cols, rows, width, lines, sort_col, total)

    return Block(tuple(range(2, len(rows) + 2)), draw, prio)


def allocate(blocks: Sequence[Block], height: int) -> list[int]:
    """Return each block's height (0: dropped): minimums first, then one step per round."""
    alive = list(range(len(blocks)))
    while alive and sum(blocks[i].sizes[0] for i in alive) > height:
        alive.remove(max(alive, key=lambda i: blocks[i].prio))
    alloc = [blocks[i].sizes[0] if i in alive else 0 for i in range(len(blocks))]
    free = height - sum(alloc)
    grew = True
    order = sorted(alive, key=lambda i: blocks[i].prio)
    while grew and free > 0:
        grew = False
        for i in order:
            nxt = next((s for s in blocks[i].sizes if s > alloc[i]), None)
            if nxt is not None and nxt - alloc[i] <= free:
                free -= nxt - alloc[i]
                alloc[i] = nxt
                grew = True
    return alloc


def stack(blocks: Sequence[Block | None], width: int, height: int) -> list[Text]:
    """Return the blocks drawn one below the other in ``height`` lines at most."""
    present = [b for b in blocks if b is not None]
    alloc = allocate(present, height)
    out: list[Text] = []
    for b, n in zip(present, alloc, strict=True):
        if n:
            out += b.draw(n)[:n]
    return [fit(t, width) for t in out[:height]]


def _columns(left: Sequence[Block | None], right: Sequence[Block | None], lw: int, rw: int,
             height: int) -> Block:
    """Return the two columns as one block: any height from what their minimums need up
    to what their fullest sizes do (at most ``height``)."""
    def need(blocks: Sequence[Block | None], k: int) -> int:
        return sum(b.sizes[k] for b in blocks if b is not None)

    low = min(max(need(left, 0), need(right, 0)), height)
    high = min(max(need(left, -1), need(right, -1)), height)

    def draw(lines: int) -> list[Text]:
        lcol = stack(left, lw, lines)
        rcol = stack(right, rw, lines)
        return [beside(lcol[i] if i < len(lcol) else Text(), lw,
                       rcol[i] if i < len(rcol) else None)
                for i in range(max(len(lcol), len(rcol)))]

    return Block(tuple(range(max(low, 1), max(high, low, 1) + 1)), draw, prio=0)


def body(panels: Sequence[Panel], model: Model, ui: UiState, width: int, height: int
         ) -> list[Text]:
    """Return the body panels' lines: in one column in order, or from ``WIDE`` cells the
    left and right ones side by side and the wide ones across the screen below them."""
    if width >= WIDE:
        lw = (width - 3) // 2
        rw = width - 3 - lw
        right = [p.block(model, ui, rw) for p in panels if p.place == "right"]
        if any(right):
            left = [p.block(model, ui, lw) for p in panels if p.place == "left"]
            columns = _columns(left, right, lw, rw, height)
            wide = [p.block(model, ui, width) for p in panels if p.place == "wide"]
            if not any(wide):  # the columns' lines fit as they are drawn
                return columns.draw(columns.sizes[-1])
            return stack([columns, *wide], width, height)
    return stack([p.block(model, ui, width) for p in panels if p.place != "header"], width,
                 height)
