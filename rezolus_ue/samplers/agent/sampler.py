"""The agent sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ...linux.procfs import KeptOpen
from ...metrics.family import Family
from ..base import AgentView, Rows, Sampler, SamplerStatus
from . import AGENT, AGENT_SAMPLER, AGENT_STATUS, FAMILIES, STATUS_CODES, STATUS_TEXT_MAX


def fds_by_size(fd_dir: str) -> bool:
    """Return True if ``stat(fd_dir).st_size`` counts the open fds, as procfs does since
    Linux 6.2: a stat instead of listing the directory, which on the reference VM costs
    130-170 us cold with 60 fds open. Checked against a listing (which itself holds one
    more fd open); on an older kernel the size is 0, on a fixture tree a directory's size.
    """
    try:
        size = os.stat(fd_dir).st_size
        return size > 0 and size == len(os.listdir(fd_dir)) - 1
    except OSError:
        return False


def fit_text(text: str, limit: int = STATUS_TEXT_MAX) -> str:
    """Return ``text`` cut to at most ``limit`` bytes of UTF-8 at a character boundary,
    with an ellipsis where it was cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "…"


class SelfReading(NamedTuple):
    """What the agent process is now, as read for the rezolus_agent record."""

    stats: Mapping[str, int]
    times: os.times_result
    statm: bytes
    stat: bytes
    fds: int


class AgentCapture(NamedTuple):
    """One reading of the agent (``AgentSelf.capture``)."""

    wanted: set[Family]
    #: The process (None: rezolus_agent not wanted).
    own: SelfReading | None
    #: Every configured sampler's state, with its refresh-time histogram's interval
    #: (bucket indices, counts).
    states: Sequence[tuple[SamplerStatus, list[int], list[int]]]


class AgentSelf(Sampler):
    """The agent's CPU time, RSS, fds, records written, EBADF races and sampler costs."""

    origin = "itself"

    name = "agent"
    families = FAMILIES
    oversample = False

    def start(self) -> None:
        self._statm = KeptOpen(self.ctx.roots.procfs / "self" / "statm")
        self._stat = KeptOpen(self.ctx.roots.procfs / "self" / "stat")
        self._fd_dir = str(self.ctx.roots.procfs / "self" / "fd")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._fds_by_size = fds_by_size(self._fd_dir)

    def capture(self) -> AgentCapture | None:
        agent = self.ctx.agent
        if agent is None:
            return None
        wanted = self.wanted_families()
        own = self._read_self(agent) if AGENT in wanted else None
        # Close every interval even when unwatched, so the first record after a consumer
        # arrives covers one interval, not the agent's whole life.
        states = [(st, *st.cost_us.interval_sparse()) for st in agent.sampler_states()]
        return AgentCapture(wanted, own, states)

    def _read_self(self, agent: AgentView) -> SelfReading:
        """Return the agent's counters and the process's times, statm, stat and fds now."""
        stats, times = agent.stats(), os.times()
        statm, stat = self._statm.read(), self._stat.read()
        fds = (os.stat(self._fd_dir).st_size if self._fds_by_size
               else len(os.listdir(self._fd_dir)))
        return SelfReading(stats, times, statm, stat, fds)

    def parse(self, raw: AgentCapture | None) -> Rows:
        if raw is None:
            return {}
        rows: dict = {}
        if raw.own is not None:
            rows[AGENT] = {(): self._self_stats(raw.own)}
        if AGENT_SAMPLER in raw.wanted:
            rows[AGENT_SAMPLER] = {
                (st.name,): (STATUS_CODES[st.state], st.refreshes, st.errors, (index, count))
                for st, index, count in raw.states}
        if AGENT_STATUS in raw.wanted:
            rows[AGENT_STATUS] = {
                (st.name, st.state, fit_text(st.reason), fit_text(st.last_error)): (st.errors,)
                for st, _index, _count in raw.states}
        return rows

    def _self_stats(self, own: SelfReading) -> tuple[int, ...]:
        """Return the rezolus_agent values: the agent's cost and health."""
        s, t = own.stats, own.times
        rss = int(own.statm.split()[1]) * self._page
        # Field 20 of /proc/self/stat (after the parenthesised comm) is num_threads.
        threads = int(own.stat.rsplit(b")", 1)[1].split()[17])
        return (os.getpid(), s["uptime_ns"], int(t.user * 1e9), int(t.system * 1e9), rss,
                own.fds, threads, s["events_written"], s["ebadf_races"], s["write_errors"],
                s["sampler_errors"], s["samplers_active"], s["samplers_unavailable"])

    def close(self) -> None:
        self._statm.close()
        self._stat.close()
