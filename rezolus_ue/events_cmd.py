"""``rezolus-ue events``: our tracepoints as the kernel sees them, and how to watch each."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tracefs_tools import Tracefs, TracefsError, UserEventsStatus, find_tracefs

from .schema import EVENTS, EventSchema

GROUP = "user_events"


def watch_commands(event: EventSchema, tracefs: Path) -> tuple[str, str]:
    """Return the perf and the ftrace command that show ``event``'s records."""
    perf = f"perf record -e {GROUP}:{event.name} -a -- sleep 5 && perf script"
    ev = tracefs / "events" / GROUP / event.name / "enable"
    ftrace = f"echo 1 > {ev} && cat {tracefs}/trace_pipe"
    return perf, ftrace


def show_events(commands_only: bool = False) -> int:
    """Print the event table (or only the watch commands); return the exit status."""
    # Piped output (grep, less) gets room for full event names.
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    try:
        root = find_tracefs(mount=os.geteuid() == 0)
    except TracefsError as e:
        root, note = Path("/sys/kernel/tracing"), f"tracefs: {e}"
    else:
        note = ""
    tfs = Tracefs(root)
    status: UserEventsStatus | None = None
    if not note:
        if not tfs.has_user_events:
            note = "this kernel has no user_events (run `rezolus-ue check`)"
        else:
            try:
                status = tfs.user_events_status()
            except TracefsError as e:
                note = str(e)
    if commands_only:
        for e in EVENTS:
            for cmd in watch_commands(e, root):
                con.print(cmd, soft_wrap=True)
        return 0
    from .agent import read_status

    agent = read_status()
    samplers = agent["samplers"] if agent else {}
    table = Table(title="rezolus-ue events (tracepoints user_events:<name>)", title_justify="left")
    table.add_column("event", no_wrap=True)
    for col in ("sampler", "registered", "enabled", "consumers"):
        table.add_column(col)
    for e in EVENTS:
        st = status.events.get(e.name) if status else None
        enabled = "?"
        if st is not None:
            try:
                enabled = "yes" if tfs.is_enabled(GROUP, e.name) else "no"
            except TracefsError:
                enabled = "?"
        table.add_row(
            e.name, e.sampler,
            "yes" if st else ("no" if status else "?"),
            enabled,
            ", ".join(st.consumers) if st and st.consumers else "-",
        )
    con.print(table)
    if samplers:
        st = Table(title=f"samplers of the running agent (pid {agent['pid']})",
                   title_justify="left")
        for col in ("sampler", "status", "detail"):
            st.add_column(col)
        for name, info in samplers.items():
            why = {"idle": "no consumer: not sampling", "active": "sampling"}.get(
                info["status"], "")
            st.add_row(name, info["status"], info.get("reason") or why)
        con.print(st)
    if status is not None and not any(e.name in status.events for e in EVENTS):
        con.print("No rezolus-ue event is registered: is the agent running? (`rezolus-ue run`)")
    if note:
        con.print(f"note: {note}")
    perf, ftrace = watch_commands(EVENTS[0], root)
    con.print("\nwatch every event: perf record -e 'user_events:rezolus_*' -a -- sleep 5"
              " && perf script", soft_wrap=True)
    con.print(f"watch one event:   {perf}", soft_wrap=True)
    con.print(f"with ftrace:       {ftrace}", soft_wrap=True)
    con.print("every event's commands: rezolus-ue events --commands", soft_wrap=True)
    con.print("field reference: docs/events.md, or the event's format file:"
              f" {root}/events/{GROUP}/<name>/format", soft_wrap=True)
    return 0
