"""The agent loop without a kernel: fake samplers injected as states, fake handles."""

from __future__ import annotations

import errno
import json
import logging
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from helpers import FakeHandle

from rezolus_ue import config
from rezolus_ue.agent import Agent, SamplerState, read_status
from rezolus_ue.errors import KernelFeatureMissing
from rezolus_ue.metrics import h2
from rezolus_ue.metrics.family import Family, counter, gauge
from rezolus_ue.samplers import REGISTRY, Roots, Sampler, SamplerContext, options
from rezolus_ue.samplers.agent import AGENT_SAMPLER, AGENT_STATUS, STATUS_CODES, STATUS_TEXT_MAX
from rezolus_ue.samplers.agent.sampler import AgentSelf, fds_by_size, fit_text
from rezolus_ue.samplers.base import FamilySampler
from rezolus_ue.samplers.cpu_usage import CPU_CORES, CPU_USAGE
from rezolus_ue.samplers.cpu_usage.sampler import CpuUsage
from rezolus_ue.schema import AGENT

#: AGENT fields the agent sampler fills from the process itself, not from Agent.stats().
PROCESS_FIELDS = {"pid", "cpu_user_ns", "cpu_system_ns", "rss_bytes", "fds", "threads"}

FAKE = Family("rezolus_fake", "fake", "A fake family.", (),
              (counter("n", "ops", "operations"),))
assert FAKE.dist_schema is not None


class FakeSampler(Sampler):
    """Counts its samples and publishes; raises when told to."""

    name = "fake"
    families = (FAKE,)

    def __init__(self, enabled: bool = True, fail: bool = False, dist: bool = False) -> None:
        super().__init__(SamplerContext(Roots(), {}))
        self.handle = FakeHandle(enabled)
        self.dist_handle = FakeHandle(dist)
        self.bind({FAKE.schema.name: self.handle, FAKE.dist_schema.name: self.dist_handle})
        self.fail = fail
        self.samples: list[int] = []
        self.publishes: list[int] = []
        self.closed = False

    def sample(self, t_ns: int, full: bool = True) -> None:
        self.samples.append(t_ns)
        if self.fail:
            raise RuntimeError("boom")

    def publish(self) -> None:
        # publish takes no time: record that of the tick's sample, which precedes it.
        self.publishes.append(self.samples[-1] if self.samples else -1)

    def close(self) -> None:
        self.closed = True
        if self.fail:
            raise RuntimeError("close boom")


class NoOversampling(FakeSampler):
    oversample = False


def make_agent(runtime_dir: Path | None = None, **samplers: FakeSampler | None) -> Agent:
    agent = Agent(config.defaults(options()), Path("/nonexistent"), runtime_dir)
    for name, s in samplers.items():
        status = "unavailable" if s is None else "idle"
        agent.states[name] = SamplerState(name, s, status, "not here" if s is None else "")
    return agent


def with_intervals(agent: Agent, publish_ns: int, sample_ns: int) -> None:
    c = agent.config
    agent.config = config.Config(
        c.path, {**c.agent, "publish_interval": publish_ns, "sample_interval": sample_ns},
        c.samplers)


# --- tick --------------------------------------------------------------------------------


def test_publish_tick_samples_then_publishes() -> None:
    s = FakeSampler()
    agent = make_agent(s=s)
    assert agent.tick(5, True) is False  # no _dist consumer: no oversampling
    assert (s.samples, s.publishes) == ([5], [5])
    st = agent.states["s"]
    assert (st.status, st.refreshes, st.errors) == ("active", 1, 0)
    assert int(st.cost_us.counts.sum()) == 1


def test_sample_tick_without_dist_consumer_calls_nothing() -> None:
    s = FakeSampler()
    agent = make_agent(s=s)
    assert agent.tick(1, False) is False
    assert (s.samples, s.publishes) == ([], [])
    assert agent.states["s"].status == "active"  # someone listens; nothing due yet
    assert agent.states["s"].refreshes == 0


def test_dist_consumer_makes_sample_ticks_sample() -> None:
    s = FakeSampler(dist=True)
    agent = make_agent(s=s)
    assert agent.tick(1, False) is True
    assert agent.tick(2, False) is True
    assert agent.tick(3, True) is True
    assert (s.samples, s.publishes) == ([1, 2, 3], [3])
    assert agent.states["s"].refreshes == 3


class CountingPolls(FakeSampler):
    """Counts the agent's per-sampler checks (poll_activation runs once per full pass)."""

    polls = 0

    def poll_activation(self) -> bool:
        self.polls += 1
        return True


def test_sample_ticks_skip_the_full_pass_while_no_enable_word_changes() -> None:
    s, quiet = CountingPolls(dist=True), CountingPolls()
    agent = make_agent(s=s, quiet=quiet)
    agent.tick(1, True)
    for t in (2, 3, 4):
        assert agent.tick(t, False) is True
    assert s.samples == [1, 2, 3, 4] and quiet.samples == [1]
    assert (s.polls, quiet.polls) == (1, 1)  # the sample ticks checked nothing
    assert agent.states["s"].refreshes == 4  # but counted and timed each sample
    agent.tick(5, True)
    assert (s.polls, quiet.polls) == (2, 2)  # publish ticks take the full pass


