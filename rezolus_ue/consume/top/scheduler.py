"""The Sched panel: context switches and forks per second, runnable and blocked tasks, and
a table of the frame's histograms (count, p50, p90, p99, max, buckets), run-queue latency
first, each row named by subsystem, metric and label. Reads ``rezolus_scheduler`` and
every histogram family of the catalog, so a new one shows without touching top; the
costly ones only while asked for (``--costly``, key c)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from rich.text import Text

from ...metrics import catalog, h2
from ...metrics.family import Cost, Family
from ...samplers.scheduler import SCHEDULER
from .frame import Frame, Model, Read, View
from .keys import UiState
from .layout import Block, Panel
from .widgets import (
    Col,
    clean,
    fit,
    fmt_int,
    fmt_num,
    fmt_value,
    items,
    kv,
    ltrunc,
    matches,
    spark,
    table,
)


@dataclass(frozen=True, slots=True)
class SchedRow:
    """System-wide scheduler activity."""

    ctxsw_s: float | None
    forks_s: float | None
    running: int
    blocked: int


@dataclass(frozen=True, slots=True)
class HistRow:
    """One histogram over the frame: its label set's buckets (H2) and percentiles."""

    event: str
    metric: str
    unit: str
    label: str
    counts: np.ndarray = field(repr=False)
    count: int
    p50: int
    p90: int
    p99: int
    max: int


@dataclass(frozen=True, slots=True)
class SchedRows:
    sched: SchedRow | None
    hists: tuple[HistRow, ...]


def _rank(f: Family) -> tuple:
    # Run-queue and syscall latency first (what the panel is for), other scheduler
    # histograms next, anything else after, the agent's own refresh cost last.
    e = f.event
    return (e.startswith("rezolus_agent"), "runqueue" not in e, "syscall" not in e,
            not e.startswith("rezolus_scheduler"), e)


#: Every histogram family of the catalog, in the panel's order.
HISTOGRAMS: tuple[Family, ...] = tuple(sorted(
    (f for f in catalog.FAMILIES if f.histogram is not None), key=_rank))
_ORDER = {f.event: i for i, f in enumerate(HISTOGRAMS)}
_METRIC = {f.event: f.histogram for f in HISTOGRAMS}
_EMPTY = SchedRows(None, ())

_QS = np.array([0.5, 0.9, 0.99, 1.0])


def percentiles(counts: np.ndarray, total: int) -> list[int]:
    """Return p50, p90, p99 and max as ``h2.percentiles`` does, in one vectorised step."""
    ranks = np.maximum(np.ceil(_QS * total), 1).astype(np.uint64)
    idx = np.searchsorted(np.cumsum(counts, dtype=np.uint64), ranks, side="left")
    return [int(v) for v in h2.UPPER[idx]]


def _hists(acc: dict[tuple, np.ndarray]) -> tuple[HistRow, ...]:
    out = []
    for (event, labels), counts in sorted(acc.items(),
                                          key=lambda kv: (_ORDER.get(kv[0][0], 99), kv[0])):
        n = int(counts.sum())
        m = _METRIC.get(event)
        if n == 0 or m is None:
            continue
        p50, p90, p99, mx = percentiles(counts, n)
        out.append(HistRow(event, m.name, m.unit, " ".join(str(v) for v in labels), counts,
                           n, p50, p90, p99, mx))
    return tuple(out)


def derive(f: Frame) -> SchedRows:
    """Return the scheduler's rates and each histogram's percentiles over the frame."""
    series = f.of(SCHEDULER.event)
    sched = None
    if series:
        s = series[0][1]
        sched = SchedRow(s.rate("context_switches"), s.rate("forks"), s.int("procs_running"),
                         s.int("procs_blocked"))
    hists = _hists(f.hists) if f.hists else ()
    return SchedRows(sched, hists) if sched or hists else _EMPTY


