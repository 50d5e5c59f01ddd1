"""The PROCESS table: the busiest processes the agent publishes (its top_cpu, top_rss and
top_io lists), with CPU (100% = one CPU, user and system), resident memory, IO read and
write per second, threads, context switches per second, age and cgroup; above it a line
on every process: counts by state, threads, forks per second, load and the CPU of
processes that exited. Reads ``rezolus_process`` and ``rezolus_processes``.

A process is its pid and start time: a reused pid is another process, whose counters are
never differenced against the first's. Only the latest publish's processes are shown.
CPU and IO per second are the interval figures the agent ranks by, over its publish
period; the rest are rates over the time since the process's previous record, or, when
top has none (it has just joined the busiest), since its start, drawn dim: exact for a
process that started within the interval, its average over its life otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from ...samplers.processes import PROCESS, PROCESSES
from .frame import Frame, Model, Read, Series, View
from .keys import UiState
from .layout import Block, Panel
from .widgets import (
    Col,
    clean,
    desc,
    fmt_bytes,
    fmt_int,
    fmt_num,
    fmt_share,
    fmt_uptime,
    items,
    kv,
    rtrunc,
    sort_rows,
    table,
)


class ProcessRow:
    """One process over its latest publish; shares in CPUs (1.0 = one CPU), rates per
    second, None when unknown. Its record is kept and each figure made when read: a table
    of 2,000 processes shows a screenful, and sorting reads one figure of each."""

    __slots__ = ("_counts", "_dt", "_names", "_period", "_rates", "_steps", "_t", "_v")

    def __init__(self, s: Series, period_ns: int) -> None:
        self._v = s.values
        self._t = s.t_ns
        self._counts = s.counts
        self._names = s.names
        self._steps = s.steps
        self._dt = s.steps_dt
        self._period = period_ns
        self._rates: dict[str, float] | None = None

    @property
    def since_start(self) -> bool:
        """Return whether its rates are since its start: top has no earlier record of it
        (exact when it started within the interval)."""
        return self._steps is None

    @property
    def rates(self) -> dict[str, float] | None:
        """Return its counters' rates per second since its previous record, or since its
        start (``since_start``); None at its very start."""
        if self._rates is None:
            if self._steps is not None:
                k, steps = 1e9 / self._dt, self._steps
            elif self.age_ns > 0:
                k, steps = 1e9 / self.age_ns, self._counts
            else:
                return None
            self._rates = dict(zip(self._names, map(k.__mul__, steps), strict=True))
        return self._rates

    def _rate(self, name: str) -> float | None:
        rates = self.rates
        return None if rates is None else rates.get(name, 0.0)

    @property
    def pid(self) -> int:
        return self._v.get("pid", 0)  # type: ignore[return-value]

    @property
    def start_ns(self) -> int:
        return self._v.get("start_ns", 0)  # type: ignore[return-value]

    @property
    def comm(self) -> str:
        return str(self._v.get("comm", ""))

    @property
    def user(self) -> str:
        return str(self._v.get("user", ""))

    @property
    def cgroup(self) -> str:
        return str(self._v.get("cgroup", "")) or "/"

    @property
    def state(self) -> str:
        return str(self._v.get("state", ""))

    @property
    def cpu(self) -> float | None:
        """CPU time in the interval over the publish period."""
        p = self._period
        return self._v.get("cpu_interval_ns", 0) / p if p else None  # type: ignore[operator]

    @property
    def user_cpu(self) -> float | None:
        r = self._rate("cpu_user_ns")
        return None if r is None else r / 1e9

    @property
    def system_cpu(self) -> float | None:
        r = self._rate("cpu_system_ns")
        return None if r is None else r / 1e9

    @property
    def rss_bytes(self) -> int:
        return self._v.get("rss_bytes", 0)  # type: ignore[return-value]

    @property
    def io_bps(self) -> float | None:
        """Storage bytes read and written in the interval, per second."""
        p = self._period
        return self._v.get("io_interval_bytes", 0) * 1e9 / p if p else None  # type: ignore[operator]

    @property
    def read_bps(self) -> float | None:
        return self._rate("io_read_bytes")

    @property
    def write_bps(self) -> float | None:
        return self._rate("io_write_bytes")

    @property
    def threads(self) -> int:
        return self._v.get("threads", 0)  # type: ignore[return-value]

    @property
    def ctxsw_s(self) -> float | None:
        """Voluntary and involuntary context switches per second."""
        r = self.rates
        return None if r is None else r.get("ctx_voluntary", 0.0) + r.get(
            "ctx_involuntary", 0.0)

    @property
    def age_ns(self) -> int:
        return max(self._t - self.start_ns, 0)

    @property
    def age_s(self) -> float:
        return self.age_ns / 1e9


@dataclass(frozen=True, slots=True)
class Summary:
    """Every process, from the latest ``rezolus_processes`` record."""

    processes: int
    states: tuple[tuple[str, int], ...]  # (state letter, processes in it)
    threads: int
    forks_s: float | None
    load: tuple[float, float, float]
    exited_cpu: float | None  # CPUs used by processes that exited between two samples


@dataclass(frozen=True, slots=True)
class ProcessRows:
    rows: tuple[ProcessRow, ...]
    summary: Summary | None


_EMPTY = ProcessRows((), None)
#: The summary's count of each state, as ``ps`` letters them.
_STATES = (("R", "running"), ("S", "sleeping"), ("D", "blocked"), ("Z", "zombie"),
           ("T", "stopped"), ("I", "idle"))


def _summary(s: Series) -> Summary:
    exited = s.rate("exited_cpu_ns")
    return Summary(
        processes=s.int("processes"), states=tuple((k, s.int(n)) for k, n in _STATES),
        threads=s.int("threads"), forks_s=s.rate("forks"),
        load=(s.int("load_1m_milli") / 1e3, s.int("load_5m_milli") / 1e3,
              s.int("load_15m_milli") / 1e3),
        exited_cpu=exited / 1e9 if exited is not None else None)


def derive(f: Frame) -> ProcessRows:
    """Return the latest publish's processes and the summary."""
    period = f.periods.get(PROCESS.event, 0)
    procs = tuple(ProcessRow(s, period) for _id, s in f.of(PROCESS.event))
    summary = f.of(PROCESSES.event)
    if not procs and not summary:
        return _EMPTY
    return ProcessRows(procs, _summary(summary[0][1]) if summary else None)