def test_an_enable_word_change_is_seen_at_the_next_sample_tick() -> None:
    a, b = FakeSampler(dist=True), FakeSampler()
    agent = make_agent(a=a, b=b)
    agent.tick(1, True)
    agent.tick(2, False)
    b.dist_handle.word.value = 1  # a consumer enables b's _dist event
    a.dist_handle.word.value = 0  # and another leaves a's
    assert agent.tick(3, False) is True
    assert a.samples == [1, 2] and b.samples == [1, 3]
    b.dist_handle.word.value = 0
    assert agent.tick(4, False) is False
    assert b.samples == [1, 3]
    b.handle.word.value = 0
    agent.tick(5, True)
    assert agent.states["b"].status == "idle"


def test_a_sampler_still_activating_is_polled_every_tick() -> None:
    slow, other = SlowToActivate(), FakeSampler(dist=True)
    agent = make_agent(slow=slow, other=other)
    agent.tick(1, True)
    agent.tick(2, False)
    agent.tick(3, False)
    assert slow.polls == 3 and other.samples == [1, 2, 3]
    slow.done = True
    agent.tick(4, False)  # seen activated: the next sample ticks may skip it
    agent.tick(5, False)
    agent.tick(6, False)
    assert slow.polls == 4 and other.samples == [1, 2, 3, 4, 5, 6]
    agent.tick(7, True)
    assert slow.publishes == [7]


def test_dist_consumer_alone_makes_the_sampler_wanted() -> None:
    s = FakeSampler(enabled=False, dist=True)
    agent = make_agent(s=s)
    assert agent.tick(1, False) is True
    assert s.samples == [1]
    assert agent.states["s"].status == "active"


def test_sampler_that_does_not_oversample_waits_for_publish() -> None:
    s = NoOversampling(dist=True)
    agent = make_agent(s=s)
    assert agent.tick(1, False) is False
    assert agent.tick(2, True) is False
    assert (s.samples, s.publishes) == ([2], [2])


def test_failing_sampler_is_counted_and_does_not_stop_the_others() -> None:
    a, boom, b = FakeSampler(), FakeSampler(fail=True), FakeSampler()
    agent = make_agent(a=a, boom=boom, b=b)
    agent.tick(1, True)
    agent.tick(2, True)
    assert (len(a.samples), len(boom.samples), len(b.samples)) == (2, 2, 2)
    assert (len(a.publishes), len(boom.publishes), len(b.publishes)) == (2, 0, 2)
    assert agent.sampler_errors == 2
    assert agent.states["boom"].errors == 2
    assert agent.states["boom"].refreshes == 2  # a failed refresh is still a refresh
    assert agent.states["boom"].status == "active"
    assert agent.states["a"].errors == 0
    assert agent.stats()["sampler_errors"] == 2


def test_sampler_errors_are_logged_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    agent = make_agent(boom=FakeSampler(fail=True))
    with caplog.at_level(logging.ERROR, logger="rezolus_ue"):
        for t in range(100):
            agent.tick(t, True)
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["sampler boom: refresh failed (1 errors): RuntimeError: boom",
                    "sampler boom: refresh failed (100 errors): RuntimeError: boom"]


def test_a_failing_sampler_is_failed_with_its_error_until_a_refresh_succeeds() -> None:
    boom = FakeSampler(fail=True)
    agent = make_agent(boom=boom)
    agent.tick(1, True)
    st = agent.states["boom"]
    assert (st.status, st.state, st.errors) == ("active", "failed", 1)
    assert st.last_error == "RuntimeError: boom"
    boom.fail = False
    agent.tick(2, True)
    # Recovered: active again; the count and the latest error stay for the record.
    assert (st.state, st.errors, st.last_error) == ("active", 1, "RuntimeError: boom")


def test_error_text_is_one_line() -> None:
    from rezolus_ue.agent import error_text
    from rezolus_ue.errors import RezolusError, SamplerUnavailable

    assert error_text(KeyError("cpu")) == "KeyError: 'cpu'"
    assert error_text(ValueError("bad\n  line")) == "ValueError: bad line"
    assert error_text(RuntimeError()) == "RuntimeError"
    assert error_text(RezolusError("cannot open x")) == "cannot open x"  # written for users
    assert error_text(SamplerUnavailable("tcp", "no BTF")) == "no BTF"


def test_sampler_without_consumer_is_idle_and_not_called() -> None:
    listened, unheard = FakeSampler(), FakeSampler(enabled=False)
    agent = make_agent(listened=listened, unheard=unheard)
    agent.tick(1, True)
    assert (len(listened.samples), len(unheard.samples)) == (1, 0)
    assert unheard.publishes == []
    assert agent.states["listened"].status == "active"
    assert agent.states["unheard"].status == "idle"
    assert agent.states["unheard"].refreshes == 0
    assert agent.stats()["samplers_active"] == 1


def test_sampler_with_no_handles_is_idle() -> None:
    s = FakeSampler()
    s.bind({})
    agent = make_agent(s=s)
    assert agent.tick(1, True) is False
    assert s.samples == []
    assert agent.states["s"].status == "idle"


