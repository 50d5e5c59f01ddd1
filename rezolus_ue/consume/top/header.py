"""The header: host and kernel, the agent (pid, uptime, CPU, RSS, errors), troubled
samplers, load averages, pressure stalls, records per second and lost, the refresh
interval, the sort mode and what is off or paused; in a replay, where it is. Reads
``rezolus_agent`` and ``rezolus_pressure``; the load averages come from the loop
(``Model.loadavg``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

from ...samplers.agent import AGENT
from ...samplers.memory import MEMORY_PRESSURE
from . import samplers
from .frame import Frame, Model, Read, Series, View
from .keys import UiState
from .layout import Block, Panel
from .widgets import fmt_bytes, fmt_int, fmt_interval, fmt_num, fmt_share, fmt_uptime, items, kv


@dataclass(frozen=True, slots=True)
class AgentRow:
    """The agent, from its latest ``rezolus_agent`` record."""

    pid: int
    uptime_s: float
    events_written: int
    rss_bytes: int
    cpu: float | None  # share of one CPU over the frame
    sampler_errors: int
    write_errors: int
    samplers_active: int
    samplers_unavailable: int


@dataclass(frozen=True, slots=True)
class PressureRow:
    """PSI of one resource: shares of time (0..1) some or all tasks stalled."""

    resource: str
    some: float | None
    full: float | None


@dataclass(frozen=True, slots=True)
class HeaderRows:
    agent: AgentRow | None
    pressure: tuple[PressureRow, ...]


#: PSI resources in the order the header shows them.
_RESOURCES = {("cpu",): 0, ("memory",): 1, ("io",): 2, ("irq",): 3}


def _agent(rows: list[tuple[tuple, Series]]) -> AgentRow | None:
    if not rows:
        return None
    s = max((s for _lb, s in rows), key=lambda s: s.t_ns)
    cpu = s.rate("cpu_user_ns", "cpu_system_ns")
    return AgentRow(
        pid=s.int("pid"), uptime_s=s.int("uptime_ns") / 1e9,
        events_written=s.int("events_written"), rss_bytes=s.int("rss_bytes"),
        cpu=cpu / 1e9 if cpu is not None else None,
        sampler_errors=s.int("sampler_errors"), write_errors=s.int("write_errors"),
        samplers_active=s.int("samplers_active"),
        samplers_unavailable=s.int("samplers_unavailable"))


def _pressure(labels: tuple, s: Series) -> PressureRow:
    """Return the frame's stall shares from the stall-time counters (us per second), or
    the kernel's 10 s averages until two records give a rate."""
    some, full = s.rate("some_stall_us"), s.rate("full_stall_us")
    if some is None:
        return PressureRow(str(labels[0]), s.int("some_avg10_ppm") / 1e6,
                           s.int("full_avg10_ppm") / 1e6)
    return PressureRow(str(labels[0]), min(some / 1e6, 1.0),
                       min(full / 1e6, 1.0) if full is not None else None)


def derive(f: Frame) -> HeaderRows:
    """Return the agent's row and the pressure of each resource."""
    return HeaderRows(_agent(f.of(AGENT.event)), tuple(
        _pressure(lb, s) for lb, s in sorted(f.of(MEMORY_PRESSURE.event),
                                             key=lambda x: _RESOURCES.get(x[0], 9))))


