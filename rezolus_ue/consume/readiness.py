"""Why a live consumer has no records: one line from what the kernel and the agent say.

A consumer that waits in silence costs its user an hour. The subscription asks
``explain`` once a second while an event it wants sends nothing, and says the answer
when it changes: no agent (and, if its events are still defined, that they are a killed
agent's and how to remove them); the agent running but an event's sampler unavailable
(its reason, from the agent's status); an event held by ftrace, which on the uprobe
transport shuts perf readers out; subscribed but nothing published yet; the agent gone,
and back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..cli_base import PROG
from ..schema import GROUPS

#: How long subscribed events may send nothing before the consumer says why: a publish
#: interval, plus a sampler's start on its first consumer, plus slack for a loaded host.
QUIET_S = 5.0
START = f"sudo {PROG} run"
#: What removes the events an agent left defined, by transport: the uprobe transport's
#: definitions (a killed agent's), user_events registered with ``persist``.
REMOVE_STALE = {"uprobe": f"sudo {PROG} cleanup", "user_events": f"sudo {PROG} events --delete"}


@dataclass(frozen=True)
class AgentSeen:
    """The running agent: its pid, and its status (None while it starts: it holds the
    lock but has written no status yet)."""

    pid: int
    status: Mapping | None = None


def find_agent(runtime_dir: Path | None = None) -> AgentSeen | None:
    """Return the running agent, or None: from its status file if its pid is alive, else
    from the holder of its lock in /proc/locks (an agent that is still starting).
    ``runtime_dir``: the agent's (default ``agent.RUNTIME_DIR``, looked up at each call)."""
    from .. import agent

    runtime_dir = runtime_dir or agent.RUNTIME_DIR
    doc = agent.read_status(runtime_dir)
    if doc is not None:
        return AgentSeen(int(doc["pid"]), doc)
    # Not by taking the lock: an agent starting at that instant would find it held.
    try:
        st = (runtime_dir / "agent.lock").stat()
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    return lock_holder(locks, os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)


def lock_holder(proc_locks: str, major: int, minor: int, inode: int) -> AgentSeen | None:
    """Return the process holding a flock on that inode, from /proc/locks' text."""
    want = re.compile(rf"^\d+: FLOCK\s+\S+\s+WRITE\s+(\d+)\s+{major:02x}:{minor:02x}:{inode}\s",
                      re.M)
    m = want.search(proc_locks)
    return AgentSeen(int(m.group(1))) if m else None


def _samplers(status: Mapping | None) -> Iterator[tuple[str, type, Mapping]]:
    """Yield (name, class, status entry) of each sampler the agent's status names."""
    from ..samplers import REGISTRY

    for name, info in ((status or {}).get("samplers") or {}).items():
        cls = REGISTRY.get(name)
        if cls is not None:
            yield name, cls, info


def unfed(status: Mapping | None) -> dict[str, str]:
    """Return the events a degraded sampler registers but names unavailable in its reason
    ("rezolus_X unavailable: why"), with their ``_dist`` twins, each with why."""
    out: dict[str, str] = {}
    for name, cls, info in _samplers(status):
        named = dict(re.findall(r"\b(rezolus_\w+) unavailable: ([^;]*)",
                                str(info.get("reason") or "")))
        for fam in cls.families:
            if fam.schema.name in named:
                out.update((s.name, f"sampler {name}: {named[fam.schema.name]}")
                           for s in fam.schemas)
    return out


def unpublished(status: Mapping | None) -> dict[str, str]:
    """Return the events the running agent will not publish here, each with why: those
    of samplers that are unavailable, disabled or failing, and the ``unfed`` ones."""
    out = unfed(status)
    for name, cls, info in _samplers(status):
        reason = str(info.get("reason") or "")
        why = {"unavailable": f"sampler {name} is unavailable here: {reason}",
               "disabled": f"sampler {name} is disabled in the agent's config",
               "failed": f"sampler {name} is failing: {info.get('last_error') or reason}",
               }.get(str(info.get("status", "")))
        if why:
            out.update((s.name, why) for fam in cls.families for s in fam.schemas)
    return out


@dataclass
class Situation:
    """What one look at the kernel and the agent found, for ``explain``."""

    wanted: Sequence[str]
    agent: AgentSeen | None
    #: Our events the kernel has, by group (user_events, or the uprobe transport's).
    defined: Mapping[str, set[str]]
    subscribed: set[str]
    #: Events ftrace holds, so perf readers are refused: event -> where it is enabled.
    blocked: Mapping[str, str] = field(default_factory=dict)
    #: Seconds the subscribed events sent nothing (0 while records flow).
    quiet_s: float = 0.0
    #: The agent an earlier look saw, if it has gone since: it stopped (or was killed).
    stopped: AgentSeen | None = None
    #: The user named the events wanted: those that will not come are worth a word even
    #: while others do (of a default set, only when none comes).
    asked: bool = True


@dataclass(frozen=True)
class Verdict:
    """``ready``: some subscribed event can bring records. ``message``: what to tell the
    user (None: nothing to say)."""

    ready: bool
    message: str | None


