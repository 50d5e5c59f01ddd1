"""``rezolus-ue top``: number formats and the small rendering pieces (bars, sparklines, cut
lines, tables whose columns drop to fit, the screen's lines) that every panel draws with.
Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.cells import cell_len
from rich.console import COLOR_SYSTEMS, Console, ConsoleOptions
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text

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
    """Return bytes in binary units (K = 1024) in at most 5 characters: 512, 1.5K, 123M,
    9.5G. Every byte figure top shows goes through here: one style in every panel."""
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


def fmt_share(x: float | None) -> str:
    """Return a share of one CPU (1.0 = 100%) in at most 6 cells: 0.5%, 42.1%, 800%."""
    return "-" if x is None else f"{x * 100:.0f}%" if x * 100 >= 99.5 else f"{x * 100:.1f}%"


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
    """Return a histogram value in its unit: durations as 120us, 1.5ms, 2.0s; bytes as
    ``fmt_bytes``, the style of every panel's bytes; else a number and the unit."""
    if unit == "bytes":
        return fmt_bytes(v)
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}.get(unit)
    if scale is None:
        return fmt_num(v) + unit
    ns = v * scale
    for div, u in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if ns >= div:
            x = ns / div
            return f"{x:.1f}{u}" if x < 9.95 else f"{x:.0f}{u}"
    return f"{ns:.0f}ns"


def fmt_interval(s: float) -> str:
    """Return a display interval as 500ms or 2s."""
    return f"{s:g}s" if s >= 1 else f"{s * 1000:g}ms"


# --- small rendering helpers -----------------------------------------------------------

#: Eighths of a cell, for heat strips and sparklines.
LEVELS = " ▁▂▃▄▅▆▇█"


def level_style(share: float) -> str:
    """Return the colour of a busy share: green, yellow from 60%, red from 90%."""
    return "red" if share >= 0.9 else "yellow" if share >= 0.6 else "green"


def items(parts: Sequence[tuple[int, Text]], width: int, sep: str = "  ") -> Text:
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


def kv(label: str, value: str, style: str = "") -> Text:
    """Return ``label value``: the label dim, the value bold (or ``style``)."""
    return Text.assemble((label + " ", "dim"), (value, style or "bold"))


class Line:
    """A line built from (text, style) pieces and made into one ``Text`` at the end.

    ``Text.append`` sanitises every piece; on a screen of a few thousand pieces that is
    most of the cost of a frame, so the hot paths build spans directly. Pieces must be
    free of control characters (labels go through ``clean``).
    """

    __slots__ = ("_n", "_parts", "_spans")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._spans: list[Span] = []
        self._n = 0

    def append(self, s: str, style: str = "") -> None:
        """Append ``s`` in ``style``."""
        if s:
            if style:
                self._spans.append(Span(self._n, self._n + len(s), style))
            self._parts.append(s)
            self._n += len(s)

    def extend(self, pieces: Iterable[tuple[str, str]]) -> None:
        """Append ``(text, style)`` pieces: ``append`` without a call per piece (a row of
        CPU bars has a hundred)."""
        parts, spans, n = self._parts, self._spans, self._n
        for s, style in pieces:
            if s:
                if style:
                    spans.append(Span(n, n + len(s), style))
                parts.append(s)
                n += len(s)
        self._n = n

    @property
    def cell_len(self) -> int:
        """Return the line's width in cells."""
        return self._n  # every piece is single-width: ASCII, box and block characters

    def text(self) -> Text:
        """Return the line as one ``Text``."""
        return Text("".join(self._parts), spans=self._spans)


def clean(s: str) -> str:
    """Return a label with control characters replaced (it came from the kernel)."""
    return s if s.isprintable() else "".join(c if c.isprintable() else "?" for c in s)


def bar(out: list[tuple[str, str]], width: int, segments: Sequence[tuple[float, str]],
        peak: float | None = None, empty: str = " ") -> None:
    """Add to ``out`` the pieces of a bar of ``width`` cells filled by ``(share, style)``
    segments in order (for ``Line.extend``).

    ``peak`` (a share) marks the interval's maximum with ``|`` when it lies past the fill.
    """
    done = 0
    acc = 0.0
    for share, style in segments:
        acc += max(share, 0.0)
        end = min(width, round(acc * width))
        if end > done:
            out.append(("█" * (end - done), style))
            done = end
    if peak is not None and width > 0:
        at = min(width - 1, max(0, round(peak * width) - 1))
        if at >= done:
            out.append((empty * (at - done), "dim"))
            out.append(("|", "bold yellow"))
            done = at + 1
    out.append((empty * (width - done), "dim"))