def rows(v: View) -> HeaderRows:
    """Return the header's rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, HeaderRows) else HeaderRows(None, ())


def _pct(share: float | None) -> str:
    """Return a share as a percentage without the sign, in at most 4 cells: 0, 1.2, 34."""
    if share is None:
        return "-"
    p = share * 100
    return "0" if p < 0.05 else f"{p:.1f}" if p < 9.95 else f"{p:.0f}"


def psi(rows: Sequence[PressureRow]) -> Text:
    """Return PSI as ``psi cpu 1.2/0% mem 0/0% io 3.4/1.0%`` (some/full stall shares)."""
    t = Text("psi", "dim")
    for r in rows:
        worst = max(r.some or 0.0, r.full or 0.0)
        style = "bold red" if worst >= 0.1 else "bold yellow" if worst >= 0.01 else "bold"
        t.append(f" {r.resource[:3]} ", "dim")
        t.append(f"{_pct(r.some)}/{_pct(r.full)}%", style)
    return t


def lines(model: Model, ui: UiState, width: int) -> list[Text]:
    """Return the header's two lines."""
    v = model.view
    h = rows(v)
    title = Text("rezolus-ue top", "bold reverse")
    l1: list[tuple[int, Text]] = [(0, title)]
    if model.host:
        l1.append((1, Text(model.host, "bold")))
    if model.kernel:
        l1.append((4, Text(model.kernel, "dim")))
    a = h.agent
    if a is None and not v.frame:
        waiting = ("subscribing..." if model.subscribed is None else
                   "waiting: why, below" if model.waiting else
                   "waiting for the agent (sudo rezolus-ue run)" if not model.subscribed
                   else "waiting for its first records")
        l1.append((0, Text(waiting, "bold yellow")))
    elif a is None:  # data, but the agent sampler is disabled or its event unsubscribed
        l1.append((0, Text("agent: no rezolus_agent records", "yellow")))
    if a is not None:
        l1 += [(0, kv("agent", str(a.pid))), (2, kv("up", fmt_uptime(a.uptime_s))),
               (3, kv("cpu", fmt_share(a.cpu))), (5, kv("rss", fmt_bytes(a.rss_bytes)))]
        # Always shown: "errors 0" is the answer an operator looks for, not a blank.
        errs = a.sampler_errors + a.write_errors
        l1.append((1, kv("errors", str(errs), "bold red" if errs else "bold")))
    bad = Text()
    states = [r.state for r in samplers.rows(v)]
    for state in samplers.TROUBLE:
        n = states.count(state)
        if n:
            bad.append(f"{n} {state} ", samplers.STATE_STYLE[state])
    if bad:
        l1.append((1, Text.assemble(("samplers ", "dim"), bad, ("(e)", "dim"))))
    l2: list[tuple[int, Text]] = []
    if model.loadavg is not None:
        l2.append((1, kv("load", " ".join(f"{x:.2f}" for x in model.loadavg))))
    if h.pressure:
        l2.append((2, psi(h.pressure)))
    l2 += [(0, kv("ev/s", fmt_num(v.events_per_s))),
           (0, kv("lost", str(model.lost), "bold red" if model.lost else "bold"))]
    if a is not None:
        l2.append((4, kv("written", fmt_int(a.events_written))))
    l2 += [(3, kv("every", fmt_interval(ui.interval_s))), (5, kv("sort", ui.mode.name))]
    if not ui.costly:
        l2.append((5, kv("costly", "off (c)", "bold yellow")))
    if ui.filter or ui.editing:
        l2.append((0, kv("filter", repr(ui.filter), "bold cyan")))
    if ui.position is not None:  # a replay: where it is, and its pause
        l1.append((0, Text(ui.position.text(), "bold reverse cyan" if ui.position.paused
                           else "bold cyan")))
    elif ui.paused:
        l2.append((0, Text("PAUSED", "bold reverse yellow")))
    if ui.silent_s >= max(3 * ui.interval_s, 3.0) and v.frame:
        l2.append((0, Text(f"no data for {ui.silent_s:.0f}s"
                           + (f": {model.waiting}" if model.waiting else ""), "bold red")))
    return [items(l1, width), items(l2, width)]


def block(model: Model, ui: UiState, width: int) -> Block:
    """Return the header's block: its two lines."""
    return Block((2,), lambda _n: lines(model, ui, width), prio=0)


NAME = "header"
PANEL = Panel(
    NAME, (Read(AGENT), Read(MEMORY_PRESSURE)), derive, block, "header",
    help=(("header", "load averages 1/5/15 min; psi: stalled share of time, some/full"
           " tasks"),))
