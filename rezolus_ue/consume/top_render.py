"""``rezolus-ue top``: one screen from the latest frame. Pure: ``render(model, width,
height, ui)`` returns a rich ``Text`` of exactly the screen's lines (header, panels or
the help or samplers screen, footer)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from rich.text import Text

from .top_keys import INTERVALS, SORTS, UiState
from .top_model import Model, top_events
from .top_panels import (
    _STATE_STYLE,
    _TROUBLE,
    _Block,
    _cpu_block,
    _memory_block,
    _samplers_block,
    _samplers_screen,
    _sched_block,
    _stack,
    _table_block,
)
from .top_rows import PressureRow, View
from .top_widgets import (
    _CGROUP_COLS,
    _CGROUP_KEYS,
    _DISK_COLS,
    _DISK_KEYS,
    _NET_COLS,
    _NET_KEYS,
    Screen,
    _cpu_share,
    _fit,
    _interval,
    _items,
    _kv,
    _sorted,
    beside,
    fmt_bytes,
    fmt_int,
    fmt_num,
    fmt_uptime,
)

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
                   "waiting: why, below" if model.waiting else
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
    if not ui.costly:
        l2.append((5, _kv("costly", "off (c)", "bold yellow")))
    if ui.filter or ui.editing:
        l2.append((0, _kv("filter", repr(ui.filter), "bold cyan")))
    if ui.paused:
        l2.append((0, Text("PAUSED", "bold reverse yellow")))
    if ui.silent_s >= max(3 * ui.interval_s, 3.0) and v.frame:
        l2.append((0, Text(f"no data for {ui.silent_s:.0f}s"
                           + (f": {model.waiting}" if model.waiting else ""), "bold red")))
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
         ("e", "samplers"), ("h", "help"), ("c", "costly"))


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
    ("c", "costly events on/off: the BPF-counted latency histograms, which every"
     " syscall, switch, IO or packet pays for while on (also --costly)"),
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
    return render_screen(model, width, height, ui).text()


def render_screen(model: Model, width: int, height: int, ui: UiState) -> Screen:
    """Return ``render``'s screen as its lines, which the live view draws directly."""
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
        body = _waiting(model, width, ui)
    else:
        body = _body(v, ui, width, room) or [
            Text("no panel data: the samplers top reads are idle, disabled or unavailable"
                 " (see `rezolus-ue events`)", "dim")]
    if ui.interactive:
        body += [Text()] * (room - len(body))
    return Screen([*head, *body[:room], *foot])


def _waiting(model: Model, width: int, ui: UiState) -> list[Text]:
    """Return the body before the first frame: what top waits for and subscribed to."""
    subscribed = model.subscribed
    wanted = top_events(ui.costly)
    if subscribed is None:
        head = f"subscribing to {len(wanted)} events..."
    elif model.waiting:
        head = f"waiting: {model.waiting}"
    elif not subscribed:
        head = ("waiting for the agent: none of top's events is registered (start it:"
                " sudo rezolus-ue run); top subscribes as soon as they are")
    else:
        head = "waiting for the first records from the agent..."
    out = [Text(ln, "bold") for ln in textwrap.wrap(head, max(width, 20),
                                                    subsequent_indent="  ")]
    if subscribed:
        missing = [e for e in wanted if e not in subscribed]
        lines = [f"subscribed to {len(subscribed)} of {len(wanted)} events: "
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
            return [beside(lcol[i] if i < len(lcol) else Text(), lw,
                           rcol[i] if i < len(rcol) else None)
                    for i in range(max(len(lcol), len(rcol)))]
    cpu, mem, sched = left(width)
    return _stack([cpu, mem, _samplers_block(v, width, 1), sched, *right(width)], width,
                  height)