def rows(v: View) -> ProcessRows:
    """Return the process rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, ProcessRows) else _EMPTY


def complete(v: View) -> bool:
    """Return whether every process has its CPU share (the publish period is known)."""
    return all(r.cpu is not None for r in rows(v).rows)


def label(r: ProcessRow) -> str:
    """Return what the filter (key /) matches: pid, user, command and cgroup."""
    return f"{r.pid} {r.user} {r.comm} {r.cgroup}"


#: Sort keys by column, in ``keys.SORT_MODES`` order.
SORTS: dict[str, Callable[[ProcessRow], object]] = {
    "cpu": lambda r: desc(r.cpu),
    "rss": lambda r: -r.rss_bytes,
    "io": lambda r: desc(r.io_bps),
    "pid": lambda r: r.pid,
}
_STATE_STYLE = {"R": "bold green", "D": "bold red", "Z": "yellow"}


def _since_start(r: ProcessRow) -> str:
    return "dim" if r.since_start else ""


COLS = (
    Col("PROCESS", 15, lambda r: r.comm, fit=lambda r, w: rtrunc(clean(r.comm), w)),
    Col("pid", 7, lambda r: str(r.pid), key="pid"),
    Col("user", 8, lambda r: r.user, drop=2, label=True,
        fit=lambda r, w: rtrunc(clean(r.user), w)),
    Col("S", 1, lambda r: r.state[:1], drop=1, style=lambda r: _STATE_STYLE.get(r.state, "")),
    Col("cpu%", 6, lambda r: fmt_share(r.cpu), key="cpu"),
    Col("usr%", 6, lambda r: fmt_share(r.user_cpu), drop=6, style=_since_start),
    Col("sys%", 6, lambda r: fmt_share(r.system_cpu), drop=6, style=_since_start),
    Col("rss", 5, lambda r: fmt_bytes(r.rss_bytes), key="rss"),
    Col("io/s", 6, lambda r: fmt_bytes(r.io_bps), key="io"),
    Col("rd/s", 6, lambda r: fmt_bytes(r.read_bps), drop=5, style=_since_start),
    Col("wr/s", 6, lambda r: fmt_bytes(r.write_bps), drop=5, style=_since_start),
    Col("thr", 4, lambda r: fmt_int(r.threads), drop=2),
    Col("cs/s", 5, lambda r: fmt_num(r.ctxsw_s), drop=3, style=_since_start),
    Col("age", 6, lambda r: fmt_uptime(r.age_s), drop=3),
    Col("cgroup", 12, lambda r: r.cgroup, drop=7, label=True, flex=True),
)


def _summary_line(s: Summary, width: int) -> Text:
    states = Text()
    for k, n in s.states:
        states.append(f" {k} ", "dim")
        states.append(fmt_int(n), _STATE_STYLE.get(k, "bold") if n else "bold")
    return items([
        (0, Text.assemble(("Procs ", "bold"), (fmt_int(s.processes), "bold"))),
        (1, Text.assemble(("state", "dim"), states)),
        (2, kv("threads", fmt_int(s.threads))),
        (2, kv("forks/s", fmt_num(s.forks_s))),
        (4, kv("load", " ".join(f"{x:.2f}" for x in s.load))),
        (3, kv("exited cpu", fmt_share(s.exited_cpu)))], width)


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the panel's block: the summary line, then the table."""
    r = rows(model.view)
    if not r.rows and r.summary is None:
        return None
    col = PANEL.sort(ui)
    shown = sort_rows(r.rows, SORTS[col], label, ui.filter)
    s = r.summary
    head = [_summary_line(s, width)] if s is not None else []
    total = s.processes if s is not None else None

    def draw(lines: int) -> list[Text]:
        room = lines - len(head)
        if room < 2 or not shown:
            return head[:lines]
        return head + table("PROCESS", COLS, shown, width, room, col, total)

    n = len(head)
    sizes = ((1,) if head else ()) + tuple(range(n + 2, n + len(shown) + 2))
    return Block(sizes or (1,), draw, prio=6)


NAME = "processes"
PANEL = Panel(
    NAME, (Read(PROCESS, identity=("pid", "start_ns"), latest=True), Read(PROCESSES)),
    derive, block, "wide",
    help=(("Procs", "every process: by state (R S D Z T I), threads, forks/s, load and the"
           " CPU of processes that exited"),
          ("PROCESS", "the busiest processes (the agent's top_cpu, top_rss and top_io):"
           " CPU (100% = one CPU), RSS, IO, context switches per second (dim: since the"
           " process started, top has no earlier record of it), age; +N: not shown")),
    sorts=tuple(SORTS), complete=complete)
