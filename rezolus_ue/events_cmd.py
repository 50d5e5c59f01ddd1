"""``rezolus-ue events``: our tracepoints as the kernel sees them, and how to watch each."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from tracefs_tools import Tracefs, TracefsError, TracefsPermissionError, find_tracefs

from .agent import RUNTIME_DIR, read_status
from .cli_base import PROG
from .errors import KernelFeatureMissing, RezolusError
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
        table.add_row(e.name, e.sampler, cost, *state.get(e.name, ("?", "?", "?")),
                      style="yellow" if cost == "costly" else None)
    return table


@dataclass(frozen=True)
class Seen:
    """What the kernel says of one of our events; None where it could not be read.

    ``counter`` (uprobe transport) is the reference counter the kernel keeps in the stub
    for the event's slot. It counts installations of the probe in a process, not readers:
    measured on Linux 6.18, one or two ``perf record -a``, ``perf -p`` of the process, our
    ``tail`` twice, and ftrace in one or three buffers all leave it at 1. So it says
    whether someone reads, never how many.
    """

    registered: bool | None
    #: The ftrace buffers with the event enabled (``Tracefs.enabled_in``).
    ftrace: tuple[str | None, ...] | None = ()
    counter: int | None = None
    #: user_events transport: the kernel's consumer kinds ("ftrace", "perf", "other").
    kinds: tuple[str, ...] | None = None


def ftrace_names(where: Sequence[str | None]) -> list[str]:
    """Return each ftrace buffer of ``where`` (None: the top-level one) as a consumer."""
    return ["ftrace" if w is None else f"ftrace (instance {w})" for w in where]


def event_state(seen: Seen, transport: str, stale: bool = False) -> tuple[str, str, str]:
    """Return the (registered, enabled, consumers) cells of one event: "?" where the
    kernel could not be asked, never a guessed "no"."""
    if seen.registered is None:
        return "?", "?", "?"
    if not seen.registered:
        return "no", "no", "-"
    registered = "stale" if stale else "yes"
    ftrace = None if seen.ftrace is None else ftrace_names(seen.ftrace)
    if transport == "uprobe":
        # One kind of reader at a time: ftrace, named by its enable files, or else
        # perf_event_open readers, seen only in the counter (ftrace raises it too).
        if ftrace:
            return registered, "yes", ", ".join(ftrace)
        if seen.counter is None:
            return registered, "?", "?"
        if seen.counter == 0:
            return registered, "no", "-"
        return registered, "yes", "perf" if ftrace is not None else "?"
    if seen.kinds is None:
        return registered, "yes" if ftrace else "?", "?"
    kinds = [k for k in seen.kinds if not (ftrace and k == "ftrace")]
    consumers = (ftrace or []) + kinds
    return registered, "yes" if consumers else "no", ", ".join(consumers) or "-"


def stale_note(transport: str, names: Sequence[str]) -> str:
    """Return what to say of ``names``, still defined (uprobe) or registered (user_events)
    with no agent running, and the command that removes them."""
    from .consume.readiness import REMOVE_STALE

    if transport == "uprobe":
        return (f"Stale: {len(names)} event(s) stay defined with no agent running (an agent"
                f" killed by SIGKILL cannot remove its own): `{REMOVE_STALE[transport]}`"
                " removes them")
    return (f"Stale: {len(names)} event(s) stay registered with no agent running"
            f" (persist = true keeps them): `{REMOVE_STALE[transport]}` removes them")


def ftrace_note(held: Mapping[str, Sequence[str | None]]) -> str:
    """Return which events ftrace holds (uprobe transport: ``held`` maps each to its
    buffers) and the perf-based readers that shuts out, or "" if it holds none."""
    by_buffer: dict[str, list[str]] = {}
    for event, where in held.items():
        for buffer in ftrace_names(where):
            by_buffer.setdefault(buffer, []).append(event)
    if not by_buffer:
        return ""
    holds = "; ".join(f"{b} holds {', '.join(ev)}" for b, ev in by_buffer.items())
    return (f"{holds}. Until ftrace disables them, perf and our consumers (top, tail, record,"
            " exporter, subscribe()) cannot read them: on the uprobe transport the kernel"
            " refuses a perf reader beside ftrace (EINTR).")


#: Printed under the table on the uprobe transport: what "perf" stands for.
UPROBE_NOTE = ("consumers: \"perf\" is any perf_event_open reader (perf, and our top, tail,"
               " record, exporter, subscribe()); the kernel's reference counter says whether"
               " one reads, not how many. On the uprobe transport an event is read by ftrace"
               " or by perf-based tools, not both at once (docs/kernels.md).")


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


def agent_transport(root: Path, agent: Mapping | None) -> str:
    """Return the transport of the running agent (``agent``: its status), else the one
    `run` would take with the default config; raise RezolusError if none can be told."""
    if agent and agent.get("transport") in GROUPS:
        return str(agent["transport"])
    from .config import load_or_default
    from .publisher import choose_transport
    from .samplers import options

    return choose_transport(root, str(load_or_default(None, options()).agent["transport"]))[0]


def transport_in_use(root: Path, agent: Mapping | None) -> tuple[str, str, bool]:
    """Return (transport, group, sure) of the running agent, else of the one `run` would
    take; not ``sure`` when tracefs could not be read to tell."""
    try:
        t = agent_transport(root, agent)
    except KernelFeatureMissing:  # none here: nothing of ours can be registered either
        return "user_events", GROUPS["user_events"], True
    except RezolusError:
        return "user_events", GROUPS["user_events"], False
    return t, GROUPS[t], True


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


class Unread:
    """What `events` could not read, each said once, for its one closing line."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.what: dict[str, None] = {}
        self.denied = False

    def add(self, err: Exception) -> None:
        """Note ``err``; a refused read is tracefs's, which sudo gets past."""
        if isinstance(err, TracefsPermissionError | PermissionError):
            self.denied = True
            self.what[f"{self.root} (permission denied)"] = None
        else:
            self.what[str(err)] = None

    def line(self) -> str:
        """Return the closing line: what was not read, and what to do."""
        fix = f": run `sudo {PROG} events`" if self.denied else ""
        return (f"could not read {'; '.join(self.what)}; ? marks what the table does not"
                f" know{fix}")