def rows(v: View) -> SchedRows:
    """Return the scheduler rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, SchedRows) else _EMPTY


@functools.lru_cache(maxsize=256)
def hist_subject(event: str, metric: str, unit: str) -> str:
    """Return what a histogram row measures: its event's words, then its metric's where the
    event does not say them, without the unit ("syscall latency", "agent sampler refresh")."""
    words = event.removeprefix("rezolus_").split("_")
    more = [w for w in metric.removesuffix(f"_{unit}").split("_") if w not in words]
    return " ".join(words + more)


def hist_name(h: HistRow) -> str:
    """Return a histogram row's full name: what it measures and its label (filters match
    it: "syscall" finds every syscall family)."""
    return f"{hist_subject(h.event, h.metric, h.unit)} {clean(h.label)}".rstrip()


#: Words a histogram row's name is shortened by, in this order, until it fits.
ABBREVIATIONS = (("sampler ", ""), ("scheduler", "sched"), ("runqueue", "runq"),
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
    for long, short in ABBREVIATIONS:
        if len(subject) + (need and need + 1) <= width:
            break
        subject = subject.replace(long, short)
    name = f"{subject} {label}".rstrip()
    if len(name) <= width:
        return name
    room = width - len(subject) - 1
    if label and room > 1:
        cut = ltrunc(label, room) if "/" in label else label[: room - 1] + "…"
        return f"{subject} {cut}"
    return name[: max(width - 1, 0)] + "…" if width > 0 else ""


def _fit_hists(hists: Sequence[HistRow]) -> Callable[[HistRow, int], str]:
    """Return the name fitter of a histogram table's rows: one subject per event."""
    longest: dict[str, int] = {}
    for h in hists:
        longest[h.event] = max(longest.get(h.event, 0), len(h.label))
    return lambda h, width: fit_hist_name(hist_subject(h.event, h.metric, h.unit),
                                          clean(h.label), width, longest[h.event])


#: Said under the panel while top does not subscribe to the costly events: what is missing
#: (the samplers of the costly histograms, as `rezolus-ue events` names them) and how to
#: get it.
COSTLY_OFF = ("costly latency histograms off (key c, --costly): "
              + ", ".join(sorted({f.sampler for f in HISTOGRAMS if f.cost is Cost.COSTLY}))
              + "; their BPF programs run on every such kernel event")


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the panel's block: the Sched line, then as many histograms as fit."""
    r = rows(model.view)
    hists = [h for h in r.hists if matches(hist_name(h), ui.filter)]
    if r.sched is None and not hists:
        return None
    # The model's order (scheduler latencies first), but the agent's own refresh costs
    # costliest first: with a dozen samplers only the top few fit.
    hists.sort(key=lambda h: (h.event.startswith("rezolus_agent"),
                              -h.p99 if h.event.startswith("rezolus_agent") else 0))
    s = r.sched

    def draw(lines: int) -> list[Text]:
        out = []
        if s is not None:
            out.append(items([
                (0, Text("Sched", "bold")), (0, kv("ctxsw/s", fmt_num(s.ctxsw_s))),
                (1, kv("runnable", str(s.running))), (2, kv("blocked", str(s.blocked))),
                (3, kv("forks/s", fmt_num(s.forks_s)))], width))
        note = not ui.costly and lines > full
        room = lines - len(out) - note
        if room >= 2 and hists:
            out += _table(hists, width, room)
        if note:
            out.append(fit(Text(COSTLY_OFF, "yellow"), width))
        return out

    base = 1 if s is not None else 0
    sizes = (base, *(base + 1 + k for k in range(1, len(hists) + 1)))
    full = sizes[-1]
    if not ui.costly:  # the last line to grow: only once every histogram shows
        sizes = (*sizes, full + 1)
    return Block(tuple(x for x in sizes if x > 0) or (1,), draw, prio=2)


def _table(hists: Sequence[HistRow], width: int, lines: int) -> list[Text]:
    spark_w = max(0, min(24, width - 58))
    cols = [
        Col("HISTOGRAM", 10, hist_name, fit=_fit_hists(hists[: max(lines - 1, 0)])),
        Col("n", 5, lambda h: fmt_int(h.count), drop=2),
        Col("p50", 6, lambda h: fmt_value(h.p50, h.unit), drop=3),
        Col("p90", 6, lambda h: fmt_value(h.p90, h.unit), drop=4),
        Col("p99", 6, lambda h: fmt_value(h.p99, h.unit)),
        Col("max", 6, lambda h: fmt_value(h.max, h.unit)),
    ]
    out = table("HISTOGRAM", cols, hists, width - (spark_w + 1 if spark_w >= 6 else 0),
                lines, "")
    if spark_w >= 6:
        out[0].append(" " + "buckets".ljust(spark_w), "bold")
        for line, h in zip(out[1:], hists, strict=False):
            line.append(" ")
            line.append_text(spark(h.counts, spark_w))
    return out


NAME = "scheduler"
PANEL = Panel(
    NAME, (Read(SCHEDULER), *(Read(f) for f in HISTOGRAMS)), derive, block, "left",
    help=(("Sched", "context switches, runnable and blocked tasks; histograms named"
           " subsystem, metric, label"),))