def test_status_follows_the_enable_word(caplog: pytest.LogCaptureFixture) -> None:
    s = FakeSampler(enabled=False)
    agent = make_agent(s=s)
    with caplog.at_level(logging.INFO, logger="rezolus_ue"):
        agent.tick(1, True)
        assert agent.states["s"].status == "idle"
        s.handle.word.value = 1  # a consumer enables the tracepoint
        agent.tick(2, True)
        assert (agent.states["s"].status, len(s.samples)) == ("active", 1)
        s.handle.word.value = 0  # ... and leaves
        agent.tick(3, True)
        assert (agent.states["s"].status, len(s.samples)) == ("idle", 1)
    assert [r.getMessage() for r in caplog.records] == [
        "s: consumer attached, sampling", "s: no consumer left, idle"]


def test_unavailable_sampler_is_skipped_and_counted() -> None:
    agent = make_agent(gone=None, ok=FakeSampler())
    agent.tick(1, True)
    assert agent.states["gone"].status == "unavailable"
    st = agent.stats()
    assert (st["samplers_unavailable"], st["samplers_active"]) == (1, 1)


def test_refresh_cost_is_recorded_in_microseconds() -> None:
    class Slow(FakeSampler):
        def publish(self) -> None:
            time.sleep(0.02)

    agent = make_agent(s=Slow())
    agent.tick(1, True)
    counts = agent.states["s"].cost_us.counts
    (idx,) = np.flatnonzero(counts)
    lower, upper = h2.bucket_bounds(int(idx))
    assert upper >= 20_000 and lower < 2_000_000


# --- status file -------------------------------------------------------------------------


def test_status_file_tracks_transitions(tmp_path: Path) -> None:
    s = FakeSampler(enabled=False)
    agent = make_agent(tmp_path, s=s, gone=None)
    status = tmp_path / "status.json"
    agent.tick(1, True)
    doc = read_status(tmp_path)
    assert doc is not None
    assert doc["pid"] == os.getpid()
    assert doc["samplers"] == {
        "s": {"status": "idle", "reason": "", "errors": 0, "last_error": ""},
        "gone": {"status": "unavailable", "reason": "not here", "errors": 0, "last_error": ""}}
    s.handle.word.value = 1
    agent.tick(2, True)
    assert read_status(tmp_path)["samplers"]["s"]["status"] == "active"  # type: ignore[index]
    # Unchanged status: the file is not rewritten every tick.
    os.utime(status, ns=(1_000_000_000, 1_000_000_000))
    agent.tick(3, True)
    assert status.stat().st_mtime_ns == 1_000_000_000
    agent.close()
    assert not status.exists()
    assert read_status(tmp_path) is None


def test_no_runtime_dir_writes_no_status(tmp_path: Path) -> None:
    agent = make_agent(None, s=FakeSampler())
    agent.tick(1, True)
    assert list(tmp_path.iterdir()) == []


def test_read_status_of_a_dead_agent_is_none(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                       capture_output=True, text=True, check=True)
    (tmp_path / "status.json").write_text(json.dumps({"pid": int(p.stdout), "samplers": {}}))
    assert read_status(tmp_path) is None


@pytest.mark.parametrize("text", ["", "{", "[]", '{"samplers": {}}', '{"pid": "x"}'])
def test_read_status_of_a_bad_file_is_none(tmp_path: Path, text: str) -> None:
    (tmp_path / "status.json").write_text(text)
    assert read_status(tmp_path) is None


