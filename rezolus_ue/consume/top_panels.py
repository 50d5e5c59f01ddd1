"""``rezolus-ue top``: the panels (CPU, memory, scheduler and histograms, tables, the
samplers) and how they share the screen's lines. Pure: each is drawn from one ``View``.

Every panel degrades to what fits: at 80x24 per-CPU bars become a one-character-per-CPU
heat strip, tables drop their least important columns and show as many rows as fit.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text

from ..metrics import catalog
from .top_keys import UiState
from .top_model import COSTLY_EVENTS
from .top_rows import CpuRow, HistRow, SamplerRow, View
from .top_widgets import (
    _LEVELS,
    _bar,
    _clean,
    _Col,
    _fit,
    _items,
    _kv,
    _level_style,
    _Line,
    _ltrunc,
    _matches,
    _spark,
    _table,
    fmt_bytes,
    fmt_int,
    fmt_num,
    fmt_pct,
    fmt_value,
)

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
            pieces = [(f"{cpu.cpu:>{label_w}}", "dim"), ("[", "")]
            _bar(pieces, bar_w, segs, cpu.peak)
            pieces += [("]", ""), (fmt_pct(cpu.busy).rjust(6),
                                   "bold" if (cpu.busy or 0) >= 0.9 else "")]
            if show_peak:
                peak = f"↑{cpu.peak * 100:.0f}%" if cpu.peak is not None else ""
                pieces.append((peak.rjust(6), "yellow"))
            line.extend(pieces)
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
            pieces = [("[", "")]
            _bar(pieces, bar_w, [(share, _level_style(share))])
            bar.extend(pieces)
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
        note = not ui.costly and lines > full
        room = lines - len(out) - note
        if room >= 2 and hists:
            out += _hist_table(hists, width, room)
        if note:
            out.append(_fit(Text(COSTLY_OFF, "yellow"), width))
        return out

    base = 1 if s is not None else 0
    sizes = (base, *(base + 1 + k for k in range(1, len(hists) + 1)))
    full = sizes[-1]
    if not ui.costly:  # the last line to grow: only once every histogram shows
        sizes = (*sizes, full + 1)
    return _Block(tuple(x for x in sizes if x > 0) or (1,), draw, prio=2)


#: Said under the scheduler panel while top does not subscribe to the costly events: what
#: is missing (the samplers of top's costly events, as `rezolus-ue events` names them)
#: and how to get it.
COSTLY_OFF = ("costly latency histograms off (key c, --costly): "
              + ", ".join(sorted({f.sampler for f in catalog.FAMILIES
                                  if f.event in COSTLY_EVENTS}))
              + "; their BPF programs run on every such kernel event")


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
