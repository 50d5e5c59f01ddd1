"""What a live consumer says while it waits, decided from what the kernel and the agent
say (``consume.readiness``): each case in-process, from given facts. The same cases
against a real agent and kernel are tests/kernel/test_consumer_waits.py."""

from __future__ import annotations

import os
from pathlib import Path

from rezolus_ue.consume.readiness import (
    AgentSeen,
    Situation,
    Watch,
    explain,
    find_agent,
    lock_holder,
    unpublished,
)
from rezolus_ue.schema import GROUPS

UPROBE, UE = GROUPS["uprobe"], GROUPS["user_events"]
CPU = "rezolus_cpu_usage"
HW = "rezolus_perf_hardware"
SCHED = "rezolus_scheduler_cpu"


def status(**samplers: dict) -> dict:
    return {"pid": 42, "transport": "uprobe", "samplers": samplers}


RUNNING = AgentSeen(42, status(
    cpu_usage={"status": "active", "reason": ""},
    perf_hardware={"status": "unavailable", "reason": "no PMU exposed by this CPU/VM"},
    scheduler={"status": "idle", "reason": "rezolus_scheduler_cpu unavailable: no"
               " /proc/schedstat (kernel built without CONFIG_SCHEDSTATS)"}))


def situation(wanted, agent=RUNNING, defined=None, subscribed=(), **kw) -> Situation:
    return Situation(list(wanted), agent, defined or {UPROBE: set(), UE: set()},
                     set(subscribed), **kw)


def test_no_agent_and_nothing_defined_says_how_to_start_it() -> None:
    v = explain(situation([CPU], agent=None))
    assert not v.ready
    assert v.message == "no agent is running: start it with `sudo rezolus-ue run`"


def test_a_killed_agents_events_are_named_stale_with_the_command_that_removes_them() -> None:
    v = explain(situation([CPU], agent=None, defined={UPROBE: {CPU, HW}, UE: set()}))
    assert not v.ready
    assert "no agent is running, but 2 rezolus_ue events are still defined" in v.message
    assert "`sudo rezolus-ue cleanup` removes them" in v.message
    assert v.message.endswith("then start it with `sudo rezolus-ue run`")
    v = explain(situation([CPU], agent=None, defined={UPROBE: set(), UE: {CPU}}))
    assert "`sudo rezolus-ue events --delete`" in v.message


def test_an_agent_that_went_away_is_named() -> None:
    v = explain(situation([CPU], agent=None, subscribed=[CPU], stopped=AgentSeen(7)))
    assert not v.ready
    assert v.message.startswith("the agent (pid 7) stopped: waiting for it to come back")


def test_a_starting_agent_is_waited_for() -> None:
    v = explain(situation([CPU], agent=AgentSeen(9)))
    assert not v.ready and "the agent (pid 9) is starting" in v.message


def test_an_unavailable_sampler_gives_its_reason() -> None:
    v = explain(situation([HW], defined={UPROBE: {CPU}, UE: set()}))
    assert not v.ready
    assert v.message.startswith(f"not published here: {HW} (sampler"
                                " perf_hardware is unavailable here: no PMU")


def test_an_event_a_degraded_sampler_cannot_feed_is_named_though_registered() -> None:
    v = explain(situation([SCHED], defined={UPROBE: {SCHED}, UE: set()}, subscribed=[SCHED]))
    assert not v.ready
    assert "not published here: rezolus_scheduler_cpu" in v.message
    assert "(sampler scheduler: no /proc/schedstat" in v.message


def test_some_events_coming_is_ready_and_still_says_what_will_not() -> None:
    v = explain(situation([CPU, HW], defined={UPROBE: {CPU}, UE: set()}, subscribed=[CPU]))
    assert v.ready and v.message.startswith("not published here: rezolus_perf_hardware")
    assert explain(situation([CPU], subscribed=[CPU])) == explain(
        situation([CPU], subscribed=[CPU], quiet_s=1.0))
    assert explain(situation([CPU], subscribed=[CPU])).message is None


