"""``rezolus-ue events``: the tables built from the agent's status.json and from what the
kernel says of each event."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from rezolus_ue.errors import RezolusError
from rezolus_ue.events_cmd import (
    BPF_NOTE,
    COST_NOTE,
    Seen,
    Unread,
    bpf_state,
    bpf_why,
    event_state,
    event_table,
    ftrace_note,
    sampler_rows,
    sampler_table,
    stale_note,
)
from tracefs_tools import TracefsPermissionError

#: status.json of an agent with one procfs and one BPF sampler in every state they take.
STATUS = {
    "pid": 4242,
    "samplers": {
        "cpu_usage": {"status": "active", "reason": ""},
        "memory": {"status": "idle", "reason": ""},
        "blockio": {"status": "disabled", "reason": "disabled in config"},
        "scheduler_runqueue": {"status": "idle", "reason":
                               "detached: no consumer (collect on-demand; attaches as tp_btf)"},
        "network": {"status": "failed", "reason": "", "errors": 7,
                    "last_error": "ValueError: bad rtnetlink reply"},
        "tcp": {"status": "unavailable", "reason": "no BTF", "errors": 1, "last_error": "no BTF"},
        "cgroup": {"status": "active", "reason": "", "errors": 2,
                   "last_error": "OSError: [Errno 19] No such device"},
    },
}


def test_bpf_state_follows_the_samplers_detail() -> None:
    s = "scheduler_runqueue"
    assert bpf_state(s, {"status": "active",
                         "reason": "attached (tp_btf), collect on-demand"}) == "attached"
    assert bpf_state(s, {"status": "idle",
                         "reason": "attached (raw_tp), collect always"}) == "attached"
    assert bpf_state(s, STATUS["samplers"][s]) == "detached"
    assert bpf_state(s, {"status": "unavailable",
                         "reason": "BPF object x is not built"}) == "not loaded"
    assert bpf_state(s, {"status": "disabled", "reason": "disabled in config"}) == "not loaded"
    assert bpf_state("cpu_usage", {"status": "active", "reason": ""}) == "-"
    assert bpf_state("no_such_sampler", {"status": "idle"}) == "-"


def test_rows_say_why() -> None:
    rows = {r[0]: r[1:] for r in sampler_rows(STATUS["samplers"])}
    assert rows["cpu_usage"] == ("active", "0", "-", "a consumer is listening: sampling")
    assert rows["memory"] == ("idle", "0", "-", "no consumer: not sampling")
    assert rows["blockio"] == ("disabled", "0", "-", "disabled in config")
    assert rows["scheduler_runqueue"] == (
        "idle", "0", "detached", "no consumer (collect on-demand; attaches as tp_btf)")
    # A failed sampler's why is its latest error; an unavailable one's, its reason (once).
    assert rows["network"] == ("failed", "7", "-", "ValueError: bad rtnetlink reply")
    assert rows["tcp"] == ("unavailable", "1", "not loaded", "no BTF")
    # Recovered, but it had errors: the latest stays visible.
    assert rows["cgroup"] == ("active", "2", "-", "a consumer is listening: sampling (latest"
                              " error: OSError: [Errno 19] No such device)")


@pytest.mark.parametrize(("status", "reason", "why"), [
    ("active", "attached (tp_btf), collect on-demand",
     "a consumer is listening (attached as tp_btf, collect on-demand)"),
    ("idle", "attached (sched_switch=raw_tp, sched_wakeup=tp_btf), collect always",
     'collect = "always" (attached as sched_switch=raw_tp, sched_wakeup=tp_btf,'
     " collect always)"),
    ("idle", "attached (tp_btf), collect on-demand",
     "no consumer left: detaches at the next publish (attached as tp_btf, collect on-demand)"),
    ("idle", "detached: no consumer (collect on-demand; attaches as kprobe)",
     "no consumer (collect on-demand; attaches as kprobe)"),
    ("active", "something new", "something new"),
])
def test_bpf_why(status: str, reason: str, why: str) -> None:
    assert bpf_why(status, reason) == why


def test_table_renders_every_sampler() -> None:
    con = Console(width=140, color_system=None, record=True)
    con.print(sampler_table(STATUS))
    text = con.export_text()
    assert "samplers of the running agent (pid 4242)" in text
    assert "BPF programs" in text
    line = next(ln for ln in text.splitlines() if "scheduler_runqueue" in ln)
    assert "detached" in line and "no consumer" in line
    line = next(ln for ln in text.splitlines() if "network" in ln)
    assert re.search(r"network\s+│ failed\s+│\s+7 │.*ValueError: bad rtnetlink reply", line), line
    assert "on-demand" in BPF_NOTE


def test_event_table_shows_each_events_cost() -> None:
    con = Console(width=160, color_system=None, record=True)
    con.print(event_table("user_events", "user_events",
                          {"rezolus_cpu_usage": ("yes", "no", "-")}))
    lines = con.export_text().splitlines()
    assert re.search(r"event\s+┃ sampler\s+┃ cost\s+┃ registered", "\n".join(lines))

    def row(event: str) -> list[str]:
        line = next(ln for ln in lines if f" {event} " in ln)
        return [c.strip() for c in line.strip("│ ").split("│")]

    assert row("rezolus_cpu_usage") == ["rezolus_cpu_usage", "cpu_usage", "cheap", "yes",
                                        "no", "-"]
    assert row("rezolus_syscall_latency")[1:3] == ["syscall", "costly"]
    assert row("rezolus_syscall_latency")[3:] == ["?", "?", "?"]  # no state: unknown
    assert "--costly" in COST_NOTE and "docs/PERFORMANCE.md" in COST_NOTE


@pytest.mark.parametrize(("seen", "cells"), [
    # What the kernel says on the uprobe transport: definitions, ftrace's enable files
    # and the slot's reference counter (0 or 1: whether one reads, never how many).
    (Seen(None), ("?", "?", "?")),  # tracefs unreadable
    (Seen(False), ("no", "no", "-")),
    (Seen(True, (), 0), ("yes", "no", "-")),
    (Seen(True, (), 1), ("yes", "yes", "perf")),
    (Seen(True, ("mine",), 1), ("yes", "yes", "ftrace (instance mine)")),
    (Seen(True, (None, "a"), 1), ("yes", "yes", "ftrace, ftrace (instance a)")),
    (Seen(True, ("mine",), None), ("yes", "yes", "ftrace (instance mine)")),  # ftrace excludes perf
    (Seen(True, (), None), ("yes", "?", "?")),  # the stub unreadable: not a wrong "no"
    (Seen(True, None, 1), ("yes", "yes", "?")),  # perf or ftrace: cannot tell which
    (Seen(True, None, 0), ("yes", "no", "-")),  # ftrace would have raised the counter
])
def test_uprobe_event_state(seen: Seen, cells: tuple[str, str, str]) -> None:
    assert event_state(seen, "uprobe") == cells


@pytest.mark.parametrize(("seen", "cells"), [
    (Seen(True, (), kinds=()), ("yes", "no", "-")),
    (Seen(True, (), kinds=("perf",)), ("yes", "yes", "perf")),
    # user_events_status says "ftrace"; the enable files say which buffers.
    (Seen(True, ("mine",), kinds=("ftrace", "perf")),
     ("yes", "yes", "ftrace (instance mine), perf")),
    (Seen(True, (), kinds=("ftrace",)), ("yes", "yes", "ftrace")),
    (Seen(True, None, kinds=None), ("yes", "?", "?")),
])
def test_user_events_event_state(seen: Seen, cells: tuple[str, str, str]) -> None:
    assert event_state(seen, "user_events") == cells


def test_events_left_without_an_agent_are_stale() -> None:
    assert event_state(Seen(True, (), 1), "uprobe", stale=True) == ("stale", "yes", "perf")
    assert event_state(Seen(False), "uprobe", stale=True) == ("no", "no", "-")
    assert "`sudo rezolus-ue cleanup`" in stale_note("uprobe", ["rezolus_memory"])
    assert "`sudo rezolus-ue events --delete`" in stale_note("user_events", ["rezolus_memory"])


def test_ftrace_note_names_what_it_shuts_out() -> None:
    assert ftrace_note({}) == ""
    note = ftrace_note({"rezolus_memory": ("mine",), "rezolus_cpu_usage": (None,)})
    assert note.startswith("ftrace (instance mine) holds rezolus_memory; ftrace holds"
                           " rezolus_cpu_usage. "), note
    assert "perf and our consumers (top, tail, record, exporter, subscribe())" in note
    assert "EINTR" in note


def test_event_table_shows_stale_and_unknown() -> None:
    con = Console(width=160, color_system=None, record=True)
    con.print(event_table("rezolus_ue", "uprobe", {
        "rezolus_memory": event_state(Seen(True, ("mine",), 1), "uprobe", stale=True)}))
    text = con.export_text()
    assert re.search(r"rezolus_memory\s+│ memory\s+│ cheap\s+│ stale\s+│ yes\s+│ ftrace"
                     r" \(instance mine\)", text), text
    assert re.search(r"rezolus_cpu_usage .*│ \?\s+│ \?\s+│ \?", text), text


def test_what_could_not_be_read_is_one_line_saying_what_to_do() -> None:
    unread = Unread(Path("/sys/kernel/tracing"))
    unread.add(PermissionError(13, "Permission denied"))
    unread.add(TracefsPermissionError("/sys/kernel/tracing/events/x/enable: Permission denied"))
    assert unread.line() == ("could not read /sys/kernel/tracing (permission denied); ? marks"
                             " what the table does not know: run `sudo rezolus-ue events`")
    other = Unread(Path("/t"))
    other.add(RezolusError("the uprobe stub is missing: install it with `x`"))
    assert other.line() == ("could not read the uprobe stub is missing: install it with `x`;"
                            " ? marks what the table does not know")