def test_read_status_without_file_is_none(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None


def test_read_status_of_an_agent_owned_by_another_user(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"pid": 1, "samplers": {"agent": {"status": "active", "reason": ""}}}
    (tmp_path / "status.json").write_text(json.dumps(doc))

    def kill(pid: int, sig: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", kill)
    assert read_status(tmp_path) == doc


# --- stats and the agent sampler ---------------------------------------------------------


def test_stats_keys_line_up_with_the_agent_event() -> None:
    stats = make_agent().stats()
    assert set(stats) == set(AGENT.field_names) - PROCESS_FIELDS
    assert all(isinstance(v, int) for v in stats.values())
    assert stats["uptime_ns"] >= 0
    assert stats["events_written"] == stats["ebadf_races"] == stats["write_errors"] == 0


def fake_procfs(root: Path, threads: int = 37, fds: int = 3) -> None:
    (root / "self" / "fd").mkdir(parents=True)
    (root / "self" / "statm").write_text("12000 345 200 10 0 900 0\n")
    # A comm with ") " in it: the fields are counted from the last ')'.
    after = ["S", *(str(n) for n in range(1, 17)), str(threads), *("0",) * 34]
    (root / "self" / "stat").write_text(f"4242 (odd) name) {' '.join(after)}\n")
    for i in range(fds):
        (root / "self" / "fd" / str(i)).write_text("")


class FakeAgentView:
    """The agent as the agent sampler sees it (SamplerContext.agent)."""

    def __init__(self, stats: Mapping[str, int], states: Sequence[SamplerState]) -> None:
        self._stats, self._states = stats, states

    def stats(self) -> Mapping[str, int]:
        return self._stats

    def sampler_states(self) -> list[SamplerState]:
        return list(self._states)


def make_agent_sampler(procfs: Path, stats: Mapping[str, int],
                       states: Sequence[SamplerState] = ()) -> AgentSelf:
    ctx = SamplerContext(Roots(procfs=procfs), {}, FakeAgentView(stats, states))
    sampler = AgentSelf(ctx)
    sampler.start()
    return sampler


def test_agent_sampler_packs_the_stats_in_schema_order(tmp_path: Path) -> None:
    fake_procfs(tmp_path)
    # Distinct values, so a swapped pair of arguments in AgentSelf.publish would show.
    stats = {k: 1000 + i for i, k in enumerate(make_agent().stats())}
    handle, per_sampler = FakeHandle(), FakeHandle(enabled=False)
    sampler = make_agent_sampler(tmp_path, stats)
    try:
        sampler.bind({AGENT.name: handle, AGENT_SAMPLER.schema.name: per_sampler,
                      AGENT_STATUS.schema.name: FakeHandle(False)})
        assert sampler.wanted and not sampler.dist_wanted
        sampler.publish()
    finally:
        sampler.close()
    (payload,) = handle.payloads
    assert per_sampler.payloads == []
    rec = AGENT.unpack(payload)
    assert {k: rec[k] for k in stats} == stats
    assert rec["pid"] == os.getpid()
    assert rec["rss_bytes"] == 345 * os.sysconf("SC_PAGE_SIZE")
    assert (rec["threads"], rec["fds"]) == (37, 3)
    assert 0 <= rec["cpu_user_ns"] <= time.process_time_ns() * 2  # type: ignore[operator]


def test_fd_count_from_the_directory_size_only_where_procfs_gives_it(tmp_path: Path) -> None:
    fake_procfs(tmp_path)
    assert not fds_by_size(str(tmp_path / "self" / "fd"))  # a directory's size: list it
    assert not fds_by_size(str(tmp_path / "missing"))
    if platform.system() == "Linux" and fds_by_size("/proc/self/fd"):  # Linux >= 6.2
        # The listing holds the directory open: one fd more than the size counts.
        assert os.stat("/proc/self/fd").st_size == len(os.listdir("/proc/self/fd")) - 1


def test_agent_sampler_publishes_each_samplers_cost(tmp_path: Path) -> None:
    fake_procfs(tmp_path)
    a = SamplerState("cpu_usage", None, "active", refreshes=12, errors=1)
    b = SamplerState("memory", None, "unavailable", "no /proc/meminfo")
    a.cost_us.record_many([10, 20, 30, 40, 1000])
    handle, agent_h = FakeHandle(), FakeHandle(enabled=False)
    sampler = make_agent_sampler(tmp_path, {}, [a, b])
    schema = AGENT_SAMPLER.schema
    try:
        sampler.bind({AGENT.name: agent_h, schema.name: handle,
                      AGENT_STATUS.schema.name: FakeHandle(False)})
        sampler.publish()
        a.cost_us.record(50)
        sampler.publish()
    finally:
        sampler.close()
    assert agent_h.payloads == []
    recs = [schema.unpack(p) for p in handle.payloads]
    assert [(r["sampler"], r["status"], r["refreshes"], r["errors"], r["count"])
            for r in recs] == [
        ("cpu_usage", STATUS_CODES["active"], 12, 1, 5),
        ("memory", STATUS_CODES["unavailable"], 0, 0, 0),
        # The second interval holds only what was recorded since the first.
        ("cpu_usage", STATUS_CODES["active"], 12, 1, 1),
        ("memory", STATUS_CODES["unavailable"], 0, 0, 0),
    ]
    first = recs[0]
    assert (first["p50"], first["max"]) == (31, 1023)  # upper edges of 30's and 1000's
    assert first["buckets"] == h2.encode_sparse(_counts([10, 20, 30, 40, 1000]))
    assert all((r["part"], r["parts"]) == (0, 1) for r in recs)


def test_agent_sampler_publishes_each_samplers_state_reason_and_errors(tmp_path: Path
                                                                      ) -> None:
    fake_procfs(tmp_path)
    ok = SamplerState("cpu_usage", None, "active")
    failing = SamplerState("memory", None, "active", errors=3, last_error="KeyError: 'x'",
                           failing=True)
    failing.sampler = FakeSampler()  # still tried: failed, not unavailable
    gone = SamplerState("tcp", None, "unavailable", "no BTF: " + "é" * 400, errors=1,
                        last_error="no BTF")
    status_h = FakeHandle()
    sampler = make_agent_sampler(tmp_path, {}, [ok, failing, gone])
    try:
        sampler.bind({AGENT.name: FakeHandle(False),
                      AGENT_SAMPLER.schema.name: FakeHandle(False),
                      AGENT_STATUS.schema.name: status_h})
        sampler.publish()
    finally:
        sampler.close()
    recs = [AGENT_STATUS.schema.unpack(p) for p in status_h.payloads]
    assert [(r["sampler"], r["state"], r["last_error"], r["errors"]) for r in recs] == [
        ("cpu_usage", "active", "", 0),
        ("memory", "failed", "KeyError: 'x'", 3),
        ("tcp", "unavailable", "no BTF", 1),
    ]
    # A long reason is cut at a character boundary, within the field, with an ellipsis.
    reason = recs[2]["reason"]
    assert isinstance(reason, str) and reason.startswith("no BTF: é") and reason.endswith("…")
    assert len(reason.encode()) <= STATUS_TEXT_MAX
    assert fit_text("short") == "short"


def test_agent_sampler_first_record_after_enabling_covers_one_interval(tmp_path: Path) -> None:
    fake_procfs(tmp_path)
    st = SamplerState("cpu_usage", None, "active")
    agent_h, per_sampler = FakeHandle(), FakeHandle(enabled=False)
    sampler = make_agent_sampler(tmp_path, make_agent().stats(), [st])
    try:
        sampler.bind({AGENT.name: agent_h, AGENT_SAMPLER.schema.name: per_sampler,
                      AGENT_STATUS.schema.name: FakeHandle(False)})
        st.cost_us.record_many([10] * 100)  # refreshes while nobody watched their cost
        sampler.publish()
        per_sampler.word.value = 1  # a consumer enables rezolus_agent_sampler
        st.cost_us.record(10)
        sampler.publish()
    finally:
        sampler.close()
    (rec,) = [AGENT_SAMPLER.schema.unpack(p) for p in per_sampler.payloads]
    assert rec["count"] == 1


def _counts(values: list[int]) -> np.ndarray:
    c = h2.new_counts()
    h2.record(c, values)
    return c


# --- the sampler API ---------------------------------------------------------------------


def test_events_derive_from_families() -> None:
    assert FakeSampler.events() == (FAKE.schema, FAKE.dist_schema)
    assert CpuUsage.events() == (CPU_USAGE.schema, CPU_USAGE.dist_schema, CPU_CORES.schema)
    for cls in REGISTRY.values():
        assert cls.events() == tuple(s for f in cls.families for s in f.schemas)
        assert all(f.sampler == cls.name for f in cls.families), cls.name


def test_wanted_dist_wanted_and_family_wanted() -> None:
    s = FakeSampler(enabled=False)
    assert not s.wanted and not s.dist_wanted and not s.family_wanted(FAKE)
    s.dist_handle.word.value = 1
    assert s.wanted and s.dist_wanted and s.family_wanted(FAKE)
    s.dist_handle.word.value = 0
    s.handle.word.value = 0x80000000  # any non-zero word means enabled
    assert s.wanted and not s.dist_wanted and s.family_wanted(FAKE)
    other = Family("rezolus_other", "fake", "x", (), (gauge("g", "x", "g", dist=False),))
    assert not s.family_wanted(other)  # not bound: never wanted


class TwoFamilies(FamilySampler):
    """Reads two families from in-memory rows."""

    name = "two"
    families = (FAKE, Family("rezolus_fake_g", "two", "g", (),
                             (gauge("g", "x", "g", dist=False),)))

    def __init__(self) -> None:
        super().__init__(SamplerContext(Roots(), {}))
        self.n = 0
        self.reads = 0

    def capture(self) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        self.reads += 1
        self.n += 10
        return {f: {(): (self.n,)} for f in self.families if self.family_wanted(f)}

    def parse(self, raw: Mapping[Family, Mapping[tuple, Sequence[int]]],
              ) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        return raw


def test_family_sampler_writes_only_enabled_events() -> None:
    s = TwoFamilies()
    fam_g = s.families[1]
    hs = {FAKE.schema.name: FakeHandle(False), FAKE.dist_schema.name: FakeHandle(True),
          fam_g.schema.name: FakeHandle(True)}
    s.bind(hs)
    assert s.dist_wanted
    s.sample(0)
    s.sample(1_000_000_000)
    s.publish()
    assert hs[FAKE.schema.name].payloads == []
    (d,) = [FAKE.dist_schema.unpack(p) for p in hs[FAKE.dist_schema.name].payloads]
    assert d == {"metric": "n", "value": 20, "p50": 10, "p90": 10, "p99": 10, "max": 10}
    assert [fam_g.schema.unpack(p) for p in hs[fam_g.schema.name].payloads] == [{"g": 20}]
    # Nothing sampled since: nothing published.
    s.publish()
    assert len(hs[fam_g.schema.name].payloads) == 1


class Deferring(TwoFamilies):
    """TwoFamilies split into capture (I/O) and parse, logging which ran when."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    def capture(self) -> dict[Family, int]:
        self.n += 10
        self.log.append(f"capture {self.n}")
        return {f: self.n for f in self.families if self.family_wanted(f)}

    def parse(self, raw: dict[Family, int]) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        self.log.append(f"parse {max(raw.values(), default=0)}")
        return {f: {(): (n + 0,)} for f, n in raw.items()}  # + 0: TypeError if garbled


def _two_bound(s: TwoFamilies, dist: bool = True) -> dict[str, FakeHandle]:
    hs = {FAKE.schema.name: FakeHandle(True), FAKE.dist_schema.name: FakeHandle(dist),
          s.families[1].schema.name: FakeHandle(True)}
    s.bind(hs)
    return hs


def test_deferring_sampler_parses_its_captures_in_order_at_the_publish_tick() -> None:
    s = Deferring()
    _two_bound(s)
    for t in range(4):
        s.sample(t * 100_000_000, full=False)
    # Between publish ticks: I/O only, and only the family whose _dist event is enabled.
    assert s.log == ["capture 10", "capture 20", "capture 30", "capture 40"]
    assert s._pending[0][2] == {FAKE: 10}
    s.sample(400_000_000, full=True)
    assert s.log[4:] == ["capture 50", "parse 10", "parse 20", "parse 30", "parse 40",
                         "parse 50"]
    assert s._pending == []


def test_deferring_sampler_publishes_what_reading_each_tick_publishes() -> None:
    """Parsing later changes nothing: each capture keeps its own time stamp."""
    payloads = []
    for s in (TwoFamilies(), Deferring()):
        hs = _two_bound(s)
        for interval in range(2):
            for k in range(10):
                t = interval * 1_000_000_000 + k * 100_000_000
                s.sample(t, full=k == 9)
            s.publish()
        payloads.append({n: h.payloads for n, h in hs.items()})
    assert payloads[0] == payloads[1]
    assert len(payloads[1][FAKE.dist_schema.name]) == 2


def test_deferring_sampler_parses_anyway_when_publish_ticks_stop() -> None:
    s = Deferring()
    _two_bound(s)
    for t in range(s.MAX_PENDING - 1):
        s.sample(t, full=False)
    assert len(s._pending) == s.MAX_PENDING - 1 and not any("parse" in x for x in s.log)
    s.sample(s.MAX_PENDING, full=False)
    assert s._pending == [] and sum("parse" in x for x in s.log) == s.MAX_PENDING


def test_deferring_sampler_drops_a_capture_that_fails_to_parse() -> None:
    s = Deferring()
    _two_bound(s)
    s.sample(0, full=False)
    s._pending[0] = (0, set(), {FAKE: "garbage"})
    with pytest.raises(TypeError):
        s.sample(1, full=True)
    assert s._pending == []  # not parsed again at the next publish tick
    s.sample(2, full=True)


def test_family_sampler_forgets_the_interval_when_the_last_consumer_leaves() -> None:
    """Samples taken before the sampler went idle do not reach the records published for
    the next consumer, however long after."""
    s = Deferring()
    hs = _two_bound(s)
    s.sample(0, full=False)
    s.sample(100_000_000, full=True)  # the agent published, then sampled once more
    s.publish()
    s.sample(200_000_000, full=False)
    s.deactivate()
    assert s._pending == []
    assert all(not o._samples and o._base is None for o in s._over.values())
    for h in hs.values():
        h.payloads.clear()
    s.sample(3_600_000_000_000, full=False)  # an hour later, a new consumer
    s.sample(3_600_100_000_000, full=True)
    s.publish()
    (d,) = [FAKE.dist_schema.unpack(p) for p in hs[FAKE.dist_schema.name].payloads]
    assert (d["p50"], d["max"]) == (100, 100)  # 10 in 100 ms


def test_unchanged_parses_bytes_only_when_they_change() -> None:
    from rezolus_ue.samplers.base import Unchanged

    calls: list[bytes] = []

    def parse(raw: bytes) -> dict:
        calls.append(raw)
        return {(): (len(raw),)}

    u = Unchanged()
    first = u.parse(b"a 1\n", parse)
    assert u.parse(b"a 1\n", parse) is first  # the same bytes: not parsed again
    assert u.parse(b"a 22\n", parse) == {(): (5,)}
    assert u.parse(b"a 1\n", parse) == first  # changed back: parsed again
    assert calls == [b"a 1\n", b"a 22\n", b"a 1\n"]


# --- start, close, run -------------------------------------------------------------------


def test_start_without_user_events_raises(tmp_path: Path) -> None:
    agent = Agent(config.defaults(options()), tmp_path)
    with pytest.raises(KernelFeatureMissing, match="CONFIG_USER_EVENTS"):
        agent.start()
    assert agent.event_names == []
    agent.close()  # nothing was opened: closing is harmless


def test_a_sampler_that_raises_at_start_is_unavailable_and_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampler bug at start (here a parse of what it found) must not stop the agent."""
    def broken_start(self: CpuUsage) -> None:
        raise ValueError("invalid literal for int() with base 10: b'oops'")

    monkeypatch.setattr(CpuUsage, "start", broken_start)
    agent = make_agent()
    agent.publisher = FakePublisher()  # type: ignore[assignment]
    st = agent._start_sampler("cpu_usage")
    assert (st.state, st.errors, agent.sampler_errors) == ("unavailable", 1, 1)
    assert st.reason == ("failed to start: ValueError: invalid literal for int() with base"
                         " 10: b'oops'")


def test_close_closes_every_sampler_even_if_one_raises() -> None:
    a, boom, b = FakeSampler(), FakeSampler(fail=True), FakeSampler()
    agent = make_agent(a=a, boom=boom, gone=None, b=b)
    agent.close()
    assert a.closed and boom.closed and b.closed


def run_agent(agent: Agent, should_stop, wake_after: float | None = None) -> float:  # type: ignore[no-untyped-def]
    """Run until ``should_stop()``; with ``wake_after``, stop and wake it then."""
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    stop = threading.Event()

    def wake() -> None:
        # From the first tick on: under load the loop may start later than this thread.
        end = time.monotonic() + 10
        while not any(st.refreshes for st in agent.states.values()) and time.monotonic() < end:
            time.sleep(0.005)
        time.sleep(wake_after)  # type: ignore[arg-type]
        stop.set()
        os.write(wfd, b"\x0f")

    t = threading.Thread(target=wake) if wake_after is not None else None
    start = time.monotonic()
    if t:
        t.start()
    try:
        agent.run(rfd, lambda: stop.is_set() or should_stop())
    finally:
        if t:
            t.join()
        os.close(rfd)
        os.close(wfd)
    return time.monotonic() - start


def test_run_publishes_every_publish_interval_until_stopped() -> None:
    s = FakeSampler()
    agent = make_agent(s=s)
    with_intervals(agent, 20_000_000, 10_000_000)
    elapsed = run_agent(agent, lambda: len(s.publishes) >= 3)
    assert len(s.publishes) == 3
    assert s.samples == s.publishes  # no _dist consumer: sampled only to publish
    # Publishes follow the interval's grid (a late one is followed by a shorter gap, so
    # single gaps say little on a loaded machine): three of them span two intervals, less
    # the first one's lateness.
    assert s.publishes[-1] - s.publishes[0] >= 20_000_000, np.diff(s.publishes)
    assert elapsed < 5


def test_run_wakes_every_sample_interval_while_a_dist_event_is_enabled() -> None:
    s = FakeSampler(dist=True)
    agent = make_agent(s=s)
    with_intervals(agent, 3_600_000_000_000, 10_000_000)
    elapsed = run_agent(agent, lambda: len(s.samples) >= 5)
    assert len(s.samples) == 5
    assert len(s.publishes) == 1  # the first tick publishes; the next is an hour away
    assert elapsed < 5


def test_run_does_not_wake_to_sample_without_a_dist_consumer() -> None:
    s = FakeSampler()
    agent = make_agent(s=s)
    with_intervals(agent, 3_600_000_000_000, 10_000_000)
    elapsed = run_agent(agent, lambda: False, wake_after=0.3)
    assert elapsed < 2
    # One publish tick at start, then asleep until the wake fd: 30 sample intervals passed.
    assert (len(s.samples), len(s.publishes)) == (1, 1)


def test_run_wakes_on_the_wake_fd() -> None:
    """A signal (written to the wake fd) ends a one-hour sleep at once."""
    s = FakeSampler()
    agent = make_agent(s=s)
    with_intervals(agent, 3_600_000_000_000, 3_600_000_000_000)
    elapsed = run_agent(agent, lambda: False, wake_after=0.05)
    assert elapsed < 2
    assert len(s.publishes) == 1


def test_single_instance_lock(tmp_path: Path) -> None:
    from rezolus_ue.agent import single_instance_lock
    from rezolus_ue.errors import RezolusError

    fd = single_instance_lock(tmp_path / "run")
    assert fd is not None
    assert (tmp_path / "run" / "agent.lock").read_text() == f"{os.getpid()}\n"
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


# --- config reload (SIGHUP) --------------------------------------------------------------


class FakePublisher:
    """Hands out FakeHandles like Publisher.register (idempotent); records unregisters."""

    def __init__(self) -> None:
        self.handles: dict[str, FakeHandle] = {}
        self.unregistered: list[str] = []
        self.stats = None

    def register(self, schemas) -> dict[str, FakeHandle]:  # type: ignore[no-untyped-def]
        return {s.name: self.handles.setdefault(s.name, FakeHandle(False)) for s in schemas}

    def unregister(self, names) -> None:  # type: ignore[no-untyped-def]
        for n in names:
            if self.handles.pop(n, None) is not None:
                self.unregistered.append(n)

    def close(self) -> None:
        self.handles.clear()


def _only(**enabled: bool) -> config.Config:
    """Return the defaults with just the named samplers enabled (procfs ones: host-safe)."""
    base = config.defaults(options())
    samplers = {n: {**o, "enabled": enabled.get(n, False)} for n, o in base.samplers.items()}
    return config.Config(None, base.agent, samplers)


def _reloading_agent(conf: config.Config) -> tuple[Agent, FakePublisher]:
    agent = Agent(conf, Path("/nonexistent"))
    pub = FakePublisher()
    agent.publisher = pub  # type: ignore[assignment]
    for name in REGISTRY:
        agent.states[name] = agent._start_sampler(name)
    return agent, pub


def test_reload_adds_removes_and_retunes_keeping_unchanged_samplers() -> None:
    agent, pub = _reloading_agent(_only(cpu_usage=True, memory=True, cgroup=True))
    try:
        cpu, mem = agent.states["cpu_usage"].sampler, agent.states["memory"].sampler
        cpu_handles = dict(cpu.handles)  # type: ignore[union-attr]
        new = _only(cpu_usage=True, cgroup=True, scheduler=True)
        cg = dict(new.samplers["cgroup"])
        cg["max_cgroups"] = int(cg["max_cgroups"]) + 1  # type: ignore[call-overload]
        new = config.Config(None, new.agent, {**new.samplers, "cgroup": cg})
        old_cgroup = agent.states["cgroup"].sampler
        agent.states["cgroup"].errors, agent.states["cgroup"].last_error = 2, "OSError: x"
        agent.sampler_errors = 2
        changes = agent.reload(new)
        # A restarted sampler keeps its errors: they still add up to the agent's total.
        assert (agent.states["cgroup"].errors, agent.states["cgroup"].last_error) == (
            2, "OSError: x")
        assert agent.states["cpu_usage"].sampler is cpu, "unchanged sampler restarted"
        assert agent.states["cpu_usage"].sampler.handles == cpu_handles  # type: ignore[union-attr]
        assert agent.states["memory"].status == "disabled"
        assert mem is not None and set(pub.unregistered) == {
            e.name for e in REGISTRY["memory"].events()}
        assert agent.states["scheduler"].status == "idle"
        assert agent.states["cgroup"].sampler is not old_cgroup
        assert sorted(changes) == ["cgroup re-tuned (idle)", "memory removed (disabled)",
                                   "scheduler added (idle)"]
    finally:
        agent.close()


def test_reload_drops_the_sample_tick_plan() -> None:
    agent, _pub = _reloading_agent(_only(cpu_usage=True))
    try:
        agent.tick(1, True)
        assert agent._fast is not None
        agent.reload(_only(cpu_usage=True, memory=True))
        assert agent._fast is None  # the next tick takes the full pass
    finally:
        agent.close()


def test_reload_applies_intervals_and_defers_restart_keys(
        caplog: pytest.LogCaptureFixture) -> None:
    agent, _pub = _reloading_agent(_only(cpu_usage=True))
    try:
        a = {**agent.config.agent, "publish_interval": 2 * 10**9, "persist": True}
        with caplog.at_level(logging.WARNING, logger="rezolus_ue"):
            changes = agent.reload(config.Config(None, a, agent.config.samplers))
        assert changes == ["agent.publish_interval"]
        assert agent.config.publish_interval_ns == 2 * 10**9
        assert agent.config.agent["persist"] is False, "persist needs a restart"
        assert "agent.persist changed; it takes effect at the next restart" in caplog.text
    finally:
        agent.close()


def test_bad_config_on_reload_keeps_the_old_one(caplog: pytest.LogCaptureFixture,
                                                tmp_path: Path) -> None:
    agent, _pub = _reloading_agent(_only(cpu_usage=True))
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent]\npublish_interval = \"fast\"\n")
    try:
        before = agent.config
        agent.reload_source = lambda: config.load(bad, options())
        agent.request_reload()
        stop = iter([False, True])
        with caplog.at_level(logging.ERROR, logger="rezolus_ue"):
            agent.run(os.pipe()[0], lambda: next(stop))
        assert agent.config is before
        assert "reload rejected, still running the previous config" in caplog.text
        assert f"{bad}:2" in caplog.text
        assert agent.states["cpu_usage"].status == "idle"
    finally:
        agent.close()