def spark(counts: np.ndarray, width: int) -> Text:
    """Return the non-zero range of a bucket array as a bar chart ``width`` cells wide."""
    nz = np.flatnonzero(counts)
    if width <= 0 or not len(nz):
        return Text(" " * max(width, 0))
    seg = counts[nz[0] : nz[-1] + 1].astype(np.float64)
    cells_ = np.array([c.sum() for c in np.array_split(seg, min(width, len(seg)))])
    top = cells_.max() or 1.0
    chars = "".join(LEVELS[max(1, round(c / top * 8))] if c else " " for c in cells_)
    return Text(chars.ljust(width), "cyan")


#: A character other than ASCII and those top draws (bars, sparklines, rules, marks),
#: which are one cell each.
_WIDE = re.compile("[^\x00-\x7f█▁▂▃▄▅▆▇│↑▕▏…·▼]")


def cells(s: str) -> int:
    """Return how many terminal cells ``s`` takes.

    rich's ``cell_len`` measures a string with any block or box character one character
    at a time (36 us for a line of CPU bars, every line of every frame); a line of ASCII
    and top's own glyphs is measured at once. Labels from the kernel (a cgroup's name may
    hold wide characters) still go to rich.
    """
    return len(s) if s.isascii() or _WIDE.search(s) is None else cell_len(s)


def fit(t: Text, width: int) -> Text:
    """Return ``t`` cut to ``width`` cells (with an ellipsis), in place."""
    if cells(t.plain) > width:
        t.truncate(width, overflow="ellipsis")
    return t


def beside(left: Text, width: int, right: Text | None) -> Text:
    """Return one line of two columns: ``left`` (extended in place) padded to ``width``
    cells, a rule, then ``right``. As ``align`` and ``append_text`` make it, without
    measuring or sanitising the whole line again (rich's ``copy`` and ``pad_right`` do)."""
    left.append(" " * (width - cells(left.plain)))
    left.append(" │ ", "dim")
    if right is not None:
        left.append_text(right)
    return left


def ltrunc(s: str, width: int) -> str:
    """Return ``s`` cut from the left to ``width`` (a cgroup path's tail says the most)."""
    return s if len(s) <= width else "…" + s[len(s) - width + 1 :]


def rtrunc(s: str, width: int) -> str:
    """Return ``s`` cut from the right to ``width`` (a name's head says the most)."""
    return s if len(s) <= width else s[: max(width - 1, 0)] + "…"


# --- tables ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Col:
    """One column of a ``table``: its header, width and cell."""

    header: str
    width: int  # the minimum width of the flexing column
    cell: Callable[[Any], str]
    drop: int = 0  # 0: never dropped; when narrow, the highest number goes first (together)
    style: Callable[[Any], str] | None = None
    key: str = ""  # the sort column this is (marked with a triangle when sorted by)
    #: A label: left-aligned and cut to its width by ``fit`` (default: from the left).
    #: The first column always is one.
    label: bool = False
    #: The column that takes the width the others leave (default: the first).
    flex: bool = False
    fit: Callable[[Any, int], str] | None = None


def table(title: str, cols: Sequence[Col], rows: Sequence[object], width: int,
          lines: int, sort_col: str, total: int | None = None) -> list[Text]:
    """Return a header line and up to ``lines - 1`` rows; one column flexes.

    The first header names the table and how many of ``total`` rows (default: all of
    ``rows``) are not shown; the sorted column's header carries a triangle.
    """
    cols = list(cols)
    while sum(c.width + 1 for c in cols) - 1 > width:
        worst = max(c.drop for c in cols)
        if not worst:
            break
        cols = [c for c in cols if c.drop != worst]
    fi = next((i for i, c in enumerate(cols) if c.flex), 0)
    widths = [c.width for c in cols]
    widths[fi] = max(widths[fi], width - sum(w + 1 for w in widths) + 1 + widths[fi])
    shown = rows[: max(lines - 1, 0)]
    more = (len(rows) if total is None else max(total, len(shown))) - len(shown)
    head = Line()
    label = title + ("▼" if sort_col == "name" else "") + (f" +{more}" if more else "")
    head.append(label[: widths[0]].ljust(widths[0]), "bold")
    for c, w in zip(cols[1:], widths[1:], strict=True):
        sorted_here = bool(c.key) and c.key == sort_col
        name = c.header + ("▼" if sorted_here else "")
        head.append(" ")
        head.append(name.ljust(w) if c.label or c.flex else name.rjust(w),
                    "bold reverse" if sorted_here else "bold")
    out = [fit(head.text(), width)]
    plan = [(c, w, k == 0 or c.label or c.flex) for k, (c, w) in enumerate(zip(
        cols, widths, strict=True))]
    for r in shown:
        # Unstyled cells are one piece with the space before them: a cgroup table of 50
        # rows and 9 columns is most of a frame's pieces.
        pieces = []
        for c, w, is_label in plan:
            if is_label:
                text = (c.fit(r, w) if c.fit else ltrunc(clean(c.cell(r)), w)).ljust(w)
            else:
                text = c.cell(r).rjust(w)
            style = c.style(r) if c.style else ""
            if not pieces:
                pieces.append((text, style))
            elif style:
                pieces += [(" ", ""), (text, style)]
            else:
                pieces.append((" " + text, ""))
        line = Line()
        line.extend(pieces)
        out.append(fit(line.text(), width))
    return out


