"""The agent sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import os

from ...linux.procfs import KeptOpen
from ...metrics.family import sparse_histogram_records
from ..base import AgentView, Sampler
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


class AgentSelf(Sampler):
    """The agent's CPU time, RSS, fds, records written, EBADF races and sampler costs."""

    name = "agent"
    families = FAMILIES
    oversample = False

    def start(self) -> None:
        self._statm = KeptOpen(self.ctx.roots.procfs / "self" / "statm")
        self._stat = KeptOpen(self.ctx.roots.procfs / "self" / "stat")
        self._fd_dir = str(self.ctx.roots.procfs / "self" / "fd")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._fds_by_size = fds_by_size(self._fd_dir)

    def publish(self) -> None:
        agent = self.ctx.agent
        if agent is None:
            return
        if self.enabled(AGENT.schema):
            self.emit(AGENT.schema, [self._self_stats(agent)])
        states = agent.sampler_states()
        schema = AGENT_SAMPLER.schema
        enabled = self.enabled(schema)
        for st in states:
            # Close every interval even when unwatched, so the first record after a
            # consumer arrives covers one interval, not the agent's whole life.
            index, count = st.cost_us.interval_sparse()
            if enabled:
                scalars = (STATUS_CODES[st.state], st.refreshes, st.errors)
                self.emit(schema, sparse_histogram_records(
                    schema, (st.name,), scalars, index, count))
        self.emit(AGENT_STATUS.schema, (
            (st.name, st.state, fit_text(st.reason), fit_text(st.last_error), st.errors)
            for st in states))

    def _self_stats(self, agent: AgentView) -> tuple[int, ...]:
        """Return the rezolus_agent record: the agent's cost and health now."""
        s = agent.stats()
        t = os.times()
        rss = int(self._statm.read().split()[1]) * self._page
        # Field 20 of /proc/self/stat (after the parenthesised comm) is num_threads.
        threads = int(self._stat.read().rsplit(b")", 1)[1].split()[17])
        fds = (os.stat(self._fd_dir).st_size if self._fds_by_size
               else len(os.listdir(self._fd_dir)))
        return (os.getpid(), s["uptime_ns"], int(t.user * 1e9), int(t.system * 1e9), rss,
                fds, threads, s["events_written"], s["ebadf_races"], s["write_errors"],
                s["sampler_errors"], s["samplers_active"], s["samplers_unavailable"])

    def close(self) -> None:
        self._statm.close()
        self._stat.close()
