"""The CPU panel: the busy share in total and split into user, system, irq, iowait and
steal, with a bar per CPU in which ``|`` marks the interval's peak; at 80x24 many CPUs
become a one-character-per-CPU heat strip. Reads ``rezolus_cpu_usage`` (time deltas) and
``rezolus_cpu_usage_dist`` (the interval's max busy_ppm, oversampled)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

from ...samplers.cpu_usage import CPU_USAGE
from .frame import Frame, Model, Read, Series, View
from .keys import UiState
from .layout import Block, Panel
from .widgets import LEVELS, Line, bar, fit, fmt_pct, items, kv, level_style


@dataclass(frozen=True, slots=True)
class CpuRow:
    """One CPU (or all of them) over the frame; shares are 0..1, None when unknown."""

    cpu: int  # -1 for the total
    busy: float | None
    user: float | None = None  # user + nice
    system: float | None = None  # system
    irq: float | None = None  # irq + softirq
    iowait: float | None = None
    steal: float | None = None
    peak: float | None = None  # the interval's max busy share (from the _dist event)


@dataclass(frozen=True, slots=True)
class CpuRows:
    total: CpuRow | None
    cpus: tuple[CpuRow, ...]


_STATES = ("user_ns", "nice_ns", "system_ns", "idle_ns", "iowait_ns", "irq_ns",
           "softirq_ns", "steal_ns")
_NO_TIME = (0.0,) * len(_STATES)
_EMPTY = CpuRows(None, ())


def _row(cpu: int, rates: dict[str, float] | None, busy_ppm: int | None,
         peak_ppm: int | None) -> CpuRow:
    peak = peak_ppm / 1e6 if peak_ppm is not None else None
    total = sum(map(rates.get, _STATES, _NO_TIME)) if rates else 0.0
    if not rates or total <= 0:
        # No time deltas yet (first frame): the agent's own busy share of its last period.
        busy = busy_ppm / 1e6 if busy_ppm is not None else None
        return CpuRow(cpu, busy, peak=peak)
    g = rates.get
    idle = g("idle_ns", 0.0) + g("iowait_ns", 0.0)
    return CpuRow(
        cpu, busy=(total - idle) / total,
        user=(g("user_ns", 0.0) + g("nice_ns", 0.0)) / total,
        system=g("system_ns", 0.0) / total,
        irq=(g("irq_ns", 0.0) + g("softirq_ns", 0.0)) / total,
        iowait=g("iowait_ns", 0.0) / total, steal=g("steal_ns", 0.0) / total, peak=peak)


def derive(f: Frame) -> CpuRows:
    """Return each CPU's shares from its time deltas, and the total's."""
    series: list[tuple[tuple, Series]] = f.of(CPU_USAGE.event)
    if not series:
        return _EMPTY
    cpus = []
    total: dict[str, float] = {}
    have_rates = True
    peaks = []
    busy_sum = 0.0
    dist_max = f.dist_max
    event = CPU_USAGE.event
    for labels, s in sorted(series, key=lambda x: x[0]):
        peak = dist_max.get((event, labels, "busy_ppm"))
        rates = s.rates
        row = _row(labels[0], rates, s.int("busy_ppm"), peak)
        cpus.append(row)
        if peak is not None:
            peaks.append(peak)
        if rates is None:
            have_rates = False
        else:
            get = rates.get
            for k in _STATES:
                total[k] = total.get(k, 0.0) + get(k, 0.0)
        busy_sum += row.busy or 0.0
    peak_all = max(peaks) if peaks else None
    if have_rates:
        tot = _row(-1, total, None, peak_all)
    else:
        tot = CpuRow(-1, busy_sum / len(cpus), peak=peak_all / 1e6 if peak_all else None)
    return CpuRows(tot, tuple(cpus))


def rows(v: View) -> CpuRows:
    """Return the CPU rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, CpuRows) else _EMPTY


def complete(v: View) -> bool:
    """Return whether every CPU has time deltas."""
    return all(c.user is not None for c in rows(v).cpus)