def _ftrace(tfs: Tracefs, group: str, name: str, unread: Unread
            ) -> tuple[str | None, ...] | None:
    try:
        return tuple(tfs.enabled_in(group, name))
    except TracefsError as e:
        unread.add(e)
        return None


def _uprobe_seen(tfs: Tracefs, group: str, agent_pid: int | None,
                 unread: Unread) -> dict[str, Seen]:
    """Return what the kernel says of each of our events on the uprobe transport: its
    definition, ftrace's enable files, and the reference counter of its stub slot, in
    this process's mapping of the stub and, if readable, in the agent's (a ``perf -p``
    of the agent raises only the agent's)."""
    from tracefs_tools import parse_uprobe_events

    from .linux.uprobe_stub import Stub
    from .publisher import slot_of

    path = tfs.path("uprobe_events")
    try:
        text = path.read_text()
    except FileNotFoundError:  # a kernel without uprobe events: nothing is defined
        return {e.name: Seen(False) for e in EVENTS}
    except OSError as e:
        unread.add(e)
        return {}
    defs = {d.event: d for d in parse_uprobe_events(text) if d.group == group}
    stub: Stub | None = None
    if any(e.name in defs for e in EVENTS):
        try:
            stub = Stub()
        except RezolusError as e:
            unread.add(e)
    seen = {}
    for e in EVENTS:
        d = defs.get(e.name)
        if d is None:
            seen[e.name] = Seen(False)
            continue
        counter = None
        if stub is not None:
            try:
                slot = slot_of(d, stub)
            except RezolusError as err:
                unread.add(err)
            else:
                theirs = stub.counter_in(agent_pid, slot) if agent_pid else None
                counter = max(stub.counter(slot).value, theirs or 0)
        seen[e.name] = Seen(True, _ftrace(tfs, group, e.name, unread), counter)
    return seen


def _user_events_seen(tfs: Tracefs, group: str, unread: Unread) -> dict[str, Seen]:
    """Return what the kernel says of each of our events on user_events: its registration
    and consumer kinds (``user_events_status``), and ftrace's enable files."""
    status = tfs.user_events_status()
    seen = {}
    for e in EVENTS:
        st = status.events.get(e.name)
        seen[e.name] = (Seen(True, _ftrace(tfs, group, e.name, unread), kinds=st.consumers)
                        if st is not None else Seen(False))
    return seen


def show_events(commands_only: bool = False) -> int:
    """Print the event table (or only the watch commands); return the exit status: 1 if
    something could not be read, so the table is not the whole truth."""
    # Piped output (grep, less) gets room for full event names.
    tty = sys.stdout.isatty()
    con = Console(highlight=False, width=None if tty else 120)
    try:
        root, missing = find_tracefs(mount=os.geteuid() == 0), None
    except TracefsError as e:
        root, missing = Path("/sys/kernel/tracing"), e
    unread = Unread(root)
    if missing is not None:
        unread.add(TracefsError(f"tracefs ({missing})"))
    tfs = Tracefs(root)
    agent = read_status()
    transport, group, sure = transport_in_use(root, agent)
    if commands_only:
        for e in EVENTS:
            for cmd in watch_commands(e, root, group):
                con.print(cmd, soft_wrap=True)
        return 0
    note = ""
    seen: dict[str, Seen] = {}
    if not unread.what:
        try:
            if transport == "uprobe":
                seen = _uprobe_seen(tfs, group, int(agent["pid"]) if agent else None, unread)
            elif not tfs.has_user_events:
                note = "this kernel has no user_events (run `rezolus-ue check`)"
                seen = {e.name: Seen(False) for e in EVENTS}
            else:
                seen = _user_events_seen(tfs, group, unread)
        except TracefsError as e:
            unread.add(e)
    ours = [n for n, s in seen.items() if s.registered]
    stale = agent is None and bool(ours)
    state = {n: event_state(s, transport, stale) for n, s in seen.items()}
    table = event_table(group, transport if sure else f"{transport}?", state)
    # ... and every cell whole, however long an ftrace instance's name.
    wide = con if tty else Console(highlight=False, width=max(
        con.width, Measurement.get(con, con.options.update_width(1000), table).maximum))
    wide.print(table)
    con.print(COST_NOTE)
    samplers = agent["samplers"] if agent else {}
    if samplers:
        con.print(sampler_table(agent))
        if any(bpf_state(n, i) != "-" for n, i in samplers.items()):
            con.print(BPF_NOTE)
    elif agent is None:
        con.print(f"No running agent ({RUNTIME_DIR}/status.json): nothing is sampled and no"
                  " BPF program of ours is attached.")
    if stale:
        con.print(stale_note(transport, ours), soft_wrap=True)
    if transport == "uprobe":
        con.print(UPROBE_NOTE)
        held = {n: s.ftrace for n, s in seen.items() if s.ftrace}
        if held:
            con.print(ftrace_note(held))
    if agent is not None and seen and not ours:
        con.print(f"No rezolus-ue event is {'defined' if transport == 'uprobe' else 'registered'}"
                  ": is the agent running? (`rezolus-ue run`)")
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
    if unread.what:
        print(f"{PROG}: error: {unread.line()}", file=sys.stderr)
        return RezolusError.exit_code
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