class Unloadable(FakeSampler):
    """A sampler that finds at activation that it cannot run (e.g. a verifier rejection)."""

    def activate(self) -> None:
        from rezolus_ue.errors import SamplerUnavailable

        raise SamplerUnavailable("fake", "the verifier rejected program x: R1 invalid")


def test_sampler_that_cannot_activate_becomes_unavailable_and_unregisters() -> None:
    bad, good = Unloadable(), FakeSampler()
    agent = make_agent(bad=bad, good=good)
    pub = FakePublisher()
    pub.register(bad.events())
    agent.publisher = pub  # type: ignore[assignment]
    agent.tick(1, True)
    st = agent.states["bad"]
    assert st.status == "unavailable" and "verifier rejected" in st.reason
    assert st.sampler is None and bad.closed
    assert set(pub.unregistered) == {e.name for e in bad.events()}
    assert agent.states["good"].status == "active" and good.publishes == [1]
    agent.tick(2, True)  # not retried
    assert agent.sampler_errors == 1
    # Its own count agrees with the agent's total, and keeps the reason as its error.
    assert (st.errors, st.state, st.last_error) == (1, "unavailable", st.reason)


def test_status_file_names_a_failing_sampler_with_its_error_and_count(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, boom=FakeSampler(fail=True), bad=Unloadable())
    for t in range(3):
        agent.tick(t, True)
    doc = read_status(tmp_path)
    assert doc is not None
    assert doc["samplers"]["boom"] == {"status": "failed", "reason": "", "errors": 3,
                                       "last_error": "RuntimeError: boom"}
    bad = doc["samplers"]["bad"]
    assert (bad["status"], bad["errors"]) == ("unavailable", 1)
    assert "verifier rejected" in bad["reason"] and bad["last_error"] == bad["reason"]
    assert sum(s["errors"] for s in doc["samplers"].values()) == agent.sampler_errors == 4


class SlowToActivate(FakeSampler):
    """Activates in the background, like a BPF sampler loading its programs."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False
        self.polls = 0

    def activate_async(self) -> None:
        pass

    def poll_activation(self) -> bool:
        self.polls += 1
        return self.done


def test_samplers_activating_in_the_background_do_not_stall_the_others() -> None:
    slow, other = SlowToActivate(), FakeSampler()
    agent = make_agent(slow=slow, other=other)
    agent.tick(1, True)
    assert slow.publishes == [] and other.publishes == [1]
    assert agent.states["slow"].status == "active"
    slow.done = True
    agent.tick(2, True)
    assert slow.publishes == [2] and other.publishes == [1, 2]