def matches(label: str, text: str) -> bool:
    """Return whether a row named ``label`` passes the filter ``text`` (key /)."""
    return not text or text.lower() in label.lower()


def desc(v: float | None) -> float:
    """Return a sort key putting the largest first and unknowns last."""
    return -(v if v is not None else -1.0)


def plus(a: float | None, b: float | None) -> float | None:
    """Return ``a + b``, unknown when ``a`` is."""
    return None if a is None else a + (b or 0.0)


def sort_rows(rows: Iterable, key: Callable, label: Callable, text: str) -> list:
    """Return the rows whose ``label`` passes the filter ``text``, sorted by ``key``."""
    if not text:
        return sorted(rows, key=key)
    return sorted((r for r in rows if matches(label(r), text)), key=key)


# --- drawing ---------------------------------------------------------------------------


class Screen:
    """A screen of lines, drawn as they are: no wrapping, no re-splitting.

    ``render`` joins the lines into one ``Text`` (what tests and ``--once`` print), but
    rich re-divides such a text into lines, resolves every span against a stack of styles
    and, in ``Live(screen=True)``, crops and pads every line twice: at 128 CPUs that was
    most of a frame. Here each line's spans (sorted, not overlapping, as ``Line`` and
    ``Text.assemble`` make them) become segments directly (any other line is left to
    rich), and ``ansi`` turns them into the terminal's output in one pass.
    """

    __slots__ = ("lines",)

    def __init__(self, lines: list[Text]) -> None:
        self.lines = lines

    def text(self) -> Text:
        """Return the screen as one ``Text`` of lines joined by newlines."""
        return Text("\n", no_wrap=True, overflow="crop").join(self.lines)

    def ansi(self, console: Console, width: int, height: int) -> str:
        """Return the terminal output that draws the screen from the top-left corner:
        each line cut to ``width`` cells and erased to its end, the rest erased below.
        Styles are written as rich writes them, in ``console``'s colour system."""
        system = COLOR_SYSTEMS.get(console.color_system or "")
        no_color = console.no_color
        out = ["\x1b[H"]
        for k, line in enumerate(self.lines[:height]):
            if k:
                out.append("\r\n")
            if cells(line.plain) > width:  # a wide character in a label: cut by cells
                line = line.copy()
                line.truncate(width, overflow="crop")
            for text, style, _control in segments(line, console):
                if style and system is not None:
                    out.append((style.without_color if no_color else style).render(
                        text, color_system=system))
                else:
                    out.append(text)
            out.append("\x1b[K")
        out.append("\x1b[J")
        return "".join(out)

    @property
    def plain(self) -> str:
        """Return the screen's characters, lines joined by newlines (as ``Text.plain``)."""
        return "\n".join(line.plain for line in self.lines)

    def __rich_console__(self, console: Console, _options: ConsoleOptions) -> Iterator[Segment]:
        newline = Segment.line()
        for k, line in enumerate(self.lines):
            if k:
                yield newline
            yield from segments(line, console)


def segments(line: Text, console: Console) -> Iterable[Segment]:
    """Return a line's segments, as ``Text.render`` makes them."""
    spans = line.spans
    text = line.plain
    if not spans and not line.style:
        return (Segment(text),)
    base = line.style
    style = _STYLES.get((base, ""))
    if style is None:
        style = _STYLES[base, ""] = console.get_style(base, default=Style.null())
    out = []
    at = 0
    for sp in spans:
        if sp.start < at or sp.end <= sp.start:  # overlapping or empty: rich's way
            return line.render(console)
        if sp.start > at:
            out.append(Segment(text[at : sp.start], style))
        st = _STYLES.get((base, sp.style))
        if st is None:
            st = _STYLES[base, sp.style] = Style.combine(
                (style, console.get_style(sp.style, default=Style.null())))
        out.append(Segment(text[sp.start : sp.end], st))
        at = sp.end
    if at < len(text):
        out.append(Segment(text[at:], style))
    return out


#: Resolved styles by (line style, span style) names: the few a screen uses.
_STYLES: dict[tuple[object, object], Style] = {}
