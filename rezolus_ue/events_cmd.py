"""``rezolus-ue events``: our tracepoints as the kernel sees them, and how to watch each."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tracefs_tools import Tracefs, TracefsError, UserEventsStatus, find_tracefs

from .agent import RUNTIME_DIR, read_status
from .cli_base import PROG
from .errors import RezolusError
from .samplers import REGISTRY
from .samplers.bpf_sampler import BpfSampler
from .schema import COST, EVENTS, GROUPS, EventSchema

#: Why a sampler that is not a BPF sampler is in each status (when it gave no reason).
_WHY = {"idle": "no consumer: not sampling", "active": "a consumer is listening: sampling"}

#: Printed under the sampler table when it lists a BPF sampler.
BPF_NOTE = ("BPF programs are loaded and attached only while a consumer has one of the"
            " sampler's events enabled (collect = \"on-demand\"), and detached and unloaded"
            " within one publish interval after the last consumer leaves; while attached,"
            " `bpftool prog show` lists them.")


#: Printed under the event table: what the cost column means and what consumers do.
COST_NOTE = ("cost: cheap events are read on the agent's clock (procfs, sysfs, netlink, perf"
             " counters); costly ones are counted by BPF programs that every syscall,"
             " context switch, softirq, IO or packet pays for while a consumer has them"
             " enabled (measured: docs/PERFORMANCE.md). top, tail, record and exporter"
             " subscribe to cheap events only unless given --costly (or, for tail and"
             " record, the events' names).")


def event_table(group: str, transport: str,
                state: Mapping[str, tuple[str, str, str]]) -> Table:
    """Return the event table: each event's sampler and cost, and from ``state`` whether
    it is registered and enabled and by which consumers ("?" for an event it lacks)."""
    table = Table(title=f"rezolus-ue events (tracepoints {group}:<name>, transport"
                  f" {transport})", title_justify="left")
    table.add_column("event", no_wrap=True)
    for col in ("sampler", "cost", "registered", "enabled", "consumers"):
        table.add_column(col)
    for e in EVENTS:
        cost = COST[e.name].value
        table.add_row(e.name, e.sampler, cost, *state.get(e.name, ("?", "?", "-")),
                      style="yellow" if cost == "costly" else None)
    return table


def watch_commands(event: EventSchema, tracefs: Path, group: str = GROUPS["user_events"]
                   ) -> tuple[str, str, str]:
    """Return the perf, the ftrace and the trace-cmd command that show ``event``'s records
    in tracepoint group ``group`` (the transport's)."""
    perf = f"perf record -e {group}:{event.name} -a -- sleep 5 && perf script"
    # An instance of our own: the global buffer is everyone else's tracing too.
    inst = tracefs / "instances" / "rezolus"
    ftrace = (f"mkdir -p {inst} && echo 1 > {inst}/events/{group}/{event.name}/enable"
              f" && cat {inst}/trace_pipe")
    trace_cmd = f"trace-cmd record -e {group}:{event.name} sleep 5 && trace-cmd report"
    return perf, ftrace, trace_cmd


def transport_in_use(root: Path, agent: Mapping | None) -> tuple[str, str]:
    """Return (transport, group) of the running agent, else the one `run` would take."""
    if agent and agent.get("transport") in GROUPS:
        t = str(agent["transport"])
        return t, GROUPS[t]
    from .config import load_or_default
    from .publisher import choose_transport
    from .samplers import options
    try:
        t = choose_transport(root, str(load_or_default(None, options()).agent["transport"]))[0]
    except RezolusError:
        t = "user_events"
    return t, GROUPS[t]


def bpf_state(name: str, info: Mapping[str, object]) -> str:
    """Return what a sampler's BPF programs are doing: "attached", "detached" or
    "not loaded"; "-" for a sampler without BPF.

    A running BPF sampler's reason is its ``BpfSampler.detail``, which starts with the state.
    """
    cls = REGISTRY.get(name)
    if cls is None or not issubclass(cls, BpfSampler):
        return "-"
    if info.get("status") in ("unavailable", "disabled"):
        return "not loaded"
    reason = str(info.get("reason") or "")
    for state in ("attached", "detached"):
        if reason.startswith(state):
            return state
    return "?"


def bpf_why(status: str, reason: str) -> str:
    """Return why a BPF sampler's programs are attached or not, from its detail (e.g.
    "attached (tp_btf), collect on-demand"), which says how but not why."""
    m = re.fullmatch(r"attached \((.*)\), collect (\S+)", reason)
    if m is None:
        return reason.removeprefix("detached: ")
    kinds, mode = m.groups()
    cause = ("a consumer is listening" if status == "active" else
             'collect = "always"' if mode == "always" else
             "no consumer left: detaches at the next publish")
    return f"{cause} (attached as {kinds}, collect {mode})"


def sampler_rows(samplers: Mapping[str, Mapping[str, object]]
                 ) -> list[tuple[str, str, str, str, str]]:
    """Return (sampler, status, errors, BPF programs, why) for each sampler in the agent's
    status: a failed sampler's why is its latest error; another's latest error, if it had
    one, follows its why."""
    rows = []
    for name, info in samplers.items():
        status, reason = str(info.get("status", "?")), str(info.get("reason") or "")
        errors, last = info.get("errors", 0), str(info.get("last_error") or "")
        bpf = bpf_state(name, info)
        if status == "failed":
            why = last or "failed"
        elif bpf in ("attached", "detached"):
            why = bpf_why(status, reason)
        else:
            why = reason or _WHY.get(status, "")
        if last and last not in why:
            why += f" (latest error: {last})"
        rows.append((name, status, str(errors), bpf, why))
    return rows


_STYLE = {"failed": "bold red", "unavailable": "yellow"}


def sampler_table(agent: Mapping) -> Table:
    """Return the table of the running agent's samplers (``agent``: its status.json)."""
    table = Table(title=f"samplers of the running agent (pid {agent['pid']})",
                  title_justify="left")
    for col in ("sampler", "status", "errors", "BPF programs", "why"):
        table.add_column(col, no_wrap=col != "why", justify="right" if col == "errors"
                         else "left")
    for row in sampler_rows(agent["samplers"]):
        table.add_row(*row, style=_STYLE.get(row[1]))
    return table


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
    agent = read_status()
    transport, group = transport_in_use(root, agent)
    status: UserEventsStatus | None = None
    defined: set[str] | None = None
    if not note:
        if transport == "uprobe":
            try:
                defined = set(tfs.events(group))
            except TracefsError:
                defined = set()
        elif not tfs.has_user_events:
            note = "this kernel has no user_events (run `rezolus-ue check`)"
        else:
            try:
                status = tfs.user_events_status()
            except TracefsError as e:
                note = str(e)
    if commands_only:
        for e in EVENTS:
            for cmd in watch_commands(e, root, group):
                con.print(cmd, soft_wrap=True)
        return 0
    samplers = agent["samplers"] if agent else {}
    state: dict[str, tuple[str, str, str]] = {}
    for e in EVENTS:
        st = status.events.get(e.name) if status else None
        there = (e.name in defined) if defined is not None else st is not None
        known = status is not None or defined is not None
        enabled = "?"
        if there:
            try:
                enabled = "yes" if tfs.is_enabled(group, e.name) else "no"
            except TracefsError:
                enabled = "?"
        state[e.name] = ("yes" if there else ("no" if known else "?"), enabled,
                         ", ".join(st.consumers) if st and st.consumers else "-")
    con.print(event_table(group, transport, state))
    con.print(COST_NOTE)
    if samplers:
        con.print(sampler_table(agent))
        if any(bpf_state(n, i) != "-" for n, i in samplers.items()):
            con.print(BPF_NOTE)
    elif agent is None:
        con.print(f"No running agent ({RUNTIME_DIR}/status.json): nothing is sampled and no"
                  " BPF program of ours is attached.")
    if transport == "uprobe":
        con.print("enabled: in ftrace. perf and our consumers (top, tail, record, exporter)"
                  " do not show there; on the uprobe transport an event is read by ftrace"
                  " or by perf-based tools, not both at once (docs/kernels.md).")
    if defined is not None and not defined & {e.name for e in EVENTS}:
        con.print("No rezolus-ue event is defined: is the agent running? (`rezolus-ue run`)")
    if status is not None and not any(e.name in status.events for e in EVENTS):
        con.print("No rezolus-ue event is registered: is the agent running? (`rezolus-ue run`)")
    if note:
        con.print(f"note: {note}")
    perf, ftrace, trace_cmd = watch_commands(EVENTS[0], root, group)
    con.print(f"\nwatch every event: perf record -e '{group}:rezolus_*' -a -- sleep 5"
              " && perf script", soft_wrap=True)
    con.print(f"watch one event:   {perf}", soft_wrap=True)
    con.print(f"with ftrace:       {ftrace}", soft_wrap=True)
    con.print(f"with trace-cmd:    {trace_cmd}", soft_wrap=True)
    con.print("every event's commands: rezolus-ue events --commands", soft_wrap=True)
    con.print("field reference: docs/events.md, or the event's format file:"
              f" {root}/events/{group}/<name>/format", soft_wrap=True)
    return 0


def delete_events(names: list[str]) -> int:
    """Delete our events the kernel keeps without a registrant (``persist = true`` keeps
    them after the agent exits); return the exit status: 1 if one is still in use.

    By name through ``DIAG_IOCSDEL``: writing ``!u:NAME`` to ``dynamic_events`` does not
    match an event that has fields (Linux 6.12 wants the whole field list too).
    """
    from .linux.user_events import delete_event

    con = Console(highlight=False, stderr=True)
    root = find_tracefs(mount=os.geteuid() == 0)
    tfs = Tracefs(root)
    if not tfs.has_user_events:
        raise RezolusError(f"this kernel has no user_events, so --delete has nothing to"
                           f" delete; the uprobe transport's events are removed by"
                           f" `{PROG} cleanup` (an agent that stops removes its own)")
    status = tfs.user_events_status()
    ours = sorted(n for n in status.events if n.startswith("rezolus_"))
    if names:
        unknown = [n for n in names if n not in status.events]
        if unknown:
            raise RezolusError(f"no such event registered: {', '.join(unknown)}"
                               " (registered: `rezolus-ue events`)")
        ours = names
    deleted, busy = [], []
    for name in ours:
        try:
            delete_event(root, name)
            deleted.append(name)
        except RezolusError as e:
            busy.append(f"{name} ({str(e).split(': ', 1)[-1]})")
    con.print(f"deleted {len(deleted)} event(s){': ' if deleted else ''}{', '.join(deleted)}",
              soft_wrap=True)
    if busy:
        con.print(f"not deleted: {', '.join(busy)}; stop the agent and the consumers that"
                  " use them (see `rezolus-ue events`), then run this again", soft_wrap=True)
        return 1
    return 0


def cleanup(dry_run: bool = False) -> int:
    """Delete the uprobe events an earlier agent left on this installation's stub; return
    the exit status: 1 if a consumer still holds one, 2 while an agent runs."""
    from tracefs_tools import UprobeEvents

    from .linux.uprobe_stub import stub_path
    from .publisher import UPROBE_GROUP, owned_uprobes, remove_owned

    con = Console(highlight=False, stderr=True)
    agent = read_status()
    if agent is not None:
        raise RezolusError(f"an agent is running (pid {agent['pid']}): its events are not"
                           " stale; stop it first (it removes its own events)")
    root = find_tracefs(mount=os.geteuid() == 0)
    if not (root / "uprobe_events").exists():
        con.print("this kernel has no uprobe events: nothing to clean up")
        return 0
    stub = stub_path().resolve()
    try:
        events = UprobeEvents(root)
    except TracefsError as e:
        raise RezolusError(str(e)) from None
    with events:
        if dry_run:
            names = [d.event for d in owned_uprobes(events, stub)]
            con.print(f"would delete {len(names)} {UPROBE_GROUP} event(s) on {stub}"
                      f"{': ' if names else ''}{', '.join(names)}", soft_wrap=True)
            return 0
        deleted, busy = remove_owned(events, stub)
    con.print(f"deleted {len(deleted)} {UPROBE_GROUP} event(s) on {stub}", soft_wrap=True)
    if busy:
        con.print(f"kept {len(busy)}, enabled by a consumer: "
                  f"{', '.join(d.event for d in busy)}; stop that consumer (perf, ftrace,"
                  " trace-cmd), then run this again", soft_wrap=True)
        return 1
    return 0