def test_an_event_held_by_ftrace_names_where() -> None:
    where = "/sys/kernel/tracing/instances/mine/events/rezolus_ue/rezolus_cpu_usage/enable"
    v = explain(situation([CPU], defined={UPROBE: {CPU}, UE: set()}, blocked={CPU: where}))
    assert not v.ready
    assert v.message.startswith(f"{CPU} is enabled in ftrace ({where}), which shuts perf")


def test_silence_while_subscribed_is_explained_after_a_while() -> None:
    v = explain(situation([CPU], subscribed=[CPU], quiet_s=6.0))
    assert v.ready and "no record came for 6 s although the agent (pid 42) runs" in v.message
    assert "its samplers say: cpu_usage active" in v.message


def test_an_event_not_yet_registered_by_a_running_agent() -> None:
    v = explain(situation([CPU]))
    assert not v.ready
    assert v.message == f"the agent (pid 42) has not registered {CPU} yet"


def test_unpublished_takes_dist_twins_and_failing_samplers() -> None:
    got = unpublished(RUNNING.status)
    assert {HW, f"{HW}_dist", SCHED} <= set(got)
    assert CPU not in got
    failing = unpublished(status(cpu_usage={"status": "failed", "last_error": "EIO"}))
    assert failing[CPU] == "sampler cpu_usage is failing: EIO"
    assert unpublished(None) == {}


def test_lock_holder_reads_proc_locks() -> None:
    text = ("1: POSIX  ADVISORY  WRITE 100 fe:00:99 0 EOF\n"
            "2: FLOCK  ADVISORY  WRITE 4242 00:1a:1499138 0 EOF\n"
            "2: -> FLOCK  ADVISORY  WRITE 4343 00:1a:1499138 0 EOF\n")
    assert lock_holder(text, 0, 0x1a, 1499138) == AgentSeen(4242)
    assert lock_holder(text, 0, 0x1a, 1) is None


def test_find_agent_from_the_status_file_and_none_without(tmp_path: Path) -> None:
    assert find_agent(tmp_path) is None
    (tmp_path / "status.json").write_text(f'{{"pid": {os.getpid()}, "samplers": {{}}}}')
    got = find_agent(tmp_path)
    assert got is not None and got.pid == os.getpid() and got.status is not None


def test_the_watch_says_each_change_once_and_when_the_agent_comes_back(
        tmp_path: Path) -> None:
    said: list[str] = []
    w = Watch([CPU], said.append, tmp_path)
    nothing = {UPROBE: set(), UE: set()}
    for _ in range(2):
        w.see_agent()
        w.judge(nothing, set(), {}, 0.0)
    assert said == ["no agent is running: start it with `sudo rezolus-ue run`"]
    (tmp_path / "status.json").write_text(
        f'{{"pid": {os.getpid()}, "samplers": {{"cpu_usage": {{"status": "active"}}}}}}')
    w.see_agent()
    assert w.judge({UPROBE: {CPU}, UE: set()}, {CPU}, {}, 0.0).ready
    (tmp_path / "status.json").unlink()
    w.see_agent()
    w.judge({UPROBE: {CPU}, UE: set()}, {CPU}, {}, 0.0)
    assert said[-1].startswith(f"the agent (pid {os.getpid()}) stopped")
    (tmp_path / "status.json").write_text(
        f'{{"pid": {os.getpid()}, "samplers": {{"cpu_usage": {{"status": "active"}}}}}}')
    w.see_agent()
    w.judge({UPROBE: {CPU}, UE: set()}, {CPU}, {}, 0.0)
    assert said[-1] == f"the agent is back (pid {os.getpid()})"


def test_of_a_default_set_what_will_not_come_is_said_only_when_nothing_comes() -> None:
    default = situation([CPU, HW], defined={UPROBE: {CPU}, UE: set()}, subscribed=[CPU],
                        asked=False)
    assert explain(default) == explain(situation([CPU], subscribed=[CPU]))
    nothing = situation([HW], defined={UPROBE: {CPU}, UE: set()}, asked=False)
    assert "not published here: rezolus_perf_hardware" in explain(nothing).message
