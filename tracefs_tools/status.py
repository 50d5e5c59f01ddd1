"""Parse tracefs `user_events_status`.

What `user_seq_show()` in kernel/trace/trace_events_user.c prints, one line per registered
event, then a blank line and a summary:

    Linux 6.4+                         Linux 5.18 - 6.3
    ----------                         ----------------
    net_stats # Used by ftrace perf    1:net_stats # Used by ftrace perf
    cpu_stats                          2:cpu_stats # FLAG:BPF_ITER
                                       3:disk_stats
    Active: 2
    Busy: 1                            Active: 3
                                       Busy: 1
                                       Max: 4096

All consumers share one ` # Used by` suffix, in the order ftrace, perf, other; an event
with no consumer has no suffix. 6.4 dropped the `index:` prefix, `FLAG:` tokens and `Max:`.
Events registered with USER_EVENT_REG_MULTI_FORMAT (6.10+) show their tracepoint name,
`<name>.<hex id>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["UserEventStatus", "UserEventsStatus", "parse_user_events_status"]

_SUMMARY_RE = re.compile(r"^(Active|Busy|Max):\s*(\d+)$")
_OLD_INDEX_RE = re.compile(r"^\d+:")


@dataclass(frozen=True)
class UserEventStatus:
    """One registered user_event and the tracers that currently consume it."""

    name: str
    consumers: tuple[str, ...] = ()  # e.g. ("ftrace", "perf")

    @property
    def busy(self) -> bool:
        """Return True if any tracer has the event enabled."""
        return bool(self.consumers)


@dataclass(frozen=True)
class UserEventsStatus:
    """The parsed `user_events_status` file."""

    events: dict[str, UserEventStatus]
    active: int
    busy: int
    max: int | None = None  # printed by kernels before 6.4 only


def _parse_event_line(line: str) -> UserEventStatus:
    """Return the UserEventStatus of one event line."""
    name, _, comment = line.partition(" #")
    name = _OLD_INDEX_RE.sub("", name.strip(), count=1)
    consumers: list[str] = []
    words = comment.split()
    if "Used" in words:
        start = words.index("Used") + 2  # skip "Used by"
        consumers = [w for w in words[start:] if not w.startswith("FLAG:")]
    return UserEventStatus(name=name, consumers=tuple(consumers))


def parse_user_events_status(text: str) -> UserEventsStatus:
    """Return the UserEventsStatus described by the text of `user_events_status`."""
    events: dict[str, UserEventStatus] = {}
    summary: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _SUMMARY_RE.match(line.strip())
        if m:
            summary[m[1]] = int(m[2])
            continue
        event = _parse_event_line(line)
        events[event.name] = event
    # The summary is always printed; count ourselves only if it was cut off.
    return UserEventsStatus(
        events=events,
        active=summary.get("Active", len(events)),
        busy=summary.get("Busy", sum(e.busy for e in events.values())),
        max=summary.get("Max"),
    )
