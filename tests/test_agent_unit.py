"""The agent loop without a kernel: fake samplers injected as states, fake handles."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from rezolus_ue import config
from rezolus_ue.agent import Agent, SamplerState
from rezolus_ue.errors import KernelFeatureMissing
from rezolus_ue.samplers import Roots, Sampler, SamplerContext, options
from rezolus_ue.samplers.agent import AgentSelf
from rezolus_ue.schema import AGENT

#: AGENT fields the agent sampler fills from the process itself, not from Agent.stats().
PROCESS_FIELDS = {"pid", "cpu_user_ns", "cpu_system_ns", "rss_bytes"}


class FakeHandle:
    """Stands in for a user_events registration: an enable word and a record sink."""

    def __init__(self, enabled: bool = True) -> None:
        self.word = ctypes.c_uint32(1 if enabled else 0)
        self.payloads: list[bytes] = []

    @property
    def enabled(self) -> bool:
        return self.word.value != 0

    def write(self, payload: bytes) -> bool:
        self.payloads.append(payload)
        return True


class FakeSampler(Sampler):
    """Counts its collects; raises when told to."""

    name = "fake"
    events = ()

    def __init__(self, enabled: bool = True, fail: bool = False) -> None:
        super().__init__(SamplerContext(Roots(), {}))
        self.handle = FakeHandle(enabled)
        self.bind({"rezolus_fake": self.handle})
        self.fail = fail
        self.collected = 0
        self.closed = False

    def collect(self) -> None:
        self.collected += 1
        if self.fail:
            raise RuntimeError("boom")

    def close(self) -> None:
        self.closed = True
        if self.fail:
            raise RuntimeError("close boom")


def make_agent(**samplers: FakeSampler | None) -> Agent:
    agent = Agent(config.defaults(options()), Path("/nonexistent"))
    for name, s in samplers.items():
        status = "unavailable" if s is None else "idle"
        agent.states[name] = SamplerState(name, s, status, "not here" if s is None else "")
    return agent


def test_failing_sampler_is_counted_and_does_not_stop_the_others() -> None:
    a, boom, b = FakeSampler(), FakeSampler(fail=True), FakeSampler()
    agent = make_agent(a=a, boom=boom, b=b)
    agent.tick()
    agent.tick()
    assert (a.collected, boom.collected, b.collected) == (2, 2, 2)
    assert agent.sampler_errors == 2
    assert agent.states["boom"].errors == 2
    assert agent.states["a"].errors == 0
    assert agent.stats()["sampler_errors"] == 2


def test_sampler_errors_are_logged_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    agent = make_agent(boom=FakeSampler(fail=True))
    with caplog.at_level(logging.ERROR, logger="rezolus_ue"):
        for _ in range(100):
            agent.tick()
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["sampler boom failed (1 times): boom", "sampler boom failed (100 times): boom"]


def test_sampler_without_consumer_is_idle_and_not_collected() -> None:
    listened, unheard = FakeSampler(), FakeSampler(enabled=False)
    agent = make_agent(listened=listened, unheard=unheard)
    agent.tick()
    assert (listened.collected, unheard.collected) == (1, 0)
    assert agent.states["listened"].status == "active"
    assert agent.states["unheard"].status == "idle"
    assert agent.stats()["samplers_active"] == 1


def test_sampler_with_no_handles_is_idle() -> None:
    s = FakeSampler()
    s.bind({})
    agent = make_agent(s=s)
    agent.tick()
    assert s.collected == 0
    assert agent.states["s"].status == "idle"


def test_status_follows_the_enable_word() -> None:
    s = FakeSampler(enabled=False)
    agent = make_agent(s=s)
    agent.tick()
    assert agent.states["s"].status == "idle"
    s.handle.word.value = 1  # a consumer enables the tracepoint
    agent.tick()
    assert (agent.states["s"].status, s.collected) == ("active", 1)
    s.handle.word.value = 0  # ... and leaves
    agent.tick()
    assert (agent.states["s"].status, s.collected) == ("idle", 1)


def test_unavailable_sampler_is_skipped_and_counted() -> None:
    agent = make_agent(gone=None, ok=FakeSampler())
    agent.tick()
    assert agent.states["gone"].status == "unavailable"
    st = agent.stats()
    assert (st["samplers_unavailable"], st["samplers_active"]) == (1, 1)


def test_stats_keys_line_up_with_the_agent_event() -> None:
    stats = make_agent().stats()
    assert set(stats) == set(AGENT.field_names) - PROCESS_FIELDS
    assert all(isinstance(v, int) for v in stats.values())
    assert stats["uptime_ns"] >= 0
    assert stats["events_written"] == stats["ebadf_races"] == stats["write_errors"] == 0


def test_agent_sampler_packs_the_stats_in_schema_order(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "statm").write_text("12000 345 200 10 0 900 0\n")
    # Distinct values, so a swapped pair of arguments in AgentSelf.collect would show.
    stats = {k: 1000 + i for i, k in enumerate(make_agent().stats())}
    ctx = SamplerContext(Roots(procfs=tmp_path), {}, lambda: stats)
    sampler = AgentSelf(ctx)
    handle = FakeHandle()
    sampler.start()
    try:
        sampler.bind({AGENT.name: handle})
        sampler.collect()
    finally:
        sampler.close()
    (payload,) = handle.payloads
    rec = AGENT.unpack(payload)
    assert {k: rec[k] for k in stats} == stats
    assert rec["pid"] == os.getpid()
    assert rec["rss_bytes"] == 345 * os.sysconf("SC_PAGE_SIZE")
    assert 0 <= rec["cpu_user_ns"] <= time.process_time_ns() * 2  # type: ignore[operator]


def test_start_without_user_events_raises(tmp_path: Path) -> None:
    agent = Agent(config.defaults(options()), tmp_path)
    with pytest.raises(KernelFeatureMissing, match="CONFIG_USER_EVENTS"):
        agent.start()
    assert agent.event_names == []
    agent.close()  # nothing was opened: closing is harmless


def test_close_closes_every_sampler_even_if_one_raises() -> None:
    a, boom, b = FakeSampler(), FakeSampler(fail=True), FakeSampler()
    agent = make_agent(a=a, boom=boom, gone=None, b=b)
    agent.close()
    assert a.closed and boom.closed and b.closed


def test_run_ticks_until_stopped() -> None:
    s = FakeSampler()
    agent = make_agent(s=s)
    cfg = agent.config
    agent.config = config.Config(cfg.path, {**cfg.agent, "interval": 10_000_000}, cfg.samplers)
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        agent.run(rfd, lambda: s.collected >= 3)
    finally:
        os.close(rfd)
        os.close(wfd)
    assert s.collected == 3


def test_run_wakes_on_the_wake_fd() -> None:
    """A signal (written to the wake fd) ends a one-hour sleep at once."""
    s = FakeSampler()
    agent = make_agent(s=s)
    cfg = agent.config
    agent.config = config.Config(cfg.path, {**cfg.agent, "interval": 3_600_000_000_000},
                                 cfg.samplers)
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    stop = threading.Event()

    def wake() -> None:
        time.sleep(0.05)
        stop.set()
        os.write(wfd, b"\x0f")

    t = threading.Thread(target=wake)
    start = time.monotonic()
    t.start()
    try:
        agent.run(rfd, stop.is_set)
    finally:
        t.join()
        os.close(rfd)
        os.close(wfd)
    assert time.monotonic() - start < 2
    assert s.collected == 1


def test_single_instance_lock(tmp_path: Path) -> None:
    from rezolus_ue.agent import single_instance_lock
    from rezolus_ue.errors import RezolusError

    fd = single_instance_lock(tmp_path / "run")
    assert fd is not None
    running = rf"another rezolus-ue agent is running \(pid {os.getpid()}"
    with pytest.raises(RezolusError, match=running):
        single_instance_lock(tmp_path / "run")
    os.close(fd)
    fd2 = single_instance_lock(tmp_path / "run")
    assert fd2 is not None
    os.close(fd2)


def test_single_instance_lock_skipped_when_dir_unusable(tmp_path: Path) -> None:
    from rezolus_ue.agent import single_instance_lock

    blocker = tmp_path / "file"
    blocker.write_text("")
    assert single_instance_lock(blocker / "run") is None