_CELL_MIN = 20  # narrowest per-CPU bar cell: "  0[██████    ] 42.1%"


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the panel's block: a summary line, then bars, or a heat strip when short."""
    r = rows(model.view)
    cpus = r.cpus
    if not cpus:
        return None
    n = len(cpus)
    strip = -(-n // max(1, width - 9))  # heat strip lines (9 columns of prefix)
    layouts = []  # (lines, columns) of bar layouts that fit the width, fewest lines first
    for cols in range(max(1, width // _CELL_MIN), 0, -1):
        layouts.append((1 + -(-n // cols), cols))
    sizes = tuple(sorted({1 + strip, *(h for h, _c in layouts if h > 1 + strip)}))

    def draw(lines: int) -> list[Text]:
        out = [_summary(r, width)]
        fits = [lc for lc in layouts if lc[0] <= lines]
        if fits:
            # The most lines that fit, in the fewest columns: the widest bars.
            _h, cols = max(fits, key=lambda lc: (lc[0], -lc[1]))
            out += _bars(cpus, width, cols)
        elif lines > 1:
            out += _strip(cpus, width)[: lines - 1]
        return out

    return Block(sizes, draw, prio=0)


def _summary(r: CpuRows, width: int) -> Text:
    t = r.total
    assert t is not None
    parts: list[tuple[int, Text]] = [
        (0, Text.assemble(("CPU ", "bold"), (fmt_pct(t.busy), "bold " + level_style(
            t.busy or 0)))),
    ]
    for prio, name, val in ((2, "usr", t.user), (3, "sys", t.system), (5, "irq", t.irq),
                            (4, "iowait", t.iowait), (6, "steal", t.steal)):
        if val is not None:
            parts.append((prio, kv(name, fmt_pct(val))))
    if t.peak is not None:
        hot = max(r.cpus, key=lambda c: c.peak or 0)
        parts.append((1, kv("max", f"{fmt_pct(t.peak)} cpu{hot.cpu}", "bold yellow")))
    parts.append((7, Text(f"{len(r.cpus)} cpus", "dim")))
    return items(parts, width)


def _bars(cpus: Sequence[CpuRow], width: int, cols: int) -> list[Text]:
    cell = width // cols
    nrows = -(-len(cpus) // cols)
    show_peak = cell >= 28
    label_w = max(3, len(str(cpus[-1].cpu)))
    tail = 6 + (6 if show_peak else 0)
    bar_w = max(1, cell - label_w - 2 - tail - 1)  # label, brackets, tail, gap
    out = []
    for r in range(nrows):
        line = Line()
        for c in range(cols):
            i = c * nrows + r  # column-major: CPUs read down, like htop
            if i >= len(cpus):
                break
            cpu = cpus[i]
            if cpu.user is not None:
                segs = [(cpu.user or 0, "green"), (cpu.system or 0, "red"),
                        (cpu.irq or 0, "magenta"), (cpu.steal or 0, "cyan")]
            else:
                segs = [(cpu.busy or 0, "green")]
            pieces = [(f"{cpu.cpu:>{label_w}}", "dim"), ("[", "")]
            bar(pieces, bar_w, segs, cpu.peak)
            pieces += [("]", ""), (fmt_pct(cpu.busy).rjust(6),
                                   "bold" if (cpu.busy or 0) >= 0.9 else "")]
            if show_peak:
                peak = f"↑{cpu.peak * 100:.0f}%" if cpu.peak is not None else ""
                pieces.append((peak.rjust(6), "yellow"))
            line.extend(pieces)
            if c < cols - 1:
                line.append(" " * (cell * (c + 1) - line.cell_len))
        out.append(fit(line.text(), width))
    return out


def _strip(cpus: Sequence[CpuRow], width: int) -> list[Text]:
    per = max(1, width - 9)
    out = []
    for start in range(0, len(cpus), per):
        chunk = cpus[start : start + per]
        line = Line()
        line.append(f"{chunk[0].cpu:>3}-{chunk[-1].cpu:<3} ▕", "dim")
        for c in chunk:
            b = c.busy or 0.0
            line.append(LEVELS[min(8, round(b * 8))] if b > 0 else "·",
                        level_style(b) if b > 0 else "dim")
        out.append(fit(line.text(), width))
    return out


NAME = "cpu"
PANEL = Panel(
    NAME, (Read(CPU_USAGE, dist=True),), derive, block, "left",
    help=(("CPU", "busy = not idle/iowait; bar: usr sys irq steal; | = interval max"),),
    complete=complete)