def _names(events: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(events[:most])
    return shown + (f" and {len(events) - most} more" if len(events) > most else "")


def _stale(defined: Mapping[str, set[str]]) -> str:
    """Return what removes the events a killed agent left, by transport."""
    transport = {g: t for t, g in GROUPS.items()}
    parts = []
    for group, names in defined.items():
        if not names:
            continue
        how = REMOVE_STALE[transport[group]]
        parts.append(f"{len(names)} {group} events are still defined (an agent that was"
                     f" killed, or stopped while a consumer held them): `{how}` removes"
                     " them")
    return "; ".join(parts)


def _samplers_of(events: Sequence[str], status: Mapping) -> str:
    """Return what the agent's status says of the samplers that publish ``events``."""
    from ..schema import EVENTS

    names = dict.fromkeys(e.sampler for e in EVENTS if e.name in events)
    samplers = status.get("samplers") or {}
    out = []
    for n in names:
        info = samplers.get(n) or {}
        reason = info.get("last_error") or info.get("reason")
        out.append(f"{n} {info.get('status', 'unknown')}" + (f" ({reason})" if reason else ""))
    return ", ".join(out) or "nothing"


def explain(s: Situation) -> Verdict:
    """Return whether records can come, and what to tell the user about the wait."""
    if s.agent is None:
        if s.stopped is not None:
            return Verdict(False, f"the agent (pid {s.stopped.pid}) stopped: waiting for"
                           f" it to come back (start it with `{START}`)")
        stale = _stale(s.defined)
        if stale:
            return Verdict(False, f"no agent is running, but {stale}; then start it with"
                           f" `{START}`")
        return Verdict(False, f"no agent is running: start it with `{START}`")
    pid = s.agent.pid
    if s.agent.status is None:
        return Verdict(bool(s.subscribed), f"the agent (pid {pid}) is starting: its events"
                       " are not registered yet")
    gone = unpublished(s.agent.status)
    everything = {n for names in s.defined.values() for n in names}
    missing = [e for e in s.wanted if e not in s.subscribed]
    unavailable = [e for e in s.wanted if e in gone]
    blocked = [e for e in missing if e in s.blocked]
    pending = [e for e in missing if e not in gone and e not in s.blocked
               and e not in everything]
    live = [e for e in s.subscribed if e not in gone]
    notes: list[str] = []
    if unavailable and (s.asked or not live):
        reasons = "; ".join(dict.fromkeys(gone[e] for e in unavailable))
        notes.append(f"not published here: {_names(unavailable)} ({reasons})")
    for e in blocked:
        notes.append(f"{e} is enabled in ftrace ({s.blocked[e]}), which shuts perf readers"
                     " such as this one out on the uprobe transport: disable it there and"
                     " this consumer takes it within a second")
    if pending and not live:
        notes.append(f"the agent (pid {pid}) has not registered {_names(pending)} yet")
    if live and s.quiet_s >= QUIET_S:
        notes.append(f"subscribed to {len(live)} events but no record came for"
                     f" {s.quiet_s:.0f} s although the agent (pid {pid}) runs; its"
                     f" samplers say: {_samplers_of(live, s.agent.status)} (`{PROG}"
                     " events` shows more)")
    if not live and not notes:
        notes.append(f"the agent (pid {pid}) registers none of the events asked for")
    return Verdict(bool(live), "; ".join(notes) or None)


class Watch:
    """Looks at the agent and the kernel for a subscription and says what changed, once:
    ``on_state(message)``. ``see_agent`` first (the subscription subscribes only while an
    agent runs: holding a killed agent's events would keep ``cleanup`` from removing
    them), then ``judge`` what the subscription has."""

    def __init__(self, wanted: Sequence[str], on_state: Callable[[str], None],
                 runtime_dir: Path | None = None, asked: bool = True) -> None:
        self.wanted = list(wanted)
        self.asked = asked
        self.on_state = on_state
        self.runtime_dir = runtime_dir
        #: The agent now (None: none runs).
        self.agent: AgentSeen | None = None
        #: The agent last seen, kept while it is gone to say which one stopped.
        self.last: AgentSeen | None = None
        self.said: str | None = None
        self.verdict = Verdict(False, None)

    def see_agent(self) -> AgentSeen | None:
        """Look for the agent; say when it came back or was replaced."""
        before, last = self.agent, self.last
        agent = self.agent = find_agent(self.runtime_dir)
        if agent is not None:
            if last is not None and before is None:
                self.on_state(f"the agent is back (pid {agent.pid})")
            elif last is not None and agent.pid != last.pid:
                self.on_state(f"the agent restarted (pid {last.pid}, now {agent.pid})")
            self.last = agent
        return agent

    def judge(self, defined: Mapping[str, set[str]], subscribed: set[str],
              blocked: Mapping[str, str], quiet_s: float) -> Verdict:
        """Return the verdict on what the subscription has; say it if it changed."""
        self.verdict = v = explain(Situation(
            self.wanted, self.agent, defined, subscribed, blocked, quiet_s,
            self.last if self.agent is None else None, self.asked))
        if v.message != self.said:
            self.said = v.message
            if v.message:
                self.on_state(v.message)
        return v
